"""Committed offsets: generation checks, fetch shapes, reload by replay, retention, OffsetDelete."""

from __future__ import annotations

from odradek.coordinator.group.records import RecordType
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import OffsetDeleteRequest, OffsetFetchRequest

from tests.harness.group_coordinator import Harness, form_group, subscription

HOUR_MS = 3600_000
SESSION_MAX_MS = 1_800_000


def test_commits_with_generation_checks():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2)
    assert h.commit_errors("g", {("t", 0): 10}, generation=generation, member_id=a) == [0]
    assert h.commit_errors("g", {("t", 0): 11}, generation=generation + 1, member_id=a) == [
        ErrorCode.ILLEGAL_GENERATION]
    assert h.commit_errors("g", {("t", 0): 11}, generation=generation, member_id="ghost") == [
        ErrorCode.UNKNOWN_MEMBER_ID]
    # Without a member id and generation, a non-empty group refuses the commit.
    assert h.commit_errors("g", {("t", 0): 11}) == [ErrorCode.UNKNOWN_MEMBER_ID]
    # While the group waits for the leader's assignment, members get REBALANCE_IN_PROGRESS.
    h.join("g", a, protocols=[("range", subscription("t", "u"))])
    h.join("g", b)
    assert h.group("g").state.value == "CompletingRebalance"
    assert h.commit_errors("g", {("t", 0): 12}, generation=generation + 1, member_id=a) == [
        ErrorCode.REBALANCE_IN_PROGRESS]
    # The previous generation is gone.
    assert h.commit_errors("g", {("t", 0): 12}, generation=generation, member_id=a) == [ErrorCode.ILLEGAL_GENERATION]
    assert h.fetch("g", {"t": [0]})[1] == {("t", 0): (10, -1, "")}


def test_commit_during_preparing_rebalance_with_the_current_generation_is_accepted():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2)
    h.join("g", a, protocols=[("range", subscription("t", "u"))])
    assert h.group("g").state.value == "PreparingRebalance"
    assert h.commit_errors("g", {("t", 0): 5}, generation=generation, member_id=b) == [0]


def test_standalone_consumer_and_admin_commit_into_a_simple_group():
    h = Harness()
    response = h.commit("simple", {("t", 0): 7, ("t", 1): 8, ("u", 0): 9}, metadata="meta", leader_epoch=3, version=8)
    assert [p.error_code for t in response.topics for p in t.partitions] == [0, 0, 0]
    assert h.fetch("simple")[1] == {("t", 0): (7, 3, "meta"), ("t", 1): (8, 3, "meta"), ("u", 0): (9, 3, "meta")}
    group = h.group("simple")
    assert group.state.value == "Empty" and group.protocol_type is None
    # A group that does not exist and a generation: GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
    assert h.commit_errors("missing", {("t", 0): 1}, generation=3, member_id="m", version=9) == [
        ErrorCode.GROUP_ID_NOT_FOUND]
    assert h.commit_errors("missing", {("t", 0): 1}, generation=3, member_id="m", version=8) == [
        ErrorCode.ILLEGAL_GENERATION]
    assert h.commit_errors("", {("t", 0): 1}) == [ErrorCode.INVALID_GROUP_ID]


def test_metadata_and_leader_epoch_round_trip_and_metadata_too_large():
    h = Harness(offset_metadata_max_bytes=8)
    errors = h.commit_errors("g", {("t", 0): 1}, metadata="x" * 9)
    assert errors == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
    assert h.commit_errors("g", {("t", 0): 2}, metadata=None, leader_epoch=4, version=6) == [0]
    assert h.fetch("g", {"t": [0, 1]})[1] == {("t", 0): (2, 4, ""), ("t", 1): (-1, -1, "")}
    # Versions before 6 have no leader epoch.
    assert h.commit_errors("g", {("t", 0): 3}, metadata="m", version=5) == [0]
    assert h.fetch("g", {"t": [0]})[1] == {("t", 0): (3, -1, "m")}


