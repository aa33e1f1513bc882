"""The cluster metadata: record framing, replay (metadata_image), the controller's operations and their
validation (controller), the log's appends and reload after restart (metadata_log)."""

from __future__ import annotations

import dataclasses
import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode, RemoteProtocolError
from odradek.protocol.records import (
    build_batch,
    iter_batches,
    stamp_base_offset,
    stamp_leader_epoch,
    validate_batch,
)
from odradek.metadata.controller import Controller
from odradek.metadata.image import (
    METADATA_VERSION,
    NO_LEADER_CHANGE,
    Endpoint,
    MetadataDelta,
    MetadataError,
    MetadataImage,
    MetadataReplayError,
    PartitionImage,
    replay_all,
)
from odradek.metadata.log import MetadataLog, metadata_log_config
from odradek.storage.producer_state import AppendOrigin
from odradek.metadata.records import (
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    AccessControlEntryRecord,
    ClientQuotaRecord,
    RemoveAccessControlEntryRecord,
    RECORD_CLASSES,
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecordType,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    decode_metadata_record,
    encode_metadata_record,
)
from odradek.storage.log import Log

NOW_MS = 1_700_000_000_000
ENDPOINTS = [Endpoint("PLAINTEXT", "localhost", 9092)]
TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER


class MemoryStorage:
    """An in-memory partition log with MetadataStorage's shape. `crash()` loses what was not flushed."""

    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.durable = 0
        self.fail_next_append = False

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        if not self.batches:
            return 0
        return validate_batch(self.batches[-1]).next_offset

    def append(self, batch: bytearray, *, leader_epoch: int, now_ms: int) -> None:
        if self.fail_next_append:
            raise OSError("disk full")
        header = validate_batch(batch)
        stamp_base_offset(batch, 0, self.log_end_offset)
        stamp_leader_epoch(batch, 0, leader_epoch)
        assert header.records_count > 0
        self.batches.append(bytes(batch))

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for batch in self.batches:
            header = validate_batch(batch)
            if header.next_offset <= offset:
                continue
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return bytes(out)

    def flush(self) -> None:
        self.durable = len(self.batches)

    def crash(self) -> None:
        del self.batches[self.durable :]


class ControlledLog:
    """A cluster of one's controller over its metadata log, as broker/controller_channel.py composes them:
    operations are the controller's (deciding against the committed image), appends the log's."""

    def __init__(self, storage, seed: int | None = None) -> None:
        self.log = MetadataLog(storage)
        self.controller = Controller(rng=random.Random(seed) if seed is not None else None)

    @property
    def storage(self):
        return self.log.storage

    @property
    def image(self) -> MetadataImage:
        return self.log.image

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def load(self):
        delta = self.log.load()
        self.controller.advance(self.log.image, self.log.log_end_offset)
        return delta

    def append(self, records, now_ms: int) -> MetadataDelta:
        delta = self.log.append(records, now_ms)
        self.controller.advance(self.log.image, self.log.log_end_offset)
        return delta

    def __getattr__(self, name: str):
        return getattr(self.controller, name)


def open_log(storage: MemoryStorage, seed: int = 0) -> ControlledLog:
    log = ControlledLog(storage, seed)
    log.load()
    return log


def started(storage: MemoryStorage | None = None, seed: int = 0) -> ControlledLog:
    log = open_log(storage if storage is not None else MemoryStorage(), seed)
    log.append(log.bootstrap(None, 1, ENDPOINTS), NOW_MS)
    return log


def error_of(call) -> ErrorCode:
    with pytest.raises(MetadataError) as info:
        call()
    assert info.value.message
    return info.value.error_code


# ------------------------------------------------------------------------------------------ framing


def test_topic_record_golden_bytes():
    topic_id = uuid.UUID("00000000-0000-4000-8000-000000000091")
    data = encode_metadata_record(TopicRecord(name="foo", topic_id=topic_id))
    # frame version 1, type 2, version 0; compact string "foo"; the uuid; no tagged fields.
    assert data == bytes([1, 2, 0, 4]) + b"foo" + topic_id.bytes + b"\x00"


def test_partition_change_golden_bytes_only_changed_fields_are_tagged():
    topic_id = uuid.UUID(int=5)
    data = encode_metadata_record(PartitionChangeRecord(partition_id=3, topic_id=topic_id, leader=2))
    # One tagged field (tag 1, size 4, leader 2): isr, replicas and the rest stay absent.
    assert data == bytes([1, 5, 0]) + b"\x00\x00\x00\x03" + topic_id.bytes + bytes([1, 1, 4, 0, 0, 0, 2])


