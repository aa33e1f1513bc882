"""The share-partition manager (broker/share/manager.py) on a manual clock, with the in-memory persister and
a real log: lazy load at share.auto.offset.reset, batch-level acquisition, acknowledgements persisted before
the answer, lock expiry, read_committed gaps, the become-follower drop and a failing persister."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from odradek.broker.share.manager import SharePartitionManager, ShareSettings
from odradek.broker.share.persister import InMemoryPersister, SharePartitionKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import ABORT, COMMIT, build_batch, build_control_batch
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager
from odradek.replication.share import RecordState
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_000_000
TP = TopicPartition("work", 0)
TID = uuid.uuid4()
ACCEPT, RELEASE, REJECT = 1, 2, 3


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


class Env:
    def __init__(self, tmp_path, **settings) -> None:
        self.clock = Clock()
        self.data = ReplicaManager(node_id=1, timer=Timer(start_ms=NOW))
        self.log = Log.open(str(tmp_path / "work-0"), LogConfig(), now_ms=NOW)
        self.partition = self.data.add_leader_partition(TP, topic_id=TID, log=self.log, leader_epoch=3, replicas=[1],
                                                        isr=[1], min_insync_replicas=1, now_ms=NOW)
        self.persister = InMemoryPersister()
        self.manager = SharePartitionManager(data=self.data, persister=self.persister, clock=self.clock,
                                             settings=ShareSettings(**settings))
        self.key = SharePartitionKey("g", TID, 0)
        self._sequences: dict[int, int] = {}

    def append(self, *counts: int, pid: int = -1, transactional: bool = False) -> None:
        """One batch per count, of that many records."""
        for n in counts:
            batch = build_batch([(None, b"v", None, NOW)] * n, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                base_sequence=self._seq(pid, n), transactional=transactional)
            self.data.append_internal(TP, bytearray(batch), now_ms=self.clock.now)

    def marker(self, kind: int, pid: int) -> None:
        self.data.append_internal(TP, bytearray(build_control_batch(kind, pid, 0, 0, NOW)), now_ms=self.clock.now)

    def _seq(self, pid: int, n: int) -> int:
        if pid < 0:
            return -1
        seq = self._sequences.get(pid, 0)
        self._sequences[pid] = seq + n
        return seq

    async def fetch(self, member: str, max_records: int = 500, **kw):
        results = await self.manager.fetch("g", member, [(TID, TP)], max_records=max_records, max_bytes=1 << 20,
                                           max_wait_ms=kw.pop("max_wait_ms", 0), **kw)
        return results[TP]

    async def ack(self, member: str, *batches):
        return (await self.manager.acknowledge("g", member, [(TID, TP, list(batches))]))[TP]

    async def persisted(self):
        return (await self.persister.read(self.key, 3)).snapshot


def ranges(result) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in result.acquired]


@pytest.fixture
def env(tmp_path):
    made = []

    def make(**settings) -> Env:
        e = Env(tmp_path / str(len(made)), **settings)
        made.append(e)
        return e
    yield make
    for e in made:
        e.log.close()


async def test_starts_at_latest_and_persists_the_start(env):
    e = env()
    e.append(3)
    assert ranges(await e.fetch("a")) == []  # latest: the 3 records before the group existed are not delivered
    assert (await e.persisted()).start_offset == 3
    e.append(2, 2)
    got = await e.fetch("a")
    assert ranges(got) == [(3, 6, 1)]
    assert sum(r.length for r in got.records) == e.log.size_bytes - _first_batch_bytes(e)


def _first_batch_bytes(e: Env) -> int:
    return e.log.read(0, 1 << 20, max_offset=3).size


async def test_earliest_and_batch_aligned_or_exact_limits(env):
    e = env(auto_offset_reset="earliest")
    e.append(4, 4, 4, 4, 4)
    assert ranges(await e.fetch("a", max_records=2)) == [(0, 3, 1)]  # alone: a whole batch (batch-optimized)
    # b shares the partition from now on: a batch larger than its whole request is cut at the limit.
    assert ranges(await e.fetch("b", max_records=3)) == [(4, 6, 1)]
    assert ranges(await e.fetch("c", max_records=2, record_limit=True)) == [(7, 8, 1)]  # exact (KIP-1206)
    # Batch-optimized: the rest of a batch, then the next batch whole although it crosses the limit.
    assert ranges(await e.fetch("d", max_records=5)) == [(9, 15, 1)]
    assert ranges(await e.fetch("e", max_records=4)) == [(16, 19, 1)]  # a batch of exactly the request
    assert e.manager.figures()["acquired"] == 20


async def test_acknowledgements_are_persisted_before_the_answer(env):
    e = env(auto_offset_reset="earliest")
    e.append(5)
    await e.fetch("a")
    assert await e.ack("a", (0, 4, [ACCEPT, ACCEPT, RELEASE, REJECT, ACCEPT])) == (0, None)
    snap = await e.persisted()
    assert snap.start_offset == 2
    assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in snap.state_batches] == [
        (2, 2, RecordState.AVAILABLE, 1), (3, 3, RecordState.ARCHIVED, 1), (4, 4, RecordState.ACKNOWLEDGED, 1)]
    code, message = await e.ack("b", (2, 2, [ACCEPT]))
    assert code == ErrorCode.INVALID_RECORD_STATE and "not acquired by b" in message
    assert (await e.ack("a", (3, 2, [ACCEPT])))[0] == ErrorCode.INVALID_REQUEST
    assert e.manager.figures()["acknowledgements"]["accept"] == 3


async def test_lock_expiry_redelivers_with_a_higher_count(env):
    e = env(auto_offset_reset="earliest", record_lock_duration_ms=1000, delivery_count_limit=2)
    e.append(2)
    assert ranges(await e.fetch("a")) == [(0, 1, 1)]
    e.clock.now += 1000
    e.manager._expire_due()  # what the lock timer runs at the deadline
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert ranges(await e.fetch("b")) == [(0, 1, 2)]
    assert (await e.ack("a", (0, 1, [ACCEPT])))[0] == ErrorCode.INVALID_RECORD_STATE
    e.clock.now += 1000
    e.manager._expire_due()
    await asyncio.sleep(0)
    assert ranges(await e.fetch("c")) == []  # archived at the limit
    figures = e.manager.figures()
    assert figures["lock_expiries"] == 4 and figures["redeliveries"] == 2 and figures["archived_at_limit"] == 2
    assert (await e.persisted()).start_offset == 2


async def test_read_committed_skips_aborted_transactions_and_markers(env):
    e = env(auto_offset_reset="earliest", read_committed=True)
    e.append(2)  # 0-1
    e.append(3, pid=7, transactional=True)  # 2-4, aborted
    e.marker(ABORT, 7)  # 5
    e.append(2, pid=8, transactional=True)  # 6-7, committed
    e.marker(COMMIT, 8)  # 8
    e.append(1, pid=9, transactional=True)  # 9, still open: past the LSO
    got = await e.fetch("a")
    assert ranges(got) == [(0, 1, 1), (6, 7, 1)]
    assert await e.ack("a", (0, 1, [ACCEPT]), (6, 7, [ACCEPT])) == (0, None)
    sp = e.manager.describe("g", TP)
    assert sp.start_offset == 9  # the aborted batch and both markers were gaps: archived, passed
    e.marker(COMMIT, 9)
    assert ranges(await e.fetch("a")) == [(9, 9, 1)]


async def test_leadership_moves_and_the_new_leader_reads_what_was_persisted(env):
    e = env(auto_offset_reset="earliest")
    e.append(2, 2)
    await e.fetch("a")
    await e.ack("a", (0, 1, [ACCEPT]))
    e.data.apply_partition_state(TP, topic_id=TID, log=e.log, leader_id=2, leader_epoch=4, replicas=[1, 2], isr=[1, 2],
                                 min_insync_replicas=1, now_ms=NOW)
    e.manager.on_metadata_update(None)  # (the update itself is not read: the replica manager already applied it)
    assert e.manager.describe("g", TP) is None
    result = await e.fetch("a")
    assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    e.data.apply_partition_state(TP, topic_id=TID, log=e.log, leader_id=1, leader_epoch=5, replicas=[1, 2], isr=[1],
                                 min_insync_replicas=1, now_ms=NOW)
    # Leading again at epoch 5: 0-1 were acknowledged (never again), 2-3 were acquired only: delivered again,
    # their first delivery counted (the acknowledgement's write carried them as available with count 1).
    assert ranges(await e.fetch("b")) == [(2, 3, 2)]


class FencingPersister(InMemoryPersister):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    async def write(self, key, leader_epoch, snapshot, delivery_complete_count=-1):
        if self.fail:
            return ErrorCode.FENCED_LEADER_EPOCH
        return await super().write(key, leader_epoch, snapshot, delivery_complete_count)


async def test_a_failed_write_fails_the_acknowledgement_and_drops_the_state(env):
    e = env(auto_offset_reset="earliest")
    e.manager.persister = e.persister = FencingPersister()
    e.append(3)
    await e.fetch("a")
    e.persister.fail = True
    code, message = await e.ack("a", (0, 2, [ACCEPT]))
    # A newer leader wrote: this one no longer leads (the client refreshes its metadata); the message says why.
    assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER and "FENCED_LEADER_EPOCH" in message
    assert e.manager.describe("g", TP) is None
    e.persister.fail = False
    assert ranges(await e.fetch("b")) == [(0, 2, 1)]  # nothing was acknowledged: all of it comes again


async def test_long_poll_wakes_on_new_records_and_on_release(env):
    e = env(auto_offset_reset="earliest")
    waiting = asyncio.create_task(e.fetch("a", max_wait_ms=60_000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    e.append(2)
    assert ranges(await asyncio.wait_for(waiting, 10)) == [(0, 1, 1)]
    waiting = asyncio.create_task(e.fetch("b", max_wait_ms=60_000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    e.manager.sessions.open("g", "a", [(TID, 0)], "conn-1", NOW)
    e.manager.connection_closed("conn-1")  # a's connection closed: its records go back, b gets them
    assert ranges(await asyncio.wait_for(waiting, 10)) == [(0, 1, 2)]
    await e.manager.close()


async def test_max_records_counts_over_the_whole_request(env):
    e = env(auto_offset_reset="earliest")
    tp2 = TopicPartition("work", 1)
    log2 = Log.open(str(e.log.directory) + "-other", LogConfig(), now_ms=NOW)
    try:
        e.data.add_leader_partition(tp2, topic_id=TID, log=log2, leader_epoch=3, replicas=[1], isr=[1],
                                    min_insync_replicas=1, now_ms=NOW)
        e.append(3, 3)
        e.data.append_internal(tp2, bytearray(build_batch([(None, b"v", None, NOW)] * 3)), now_ms=NOW)
        got = await e.manager.fetch("g", "a", [(TID, TP), (TID, tp2)], max_records=4, max_bytes=1 << 20,
                                    max_wait_ms=0, record_limit=True)
        assert ranges(got[TP]) == [(0, 3, 1)] and ranges(got[tp2]) == [] and got[tp2].records == []
        got = await e.manager.fetch("g", "a", [(TID, TP), (TID, tp2)], max_records=4, max_bytes=1 << 20,
                                    max_wait_ms=0)
        assert ranges(got[TP]) == [(4, 5, 1)] and ranges(got[tp2]) == [(0, 2, 1)]  # batch-aligned: 5 in all
    finally:
        log2.close()


async def test_records_deleted_under_the_group_move_its_start(env):
    e = env(auto_offset_reset="earliest")
    e.append(2, 2, 2)
    assert ranges(await e.fetch("a", max_records=2)) == [(0, 1, 1)]
    e.log.delete_records_before(4, now_ms=NOW)  # DeleteRecords (or retention) under the share group
    assert ranges(await e.fetch("b")) == [(4, 5, 1)]
    assert e.manager.describe("g", TP).start_offset == 4
    assert (await e.ack("a", (0, 1, [ACCEPT])))[0] == ErrorCode.INVALID_RECORD_STATE
    await asyncio.sleep(0)
    assert (await e.persisted()).start_offset == 4


@pytest.mark.parametrize("reset,start", [("by_duration:PT5M", 2), ("by_duration:P1D", 0), ("by_duration:PT1S", 5)])
async def test_by_duration_starts_at_the_first_record_written_since(env, reset, start):
    """share.auto.offset.reset=by_duration:<ISO-8601>: the first record at or after now minus the duration;
    none that recent, the high watermark (KIP-1106)."""
    e = env(auto_offset_reset=reset)
    for ts, n in ((NOW - 900_000, 2), (NOW - 60_000, 3)):  # 15 minutes ago, then one minute ago
        batch = build_batch([(None, b"v", None, ts)] * n)
        e.data.append_internal(TP, bytearray(batch), now_ms=NOW)
    await e.fetch("a")
    assert (await e.persisted()).start_offset == start


async def test_a_changed_group_lock_duration_holds_from_the_next_acquisition(tmp_path):
    """settings_for is asked on every fetch: a group's share.record.lock.duration.ms changed after the
    share-partition was loaded sets the deadline of the records acquired next."""
    lock = {"ms": 1000}
    e = Env(tmp_path, auto_offset_reset="earliest")
    e.manager = SharePartitionManager(data=e.data, persister=e.persister, clock=e.clock, settings_for=lambda group:
                                      ShareSettings(auto_offset_reset="earliest", record_lock_duration_ms=lock["ms"]))
    try:
        e.append(1, 1)
        await e.fetch("a", max_records=1)
        lock["ms"] = 5000
        await e.fetch("b", max_records=1)
        e.clock.now = NOW + 2000  # a's lock (1 s) ran out, b's (5 s) did not
        assert ranges(await e.fetch("c")) == [(0, 0, 2)]
    finally:
        e.log.close()


async def test_per_partition_figures_are_labelled_and_bounded(env):
    """What /metrics labels with group/topic/partition (the console's share-group page reads them): in flight,
    acquired and the share-partition's own lock expiries, for at most `limit` share-partitions."""
    from prometheus_client import CollectorRegistry, generate_latest

    from odradek.broker.metrics import Metrics, ShareGroupsCollector

    e = env(auto_offset_reset="earliest", record_lock_duration_ms=1000)
    e.append(3, 2)
    assert ranges(await e.fetch("a", max_records=3)) == [(0, 2, 1)]
    (row,) = e.manager.figures()["per_partition"]
    assert row == ("g", "work", 0, {"in_flight": 3, "acquired": 3, "lock_expiries": 0, "redeliveries": 0,
                                     "archived_at_limit": 0, "dlq_records": 0})
    e.clock.now += 1000
    e.manager._expire_due()
    await asyncio.sleep(0)
    assert e.manager.per_partition_figures()[0][3]["lock_expiries"] == 3
    assert e.manager.per_partition_figures(limit=0) == []
    registry = CollectorRegistry()
    metrics = Metrics(node_id=1)
    registry.register(ShareGroupsCollector(e.manager.figures, metrics))
    text = generate_latest(registry).decode()
    assert 'odradek_share_partition_records_in_flight{group="g",partition="0",topic="work"} 3.0' in text
    assert 'odradek_share_partition_records_acquired{group="g",partition="0",topic="work"} 0.0' in text
    assert 'odradek_share_partition_lock_expiries{group="g",partition="0",topic="work"} 3.0' in text


def test_delivery_complete_count_counts_finished_records_at_or_past_the_start():
    """KIP-1226's count written with each state: acknowledged and archived records from the start offset on
    (a batch straddling the start counts from it), never available ones."""
    from odradek.broker.share.manager import delivery_complete_count
    from odradek.replication.share import ShareSnapshot, StateBatch

    snapshot = ShareSnapshot(1, 5, (
        StateBatch(3, 6, RecordState.ACKNOWLEDGED, 1),   # 5 and 6 count
        StateBatch(7, 8, RecordState.AVAILABLE, 1),
        StateBatch(9, 9, RecordState.ARCHIVED, 5),
        StateBatch(10, 12, RecordState.ACKNOWLEDGED, 2),
    ))
    assert delivery_complete_count(snapshot) == 2 + 1 + 3
    assert delivery_complete_count(ShareSnapshot(1, 0, ())) == 0


async def test_each_write_carries_the_delivery_complete_count(env):
    e = env(auto_offset_reset="earliest")
    written = []
    real = e.persister.write

    async def write(key, leader_epoch, snapshot, delivery_complete_count=-1):
        written.append(delivery_complete_count)
        return await real(key, leader_epoch, snapshot, delivery_complete_count)

    e.persister.write = write  # type: ignore[method-assign]
    e.append(4)
    await e.fetch("a")
    await e.ack("a", (1, 1, [ACCEPT]), (3, 3, [REJECT]))
    # Offset 0 still acquired (the start stays at 0): offsets 1 and 3 are done.
    assert written[-1] == 2