def test_unknown_topic_partitions_are_refused_when_the_coordinator_knows_the_topics():
    topics = TopicsImage()
    topics.add("t", 2)
    h = Harness(topics=topics)
    assert h.commit_errors("g", {("t", 1): 1, ("t", 2): 1, ("nope", 0): 1}) == [
        0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_offsets_survive_reload():
    h = Harness()
    (a,), generation = form_group(h, "g", 1)
    h.commit("g", {("t", 0): 100, ("t", 1): 200}, generation=generation, member_id=a, metadata="x", leader_epoch=2)
    h.commit("simple", {("u", 0): 5})
    reloaded = h.reload()
    assert h.fetch("g", gc=reloaded)[1] == {("t", 0): (100, 2, "x"), ("t", 1): (200, 2, "x")}
    assert h.fetch("simple", gc=reloaded)[1] == {("u", 0): (5, -1, "")}
    # The group came back Stable with its member, who may keep committing with its generation.
    shard = reloaded.shard_for("g")
    group = shard.group("g")
    assert group.state.value == "Stable" and list(group.members) == [a] and group.generation_id == generation
    assert shard.replicated_state() == h.shard("g").replicated_state()


def test_offset_fetch_versions():
    h = Harness()
    h.commit("g", {("t", 0): 1, ("t", 1): 2})
    v1 = h.gc.offset_fetch(OffsetFetchRequest(group_id="g", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 5])]), 1, h.now)
    assert [(p.partition_index, p.committed_offset) for p in v1.topics[0].partitions] == [(0, 1), (5, -1)]
    v3_all = h.gc.offset_fetch(OffsetFetchRequest(group_id="g", topics=None), 3, h.now)
    assert v3_all.error_code == 0
    assert [(p.partition_index, p.committed_offset) for p in v3_all.topics[0].partitions] == [(0, 1), (1, 2)]
    batched = h.gc.offset_fetch(OffsetFetchRequest(groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None),
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id="empty", topics=None),
    ]), 8, h.now)
    assert [g.group_id for g in batched.groups] == ["g", "empty"]
    assert [len(g.topics) for g in batched.groups] == [1, 0]
    for version in (1, 3, 7, 8, 9):
        request = (OffsetFetchRequest(group_id="g", topics=None if version >= 2 else []) if version < 8 else
                   OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None)]))
        h.gc.offset_fetch(request, version, h.now).encode(version)


def test_not_coordinator_errors_go_where_each_version_puts_them():
    h = Harness()
    h.gc.on_resigned(h.gc.partition_for("g"))
    requested = [OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]
    v1 = h.gc.offset_fetch(OffsetFetchRequest(group_id="g", topics=requested), 1, h.now)
    assert v1.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    v2 = h.gc.offset_fetch(OffsetFetchRequest(group_id="g", topics=requested), 2, h.now)
    assert v2.error_code == ErrorCode.NOT_COORDINATOR and v2.topics == []
    assert h.fetch("g")[0] == ErrorCode.NOT_COORDINATOR
    assert h.commit_errors("g", {("t", 0): 1}) == [ErrorCode.NOT_COORDINATOR]
    assert h.join("g").result().error_code == ErrorCode.NOT_COORDINATOR
    assert h.heartbeat("g", "m", 1) == ErrorCode.NOT_COORDINATOR


