"""Pruning `__share_group_state` (coordinator/share/): cold-partition snapshot rounds and deleting the records
below the oldest offset still needed, on a manual clock and an in-memory log that can lose its head as
DeleteRecords does. The property: whatever was written and whenever the rounds ran, a coordinator that
loads what is left of the log has exactly the state of the one that wrote it."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.coordinator.runtime import InMemoryPartitionWriter
from odradek.coordinator.share.config import ShareCoordinatorConfig
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.coordinator.share.records import ShareRecordType, deserialize
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.share import RecordState, StateBatch

TOPIC_ID = uuid.UUID("6f2c5a8e-1f43-4c9e-9b59-1c9d2c3e4f50")
COLD_MS, PRUNE_MS = 1_000, 1_500


class PrunableWriter(InMemoryPartitionWriter):
    """An in-memory log with offsets: `start[p]` records were deleted from its head."""

    def __init__(self) -> None:
        super().__init__()
        self.start: dict[int, int] = {}
        self.deletes: list[tuple[int, int]] = []

    def log_end_offset(self, partition: int) -> int:
        return self.start.get(partition, 0) + len(self.logs.get(partition, ()))

    def delete_records_before(self, partition: int, offset: int) -> int:
        start = self.start.get(partition, 0)
        if offset <= start:
            return 0
        assert offset <= self.log_end_offset(partition), "deleting past the log end"
        del self.logs.setdefault(partition, [])[: offset - start]
        self.start[partition] = offset
        self.deletes.append((partition, offset))
        return offset - start


class Harness:
    def __init__(self, *, per_snapshot: int = 500, partitions: int = 1) -> None:
        self.config = ShareCoordinatorConfig(state_topic_num_partitions=partitions,
                                             snapshot_update_records_per_snapshot=per_snapshot,
                                             cold_partition_snapshot_interval_ms=COLD_MS,
                                             state_topic_prune_interval_ms=PRUNE_MS)
        self.writer = PrunableWriter()
        self.now = 1_000
        self.timer = Timer(start_ms=self.now)
        self.coordinator = self.new_coordinator(prune=True)

    def new_coordinator(self, *, prune: bool) -> ShareCoordinator:
        w = self.writer
        c = ShareCoordinator(w, self.timer, self.config,
                             log_end_offset=w.log_end_offset if prune else None,
                             delete_records_before=w.delete_records_before if prune else None)
        c.startup(self.now)
        return c

    def advance(self, ms: int) -> None:
        self.now += ms
        self.timer.advance_clock(self.now)

    def write(self, partition: int, batches, *, start_offset: int = -1, group: str = "g") -> None:
        d = self.coordinator.write(group, TOPIC_ID, partition, 0, 1, start_offset, -1, batches, self.now)
        assert d.done and d.result().error_code == 0

    def delete(self, partition: int, group: str = "g") -> None:
        assert self.coordinator.delete(group, TOPIC_ID, partition, self.now).result().error_code == 0

    def state(self, coordinator: ShareCoordinator) -> dict:
        out = {}
        for p in coordinator.runtime.partitions:
            shard = coordinator.runtime.shard(p)
            out[p] = ({k: (o.state_epoch, o.leader_epoch, o.start_offset, o.delivery_complete_count, o.batches)
                       for k, o in shard.offsets.items()}, dict(shard.leader_epochs), dict(shard.state_epochs))
        return out

    def reloaded_state(self) -> dict:
        """The state a new leader loads from what is left of the log (without pruning of its own)."""
        return self.state(self.new_coordinator(prune=False))


def _batch(first: int, last: int, state=RecordState.ACKNOWLEDGED, count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


def test_the_log_start_moves_past_what_every_share_partition_has_snapshotted():
    h = Harness()
    for i in range(20):  # one share-partition, 20 writes: a snapshot then 19 updates
        h.write(0, [_batch(i, i)], start_offset=i + 1)
    assert h.writer.log_end_offset(0) == 20
    # Round 1 after the load: its snapshot (offset 0) was replayed since the load, so nothing is written;
    # the mark moves to 20.
    h.advance(COLD_MS)
    assert h.writer.log_end_offset(0) == 20 and not h.writer.deletes
    h.write(0, [_batch(20, 20)], start_offset=21)  # an update at offset 20
    h.advance(PRUNE_MS - COLD_MS)  # the prune timer: the first round gave no offset yet
    assert not h.writer.deletes
    h.advance(2 * COLD_MS - PRUNE_MS)  # round 2: no snapshot since mark 20, one now (offset 21)
    assert h.writer.log_end_offset(0) == 22
    h.advance(2 * PRUNE_MS - 2 * COLD_MS)  # prune: below the previous mark, 20
    assert h.writer.deletes == [(0, 20)]
    records = [deserialize(k, v) for k, v in h.writer.logs[0]]
    assert [r.type for r in records] == [ShareRecordType.SHARE_UPDATE, ShareRecordType.SHARE_SNAPSHOT]
    assert h.reloaded_state()[0] == h.state(h.coordinator)[0]
    assert h.coordinator.counts.pruned == 20


def test_a_cold_share_partition_is_snapshotted_once_per_round_a_hot_one_not_again():
    h = Harness(per_snapshot=2)
    h.write(0, [_batch(0, 0)], start_offset=1, group="cold")
    h.advance(COLD_MS)  # round 1: cold has a snapshot since the load -> nothing written
    before = h.writer.log_end_offset(0)
    assert before == 1
    h.advance(COLD_MS // 2)
    for i in range(3):  # hot: a snapshot (first write), 2 updates, then a snapshot again
        h.write(0, [_batch(i, i)], start_offset=i + 1, group="hot")
    end = h.writer.log_end_offset(0)
    h.advance(COLD_MS // 2)  # round 2: hot snapshotted since the mark; cold not -> one snapshot, of cold
    written = [deserialize(k, v) for k, v in h.writer.logs[0][end - h.writer.start.get(0, 0):]]
    assert [(r.type, r.key.group_id) for r in written] == [(ShareRecordType.SHARE_SNAPSHOT, "cold")]


def test_a_deleted_share_partition_needs_nothing_kept():
    h = Harness()
    h.write(0, [_batch(0, 4)], start_offset=5)
    h.delete(0)
    for _ in range(3):
        h.advance(COLD_MS)
    h.advance(PRUNE_MS)
    assert h.writer.start.get(0, 0) == 2  # the snapshot and its tombstone
    assert h.reloaded_state()[0] == ({}, {}, {})


def test_a_new_leader_starts_the_rounds_afresh_and_never_prunes_what_it_needs():
    h = Harness()
    h.write(0, [_batch(0, 0)], start_offset=1)
    h.advance(COLD_MS)
    h.coordinator.shutdown()  # the partition moves away before its first pruning...
    h.coordinator = h.new_coordinator(prune=True)  # ...and back: the marks are gone
    h.advance(PRUNE_MS)
    assert not h.writer.deletes
    assert h.reloaded_state() == h.state(h.coordinator)


@pytest.mark.parametrize("seed", range(25))
def test_random_writes_and_rounds_reload_to_the_same_state(seed):
    rng = random.Random(seed)
    h = Harness(per_snapshot=rng.choice([0, 1, 3, 500]), partitions=2)
    groups = ["a", "b", "c", "d"]
    starts = {(g, p): 0 for g in groups for p in range(2)}
    for _ in range(rng.randint(30, 150)):
        roll = rng.random()
        g, p = rng.choice(groups), rng.randrange(2)
        if roll < 0.6:
            first = starts[(g, p)] + rng.randint(0, 5)
            last = first + rng.randint(0, 5)
            new_start = starts[(g, p)] + rng.randint(0, 3) if rng.random() < 0.5 else -1
            if new_start != -1:
                starts[(g, p)] = new_start
            h.write(p, [_batch(first, last, rng.choice([RecordState.AVAILABLE, RecordState.ACKNOWLEDGED,
                                                       RecordState.ARCHIVED]), rng.randint(0, 4))],
                    start_offset=new_start, group=g)
        elif roll < 0.65:
            h.delete(p, group=g)
            starts[(g, p)] = 0
        elif roll < 0.7:  # a failover: the partitions reload from what is left, and the rounds start afresh
            h.coordinator.shutdown()
            h.coordinator = h.new_coordinator(prune=True)
        else:
            h.advance(rng.randint(1, 2 * PRUNE_MS))
        assert h.reloaded_state() == h.state(h.coordinator), f"seed {seed}"
    for _ in range(4):
        h.advance(PRUNE_MS)
    assert h.reloaded_state() == h.state(h.coordinator), f"seed {seed}"
    if any(h.writer.logs.values()):
        assert h.writer.deletes, f"seed {seed}: nothing pruned"
