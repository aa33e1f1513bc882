"""OffsetFetch without require_stable reads the offsets (and validates the member) at the high watermark of
the group's partition.

Kafka's GroupCoordinatorService answers it with a read operation at the partition's last committed offset:
a commit appended but not yet replicated, a deletion (OffsetDelete, DeleteGroups, retention) likewise, and
a transaction's offsets until their COMMIT marker is committed, are not seen by anyone else. The writer
here holds the high watermark (`commit_later`) and `writer.commit(partition, offset)` moves it.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.coordinator.group.records import deserialize
from odradek.coordinator.group.shard import GroupCoordinatorShard
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
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


# ---------------------------------------------------------------------------------------------------
# The group and its member epochs are validated at the high watermark too (KIP-848 consumer groups).

def _heartbeat(h: Harness, member_id: str, epoch: int, topics: list[str] | None, group_id: str = G):
    joining = epoch == 0
    request = ConsumerGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=epoch, instance_id=None,
        rebalance_timeout_ms=30_000 if topics is not None else -1, subscribed_topic_names=topics,
        server_assignor=None, topic_partitions=[] if joining else None)
    return h.gc.consumer_group_heartbeat(request, 1, h.now, "client", "/10.0.0.1")


def _consumer_harness() -> Harness:
    topics = TopicsImage()
    topics.add("in", 2, uuid.UUID(int=1))
    topics.add("more", 1, uuid.UUID(int=2))
    return Harness(commit_later=True, topics=topics)


def test_a_member_fetches_with_the_epoch_it_was_told_while_its_next_one_is_not_committed():
    h = _consumer_harness()
    joined = _heartbeat(h, "m", 0, ["in"])
    # A group whose records are not committed: Kafka finds no group at the high watermark, so the fetch
    # is answered (nothing committed) rather than refused for a member it cannot know yet.
    assert h.fetch(G, {"in": [0]}, member_id="m", member_epoch=1) == (0, {("in", 0): (-1, -1, "")})
    hw(h)
    epoch = joined.result().member_epoch
    assert h.fetch(G, {"in": [0]}, member_id="m", member_epoch=epoch)[0] == 0
    # A new subscription bumps the member's epoch in records not yet replicated.
    bumped = _heartbeat(h, "m", epoch, ["in", "more"])
    assert not bumped.done
    assert h.shard(G).consumer_groups[G].members["m"].member_epoch > epoch
    assert h.fetch(G, {"in": [0]}, member_id="m", member_epoch=epoch)[0] == 0  # not STALE_MEMBER_EPOCH
    assert h.fetch(G, {"in": [0]}, member_id="m", member_epoch=epoch + 1)[0] == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.fetch(G, {"in": [0]}, member_id="other", member_epoch=epoch)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    hw(h)
    new_epoch = bumped.result().member_epoch
    assert h.fetch(G, {"in": [0]}, member_id="m", member_epoch=new_epoch)[0] == 0
    assert h.fetch(G, {"in": [0]}, member_id="m", member_epoch=epoch)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert len(h.shard(G).consumer.committed_members) == 0


# ---------------------------------------------------------------------------------------------------
# The property: whatever was written and however far the high watermark got, OffsetFetch answers what a
# shard replaying only the log below the high watermark holds.

GROUPS = ["g", "h"]
_ops = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.integers(0, 1), st.integers(0, 100)),
    st.tuples(st.just("offset_delete"), st.sampled_from(GROUPS), st.integers(0, 1)),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS)),
    st.tuples(st.just("replicate"), st.integers(0, 3)),
    st.tuples(st.just("reload"),),
), max_size=30)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops)
def test_offset_fetch_answers_the_log_below_the_high_watermark(ops):
    h = Harness(commit_later=True, offsets_topic_num_partitions=1)
    gc = h.gc
    boundaries: list[int] = []  # the log's end after each operation: its batches' ends
    for op in ops:
        if op[0] == "commit":
            _, group_id, partition, offset = op
            topic = OffsetCommitRequest.OffsetCommitRequestTopic
            gc.offset_commit(OffsetCommitRequest(group_id=group_id, topics=[topic(name="in", partitions=[
                topic.OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset,
                                                   committed_metadata="")])]), 8, h.now)
        elif op[0] == "offset_delete":
            P = OffsetDeleteRequest.OffsetDeleteRequestTopic
            gc.offset_delete(OffsetDeleteRequest(group_id=op[1], topics=[P(name="in", partitions=[
                P.OffsetDeleteRequestPartition(partition_index=op[2])])]), 0, h.now)
        elif op[0] == "delete":
            gc.delete_groups(DeleteGroupsRequest(groups_names=[op[1]]), 2, h.now)
        elif op[0] == "replicate":  # over `op[1]` more batches (a follower fetches whole batches)
            ends = sorted(set(boundaries))
            ahead = [end for end in ends if end > h.writer.high_watermark(0)]
            if ahead and op[1]:
                h.writer.commit(0, ahead[min(op[1], len(ahead)) - 1])
        else:
            gc.shutdown()
            gc = h.reload()
        boundaries.append(len(h.writer.logs.get(0, ())))
        oracle = GroupCoordinatorShard(0, h.config)
        for key, value in h.writer.logs.get(0, [])[:h.writer.high_watermark(0)]:
            oracle.replay(deserialize(key, value))
        for group_id in GROUPS:
            expected = {k: o.committed_offset for k, o in oracle.offsets.get(group_id, {}).items()}
            assert {k: o for k, (o, _, _) in h.fetch(group_id, gc=gc)[1].items()} == expected
    h.writer.commit(0)
    assert len(gc.shard_for("g").offset_manager.committed_view) == 0