def sample_records() -> list:
    topic_id = uuid.UUID(int=0x1234)
    return [
        RegisterBrokerRecord(
            broker_id=1,
            incarnation_id=uuid.UUID(int=9),
            broker_epoch=17,
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092)],
            features=[RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=1,
                                                         max_supported_version=7)],
            rack="r1",
            fenced=False,
            in_controlled_shutdown=True,
        ),
        UnregisterBrokerRecord(broker_id=1, broker_epoch=17),
        TopicRecord(name="t", topic_id=topic_id),
        PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1, 2], isr=[1], leader=1, leader_epoch=0,
                        partition_epoch=0, leader_recovery_state=1),
        ConfigRecord(resource_type=TOPIC, resource_name="t", name="retention.ms", value="1000"),
        ConfigRecord(resource_type=TOPIC, resource_name="t", name="retention.ms", value=None),
        PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=[1, 2], replicas=[2, 1], leader_recovery_state=0),
        RemoveTopicRecord(topic_id=topic_id),
        FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION),
        ProducerIdsRecord(broker_id=1, broker_epoch=17, next_producer_id=2000),
        BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=17, fenced=-1, in_controlled_shutdown=1),
        NoOpRecord(),
        ClusterIdRecord(cluster_id="abc"),
        UserScramCredentialRecord(name="alice", mechanism=2, salt=b"s", stored_key=b"k1", server_key=b"k2", iterations=4096),
        RemoveUserScramCredentialRecord(name="alice", mechanism=2),
        AccessControlEntryRecord(id=uuid.UUID(int=7), resource_type=2, resource_name="t", pattern_type=4,
                                 principal="User:a", host="*", operation=3, permission_type=3),
        RemoveAccessControlEntryRecord(id=uuid.UUID(int=7)),
        ClientQuotaRecord(entity=[ClientQuotaRecord.EntityData(entity_type="user", entity_name=None)],
                          key="producer_byte_rate", value=1048576.0, remove=False),
    ]


def test_every_record_type_round_trips():
    records = sample_records()
    assert {type(r).RECORD_TYPE for r in records} == set(RECORD_CLASSES)
    for record in records:
        assert decode_metadata_record(encode_metadata_record(record)) == record


@pytest.mark.parametrize("cls", sorted(RECORD_CLASSES.values(), key=lambda c: c.RECORD_TYPE))
def test_every_valid_version_decodes(cls):
    low, high = cls.VALID_VERSIONS
    for version in range(low, high + 1):
        data = bytes([1, cls.RECORD_TYPE, version]) + cls().encode(version)
        assert decode_metadata_record(data) == cls()


@pytest.mark.parametrize(
    "data",
    [
        bytes([0, 2, 0]),  # frame version 0
        bytes([1, 99, 0]),  # unknown record type
        bytes([1, 2, 1]),  # TopicRecord has no version 1
        bytes([1, 20, 0, 0, 7]),  # NoOpRecord with trailing bytes
        bytes([1, 2, 0, 9]),  # truncated body
        b"",
    ],
)
def test_malformed_frames_raise_remote_protocol_error(data):
    with pytest.raises(RemoteProtocolError):
        decode_metadata_record(data)


# --------------------------------------------------------------------------------- bootstrap, reload


