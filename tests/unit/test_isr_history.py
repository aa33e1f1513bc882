"""The exact ISR/leader timeline each node keeps from the metadata log (metadata/isr_history.py)."""

from __future__ import annotations

import uuid

import pytest

from odradek.metadata.image import MetadataDelta
from odradek.metadata.isr_history import IsrHistory, read_json
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.metadata.records import PartitionChangeRecord, PartitionRecord, TopicRecord

T, U = uuid.UUID(int=7), uuid.UUID(int=8)


def publish(publisher: MetadataPublisher, offset: int, *records) -> None:
    delta = MetadataDelta(publisher.image)
    for record in records:
        delta.replay(record)
    publisher.publish(MetadataUpdate.from_delta(delta, delta.apply(), offset))


def test_each_change_is_kept_with_its_offset_before_and_after():
    clock = [1_000]
    publisher = MetadataPublisher()
    history = IsrHistory(clock=lambda: clock[0], capacity=3, replayed_through=11)
    publisher.register(history)
    publish(publisher, 11, TopicRecord(name="t", topic_id=T), *(
        PartitionRecord(partition_id=i, topic_id=T, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=0,
                        partition_epoch=0) for i in range(3)))
    assert list(history.events) == []  # created: the first ISR is no change (and the first image is a start)
    clock[0] = 2_000
    publish(publisher, 12, PartitionChangeRecord(partition_id=0, topic_id=T, isr=[1, 2]))
    clock[0] = 3_000
    publish(publisher, 20, PartitionChangeRecord(partition_id=0, topic_id=T, isr=[1, 2, 3]),
            PartitionChangeRecord(partition_id=1, topic_id=T, leader=2, isr=[2, 3]),
            TopicRecord(name="u", topic_id=U),
            PartitionRecord(partition_id=0, topic_id=U, replicas=[1], isr=[1], leader=1))
    shrink, expand, moved = history.events
    assert (shrink.offset, shrink.topic, shrink.partition, shrink.kind) == (11, "t", 0, "shrink")
    assert (shrink.isr_before, shrink.isr, shrink.replicas, shrink.leader) == ((1, 2, 3), (1, 2), (1, 2, 3), 1)
    assert shrink.applied_ms == 2_000 and not shrink.replayed  # (its batch ends at 12, past the replayed 11)
    assert (expand.offset, expand.partition, expand.kind, expand.isr) == (19, 0, "expand", (1, 2, 3))
    assert (moved.partition, moved.kind, moved.leader_before, moved.leader, moved.leader_epoch) == (1, "shrink", 1, 2, 1)
    assert expand.applied_ms == 3_000

    publish(publisher, 25, PartitionChangeRecord(partition_id=2, topic_id=T, leader=3))
    assert history.recorded == 4 and len(history.events) == 3  # the ring keeps the last 3
    assert [e.kind for e in history.read(after=19)] == ["leader"]  # (one batch, one offset: 19 had two changes)
    assert [e.kind for e in history.read(after=18)] == ["expand", "shrink", "leader"]
    assert [e.partition for e in history.read(limit=1)] == [2]

    answer = read_json(history, {"after": "18", "limit": "2"}, node_id=5)
    assert answer["node_id"] == 5 and answer["recorded"] == 4 and answer["kept"] == 3 and answer["metadata_offset"] == 25
    assert [(e["topic"], e["partition"], e["kind"], e["isr_before"], e["isr"]) for e in answer["events"]] == [
        ("t", 1, "shrink", [1, 2, 3], [2, 3]), ("t", 2, "leader", [1, 2, 3], [1, 2, 3])]
    with pytest.raises(ValueError, match="limit must be between 1 and 3"):
        read_json(history, {"limit": "4"}, node_id=5)
    with pytest.raises(ValueError, match="after must be a whole number"):
        read_json(history, {"after": "x"}, node_id=5)


def test_replayed_batches_are_marked():
    publisher = MetadataPublisher()
    history = IsrHistory(clock=lambda: 9, replayed_through=30)
    publisher.register(history)
    publish(publisher, 10, TopicRecord(name="t", topic_id=T),
            PartitionRecord(partition_id=0, topic_id=T, replicas=[1, 2], isr=[1, 2], leader=1))
    publish(publisher, 30, PartitionChangeRecord(partition_id=0, topic_id=T, isr=[1]))
    publish(publisher, 31, PartitionChangeRecord(partition_id=0, topic_id=T, isr=[1, 2]))
    assert [(e.offset, e.replayed) for e in history.events] == [(29, True), (30, False)]


def test_the_console_merges_the_brokers_rings_by_offset():
    from odradek.console.sampler import isr_events_url, merge_isr_events

    rings = []
    for node_id, clock, replayed_through in ((1, 5_000, -1), (2, 9_000, 100)):  # node 2 restarted and replayed
        publisher = MetadataPublisher()
        history = IsrHistory(clock=lambda clock=clock: clock, replayed_through=replayed_through)
        publisher.register(history)
        publish(publisher, 10, TopicRecord(name="t", topic_id=T),
                PartitionRecord(partition_id=0, topic_id=T, replicas=[1, 2], isr=[1, 2], leader=1))
        publish(publisher, 20, PartitionChangeRecord(partition_id=0, topic_id=T, isr=[1]))
        publish(publisher, 30, PartitionChangeRecord(partition_id=0, topic_id=T, isr=[1, 2]))
        rings.append(read_json(history, {}, node_id))
    merged: dict = {}
    assert merge_isr_events(merged, rings[1]) == 29
    assert [e.applied_ms for e in merged.values()] == [None, None]  # replays only: no time known
    merge_isr_events(merged, rings[0])
    shrink, expand = (merged[k] for k in sorted(merged))
    assert (shrink.partition, shrink.kind, shrink.before, shrink.after, shrink.applied_ms) == ("t-0", "shrink", (1, 2), (1,), 5_000)
    assert expand.kind == "expand" and expand.seen_by == {1, 2}
    assert isr_events_url("http://h:9/metrics", 29) == "http://h:9/odradek/isr-events?after=29"
