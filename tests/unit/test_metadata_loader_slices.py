"""metadata/loader.py with a replay budget: a large committed batch is replayed in slices and its image
published once, whole; batches committed behind it wait their turn; a snapshot replaces what waits. The
result is the image the unsliced loader publishes (manual clock, no Raft node: batches are handed in)."""

from __future__ import annotations

from odradek.metadata.loader import MetadataLoader
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.metadata.records import encode_metadata_record
from odradek.metadata.snapshot import encode_snapshot
from odradek.raft.core import CommittedBatch
from odradek.raft.log import SnapshotId

from .cluster_harness import Cluster


class Recorder:
    def __init__(self) -> None:
        self.updates: list[MetadataUpdate] = []

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        self.updates.append(update)


def _setup(budget: int | None):
    cluster = Cluster(1)
    for broker in (1, 2, 3):
        cluster.start(broker)
    publisher = MetadataPublisher()
    recorder = Recorder()
    publisher.register(recorder)
    pending: list[int] = []
    loader = MetadataLoader(publisher, clock=lambda: 0, replay_budget=budget, on_pending=lambda: pending.append(1))
    base = [encode_metadata_record(r) for r in cluster.written]
    loader.handle_commit(CommittedBatch(0, len(base) - 1, 1, base, False))  # small: published in the call
    committed: list[int] = []
    loader.on_commit(lambda batch: committed.append(batch.last_offset))
    return cluster, loader, recorder, pending, committed, len(base)


def _topic_batch(cluster: Cluster, name: str, partitions: int, offset: int) -> CommittedBatch:
    records = [encode_metadata_record(r) for r in cluster.controller.create_topic(name, partitions, 3)]
    return CommittedBatch(offset, offset + len(records) - 1, 1, records, False)


def test_a_large_batch_is_replayed_in_slices_and_published_once_whole():
    cluster, loader, recorder, pending, committed, offset = _setup(budget=1000)
    published_before = len(recorder.updates)
    big = _topic_batch(cluster, "scale", 2_499, offset)  # 2,500 records
    loader.handle_commit(big)
    assert pending == [1] and loader.pending == 1
    assert "scale" not in loader.image.topics_by_name and loader.applied_end_offset == offset
    assert loader.replay_pending(1000) == 1  # 2,000 of 2,500 replayed: still nothing to see
    assert len(recorder.updates) == published_before and committed == [] and loader.applied_end_offset == offset
    assert loader.replay_pending(1000) == 0
    (update,) = recorder.updates[published_before:]
    assert len(update.image.topics_by_name["scale"].partitions) == 2_499 and update.offset == big.last_offset + 1
    assert committed == [big.last_offset] and loader.applied_end_offset == big.last_offset + 1

    # The same batch through a loader without a budget publishes the same image.
    _, whole, whole_recorder, whole_pending, _, _ = _setup(budget=None)
    whole.handle_commit(big)
    assert whole_pending == [] and whole.image.topics_by_name == loader.image.topics_by_name
    assert whole_recorder.updates[-1].changed_partitions == update.changed_partitions


def test_batches_committed_behind_a_large_one_wait_their_turn_in_order():
    cluster, loader, recorder, pending, committed, offset = _setup(budget=1000)
    big = _topic_batch(cluster, "scale", 1_500, offset)
    small = _topic_batch(cluster, "small", 1, big.last_offset + 1)
    control = CommittedBatch(small.last_offset + 1, small.last_offset + 1, 2, [], True)
    loader.handle_commit(big)
    loader.handle_commit(small)
    loader.handle_commit(control)
    assert pending == [1] and loader.pending == 3  # told once, when the queue began
    assert "small" not in loader.image.topics_by_name and committed == []
    assert loader.replay_pending(501) == 2  # the rest of the big one (1,501 = 1,000 + 501), then out of budget
    assert committed == [big.last_offset] and "small" not in loader.image.topics_by_name
    assert loader.replay_pending(1000) == 0
    assert committed == [big.last_offset, small.last_offset, control.last_offset]
    assert loader.applied_end_offset == control.last_offset + 1 and "small" in loader.image.topics_by_name
    loader.handle_commit(_topic_batch(cluster, "later", 3, control.last_offset + 1))  # an empty queue: at once
    assert "later" in loader.image.topics_by_name and pending == [1]


def test_a_snapshot_replaces_the_batches_waiting():
    cluster, loader, recorder, pending, committed, offset = _setup(budget=1000)
    loader.handle_commit(_topic_batch(cluster, "scale", 2_000, offset))
    snapshot_image = loader.image  # (what the leader's snapshot holds, say)
    loader.handle_load_snapshot(SnapshotId(offset + 5000, 3), encode_snapshot(snapshot_image, 0))
    assert loader.pending == 0 and loader.applied_end_offset == offset + 5000
    assert loader.replay_pending(1000) == 0 and committed == []
    assert recorder.updates[-1].offset == offset + 5000