def test_bootstrap_writes_feature_level_cluster_id_and_registration():
    storage = MemoryStorage()
    log = started(storage)
    image = log.image
    assert len(image.cluster_id) == 22
    assert set(image.cluster_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert not image.cluster_id.startswith("-")
    # KIP-966's ELR is on in a new cluster, with the cluster-wide min.insync.replicas it decides by; so are
    # KIP-890's Transactions V2 (transaction.version 2), as in Kafka 4.x, and KIP-932's share groups
    # with KIP-1191's dead-letter queues (share.version 2, Kafka 4.4's default).
    assert image.features == {"metadata.version": METADATA_VERSION, "eligible.leader.replicas.version": 1,
                              "transaction.version": 2, "share.version": 2}
    assert image.broker_configs() == {"min.insync.replicas": "1"}
    broker = image.brokers[1]
    assert broker.endpoints == tuple(ENDPOINTS) and not broker.fenced
    assert storage.durable == len(storage.batches) == 1
    records = [decode_metadata_record(r.value) for r in _records_of(storage)]
    assert [type(r).RECORD_TYPE for r in records] == [
        MetadataRecordType.FEATURE_LEVEL,
        MetadataRecordType.FEATURE_LEVEL,
        MetadataRecordType.FEATURE_LEVEL,
        MetadataRecordType.FEATURE_LEVEL,
        MetadataRecordType.CLUSTER_ID,
        MetadataRecordType.CONFIG,
        MetadataRecordType.REGISTER_BROKER,
    ]


def test_restart_keeps_cluster_id_and_reregisters_with_a_higher_epoch():
    storage = MemoryStorage()
    first = started(storage)
    cluster_id = first.image.cluster_id
    second = open_log(storage, seed=1)
    records = second.bootstrap(cluster_id, 1, ENDPOINTS)
    assert [type(r).RECORD_TYPE for r in records] == [MetadataRecordType.REGISTER_BROKER]
    second.append(records, NOW_MS)
    assert second.image.cluster_id == cluster_id
    assert second.image.brokers[1].broker_epoch > first.image.brokers[1].broker_epoch
    assert second.image.brokers[1].incarnation_id != first.image.brokers[1].incarnation_id
    assert error_of(lambda: second.bootstrap("another-cluster-id-xyz", 1, ENDPOINTS)) == (
        ErrorCode.INCONSISTENT_CLUSTER_ID
    )
    assert second.bootstrap(None, 1, ENDPOINTS)[0].RECORD_TYPE == MetadataRecordType.REGISTER_BROKER


def test_bootstrap_uses_a_given_cluster_id():
    log = open_log(MemoryStorage())
    log.append(log.bootstrap("MkU3OEVBNTcwNTJENDM2Qk", 3, ENDPOINTS), NOW_MS)
    assert log.image.cluster_id == "MkU3OEVBNTcwNTJENDM2Qk"


def run_operations(log: ControlledLog) -> None:
    log.append(log.create_topic("orders", 3, 1, {"retention.ms": "60000", "cleanup.policy": "delete"}), NOW_MS)
    log.append(log.create_topic("payments", 1, 1), NOW_MS)
    log.append(log.create_topic("doomed", 2, 1, {"segment.bytes": "1048576"}), NOW_MS)
    log.append(log.create_partitions("orders", 5), NOW_MS)
    log.append(log.alter_configs(TOPIC, "payments", {"retention.ms": "1000"}), NOW_MS)
    log.append(log.alter_configs(BROKER, "", {"log.retention.hours": "24"}), NOW_MS)
    log.append(log.alter_configs(BROKER, "1", {"log.cleaner.threads": "2"}), NOW_MS)
    log.append(log.alter_configs(TOPIC, "orders", {"retention.ms": None}), NOW_MS)
    log.append(log.delete_topic("doomed"), NOW_MS)
    log.append(log.allocate_producer_ids(1)[0], NOW_MS)


def test_replay_after_reopen_rebuilds_the_same_image():
    storage = MemoryStorage()
    log = started(storage)
    run_operations(log)
    image = log.image
    assert sorted(image.topics_by_name) == ["orders", "payments"]
    assert len(image.topics_by_name["orders"].partitions) == 5
    assert image.topic_configs("orders") == {"cleanup.policy": "delete"}
    assert image.topic_configs("payments") == {"retention.ms": "1000"}
    assert image.topic_configs("doomed") == {}
    assert image.broker_configs() == {"log.retention.hours": "24", "min.insync.replicas": "1"}
    assert image.broker_configs(1) == {"log.cleaner.threads": "2"}
    assert image.next_producer_id == 1000

    reopened = ControlledLog(storage)
    reopened.load()
    assert reopened.image == image
    assert reopened.image is not image
    assert reopened.log_end_offset == log.log_end_offset


def test_records_replayed_in_memory_equal_the_logged_image():
    storage = MemoryStorage()
    log = started(storage)
    run_operations(log)
    assert replay_all(decode_metadata_record(r.value) for r in _records_of(storage)) == log.image


def test_topic_ids_are_random_non_zero_and_stable_across_reopen():
    storage = MemoryStorage()
    log = started(storage)
    ids = set()
    for i in range(20):
        records = log.create_topic(f"t{i}", 1, 1)
        assert isinstance(records[0], TopicRecord)
        ids.add(records[0].topic_id)
        log.append(records, NOW_MS)
    assert len(ids) == 20
    assert all(topic_id.int > 1 and topic_id.version == 4 for topic_id in ids)
    reopened = open_log(storage)
    assert {t.topic_id for t in reopened.image.topics_by_id.values()} == ids
    for name, topic in log.image.topics_by_name.items():
        assert reopened.image.topics_by_name[name].topic_id == topic.topic_id
        assert reopened.image.topics_by_id[topic.topic_id].name == name


def test_a_recreated_topic_gets_a_new_id_and_loses_old_configs():
    log = started()
    log.append(log.create_topic("t", 1, 1, {"retention.ms": "5"}), NOW_MS)
    old_id = log.image.topics_by_name["t"].topic_id
    delta = log.append(log.delete_topic("t"), NOW_MS)
    assert old_id in delta.removed_topics
    log.append(log.create_topic("t", 2, 1), NOW_MS)
    assert log.image.topics_by_name["t"].topic_id != old_id
    assert log.image.topic_configs("t") == {}


def test_new_partitions_are_led_by_their_first_replica_at_epoch_zero():
    log = started()
    log.append(log.create_topic("t", 4, 1), NOW_MS)
    partitions = log.image.topics_by_name["t"].partitions
    assert sorted(partitions) == [0, 1, 2, 3]
    assert all(p == PartitionImage((1,), (1,), 1, 0, 0) for p in partitions.values())


def test_replicas_spread_over_unfenced_brokers():
    log = started()
    for broker_id in (2, 3):
        log.append(log.register_broker(broker_id, ENDPOINTS), NOW_MS)
    log.append(log.fence_broker(3), NOW_MS)
    log.append(log.create_topic("t", 4, 2), NOW_MS)
    partitions = log.image.topics_by_name["t"].partitions
    assert all(set(p.replicas) == {1, 2} and p.isr == p.replicas and p.leader == p.replicas[0]
               for p in partitions.values())
    assert {p.leader for p in partitions.values()} == {1, 2}
    assert error_of(lambda: log.create_topic("u", 1, 3)) == ErrorCode.INVALID_REPLICATION_FACTOR
    log.append(log.unfence_broker(3), NOW_MS)
    log.append(log.create_topic("u", 1, 3), NOW_MS)
    assert set(log.image.topics_by_name["u"].partitions[0].replicas) == {1, 2, 3}


def test_manual_assignments():
    log = started()
    log.append(log.register_broker(2, ENDPOINTS), NOW_MS)
    log.append(log.create_topic("t", -1, -1, assignments={0: [2, 1], 1: [1, 2]}), NOW_MS)
    partitions = log.image.topics_by_name["t"].partitions
    assert partitions[0].replicas == (2, 1) and partitions[0].leader == 2
    assert partitions[1].replicas == (1, 2) and partitions[1].leader == 1
    log.append(log.create_partitions("t", 3, [[2]]), NOW_MS)
    assert log.image.topics_by_name["t"].partitions[2].replicas == (2,)


def test_producer_id_blocks_never_repeat_across_restarts():
    storage = MemoryStorage()
    log = started(storage)
    seen: list[range] = []
    for restart in range(4):
        for _ in range(3):
            records, block = log.allocate_producer_ids(1, block_size=100 + restart)
            log.append(records, NOW_MS)
            seen.append(range(block.first_producer_id, block.next_block_first_id))
        log = open_log(storage, seed=restart + 1)
    ids = [i for block in seen for i in block]
    assert len(ids) == len(set(ids))
    assert [b.start for b in seen] == sorted(b.start for b in seen)
    assert log.image.next_producer_id == seen[-1].stop


def test_an_unflushed_block_is_not_handed_out_and_a_crash_loses_only_unflushed_batches():
    storage = MemoryStorage()
    log = started(storage)
    records, first = log.allocate_producer_ids(1)
    log.append(records, NOW_MS)
    records, _ = log.allocate_producer_ids(1)  # built but never appended: the block was never usable
    storage.crash()
    reopened = open_log(storage)
    _, again = reopened.allocate_producer_ids(1)
    assert again.first_producer_id == first.next_block_first_id


def test_append_flushes_before_publishing_the_image():
    storage = MemoryStorage()
    log = started(storage)
    flushed_before = []

    original_flush = storage.flush

    def flush():
        original_flush()
        flushed_before.append("orders" in log.image.topics_by_name)

    storage.flush = flush
    log.append(log.create_topic("orders", 1, 1), NOW_MS)
    assert flushed_before == [False]
    assert "orders" in log.image.topics_by_name


def test_a_record_the_image_cannot_take_is_refused_before_the_log():
    storage = MemoryStorage()
    log = started(storage)
    before = list(storage.batches)
    with pytest.raises(MetadataReplayError):
        log.append([RemoveTopicRecord(topic_id=uuid.UUID(int=77))], NOW_MS)
    assert storage.batches == before


def test_a_storage_failure_leaves_the_image_and_refuses_further_appends():
    storage = MemoryStorage()
    log = started(storage)
    image = log.image
    storage.fail_next_append = True
    with pytest.raises(OSError):
        log.append(log.create_topic("t", 1, 1), NOW_MS)
    assert log.image is image
    storage.fail_next_append = False
    assert error_of(lambda: log.append(log.create_topic("t", 1, 1), NOW_MS)) == ErrorCode.KAFKA_STORAGE_ERROR


def test_load_skips_control_batches():
    storage = MemoryStorage()
    started(storage)
    # A KRaft LeaderChange control record (type 2): not a metadata record, skipped on replay.
    control = bytearray(build_batch([(b"\x00\x00\x00\x02", b"\x00\x00", None, NOW_MS)], control=True))
    storage.append(control, leader_epoch=0, now_ms=NOW_MS)
    log = started(storage, seed=3)
    assert 1 in log.image.brokers
    assert open_log(storage).image == log.image


def test_load_reads_in_chunks(monkeypatch):
    import odradek.metadata.log as metadata

    storage = MemoryStorage()
    log = started(storage)
    run_operations(log)
    monkeypatch.setattr(metadata, "_READ_BYTES", 1)
    assert open_log(storage).image == log.image


# ------------------------------------------------------------------------------------------ replay


def test_partition_change_bumps_epochs_as_kafka_merges():
    log = started()
    log.append(log.register_broker(2, ENDPOINTS), NOW_MS)
    log.append(log.create_topic("t", 1, 2), NOW_MS)
    topic = log.image.topics_by_name["t"]
    p0 = topic.partitions[0]
    other = [b for b in p0.replicas if b != p0.leader][0]

    log.append([PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, isr=[p0.leader])], NOW_MS)
    p1 = log.image.topics_by_name["t"].partitions[0]
    assert (p1.isr, p1.leader, p1.leader_epoch, p1.partition_epoch) == ((p0.leader,), p0.leader, 0, 1)

    log.append([PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, leader=other, isr=[other])], NOW_MS)
    p2 = log.image.topics_by_name["t"].partitions[0]
    assert (p2.isr, p2.leader, p2.leader_epoch, p2.partition_epoch) == ((other,), other, 1, 2)
    assert p2.replicas == p0.replicas
    assert NO_LEADER_CHANGE == PartitionChangeRecord().leader


