"""Snapshots of the metadata image: its records replay into the same image, and survive the batch framing.

The images come from the same random operations as test_metadata_log's replay property (topics, partitions,
configs, producer-id blocks, broker registrations, fencing, partition changes), so every kind of state the
image holds is in some snapshot; a torn or corrupted snapshot is refused, never half loaded.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import RemoteProtocolError
from odradek.metadata.image import MetadataError, MetadataImage, MetadataReplayError, replay_all
from odradek.metadata.snapshot import decode_snapshot, encode_snapshot, image_records

from .test_metadata_log import NOW_MS, apply_operation, operations, started


@settings(max_examples=100, deadline=None)
@given(ops=operations, seed=st.integers(0, 2**32 - 1))
def test_a_snapshot_rebuilds_the_image_exactly(ops, seed):
    log = started(seed=seed)
    for op in ops:
        if op[0] == "restart":
            continue
        try:
            records = apply_operation(log, op)
        except MetadataError:
            continue
        log.append(records, NOW_MS)
    image = log.image
    assert replay_all(image_records(image)) == image
    assert decode_snapshot(encode_snapshot(image, NOW_MS)) == image


def test_an_empty_image_and_many_records_per_batch():
    assert decode_snapshot(encode_snapshot(MetadataImage(), NOW_MS)) == MetadataImage()
    log = started()
    for i in range(30):
        log.append(log.create_topic(f"t{i}", 40, 1, {"retention.ms": str(i)}), NOW_MS)
    data = encode_snapshot(log.image, NOW_MS)
    assert decode_snapshot(data) == log.image


def test_a_torn_or_corrupt_snapshot_is_refused():
    log = started()
    log.append(log.create_topic("t", 3, 1), NOW_MS)
    data = encode_snapshot(log.image, NOW_MS)
    with pytest.raises((MetadataReplayError, RemoteProtocolError)):
        decode_snapshot(data[:-5])
    corrupt = bytearray(data)
    corrupt[-3] ^= 0xFF
    with pytest.raises((MetadataReplayError, RemoteProtocolError)):
        decode_snapshot(bytes(corrupt))


def test_a_delta_names_the_partitions_its_records_changed():
    """MetadataDelta.changed_partitions (Kafka's TopicDelta): partition records narrow a changed topic to
    their partitions; a topic config (or a broker default that may be one) changes the topic as a whole."""
    import uuid

    from odradek.metadata.image import MetadataDelta, replay_all
    from odradek.metadata.records import (ConfigRecord, ConfigResourceType, PartitionChangeRecord, PartitionRecord,
                                          RemoveTopicRecord, TopicRecord)

    a, b = uuid.UUID(int=11), uuid.UUID(int=12)
    image = replay_all([TopicRecord(name="a", topic_id=a), TopicRecord(name="b", topic_id=b),
                        *(PartitionRecord(partition_id=i, topic_id=t, replicas=[1], isr=[1], leader=1)
                          for t in (a, b) for i in range(4))])
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(partition_id=2, topic_id=a, leader=-1))
    delta.replay(PartitionChangeRecord(partition_id=1, topic_id=b, isr=[1]))
    delta.replay(ConfigRecord(resource_type=int(ConfigResourceType.TOPIC), resource_name="b", name="retention.ms", value="1"))
    assert delta.changed_topic_ids == {a, b}
    assert delta.changed_partitions() == {a: frozenset({2})}  # b changed as a whole
    after = delta.apply()
    assert after.topics_by_name["a"].partitions[2].leader == -1 and after.topics_by_name["b"] is after.topics_by_id[b]
    assert image.topics_by_name["a"].partitions[2].leader == 1  # the image before is untouched

    created = MetadataDelta(after)
    c = uuid.UUID(int=13)
    created.replay(TopicRecord(name="c", topic_id=c))
    created.replay(PartitionRecord(partition_id=0, topic_id=c, replicas=[1], isr=[1], leader=1))
    created.replay(RemoveTopicRecord(topic_id=a))
    assert created.changed_partitions() == {c: frozenset({0})}
    final = created.apply()
    assert set(final.topics_by_name) == {"b", "c"} and final.topics_by_name["c"].partitions[0].leader == 1
