"""TxnOffsetCommit in the group coordinator: offsets pending in a transactional batch, made visible by the
COMMIT marker, dropped by ABORT, unstable for require_stable fetches meanwhile, and the same after a reload."""

from __future__ import annotations

from odradek.coordinator.runtime import TransactionalRecord, TransactionMarker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import OffsetFetchRequest, OffsetFetchResponse, TxnOffsetCommitRequest

from tests.harness.group_coordinator import Harness, form_group

G = "g"


def txn_commit(h, offsets, *, pid=7, epoch=0, version=3, generation=-1, member_id=""):
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    by_topic = {}
    for (topic, p), o in offsets.items():
        by_topic.setdefault(topic, []).append(T.TxnOffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=""))
    request = TxnOffsetCommitRequest(transactional_id="t", group_id=G, producer_id=pid, producer_epoch=epoch,
                                     generation_id=generation, member_id=member_id, group_instance_id=None,
                                     topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])
    response = h.gc.txn_offset_commit(request, version, h.now).result()
    return [p.error_code for t in response.topics for p in t.partitions]


def stable_fetch(h, gc=None):
    request = OffsetFetchRequest(group_id=G, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="in", partition_indexes=[0])], require_stable=True)
    answer = (gc or h.gc).offset_fetch(request, 7, h.now)
    (t,) = answer.result().topics  # a require_stable fetch waits for the partition's commit (here at once)
    (p,) = t.partitions
    return p.error_code, p.committed_offset


def marker(h, pid, committed):
    partition = h.gc.partition_for(G)
    h.writer.append_marker(partition, pid, 0, committed)
    h.gc.complete_transaction(partition, pid, committed)


def test_pending_until_the_commit_marker():
    h = Harness()
    h.commit(G, {("in", 0): 5})
    assert txn_commit(h, {("in", 0): 10, ("in", 1): 11}) == [0, 0]
    log = h.writer.logs[h.gc.partition_for(G)]
    assert isinstance(log[-1], TransactionalRecord) and log[-1].producer_id == 7
    assert h.fetch(G, {"in": [0, 1]})[1] == {("in", 0): (5, -1, ""), ("in", 1): (-1, -1, "")}
    assert stable_fetch(h) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    marker(h, 7, True)
    assert h.fetch(G, {"in": [0, 1]})[1] == {("in", 0): (10, -1, ""), ("in", 1): (11, -1, "")}
    assert stable_fetch(h) == (0, 10)


def test_abort_drops_them_and_a_reload_agrees():
    h = Harness()
    h.commit(G, {("in", 0): 5})
    txn_commit(h, {("in", 0): 10})
    marker(h, 7, False)
    txn_commit(h, {("in", 0): 20}, pid=8)
    assert h.fetch(G, {"in": [0]})[1] == {("in", 0): (5, -1, "")}
    gc = h.reload()
    assert h.fetch(G, {"in": [0]}, gc=gc)[1] == {("in", 0): (5, -1, "")}
    assert stable_fetch(h, gc) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)  # pid 8 still open after the reload
    assert isinstance(h.writer.logs[h.gc.partition_for(G)][-2], TransactionMarker)


def test_member_checks_of_a_consumer_group_generation():
    h = Harness()
    members, generation = form_group(h, G, 1)
    assert txn_commit(h, {("in", 0): 1}, generation=generation, member_id=members[0]) == [0]
    assert txn_commit(h, {("in", 0): 1}, generation=generation + 5, member_id=members[0]) == [ErrorCode.ILLEGAL_GENERATION]
    assert txn_commit(h, {("in", 0): 1}, version=2) == [0]  # v0-2 carry no member: let through


def plain_fetch(h, gc=None):
    """OffsetFetch v7 without require_stable: the committed offset, never a pending one."""
    request = OffsetFetchRequest(group_id=G, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="in", partition_indexes=[0])], require_stable=False)
    (t,) = (gc or h.gc).offset_fetch(request, 7, h.now).topics
    (p,) = t.partitions
    return p.error_code, p.committed_offset


def test_a_fetch_sees_the_last_committed_offset_until_the_marker_and_never_an_aborted_one():
    h = Harness()
    h.commit(G, {("in", 0): 5})
    txn_commit(h, {("in", 0): 10})
    assert plain_fetch(h) == (0, 5)
    assert stable_fetch(h) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    # Another producer's transaction on the same partition: unstable until both end.
    txn_commit(h, {("in", 0): 30}, pid=9)
    marker(h, 7, True)
    assert plain_fetch(h) == (0, 10)
    assert stable_fetch(h) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    marker(h, 9, False)
    assert plain_fetch(h) == stable_fetch(h) == (0, 10)
    assert plain_fetch(h, h.reload()) == (0, 10)