def test_images_are_not_mutated_by_later_replay():
    log = started()
    log.append(log.create_topic("t", 1, 1, {"a": "1"}), NOW_MS)
    before = log.image
    snapshot = (dict(before.topics_by_name), dict(before.topics_by_name["t"].partitions), dict(before.configs),
                dict(before.topic_configs("t")))
    log.append(log.create_partitions("t", 2), NOW_MS)
    log.append(log.alter_configs(TOPIC, "t", {"a": "2", "b": "3"}), NOW_MS)
    log.append(log.create_topic("u", 1, 1), NOW_MS)
    log.append(log.delete_topic("t"), NOW_MS)
    assert snapshot == (dict(before.topics_by_name), dict(before.topics_by_name["t"].partitions),
                        dict(before.configs), dict(before.topic_configs("t")))


@pytest.mark.parametrize(
    "record",
    [
        PartitionRecord(partition_id=0, topic_id=uuid.UUID(int=5), replicas=[1], isr=[1], leader=1),
        PartitionChangeRecord(partition_id=0, topic_id=uuid.UUID(int=5), leader=1),
        RemoveTopicRecord(topic_id=uuid.UUID(int=5)),
        TopicRecord(name="zero", topic_id=uuid.UUID(int=0)),
        UnregisterBrokerRecord(broker_id=9, broker_epoch=0),
        BrokerRegistrationChangeRecord(broker_id=9, broker_epoch=0, fenced=1),
        ProducerIdsRecord(broker_id=1, next_producer_id=0),
    ],
)
def test_inconsistent_records_do_not_replay(record):
    with pytest.raises(MetadataReplayError):
        replay_all([record])