def test_retention_expires_offsets_of_an_empty_group_and_deletes_it():
    h = Harness(offsets_retention_ms=2 * HOUR_MS, offsets_retention_check_interval_ms=HOUR_MS // 2)
    (a,), generation = form_group(h, "g", 1, session_ms=SESSION_MAX_MS)
    h.commit("g", {("t", 0): 1}, generation=generation, member_id=a)
    h.commit("simple", {("t", 0): 1})
    # A live group keeps its offsets however old.
    for _ in range(9):
        h.advance(HOUR_MS // 3)
        assert h.heartbeat("g", a, generation) == 0
    assert h.fetch("g")[1] == {("t", 0): (1, -1, "")}
    # The simple group's offsets expire retention time after their commit; the group goes with them.
    assert h.fetch("simple")[1] == {}
    assert "simple" not in h.shard("simple").group_ids()
    # The consumer group's retention counts from when it became empty.
    h.leave("g", (a, None))
    assert h.group("g").state.value == "Empty"
    h.advance(HOUR_MS)
    assert h.fetch("g")[1] == {("t", 0): (1, -1, "")}
    h.advance(HOUR_MS + HOUR_MS // 2)
    assert h.fetch("g")[1] == {}
    assert h.shard("g").group("g") is None
    assert h.records("g")[-1].type is RecordType.GROUP_METADATA and h.records("g")[-1].value is None


def test_retention_of_an_explicit_expire_timestamp_and_of_unsubscribed_topics():
    h = Harness(offsets_retention_ms=10 * HOUR_MS, offsets_retention_check_interval_ms=HOUR_MS)
    (a,), generation = form_group(h, "g", 1, protocols=[("range", subscription("t"))], session_ms=SESSION_MAX_MS)
    # OffsetCommit v2-4 may ask for its own retention (an OffsetCommitValue v1 record).
    assert h.commit_errors("g", {("t", 0): 1, ("short", 0): 1}, generation=generation, member_id=a, version=2,
                           retention_ms=HOUR_MS) == [0, 0]
    assert h.records("g")[-1].value_version == 1
    h.commit("g", {("gone", 0): 1}, generation=generation, member_id=a)

    def run_for(hours: int) -> None:
        for _ in range(3 * hours):
            h.advance(HOUR_MS // 3)
            assert h.heartbeat("g", a, generation) == 0

    run_for(2)
    assert set(h.fetch("g")[1]) == {("t", 0), ("gone", 0)}
    run_for(9)
    # The stable group subscribes to t: its offset stays, whatever its expire timestamp says.
    assert set(h.fetch("g")[1]) == {("t", 0)}


def test_offset_delete():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2, protocols=[("range", subscription("t"))])
    h.commit("g", {("t", 0): 1, ("u", 0): 2}, generation=generation, member_id=a)
    request = OffsetDeleteRequest(group_id="g", topics=[
        OffsetDeleteRequest.OffsetDeleteRequestTopic(name=name, partitions=[
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=0)])
        for name in ("t", "u")])
    response = h.gc.offset_delete(request, 0, h.now).result()
    assert response.error_code == 0
    assert [(t.name, t.partitions[0].error_code) for t in response.topics] == [
        ("t", ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), ("u", 0)]
    assert h.fetch("g")[1] == {("t", 0): (1, -1, "")}
    request.group_id = "missing"
    assert h.gc.offset_delete(request, 0, h.now).result().error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # A non-empty group of another protocol type may not delete offsets.
    form_group(h, "connect", 1, protocol_type="connect")
    request.group_id = "connect"
    assert h.gc.offset_delete(request, 0, h.now).result().error_code == ErrorCode.NON_EMPTY_GROUP


def test_responses_wait_for_the_commit_when_replication_commits_later():
    h = Harness(commit_later=True)
    partition = h.gc.partition_for("g")
    commit = h.gc.offset_commit(_commit_request("g", 5), 8, h.now)
    assert not commit.done
    end_offset = len(h.writer.logs[partition])
    # A write without records (a heartbeat) waits for the writes before it too.
    fetch_like = h.gc.heartbeat(_heartbeat_request("g"), 3, h.now)
    assert not fetch_like.done
    h.gc.on_committed(partition, end_offset - 1)
    assert not commit.done
    h.gc.on_committed(partition, end_offset)
    assert commit.result().topics[0].partitions[0].error_code == 0
    assert fetch_like.result().error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_failed_append_changes_nothing_and_is_answered():
    h = Harness()
    h.writer.fail_next = OSError("disk full")
    assert h.commit_errors("g", {("t", 0): 1}) == [ErrorCode.UNKNOWN_SERVER_ERROR]
    assert h.fetch("g")[1] == {}
    (a,), generation = form_group(h, "g2", 1)
    join = h.join("g2", a, protocols=[("range", subscription("x"))])
    r = join.result()
    h.writer.fail_next = OSError("disk full")
    sync = h.sync("g2", a, r.generation_id, {a: b"x"}).result()
    assert sync.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.group("g2").state.value in ("PreparingRebalance", "CompletingRebalance")
    assert h.shard("g2").group_metadata["g2"].generation == generation


def _commit_request(group_id: str, offset: int):
    from odradek.protocol.messages import OffsetCommitRequest

    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group_id, topics=[topic(name="t", partitions=[
        topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="")])])


def _heartbeat_request(group_id: str):
    from odradek.protocol.messages import HeartbeatRequest

    return HeartbeatRequest(group_id=group_id, generation_id=1, member_id="m")
