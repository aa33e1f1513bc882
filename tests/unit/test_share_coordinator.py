"""The share coordinator (coordinator/share/) on a manual clock and an in-memory log: replay, fencing,
snapshots every N updates, delete, uninitialized reads, and records -> reload -> the same state."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.coordinator.partitioning import (
    parse_share_coordinator_key,
    partition_for,
    share_coordinator_key,
    share_state_partition,
)
from odradek.coordinator.runtime import InMemoryPartitionWriter
from odradek.coordinator.share.config import ShareCoordinatorConfig
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.coordinator.share.records import ShareRecordType, ShareStateKey, deserialize, serialize
from odradek.coordinator.share.shard import combine_state_batches
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    WriteShareGroupStateRequest,
)
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.share import RecordState, SharePartition, StateBatch

A, ACK, ARC = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
TOPIC_ID = uuid.UUID("6f2c5a8e-1f43-4c9e-9b59-1c9d2c3e4f50")
GROUP = "workers"


class Harness:
    def __init__(self, *, per_snapshot: int = 500, partitions: int = 3, with_topics: bool = True,
                 commit_later: bool = False) -> None:
        self.config = ShareCoordinatorConfig(state_topic_num_partitions=partitions,
                                             snapshot_update_records_per_snapshot=per_snapshot)
        self.writer = InMemoryPartitionWriter(commit_later=commit_later)
        self.now = 1_000
        self.timer = Timer(start_ms=self.now)
        self.topics = TopicsImage()
        if with_topics:
            self.topics.add("orders", 4, TOPIC_ID)
        self.coordinator = self.new_coordinator()

    def new_coordinator(self) -> ShareCoordinator:
        c = ShareCoordinator(self.writer, self.timer, self.config, topics=self.topics)
        c.startup(self.now)
        return c

    def reload(self) -> ShareCoordinator:
        """A new coordinator replays the same log (a failover)."""
        self.coordinator.shutdown()
        self.coordinator = self.new_coordinator()
        return self.coordinator

    def done(self, deferred):
        assert deferred.done
        return deferred.result()

    def initialize(self, partition=0, state_epoch=0, start_offset=-1, group=GROUP):
        return self.done(self.coordinator.initialize(group, TOPIC_ID, partition, state_epoch, start_offset, self.now))

    def write(self, batches, partition=0, state_epoch=0, leader_epoch=1, start_offset=-1, complete=-1, group=GROUP):
        return self.done(self.coordinator.write(group, TOPIC_ID, partition, state_epoch, leader_epoch, start_offset,
                                                complete, batches, self.now))

    def read(self, partition=0, leader_epoch=1, group=GROUP):
        return self.done(self.coordinator.read(group, TOPIC_ID, partition, leader_epoch, self.now))

    def summary(self, partition=0, group=GROUP):
        return self.done(self.coordinator.read_summary(group, TOPIC_ID, partition, -1, self.now))

    def delete(self, partition=0, group=GROUP):
        return self.done(self.coordinator.delete(group, TOPIC_ID, partition, self.now))

    def records(self):
        return [deserialize(k, v) for log in self.writer.logs.values() for k, v in log]

    def state(self):
        c = self.coordinator
        return {p: (dict(c.runtime.shard(p).offsets), dict(c.runtime.shard(p).leader_epochs),
                    dict(c.runtime.shard(p).state_epochs)) for p in c.runtime.partitions}


# -- routing ---------------------------------------------------------------------------------------------


def test_coordinator_key_is_kafkas_uuid_form_and_parses_back():
    key = share_coordinator_key("g:1", TOPIC_ID, 7)
    group, topic, index = key.rsplit(":", 2)
    assert group == "g:1" and len(topic) == 22 and "=" not in topic and index == "7"
    assert parse_share_coordinator_key(key) == ("g:1", TOPIC_ID, 7)
    assert parse_share_coordinator_key(f"g:{TOPIC_ID}:7") == ("g", TOPIC_ID, 7)
    for bad in ("nocolons", "g:notauuid:1", f"g:{TOPIC_ID}:-1", f":{TOPIC_ID}:1", f"g:{TOPIC_ID}:x"):
        assert parse_share_coordinator_key(bad) is None
    assert share_state_partition(key, 50) == partition_for(key, 50)


def test_known_kafka_hash():
    # Java: "AAAAAAAAAAAAAAAAAAAAAA".hashCode() ... spot values of String.hashCode for the routing function.
    assert partition_for("hello", 50) == abs(99162322) % 50
    assert share_state_partition("group:AAAAAAAAAAAAAAAAAAAAAA:0", 50) == partition_for("group:AAAAAAAAAAAAAAAAAAAAAA:0", 50)


# -- records ---------------------------------------------------------------------------------------------


def test_records_round_trip_with_kafkas_layout():
    h = Harness(per_snapshot=1)
    h.initialize(start_offset=10)
    h.write([StateBatch(10, 19, A, 1)], complete=0)
    h.write([StateBatch(10, 14, ACK, 1)])
    raw = h.writer.logs[h.coordinator.partition_for(GROUP, TOPIC_ID, 0)]
    types = [int.from_bytes(k[:2], "big") for k, _ in raw]
    assert types == [0, 1, 0]  # snapshot (initialize), update, snapshot (after 1 update)
    assert all(v[:2] == b"\x00\x00" for _, v in raw)
    for k, v in raw:
        assert serialize(deserialize(k, v)) == (k, v)
    snapshot = deserialize(*raw[2])
    assert snapshot.type is ShareRecordType.SHARE_SNAPSHOT and snapshot.snapshot_epoch == 1
    assert snapshot.batches == (StateBatch(10, 14, ACK, 1), StateBatch(15, 19, A, 1))
    # An unknown record type is skipped, as Kafka skips it.
    assert deserialize(b"\x00\x07" + raw[0][0][2:], raw[0][1]) is None


# -- the operations --------------------------------------------------------------------------------------


def test_uninitialized_read_answers_start_offset_minus_one_and_writes_nothing():
    h = Harness()
    answer = h.read()
    assert answer.error_code is ErrorCode.NONE
    assert (answer.start_offset, answer.state_epoch, answer.batches) == (-1, 0, ())
    assert h.records() == []
    summary = h.summary()
    assert (summary.error_code, summary.start_offset, summary.state_epoch, summary.delivery_complete_count) == (
        ErrorCode.NONE, -1, 0, -1)


def test_initialize_then_write_then_read():
    h = Harness()
    assert h.initialize(state_epoch=1, start_offset=100).error_code is ErrorCode.NONE
    assert h.read(leader_epoch=3).start_offset == 100
    assert h.write([StateBatch(100, 104, ACK, 1), StateBatch(105, 109, A, 2)], state_epoch=1, leader_epoch=3,
                   start_offset=100, complete=5).error_code is ErrorCode.NONE
    answer = h.read(leader_epoch=3)
    assert (answer.state_epoch, answer.start_offset) == (1, 100)
    assert answer.batches == (StateBatch(100, 104, ACK, 1), StateBatch(105, 109, A, 2))
    # The start moves past what is done; the ranges below it go.
    h.write([StateBatch(105, 106, ACK, 2)], state_epoch=1, leader_epoch=3, start_offset=107)
    answer = h.read(leader_epoch=3)
    assert answer.start_offset == 107 and answer.batches == (StateBatch(107, 109, A, 2),)
    summary = h.summary()
    assert (summary.state_epoch, summary.leader_epoch, summary.start_offset) == (1, 3, 107)


def test_leader_epoch_fencing():
    h = Harness()
    h.initialize()
    assert h.write([StateBatch(0, 4, A, 1)], leader_epoch=5).error_code is ErrorCode.NONE
    stale = h.write([StateBatch(0, 4, ACK, 1)], leader_epoch=4)
    assert stale.error_code is ErrorCode.FENCED_LEADER_EPOCH and "5" in stale.error_message
    assert h.read(leader_epoch=4).error_code is ErrorCode.FENCED_LEADER_EPOCH
    # A newer leader's read records its epoch (one update, no ranges): the leader before it is fenced.
    before = len(h.records())
    assert h.read(leader_epoch=7).batches == (StateBatch(0, 4, A, 1),)
    assert len(h.records()) == before + 1
    assert h.write([StateBatch(0, 4, ACK, 1)], leader_epoch=5).error_code is ErrorCode.FENCED_LEADER_EPOCH
    assert h.read(leader_epoch=7).batches == (StateBatch(0, 4, A, 1),)
    assert len(h.records()) == before + 1  # a read at the same epoch writes nothing
    # -1 is not a leader: neither fenced nor recorded.
    assert h.read(leader_epoch=-1).error_code is ErrorCode.NONE
    assert h.reload() and h.write([StateBatch(0, 4, ACK, 1)], leader_epoch=6).error_code is ErrorCode.FENCED_LEADER_EPOCH


def test_state_epoch_fencing_and_reinitialize():
    h = Harness()
    h.initialize(state_epoch=2, start_offset=0)
    h.write([StateBatch(0, 9, ACK, 1)], state_epoch=2)
    assert h.write([StateBatch(0, 9, A, 1)], state_epoch=1).error_code is ErrorCode.FENCED_STATE_EPOCH
    assert h.initialize(state_epoch=1, start_offset=50).error_code is ErrorCode.FENCED_STATE_EPOCH
    # An alter of the offsets: a higher state epoch starts over at the new start offset, with no ranges.
    assert h.initialize(state_epoch=3, start_offset=50).error_code is ErrorCode.NONE
    answer = h.read()
    assert (answer.state_epoch, answer.start_offset, answer.batches) == (3, 50, ())
    assert h.write([StateBatch(50, 51, A, 1)], state_epoch=2).error_code is ErrorCode.FENCED_STATE_EPOCH


def test_bad_input_gets_invalid_request_or_unknown_partition():
    h = Harness()
    assert h.initialize(state_epoch=-1).error_code is ErrorCode.INVALID_REQUEST
    assert h.initialize(partition=-1).error_code is ErrorCode.INVALID_REQUEST
    assert h.initialize(group="").error_code is ErrorCode.INVALID_REQUEST
    assert h.read(leader_epoch=-2).error_code is ErrorCode.INVALID_REQUEST
    assert h.write([StateBatch(5, 4, A, 1)]).error_code is ErrorCode.INVALID_REQUEST
    assert h.write([StateBatch(0, 4, A, -1)]).error_code is ErrorCode.INVALID_REQUEST
    assert h.write([StateBatch(0, 4, RecordState.ACQUIRED, 1)]).error_code is ErrorCode.INVALID_REQUEST
    assert h.initialize(partition=4).error_code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # the topic has 4
    assert h.records() == []


def test_write_of_an_uninitialized_share_partition_creates_it():
    h = Harness()
    assert h.write([StateBatch(0, 2, ACK, 1)], leader_epoch=0, start_offset=0).error_code is ErrorCode.NONE
    assert h.read(leader_epoch=0).batches == (StateBatch(0, 2, ACK, 1),)
    assert h.records()[0].type is ShareRecordType.SHARE_SNAPSHOT


def test_snapshot_every_n_updates():
    n = 3
    h = Harness(per_snapshot=n)
    h.initialize(start_offset=0)
    for i in range(10):
        h.write([StateBatch(i, i, ACK, 1)], start_offset=0)
    types = [r.type for r in h.records()]
    # initialize's snapshot, then n updates and a snapshot, again and again
    S, U = ShareRecordType.SHARE_SNAPSHOT, ShareRecordType.SHARE_UPDATE
    assert types == [S, U, U, U, S, U, U, U, S, U, U]
    assert h.coordinator.counts.snapshots == 3 and h.coordinator.counts.updates == 8
    assert h.coordinator.counts.writes == 10
    assert h.read().batches == (StateBatch(0, 9, ACK, 1),)
    expected = h.state()
    h.reload()
    assert h.state() == expected


def test_zero_updates_per_snapshot_writes_snapshots_only():
    h = Harness(per_snapshot=0)
    h.initialize()
    h.write([StateBatch(0, 0, A, 1)])
    h.write([StateBatch(1, 1, A, 1)])
    assert {r.type for r in h.records()} == {ShareRecordType.SHARE_SNAPSHOT}


def test_delete_writes_a_tombstone_and_the_reload_forgets():
    h = Harness()
    h.initialize(state_epoch=4, start_offset=0)
    h.write([StateBatch(0, 3, ACK, 1)], state_epoch=4, leader_epoch=9)
    assert h.delete().error_code is ErrorCode.NONE
    tombstone = h.records()[-1]
    assert tombstone.is_tombstone and tombstone.type is ShareRecordType.SHARE_SNAPSHOT
    assert h.read(leader_epoch=0).start_offset == -1
    # Deleting what does not exist succeeds and writes nothing.
    before = len(h.records())
    assert h.delete().error_code is ErrorCode.NONE and len(h.records()) == before
    h.reload()
    answer = h.read(leader_epoch=0)
    assert (answer.error_code, answer.start_offset, answer.state_epoch) == (ErrorCode.NONE, -1, 0)
    # The epochs went with it: a new initialization at epoch 0 is accepted.
    assert h.initialize(state_epoch=0, start_offset=0).error_code is ErrorCode.NONE


def test_not_coordinator_for_a_partition_not_loaded():
    h = Harness()
    p = h.coordinator.partition_for(GROUP, TOPIC_ID, 0)
    h.coordinator.on_resigned(p)
    assert h.read().error_code is ErrorCode.NOT_COORDINATOR
    assert h.write([StateBatch(0, 0, A, 1)]).error_code is ErrorCode.NOT_COORDINATOR


def test_answers_wait_for_the_high_watermark():
    h = Harness(commit_later=True)
    p = h.coordinator.partition_for(GROUP, TOPIC_ID, 0)
    written = h.coordinator.initialize(GROUP, TOPIC_ID, 0, 0, 5, h.now)
    read = h.coordinator.read(GROUP, TOPIC_ID, 0, 1, h.now)
    assert not written.done and not read.done  # a read waits for the writes before it
    h.writer.commit(p)
    assert written.result().error_code is ErrorCode.NONE and read.result().start_offset == 5
    # Not replicated within share.coordinator.write.timeout.ms: COORDINATOR_NOT_AVAILABLE.
    late = h.coordinator.write(GROUP, TOPIC_ID, 0, 0, 1, -1, -1, [StateBatch(5, 5, ACK, 1)], h.now)
    h.timer.advance_clock(h.now + h.config.write_timeout_ms + 1)
    assert late.result().error_code is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_combine_state_batches():
    cur = (StateBatch(0, 9, A, 1), StateBatch(10, 19, ACK, 1))
    assert combine_state_batches(cur, [StateBatch(5, 12, ARC, 2)], 0) == (
        StateBatch(0, 4, A, 1), StateBatch(5, 12, ARC, 2), StateBatch(13, 19, ACK, 1))
    assert combine_state_batches(cur, [StateBatch(0, 9, ACK, 1)], -1) == (StateBatch(0, 19, ACK, 1),)
    assert combine_state_batches(cur, [], 15) == (StateBatch(15, 19, ACK, 1),)
    assert combine_state_batches((), [StateBatch(3, 4, A, 0), StateBatch(0, 1, A, 0)], 0) == (
        StateBatch(0, 1, A, 0), StateBatch(3, 4, A, 0))


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_replay_to_the_same_state(seed):
    """What a leader does to a share-partition, persisted after every step, reloads to what the leader had:
    acknowledged records are never delivered again, unacknowledged ones are (with their counts)."""
    rng = random.Random(seed)
    h = Harness(per_snapshot=rng.choice([0, 1, 3, 500]), partitions=2)
    leaders = {}
    for partition in range(3):
        h.initialize(partition=partition, start_offset=0)
        leaders[partition] = SharePartition(0, delivery_count_limit=3)
    now = 0
    epoch = 1
    for step in range(200):
        partition = rng.randrange(3)
        sp = leaders[partition]
        now += rng.randrange(0, 50)
        action = rng.random()
        if action < 0.5:
            end = sp.end_offset
            got = sp.acquire("m", sp.start_offset, end + rng.randrange(0, 5), 5, now)
            if got and rng.random() < 0.8:
                r = got[0]
                sp.acknowledge("m", [(r.first_offset, r.last_offset, [rng.choice([1, 2, 3])])], now)
        elif action < 0.6:
            sp.expire(now + 100_000)
        elif action < 0.65:
            epoch += 1
            h.reload()
        snap = sp.snapshot()
        answer = h.write(list(snap.state_batches), partition=partition, leader_epoch=epoch,
                         start_offset=snap.start_offset)
        assert answer.error_code is ErrorCode.NONE, answer
        read = h.read(partition=partition, leader_epoch=epoch)
        assert read.start_offset == snap.start_offset
        assert combine_state_batches((), read.batches, read.start_offset) == combine_state_batches(
            (), snap.state_batches, snap.start_offset)
    expected = h.state()
    h.reload()
    assert h.state() == expected


# -- APIs 83-87 as messages ------------------------------------------------------------------------------


def test_request_messages_are_answered_per_partition():
    h = Harness()
    c = h.coordinator
    Init = InitializeShareGroupStateRequest
    init = Init(group_id=GROUP, topics=[Init.InitializeStateData(topic_id=TOPIC_ID, partitions=[
        Init.InitializeStateData.PartitionData(partition=0, state_epoch=0, start_offset=3),
        Init.InitializeStateData.PartitionData(partition=9, state_epoch=0, start_offset=3)])])
    response = h.done(c.initialize_state(init, 0, h.now))
    (result,) = response.results
    assert result.topic_id == TOPIC_ID
    assert [(p.partition, p.error_code) for p in result.partitions] == [
        (0, 0), (9, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))]
    W = WriteShareGroupStateRequest
    write = W(group_id=GROUP, topics=[W.WriteStateData(topic_id=TOPIC_ID, partitions=[
        W.WriteStateData.PartitionData(partition=0, state_epoch=0, leader_epoch=2, start_offset=3,
                                       delivery_complete_count=1, state_batches=[
                                           W.WriteStateData.PartitionData.StateBatch(
                                               first_offset=3, last_offset=3, delivery_state=2, delivery_count=1),
                                           W.WriteStateData.PartitionData.StateBatch(
                                               first_offset=4, last_offset=4, delivery_state=9, delivery_count=1)])])])
    bad = h.done(c.write_state(write, 1, h.now))
    assert bad.results[0].partitions[0].error_code == int(ErrorCode.INVALID_REQUEST)
    write.topics[0].partitions[0].state_batches.pop()
    assert h.done(c.write_state(write, 1, h.now)).results[0].partitions[0].error_code == 0
    R = ReadShareGroupStateRequest
    read = R(group_id=GROUP, topics=[R.ReadStateData(topic_id=TOPIC_ID, partitions=[
        R.ReadStateData.PartitionData(partition=0, leader_epoch=2)])])
    entry = h.done(c.read_state(read, 0, h.now)).results[0].partitions[0]
    assert (entry.error_code, entry.state_epoch, entry.start_offset) == (0, 0, 3)
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in entry.state_batches] == [
        (3, 3, 2, 1)]
    assert h.summary().delivery_complete_count == 1


def test_keys_spread_over_partitions_and_shards_hold_their_own():
    h = Harness(partitions=3)
    for partition in range(4):
        h.initialize(partition=partition, start_offset=partition)
    c = h.coordinator
    for partition in range(4):
        shard = c.runtime.shard(c.partition_for(GROUP, TOPIC_ID, partition))
        assert ShareStateKey(GROUP, TOPIC_ID, partition) in shard.offsets
    assert c.share_partitions() == 4


def test_snapshot_value_golden_with_the_tagged_delivery_complete_count():
    """ShareSnapshotValue v0 as Kafka 4.4 lays it out (flexible; DeliveryCompleteCount is tag 0, omitted at -1)."""
    from odradek.protocol.codec import encode
    from odradek.protocol.messages import DATA_CLASSES

    cls = DATA_CLASSES["ShareSnapshotValue"]
    value = cls(snapshot_epoch=1, state_epoch=2, leader_epoch=3, start_offset=4, create_timestamp=5,
                write_timestamp=6, state_batches=[cls.StateBatch(first_offset=4, last_offset=5, delivery_state=2,
                                                                 delivery_count=1)])
    body = ("00000001" "00000002" "00000003" "0000000000000004" "0000000000000005" "0000000000000006"
            "02" "0000000000000004" "0000000000000005" "02" "0001" "00")
    assert encode(value, 0).hex() == body + "00"
    value.delivery_complete_count = 7
    assert encode(value, 0).hex() == body + "01" + "00" + "04" + "00000007"


def test_metrics_read_the_coordinator():
    from prometheus_client import CollectorRegistry, generate_latest

    from odradek.broker.metrics import Metrics
    from odradek.broker.share.state_metrics import ShareCoordinatorCollector

    h = Harness(per_snapshot=1)
    h.initialize()
    h.write([StateBatch(0, 0, ACK, 1)])
    h.write([StateBatch(1, 1, ACK, 1)])
    h.write([StateBatch(2, 2, ACK, 1)], leader_epoch=0)  # fenced
    registry = CollectorRegistry()
    registry.register(ShareCoordinatorCollector(lambda: h.coordinator, Metrics(node_id=1)))
    text = generate_latest(registry).decode()
    for line in ("odradek_share_coordinator_partitions 3.0", "odradek_share_coordinator_share_partitions 1.0",
                 "odradek_share_coordinator_writes_total 2.0", 'odradek_share_coordinator_records_total{type="snapshot"} 2.0',
                 'odradek_share_coordinator_records_total{type="update"} 1.0',
                 'odradek_share_coordinator_fenced_total{error="FENCED_LEADER_EPOCH"} 1.0'):
        assert line in text, text
    empty = CollectorRegistry()
    empty.register(ShareCoordinatorCollector(lambda: None, Metrics(node_id=1)))
    assert "odradek_share_coordinator_partitions 0.0" in generate_latest(empty).decode()