def test_replay_refuses_a_changed_cluster_id_or_a_duplicate_topic():
    topic = TopicRecord(name="t", topic_id=uuid.UUID(int=5))
    with pytest.raises(MetadataReplayError):
        replay_all([ClusterIdRecord(cluster_id="a"), ClusterIdRecord(cluster_id="b")])
    with pytest.raises(MetadataReplayError):
        replay_all([topic, TopicRecord(name="t", topic_id=uuid.UUID(int=6))])
    with pytest.raises(MetadataReplayError):
        replay_all([topic, TopicRecord(name="u", topic_id=uuid.UUID(int=5))])


def test_a_delta_is_used_once():
    delta = MetadataDelta(MetadataImage())
    delta.replay(NoOpRecord())
    assert delta.apply() == MetadataImage()
    with pytest.raises(RuntimeError):
        delta.replay(NoOpRecord())
    with pytest.raises(RuntimeError):
        delta.apply()


def test_feature_level_zero_removes_the_feature():
    image = replay_all([FeatureLevelRecord(name="x", feature_level=2)])
    assert image.features == {"x": 2}
    assert replay_all([FeatureLevelRecord(name="x", feature_level=0)], image).features == {}


# -------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a" * 250, "with space", "slash/y", "ünïcode", "colon:x", "tab\t"],
)
def test_illegal_topic_names(name):
    log = started()
    assert error_of(lambda: log.create_topic(name, 1, 1)) == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", ["a", "a" * 249, "A.b_c-9", "...", "__consumer_offsets"])