def test_a_plain_commit_written_after_the_transactional_one_wins_at_the_commit_marker():
    """Kafka keeps the most recent of a transactional and a plain commit (by the records' log order)."""
    h = Harness()
    txn_commit(h, {("in", 0): 10})
    h.commit(G, {("in", 0): 15})
    assert plain_fetch(h) == (0, 15)
    marker(h, 7, True)
    assert plain_fetch(h) == stable_fetch(h) == (0, 15)
    assert plain_fetch(h, h.reload()) == (0, 15)  # a reload replays the same order
    # The other way round: the transactional commit is the newer one, and takes effect.
    h.commit(G, {("in", 0): 16})
    txn_commit(h, {("in", 0): 20}, pid=8)
    marker(h, 8, True)
    assert plain_fetch(h) == (0, 20)
    assert plain_fetch(h, h.reload()) == (0, 20)


def tombstones(h) -> list[tuple[str, int]]:
    """The offset tombstones in the group's partition log (plain records only)."""
    from odradek.coordinator.group.records import deserialize

    plain = [item for item in h.writer.logs[h.gc.partition_for(G)]
             if type(item) not in (TransactionalRecord, TransactionMarker)]
    records = [deserialize(k, v) for k, v in plain]
    return [(r.key.topic, r.key.partition) for r in records if r.value is None and hasattr(r.key, "topic")]


def _offset_delete(h):
    from odradek.protocol.messages import OffsetDeleteRequest

    request = OffsetDeleteRequest(group_id=G, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name="in", partitions=[OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
            partition_index=0)])])
    response = h.gc.offset_delete(request, 0, h.now).result()
    assert response.error_code == 0 and response.topics[0].partitions[0].error_code == 0


def test_a_deleted_offset_does_not_come_back_with_a_later_commit_marker():
    h = Harness()
    h.commit(G, {("in", 0): 5})
    txn_commit(h, {("in", 0): 10})
    _offset_delete(h)
    assert stable_fetch(h) == plain_fetch(h) == (0, -1)  # the tombstone took the pending offset with it
    marker(h, 7, True)
    assert plain_fetch(h) == (0, -1)
    assert plain_fetch(h, h.reload()) == (0, -1)
    # A partition with only a pending offset gets a tombstone too (Kafka's OffsetDelete).
    txn_commit(h, {("in", 0): 11}, pid=8)
    _offset_delete(h)
    assert tombstones(h) == [("in", 0), ("in", 0)]
    marker(h, 8, True)
    assert plain_fetch(h) == (0, -1)


def test_delete_groups_tombstones_pending_offsets():
    from odradek.protocol.messages import DeleteGroupsRequest

    h = Harness()
    txn_commit(h, {("in", 0): 10})
    response = h.gc.delete_groups(DeleteGroupsRequest(groups_names=[G]), 2, h.now).result()
    assert [r.error_code for r in response.results] == [0]
    assert tombstones(h) == [("in", 0)]
    marker(h, 7, True)
    assert plain_fetch(h) == (0, -1)


def test_retention_keeps_an_offset_with_a_pending_transactional_one_and_its_group():
    hour = 3_600_000
    h = Harness(offsets_retention_ms=2 * hour, offsets_retention_check_interval_ms=hour // 2)
    h.commit(G, {("in", 0): 5})  # a simple group: its offset expires retention time after its commit
    txn_commit(h, {("in", 0): 10})
    h.advance(3 * hour)
    assert plain_fetch(h) == (0, 5)
    assert G in h.shard(G).group_ids()
    marker(h, 7, True)
    assert plain_fetch(h) == (0, 10)


def test_a_stable_fetch_is_answered_once_what_was_written_before_it_is_committed():
    """Kafka schedules a require_stable OffsetFetch as a write without records: it reads the latest state
    and answers once the partition's high watermark covers everything written before it; a fetch without
    require_stable answers at once."""
    h = Harness(commit_later=True)
    partition = h.gc.partition_for(G)
    from odradek.protocol.messages import OffsetCommitRequest

    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = h.gc.offset_commit(OffsetCommitRequest(group_id=G, topics=[topic(name="in", partitions=[
        topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_metadata="")])]), 8, h.now)
    assert not commit.done
    request = OffsetFetchRequest(group_id=G, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(
        name="in", partition_indexes=[0])], require_stable=True)
    stable = h.gc.offset_fetch(request, 7, h.now)
    assert not stable.done
    request.require_stable = False
    assert isinstance(h.gc.offset_fetch(request, 7, h.now), OffsetFetchResponse)  # answered now
    h.gc.on_committed(partition, len(h.writer.logs[partition]))
    assert commit.done and stable.result().topics[0].partitions[0].committed_offset == 5
