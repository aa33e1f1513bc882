"""OffsetFetch without require_stable reads the offsets at the high watermark of the group's partition.

Kafka's GroupCoordinatorService answers it with a read operation at the partition's last committed offset:
a commit appended but not yet replicated, a deletion (OffsetDelete, DeleteGroups, retention) likewise, and
a transaction's offsets until their COMMIT marker is committed, are not seen by anyone else. The writer
here holds the high watermark (`commit_later`) and `writer.commit(partition, offset)` moves it.
"""

from __future__ import annotations

from odradek.protocol.messages import (
    DeleteGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
)

from tests.harness.group_coordinator import Harness

G = "g"
HOUR_MS = 3_600_000


def commit(h: Harness, offsets: dict[tuple[str, int], int]):
    """An OffsetCommit of a simple group (generation -1); the Deferred, held until the HW passes it."""
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    by_topic: dict[str, list] = {}
    for (name, p), o in offsets.items():
        by_topic.setdefault(name, []).append(topic.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_metadata=""))
    request = OffsetCommitRequest(group_id=G, topics=[topic(name=n, partitions=ps) for n, ps in by_topic.items()])
    return h.gc.offset_commit(request, 8, h.now)


def txn_commit(h: Harness, offsets: dict[tuple[str, int], int], pid: int = 7):
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    request = TxnOffsetCommitRequest(transactional_id="t", group_id=G, producer_id=pid, producer_epoch=0,
                                     generation_id=-1, member_id="", group_instance_id=None, topics=[
                                         T(name=name, partitions=[T.TxnOffsetCommitRequestPartition(
                                             partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                             committed_metadata="")])
                                         for (name, p), o in offsets.items()])
    return h.gc.txn_offset_commit(request, 3, h.now)


def fetch_all(h: Harness, gc=None) -> dict[tuple[str, int], int]:
    return {key: offset for key, (offset, _, _) in h.fetch(G, gc=gc)[1].items()}


def fetch_one(h: Harness, partition: int = 0) -> int:
    return h.fetch(G, {"in": [partition]})[1][("in", partition)][0]


def log_end(h: Harness) -> int:
    return len(h.writer.logs[h.gc.partition_for(G)])


def hw(h: Harness, offset: int | None = None) -> None:
    """The high watermark of the group's partition moves to `offset` (default: the end of its log)."""
    h.writer.commit(h.gc.partition_for(G), offset)


def view_size(gc) -> int:
    return len(gc.shard_for(G).offset_manager.committed_view)


def test_a_commit_is_seen_once_the_high_watermark_passes_it():
    h = Harness(commit_later=True)
    first = commit(h, {("in", 0): 5})
    assert not first.done
    assert fetch_one(h) == -1 and fetch_all(h) == {}
    hw(h)
    assert first.done and fetch_one(h) == 5 and fetch_all(h) == {("in", 0): 5}
    # A newer commit waiting for its replicas leaves the committed one in place, partition by partition.
    commit(h, {("in", 0): 7, ("in", 1): 3})
    commit(h, {("in", 0): 9})
    assert fetch_all(h) == {("in", 0): 5}
    hw(h, log_end(h) - 1)  # the first of the two batches (its two records) is replicated
    assert fetch_all(h) == {("in", 0): 7, ("in", 1): 3}
    assert view_size(h.gc) == 1  # what is left to commit, and no more
    hw(h)
    assert fetch_all(h) == {("in", 0): 9, ("in", 1): 3}
    assert view_size(h.gc) == 0


def test_a_require_stable_fetch_still_reads_the_latest_state_and_waits():
    """Kept as it was (and as Kafka's): a write without records, answered once everything is committed."""
    h = Harness(commit_later=True)
    commit(h, {("in", 0): 5})
    request = OffsetFetchRequest(group_id=G, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="in", partition_indexes=[0])], require_stable=True)
    stable = h.gc.offset_fetch(request, 7, h.now)
    request.require_stable = False
    plain = h.gc.offset_fetch(request, 7, h.now)
    assert isinstance(plain, OffsetFetchResponse) and plain.topics[0].partitions[0].committed_offset == -1
    assert not stable.done
    hw(h)
    assert stable.result().topics[0].partitions[0].committed_offset == 5


def test_a_deleted_offset_stays_visible_until_its_tombstone_is_committed():
    h = Harness(commit_later=True)
    commit(h, {("in", 0): 5, ("in", 1): 6})
    hw(h)
    P = OffsetDeleteRequest.OffsetDeleteRequestTopic
    deleted = h.gc.offset_delete(OffsetDeleteRequest(group_id=G, topics=[P(name="in", partitions=[
        P.OffsetDeleteRequestPartition(partition_index=0)])]), 0, h.now)
    assert not deleted.done
    assert fetch_all(h) == {("in", 0): 5, ("in", 1): 6}
    hw(h)
    assert deleted.result().error_code == 0
    assert fetch_all(h) == {("in", 1): 6}