def test_legal_topic_names(name):
    log = started()
    log.append(log.create_topic(name, 1, 1), NOW_MS)
    assert name in log.image.topics_by_name


def test_create_topic_errors():
    log = started()
    log.append(log.create_topic("a.b", 1, 1), NOW_MS)
    assert error_of(lambda: log.create_topic("a.b", 1, 1)) == ErrorCode.TOPIC_ALREADY_EXISTS
    assert error_of(lambda: log.create_topic("a_b", 1, 1)) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert error_of(lambda: log.create_topic("t", 0, 1)) == ErrorCode.INVALID_PARTITIONS
    assert error_of(lambda: log.create_topic("t", -1, 1)) == ErrorCode.INVALID_PARTITIONS
    assert error_of(lambda: log.create_topic("t", 1, 0)) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert error_of(lambda: log.create_topic("t", 1, 2)) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert error_of(lambda: log.create_topic("t", 1, 1, {"x": None})) == ErrorCode.INVALID_CONFIG
    assert error_of(lambda: log.create_topic("__cluster_metadata", 1, 1)) == ErrorCode.INVALID_REQUEST


def test_create_topic_without_brokers_cannot_place_replicas():
    log = open_log(MemoryStorage())
    assert error_of(lambda: log.create_topic("t", 1, 1)) == ErrorCode.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize(
    "assignments",
    [
        {0: [1], 2: [1]},  # not consecutive
        {1: [1]},  # not 0-based
        {},
        {0: []},
        {0: [1, 1]},
        {0: [7]},  # unregistered broker
        {0: [1], 1: [1, 2]},  # inconsistent replica counts
        {0: [3]},  # only fenced brokers
    ],
)
def test_bad_manual_assignments(assignments):
    log = started()
    log.append(log.register_broker(2, ENDPOINTS), NOW_MS)
    log.append(log.register_broker(3, ENDPOINTS, fenced=True), NOW_MS)
    assert error_of(lambda: log.create_topic("t", -1, -1, assignments=assignments)) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    )


def test_manual_assignments_exclude_counts():
    log = started()
    assert error_of(lambda: log.create_topic("t", 1, -1, assignments={0: [1]})) == ErrorCode.INVALID_REQUEST


