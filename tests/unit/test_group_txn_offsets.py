"""TxnOffsetCommit in the group coordinator: offsets pending in a transactional batch, made visible by the
COMMIT marker, dropped by ABORT, unstable for require_stable fetches meanwhile, and the same after a reload."""

from __future__ import annotations

from odradek.coordinator.runtime import TransactionalRecord, TransactionMarker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import OffsetFetchRequest, TxnOffsetCommitRequest

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
    (t,) = (gc or h.gc).offset_fetch(request, 7, h.now).topics
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