def test_a_group_deleted_by_records_not_committed_keeps_its_offsets_for_readers():
    h = Harness(commit_later=True)
    commit(h, {("in", 0): 5})
    hw(h)
    deleted = h.gc.delete_groups(DeleteGroupsRequest(groups_names=[G]), 2, h.now)
    assert not deleted.done
    assert h.shard(G).group(G) is None  # gone from the latest state ...
    assert fetch_all(h) == {("in", 0): 5}  # ... but not from what is committed
    hw(h)
    assert deleted.result().results[0].error_code == 0
    assert fetch_all(h) == {} and fetch_one(h) == -1


def test_an_expired_offset_stays_visible_until_its_tombstone_is_committed():
    h = Harness(commit_later=True, offsets_retention_ms=2 * HOUR_MS, offsets_retention_check_interval_ms=HOUR_MS)
    commit(h, {("in", 0): 5})
    hw(h)
    h.advance(3 * HOUR_MS)  # the retention round writes the tombstone (and the group's)
    assert h.shard(G).offsets.get(G) is None
    assert fetch_all(h) == {("in", 0): 5}
    hw(h)
    assert fetch_all(h) == {}


def test_a_reload_treats_what_is_above_the_high_watermark_as_not_committed():
    """A new leader replays its whole log; the part its high watermark has not passed may still be
    truncated (by no one but a later leader change, which unloads the shard), so it is not shown."""
    h = Harness(commit_later=True)
    commit(h, {("in", 0): 5})
    hw(h)
    commit(h, {("in", 0): 7, ("in", 1): 1})
    P = OffsetDeleteRequest.OffsetDeleteRequestTopic
    h.gc.offset_delete(OffsetDeleteRequest(group_id=G, topics=[P(name="in", partitions=[
        P.OffsetDeleteRequestPartition(partition_index=1)])]), 0, h.now)
    h.gc.shutdown()
    again = h.reload()
    assert fetch_all(h, again) == {("in", 0): 5}
    hw(h, log_end(h) - 1)  # the commit, not the deletion after it
    assert fetch_all(h, again) == {("in", 0): 7, ("in", 1): 1}
    hw(h)
    assert fetch_all(h, again) == {("in", 0): 7}
    assert view_size(again) == 0


def test_transactional_offsets_are_seen_once_their_commit_marker_is_committed():
    h = Harness(commit_later=True)
    partition = h.gc.partition_for(G)
    commit(h, {("in", 0): 5})
    txn_commit(h, {("in", 0): 10, ("in", 1): 11})
    hw(h)
    assert fetch_all(h) == {("in", 0): 5}  # pending in the open transaction
    # The broker tells the coordinator of a marker once its acks=all append is replicated.
    h.writer.append_marker(partition, 7, 0, True)
    hw(h)
    # A plain commit appended after the marker, not yet replicated, must not show through it ...
    commit(h, {("in", 0): 20})
    h.gc.complete_transaction(partition, 7, True)
    assert fetch_all(h) == {("in", 0): 10, ("in", 1): 11}
    hw(h)
    assert fetch_all(h) == {("in", 0): 20, ("in", 1): 11}
    assert view_size(h.gc) == 0


def test_a_reload_shows_a_transaction_once_its_marker_is_committed():
    h = Harness(commit_later=True)
    partition = h.gc.partition_for(G)
    commit(h, {("in", 0): 5})
    txn_commit(h, {("in", 0): 10})
    hw(h)
    h.writer.append_marker(partition, 7, 0, True)  # written, not replicated yet, when the leader changes
    h.gc.shutdown()
    again = h.reload()
    assert fetch_all(h, again) == {("in", 0): 5}
    hw(h)
    assert fetch_all(h, again) == {("in", 0): 10}
    assert view_size(again) == 0


def test_an_aborted_transaction_changes_nothing_readers_see():
    h = Harness(commit_later=True)
    partition = h.gc.partition_for(G)
    commit(h, {("in", 0): 5})
    txn_commit(h, {("in", 0): 10})
    hw(h)
    h.writer.append_marker(partition, 7, 0, False)
    hw(h)
    h.gc.complete_transaction(partition, 7, False)
    assert fetch_all(h) == {("in", 0): 5} and view_size(h.gc) == 0


def test_a_write_answered_as_timed_out_still_shows_once_replicated():
    """offsets.commit.timeout.ms gives up the answer, not the records (runtime.py `_bounded`)."""
    h = Harness(commit_later=True, offsets_commit_timeout_ms=5000)
    answer = commit(h, {("in", 0): 5})
    h.advance(5000)
    assert answer.done and answer.result().topics[0].partitions[0].error_code != 0
    assert fetch_one(h) == -1
    hw(h)
    assert fetch_one(h) == 5