def test_delete_topic_errors():
    log = started()
    log.append(log.create_topic("t", 1, 1), NOW_MS)
    topic_id = log.image.topics_by_name["t"].topic_id
    assert error_of(lambda: log.delete_topic("nope")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_of(lambda: log.delete_topic(topic_id=uuid.UUID(int=99))) == ErrorCode.UNKNOWN_TOPIC_ID
    assert log.delete_topic(topic_id=topic_id) == log.delete_topic("t") == [RemoveTopicRecord(topic_id=topic_id)]


def test_create_partitions_errors():
    log = started()
    log.append(log.create_topic("t", 2, 1), NOW_MS)
    assert error_of(lambda: log.create_partitions("nope", 3)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_of(lambda: log.create_partitions("t", 1)) == ErrorCode.INVALID_PARTITIONS
    assert error_of(lambda: log.create_partitions("t", 2)) == ErrorCode.INVALID_PARTITIONS
    assert error_of(lambda: log.create_partitions("t", 4, [[1]])) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert [r.partition_id for r in log.create_partitions("t", 4)] == [2, 3]


def test_alter_configs_errors_and_no_op_changes():
    log = started()
    log.append(log.create_topic("t", 1, 1, {"a": "1", "b": "2"}), NOW_MS)
    assert error_of(lambda: log.alter_configs(TOPIC, "nope", {"a": "1"})) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_of(lambda: log.alter_configs(BROKER, "one", {"a": "1"})) == ErrorCode.INVALID_REQUEST
    assert error_of(lambda: log.alter_configs(ConfigResourceType.CLIENT_METRICS, "m", {"a": "1"})) == ErrorCode.INVALID_REQUEST
    assert error_of(lambda: log.alter_configs(ConfigResourceType.GROUP, "", {"a": "1"})) == ErrorCode.INVALID_REQUEST
    assert error_of(lambda: log.alter_configs(TOPIC, "t", {"": "1"})) == ErrorCode.INVALID_CONFIG
    assert log.alter_configs(TOPIC, "t", {"a": "1", "missing": None}) == []
    log.append(log.alter_configs(TOPIC, "t", {"c": "3"}, replace=True), NOW_MS)
    assert log.image.topic_configs("t") == {"c": "3"}


def test_producer_ids_need_a_registered_broker():
    log = started()
    assert error_of(lambda: log.allocate_producer_ids(5)) == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert error_of(lambda: log.allocate_producer_ids(1, block_size=0)) == ErrorCode.INVALID_REQUEST


def test_broker_registration_lifecycle():
    log = started()
    log.append(log.register_broker(2, ENDPOINTS, rack="r"), NOW_MS)
    assert log.image.brokers[2].rack == "r"
    log.append(log.fence_broker(2), NOW_MS)
    assert log.image.brokers[2].fenced
    log.append(log.unregister_broker(2), NOW_MS)
    assert 2 not in log.image.brokers
    assert error_of(lambda: log.fence_broker(2)) == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert error_of(lambda: log.register_broker(-1, ENDPOINTS)) == ErrorCode.INVALID_REQUEST
    duplicate = [Endpoint("PLAINTEXT", "a", 1), Endpoint("PLAINTEXT", "b", 2)]
    assert error_of(lambda: log.register_broker(4, duplicate)) == ErrorCode.INVALID_REQUEST


# ------------------------------------------------------------------------------------------ property

NAMES = ["a", "b", "c", "a.b", "a_b"]

creates = st.tuples(
    st.just("create"),
    st.sampled_from(NAMES),
    st.sampled_from([1, 1, 2, 3, 0]),
    st.sampled_from([1, 1, 1, 1, 2, 0]),
    st.dictionaries(st.sampled_from(["x", "y"]), st.sampled_from(["1", "2"]), max_size=2),
)
operations = st.lists(
    st.one_of(
        creates,
        creates,
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("partitions"), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("configs"), st.sampled_from([TOPIC, BROKER]), st.integers(0, 5),
                  st.dictionaries(st.sampled_from(["x", "y", "z"]), st.sampled_from(["1", "2", None]), max_size=3),
                  st.booleans()),
        st.tuples(st.just("producer_ids"), st.integers(1, 3), st.integers(0, 5)),
        st.tuples(st.just("register"), st.integers(1, 3)),
        st.tuples(st.just("fence"), st.sampled_from([2, 3, 1]), st.booleans()),
        st.tuples(st.just("unregister"), st.integers(2, 3)),
        st.tuples(st.just("change"), st.integers(0, 5), st.integers(0, 3), st.integers(-2, 3)),
        st.tuples(st.just("restart")),
    ),
    max_size=40,
)


def apply_operation(log: ControlledLog, op: tuple) -> list:
    """Run one drawn operation; a topic is drawn as an index into the existing names (then some unknown)."""
    kind = op[0]
    existing = sorted(log.image.topics_by_name) + ["unknown"]

    def topic_name(index: int) -> str:
        return existing[index % len(existing)]

    if kind == "create":
        return log.create_topic(op[1], op[2], op[3], op[4])
    if kind == "delete":
        return log.delete_topic(topic_name(op[1]))
    if kind == "partitions":
        topic = log.image.topics_by_name.get(topic_name(op[1]))
        current = len(topic.partitions) if topic is not None else 1
        return log.create_partitions(topic_name(op[1]), current + op[2])
    if kind == "configs":
        name = topic_name(op[2]) if op[1] == TOPIC else ["", "1", "x"][op[2] % 3]
        return log.alter_configs(op[1], name, op[3], replace=op[4])
    if kind == "producer_ids":
        return log.allocate_producer_ids(op[1], op[2])[0]
    if kind == "register":
        return log.register_broker(op[1], ENDPOINTS)
    if kind == "fence":
        return log.fence_broker(op[1]) if op[2] else log.unfence_broker(op[1])
    if kind == "unregister":
        return log.unregister_broker(op[1])
    if kind == "change":
        topic = log.image.topics_by_name.get(topic_name(op[1]))
        if topic is None or op[2] not in topic.partitions:
            return []
        leader = op[3]
        isr = None if leader < 0 else [leader]
        return [PartitionChangeRecord(partition_id=op[2], topic_id=topic.topic_id, leader=leader, isr=isr)]
    raise AssertionError(kind)


@settings(max_examples=150, deadline=None)
@given(ops=operations, seed=st.integers(0, 2**32 - 1))
def test_image_after_operations_equals_replay_of_their_records(ops, seed):
    storage = MemoryStorage()
    log = started(storage, seed)
    written = [decode_metadata_record(r.value) for r in _records_of(storage)]
    for op in ops:
        if op[0] == "restart":
            image = log.image
            log = open_log(storage, seed + 1)
            assert log.image == image
            continue
        try:
            records = apply_operation(log, op)
        except MetadataError as e:
            assert e.error_code != ErrorCode.UNKNOWN_SERVER_ERROR
            continue
        log.append(records, NOW_MS)
        written.extend(records)
        _check_invariants(log.image)
    assert replay_all(written) == log.image
    assert open_log(storage).image == log.image
    assert [decode_metadata_record(r.value) for r in _records_of(storage)] == written


def _check_invariants(image: MetadataImage) -> None:
    assert {t.name: t for t in image.topics_by_id.values()} == dict(image.topics_by_name)
    for topic in image.topics_by_id.values():
        assert topic.topic_id.int != 0
        assert sorted(topic.partitions) == list(range(len(topic.partitions)))
    names = {n.replace(".", "_") for n in image.topics_by_name}
    assert len(names) == len(image.topics_by_name)
    for (resource_type, name), configs in image.configs.items():
        assert configs
        if resource_type == TOPIC:
            assert name in image.topics_by_name


def _records_of(storage: MemoryStorage):
    from odradek.protocol.records import iter_records

    for batch in storage.batches:
        for _, header in iter_batches(batch):
            if not header.is_control:
                yield from iter_records(batch, max_uncompressed_bytes=1 << 20)


# ---------------------------------------------------------------------------------- over storage's Log


def open_real(directory, *, clean: bool = False, seed: int = 0) -> ControlledLog:
    log = Log.open(str(directory), metadata_log_config(), now_ms=NOW_MS, had_clean_shutdown=clean)
    metadata = ControlledLog(StorageLogAdapter(log), seed)
    metadata.load()
    return metadata


def test_over_a_real_log_reopen_after_clean_close(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = open_real(directory)
    log.append(log.bootstrap(None, 1, ENDPOINTS), NOW_MS)
    run_operations(log)
    log.storage.log.close()
    reopened = open_real(directory, clean=True, seed=1)
    assert reopened.image == log.image
    assert reopened.log_end_offset == log.log_end_offset
    _, block = reopened.allocate_producer_ids(1)
    assert block.first_producer_id == log.image.next_producer_id


def test_over_a_real_log_unclean_reopen_cuts_a_torn_batch(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    log = open_real(directory)
    log.append(log.bootstrap(None, 1, ENDPOINTS), NOW_MS)
    run_operations(log)
    image, end_offset = log.image, log.log_end_offset
    # A crash in the middle of writing the next operation's batch: only its first bytes reached the file.
    torn = build_batch([(None, encode_metadata_record(r), None, NOW_MS) for r in log.create_topic("late", 3, 1)])
    segment = directory / "00000000000000000000.log"
    assert segment.exists()
    with open(segment, "ab") as f:
        f.write(torn[: len(torn) // 2])

    reopened = open_real(directory, seed=2)  # no clean close: recovery scans and cuts the tail
    assert reopened.image == image
    assert reopened.log_end_offset == end_offset
    reopened.append(reopened.create_topic("late", 3, 1), NOW_MS)
    again = open_real(directory, seed=3)
    assert again.image == reopened.image
    assert "late" in again.image.topics_by_name


def test_over_a_real_log_many_segments(tmp_path):
    directory = tmp_path / "__cluster_metadata-0"
    config = dataclasses.replace(metadata_log_config(), segment_bytes=2048)
    storage = StorageLogAdapter(Log.open(str(directory), config, now_ms=NOW_MS))
    log = ControlledLog(storage, 0)
    log.load()
    log.append(log.bootstrap(None, 1, ENDPOINTS), NOW_MS)
    for i in range(40):
        log.append(log.create_topic(f"t{i}", 2, 1, {"retention.ms": str(i)}), NOW_MS)
    assert len(storage.log.segments) > 1
    reopened = MetadataLog(StorageLogAdapter(Log.open(str(directory), config, now_ms=NOW_MS)))
    reopened.load()
    assert reopened.image == log.image


def test_an_operation_too_large_for_one_batch_is_refused_without_failing_the_log():
    log = started()
    huge = {f"c{i}": "v" * 1000 for i in range(9000)}
    assert error_of(lambda: log.append(log.create_topic("t", 1, 1, huge), NOW_MS)) == ErrorCode.INVALID_REQUEST
    log.append(log.create_topic("t", 1, 1), NOW_MS)
    assert error_of(lambda: log.create_topic("u", 10_001, 1)) == ErrorCode.INVALID_PARTITIONS
    assert error_of(lambda: log.create_partitions("t", 10_002)) == ErrorCode.INVALID_PARTITIONS


class StorageLogAdapter:
    """MetadataStorage over the storage layer's `Log` (opened with `metadata_log_config()`): the crash tests' log."""

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, batch: bytearray, *, leader_epoch: int, now_ms: int) -> None:
        self.log.append(batch, leader_epoch=leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)

    def read(self, offset: int, max_bytes: int) -> bytes:
        # A segment cut short under the read ends the bytes early; the load then stops on the batch it
        # cannot read whole (MetadataReplayError) rather than start on a part of the metadata.
        return self.log.read_bytes(offset, max_bytes)

    def flush(self) -> None:
        self.log.flush()
