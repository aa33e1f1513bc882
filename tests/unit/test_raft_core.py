"""Scenarios of the KRaft quorum core on a manual clock: elections, pre-vote, check quorum, divergence,
snapshots, restarts, and the wire form of everything the core sends."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from odradek.raft import API_VERSIONS, NotLeaderError, OutboundResponse, QuorumStateData, Role, SnapshotId
from odradek.raft.core import METADATA_TOPIC_ID

from .raft_harness import Cluster


def elect(cluster: Cluster) -> int:
    cluster.run_until(lambda: len(cluster.leaders()) == 1 and all(
        n is None or n.leader_id == cluster.leaders()[0] for n in cluster.nodes.values()))
    return cluster.leaders()[0]


def test_single_voter_elects_itself_and_commits():
    cluster = Cluster(voters=(1,))
    elect(cluster)
    assert cluster[1].epoch == 1
    offset = cluster.append(b"a", b"b")
    cluster.run_until(lambda: cluster.committed_everywhere(offset))
    assert cluster.machines[1].values == [(1, b"a"), (2, b"b")]  # offset 0 is the LeaderChange control batch
    assert cluster.machines[1].commits[0].is_control


@pytest.mark.parametrize("voters", [(1, 2, 3), (1, 2, 3, 4, 5)])
def test_voters_elect_one_leader_and_replicate_to_observers(voters):
    cluster = Cluster(voters=voters, observers=(100,))
    leader = elect(cluster)
    assert all(n.epoch == 1 for n in cluster.nodes.values() if n.is_voter)
    offsets = [cluster.append(f"r{i}".encode()) for i in range(5)]
    cluster.run_until(lambda: cluster.committed_everywhere(offsets[-1]))
    for node_id in cluster.nodes:
        assert [v for _, v in cluster.machines[node_id].values] == [b"r0", b"r1", b"r2", b"r3", b"r4"]
        assert cluster[node_id].leader_id == leader
    assert not cluster[100].is_voter and cluster[100].role == Role.FOLLOWER
    # Pre-vote came first: a candidate's epoch only rises after a majority said it would vote.
    votes = cluster.messages(VoteRequest)
    assert votes[0].topics[0].partitions[0].pre_vote


def test_append_needs_the_lead():
    cluster = Cluster()
    leader = elect(cluster)
    follower = next(i for i in cluster.nodes if i != leader)
    with pytest.raises(NotLeaderError):
        cluster[follower].append([b"x"], cluster.now)


def test_votes_are_persisted_before_they_are_answered():
    cluster = Cluster()
    elect(cluster)
    checked = 0
    for source, message in cluster.sent:
        if isinstance(message, OutboundResponse) and isinstance(message.message, VoteResponse):
            p = message.message.topics[0].partitions[0]
            if p.vote_granted and not p.pre_vote:
                state = cluster.stores[source].state
                assert state.voted_id == message.destination and state.leader_epoch >= p.leader_epoch
                checked += 1
    assert checked >= 1
    # The leader persisted its own election: a restart finds it, and resigns the epoch.
    leader = cluster.leaders()[0]
    assert cluster.stores[leader].state.leader_id == leader


def test_persisted_state_survives_a_restart_and_a_restarted_leader_resigns():
    cluster = Cluster()
    leader = elect(cluster)
    epoch = cluster[leader].epoch
    cluster.crash(leader)
    node = cluster.restart(leader)
    assert node.epoch == epoch and node.role == Role.RESIGNED
    new_leader = elect(cluster)
    assert cluster[new_leader].epoch > epoch


def test_pre_vote_does_not_disrupt_a_stable_leader():
    cluster = Cluster(voters=(1, 2, 3))
    leader = elect(cluster)
    epoch = cluster[leader].epoch
    x = next(i for i in cluster.nodes if i != leader)
    # x loses the leader (both ways) but still reaches the third voter, which fetches happily.
    cluster.cut |= {(x, leader), (leader, x)}
    cluster.advance(10_000)
    pre_votes = [m for m in cluster.messages(VoteRequest) if m.topics[0].partitions[0].replica_id == x]
    assert pre_votes and all(m.topics[0].partitions[0].pre_vote for m in pre_votes)
    assert cluster[leader].role == Role.LEADER and cluster[leader].epoch == epoch
    assert cluster[x].epoch == epoch  # never bumped: no disruptive election
    cluster.heal()
    cluster.run_until(lambda: cluster[x].role == Role.FOLLOWER and cluster[x].leader_id == leader)
    assert cluster[leader].epoch == epoch


def test_check_quorum_resigns_a_leader_cut_from_the_majority():
    cluster = Cluster(voters=(1, 2, 3), fetch_timeout_ms=2000)
    leader = elect(cluster)
    epoch = cluster[leader].epoch
    cut_at = cluster.now
    cluster.isolate(leader)
    took = cluster.run_until(lambda: cluster[leader].role != Role.LEADER)
    assert took <= 3000 + 10  # 1.5 x fetch timeout
    assert cluster[leader].role in (Role.RESIGNED, Role.PROSPECTIVE)
    cluster.run_until(lambda: any(cluster[i].role == Role.LEADER for i in cluster.nodes if i != leader))
    new_leader = next(i for i in cluster.nodes if i != leader and cluster[i].role == Role.LEADER)
    assert cluster[new_leader].epoch > epoch
    assert cluster.now - cut_at < 10_000
    cluster.heal()
    cluster.run_until(lambda: cluster[leader].leader_id == new_leader and cluster[leader].role == Role.FOLLOWER)


def test_divergent_follower_log_is_truncated_by_epoch():
    cluster = Cluster(voters=(1, 2, 3))
    old = elect(cluster)
    committed = cluster.append(b"committed")
    cluster.run_until(lambda: cluster.committed_everywhere(committed))
    # The leader appends records nobody receives, then loses the lead to the others.
    cluster.isolate(old)
    cluster[old].append([b"lost-1"], cluster.now)
    cluster[old].append([b"lost-2"], cluster.now)
    cluster.advance(10)
    old_end = cluster.logs[old].log_end_offset
    cluster.run_until(lambda: any(cluster[i].role == Role.LEADER for i in cluster.nodes if i != old))
    new = next(i for i in cluster.nodes if i != old and cluster[i].role == Role.LEADER)
    offset = cluster[new].append([b"new-1"], cluster.now)
    cluster.tick()
    cluster.heal()
    cluster.run_until(lambda: cluster.committed_everywhere(offset))
    diverging = [m for m in cluster.messages(FetchResponse)
                 if m.responses[0].partitions[0].diverging_epoch.epoch >= 0]
    assert diverging, "the old leader was told where its log diverges"
    assert old_end > cluster.logs[new].log_end_offset - 2  # it really had a suffix of its own
    assert cluster.logs[old].batches() == cluster.logs[new].batches()
    assert [v for _, v in cluster.machines[old].values] == [b"committed", b"new-1"]


def test_divergence_across_epochs_the_follower_never_held_takes_two_rounds():
    # The leader's epoch 1 ends at 5, then epochs 3 and 5. The follower's epoch 1 runs on to 10 (one
    # batch spans 5..8) and then has epoch 4. Asked about epoch 4, the leader answers (3, 8); the follower
    # has no epoch 3, so it cuts at the end of its epoch 1 (10, a boundary of its own), not at 8 (inside
    # a batch), and the next answer, about epoch 1, brings it to 5.
    from odradek.protocol.records import build_batch
    from odradek.raft import MemoryRaftLog

    def log_of(*batches):
        log = MemoryRaftLog()
        for count, epoch in batches:
            log.append_as_leader(build_batch([(None, b"x", None, 0)] * count), epoch)
        log.flush()
        return log

    state = QuorumStateData(leader_epoch=5)
    leader_log = ((2, 1), (3, 1), (2, 3), (1, 3), (1, 5))
    preload = {1: (log_of(*leader_log), state), 2: (log_of(*leader_log), state),
               3: (log_of((2, 1), (3, 1), (4, 1), (1, 1), (2, 4)), state)}
    cluster = Cluster(voters=(1, 2, 3), preload=preload)
    leader = elect(cluster)
    assert leader != 3
    offset = cluster.append(b"after")
    cluster.run_until(lambda: cluster.committed_everywhere(offset))
    assert cluster.logs[3].batches() == cluster.logs[leader].batches()
    diverging = [m.responses[0].partitions[0].diverging_epoch for m in cluster.messages(FetchResponse)
                 if m.responses[0].partitions[0].diverging_epoch.epoch >= 0]
    assert [(d.epoch, d.end_offset) for d in diverging] == [(3, 8), (1, 5)]


def test_records_of_earlier_epochs_commit_only_with_one_of_the_new_leaders_own():
    # Every voter holds offsets 0-4 from epoch 1, uncommitted. When the new leader's first follower
    # fetches at 5, a majority has 0-4, but the high watermark must wait for the LeaderChange batch at 5
    # (Raft's rule against committing an earlier term's entries by counting, Figure 8 of the paper).
    from odradek.protocol.records import build_batch
    from odradek.raft import MemoryRaftLog

    def preload():
        log = MemoryRaftLog()
        log.append_as_leader(build_batch([(None, b"old", None, 0)] * 5), 1)
        log.flush()
        return log, QuorumStateData(leader_epoch=1)

    cluster = Cluster(voters=(1, 2, 3), preload={i: preload() for i in (1, 2, 3)})
    seen: set[int] = set()
    for node_id, node in cluster.nodes.items():
        def watched(source, request_id, request, now_ms, node=node, inner=node.handle_request):
            out = inner(source, request_id, request, now_ms)
            if node.role == Role.LEADER:
                seen.add(node.high_watermark)
            return out
        node.handle_request = watched
    elect(cluster)
    cluster.run_until(lambda: cluster.committed_everywhere(5))
    assert 5 not in seen and 6 in seen
    assert [v for _, v in cluster.machines[1].values] == [b"old"] * 5


def test_lagging_observer_catches_up_through_a_chunked_snapshot():
    cluster = Cluster(voters=(1, 2, 3), observers=(100,), snapshot_chunk_bytes=16)
    leader = elect(cluster)
    cluster.isolate(100)
    last = 0
    for i in range(20):
        last = cluster.append(f"v{i}".encode())
    cluster.run_until(lambda: all(cluster[v].high_watermark > last for v in (1, 2, 3))
                      and all(cluster.machines[v].next_offset > last for v in (1, 2, 3)))
    for v in (1, 2, 3):
        cluster[v].create_snapshot(cluster.machines[v].next_offset, cluster.machines[v].snapshot())
        assert cluster.logs[v].log_start_offset == last + 1
    after = cluster.append(b"after-snapshot")
    cluster.heal()
    cluster.run_until(lambda: cluster.committed_everywhere(after))
    machine = cluster.machines[100]
    assert machine.loads == [SnapshotId(last + 1, cluster[leader].epoch)]
    assert [v for _, v in machine.values] == [f"v{i}".encode() for i in range(20)] + [b"after-snapshot"]
    chunks = cluster.messages(FetchSnapshotRequest)
    assert len(chunks) > 3 and [c.topics[0].partitions[0].position for c in chunks][:2] == [0, 16]
    assert cluster.logs[100].log_start_offset == last + 1


def test_restart_loads_the_snapshot_then_the_log_after_it():
    cluster = Cluster(voters=(1, 2, 3))
    elect(cluster)
    first = [cluster.append(f"a{i}".encode()) for i in range(5)]
    cluster.run_until(lambda: cluster.committed_everywhere(first[-1]))
    node_id = next(i for i in cluster.nodes if cluster[i].role == Role.FOLLOWER)
    snap = cluster[node_id].create_snapshot(cluster.machines[node_id].next_offset,
                                            cluster.machines[node_id].snapshot())
    second = [cluster.append(f"b{i}".encode()) for i in range(3)]
    cluster.run_until(lambda: cluster.committed_everywhere(second[-1]))
    cluster.crash(node_id)
    cluster.restart(node_id)
    machine = cluster.machines[node_id]
    cluster.run_until(lambda: machine.next_offset > second[-1])
    assert machine.loads == [snap]
    assert machine.commits[0].base_offset == snap.end_offset  # nothing below the snapshot replayed
    assert [v for _, v in machine.values] == [f"a{i}".encode() for i in range(5)] + [f"b{i}".encode() for i in range(3)]


def test_unflushed_leader_records_do_not_count_toward_the_high_watermark():
    cluster = Cluster(voters=(1,), leader_flush_interval_ms=1000)
    elect(cluster)
    cluster.advance(1000)
    first = cluster.append(b"x")  # flushed at once: the last flush is more than an interval ago
    assert cluster[1].high_watermark == first + 1
    offset = cluster.append(b"y")
    cluster.advance(100)
    assert cluster[1].high_watermark == first + 1  # appended, not flushed, so not committed
    cluster.advance(1000)
    assert cluster[1].high_watermark == offset + 1


def test_graceful_resignation_hands_over_with_end_quorum_epoch():
    cluster = Cluster(voters=(1, 2, 3))
    leader = elect(cluster)
    epoch = cluster[leader].epoch
    cluster.emit(leader, cluster[leader].resign(cluster.now))
    took = cluster.run_until(lambda: any(cluster[i].role == Role.LEADER and cluster[i].epoch > epoch
                                         for i in cluster.nodes))
    assert cluster.messages(EndQuorumEpochRequest)
    assert took < 1000  # the preferred successor stands at once, not after an election timeout


def test_describe_quorum_reports_voters_and_observers():
    cluster = Cluster(voters=(1, 2, 3), observers=(100,))
    leader = elect(cluster)
    offset = cluster.append(b"x")
    cluster.run_until(lambda: cluster.committed_everywhere(offset))
    cluster.advance(600)  # a round of fetches after the commit
    response = cluster[leader].describe_quorum()
    p = response.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.high_watermark) == (ErrorCode.NONE, leader, offset + 1)
    assert [r.replica_id for r in p.current_voters] == [1, 2, 3]
    assert [r.replica_id for r in p.observers] == [100]
    assert all(r.log_end_offset == offset + 1 for r in p.current_voters + p.observers)
    follower = next(i for i in cluster.nodes if i != leader)
    out = cluster[follower].handle_request(100, 1, DescribeQuorumRequest(), cluster.now)
    assert out[0].message.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_requests_from_other_clusters_are_refused():
    cluster = Cluster()
    leader = elect(cluster)
    request = VoteRequest(cluster_id="other", topics=[])
    out = cluster[leader].handle_request(2, 1, request, cluster.now)
    assert out[0].message.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_every_emitted_message_encodes_at_the_versions_kafka_controllers_speak():
    cluster = Cluster(voters=(1, 2, 3), observers=(100,), snapshot_chunk_bytes=32)
    leader = elect(cluster)
    cluster.isolate(100)
    last = 0
    for i in range(10):
        last = cluster.append(f"v{i}".encode())
    cluster.run_until(lambda: all(cluster.machines[v].next_offset > last for v in (1, 2, 3)))
    for v in (1, 2, 3):
        cluster[v].create_snapshot(cluster.machines[v].next_offset, cluster.machines[v].snapshot())
    cluster.heal()
    cluster.run_until(lambda: cluster.committed_everywhere(last))
    cluster.emit(leader, cluster[leader].handle_request(100, 10**6, DescribeQuorumRequest(), cluster.now))
    cluster.emit(leader, cluster[leader].resign(cluster.now))
    cluster.run_until(lambda: len(cluster.leaders()) == 1 and cluster.leaders()[0] != leader)
    seen: dict[type, int] = {}
    for _, outbound in cluster.sent:
        message = outbound.message
        version = outbound.api_version
        assert version == API_VERSIONS[message.API_KEY]
        data = message.encode(version)
        decoded = type(message).decode(data, version)
        assert decoded.encode(version) == data
        assert decoded == message, type(message).__name__
        seen[type(message)] = seen.get(type(message), 0) + 1
    expected = {VoteRequest, VoteResponse, BeginQuorumEpochRequest, BeginQuorumEpochResponse,
                EndQuorumEpochRequest, EndQuorumEpochResponse, FetchRequest, FetchResponse,
                FetchSnapshotRequest, FetchSnapshotResponse, DescribeQuorumResponse}
    assert expected <= set(seen), expected - set(seen)
    fetch = cluster.messages(FetchRequest)[0]
    assert fetch.topics[0].topic_id == METADATA_TOPIC_ID and fetch.replica_state.replica_id >= 0


def test_quorum_state_speaks_kafkas_json(tmp_path):
    from odradek.raft import FileQuorumStateStore

    kafka_v0 = ('{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
                '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    state = QuorumStateData.from_json(kafka_v0)
    assert state == QuorumStateData(leader_epoch=2, leader_id=1, voted_id=-1, current_voters=(1, 2, 3))
    assert QuorumStateData.from_json(state.to_json()) == state
    kafka_v1 = ('{"leaderId":-1,"leaderEpoch":5,"votedId":3,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",'
                '"data_version":1}')
    assert QuorumStateData.from_json(kafka_v1) == QuorumStateData(leader_epoch=5, voted_id=3)
    store = FileQuorumStateStore(str(tmp_path))
    assert store.read() is None
    store.write(state)
    assert FileQuorumStateStore(str(tmp_path)).read() == state
    assert (tmp_path / "quorum-state").read_text().startswith('{"clusterId"')


def _quiet(cluster: Cluster) -> int:
    """Elect, then let the followers' fetches come to rest at the leader (parked, nothing to say)."""
    leader = elect(cluster)
    offset = cluster.append(b"warm")
    cluster.run_until(lambda: cluster.committed_everywhere(offset))
    cluster.advance(20)
    assert len(cluster[leader].state.parked) == len(cluster.nodes) - 1
    return leader


def test_a_record_is_committed_everywhere_one_fetch_round_after_the_fetch_that_committed_it():
    """With no time passing: the append answers the parked fetches with the record; the first follower's
    next fetch moves the high watermark (answered at once), and the second's, which arrives after that and
    says it knows the old high watermark (Fetch v18, KIP-1166), is answered at once too instead of being
    parked for the max wait (500 ms) as an idle fetch."""
    cluster = Cluster(voters=(1, 2, 3), observers=(100,))
    _quiet(cluster)
    start = cluster.now
    offset = cluster.append(b"x")
    assert cluster.now == start
    assert cluster.committed_everywhere(offset), {i: n.high_watermark for i, n in cluster.nodes.items()}


def _fetch(cluster: Cluster, node_id: int, fetch_offset: int, high_watermark: int | None):
    from odradek.raft import rpc

    request = rpc.fetch_request(cluster_id="test", replica_id=node_id, epoch=cluster.leader().epoch,
                                fetch_offset=fetch_offset, last_fetched_epoch=cluster.leader().epoch,
                                log_start_offset=0, max_bytes=1 << 20, max_wait_ms=500,
                                high_watermark=0 if high_watermark is None else high_watermark)
    if high_watermark is None:  # as sent at v17 and below: the field's default, "not known"
        request.topics[0].partitions[0].high_watermark = FetchRequest.FetchTopic.FetchPartition().high_watermark
    return request


def _answers(outbound, request_id: int) -> list:
    return [m.message for m in outbound if isinstance(m, OutboundResponse) and m.request_id == request_id]


def test_the_leader_parks_an_idle_fetch_only_when_the_fetcher_knows_its_high_watermark():
    cluster = Cluster(voters=(1, 2, 3))
    leader_id = _quiet(cluster)
    leader = cluster[leader_id]
    f1, f2 = (i for i in (1, 2, 3) if i != leader_id)
    # The test plays the followers from here: their own fetches stay parked, unanswered.
    offset = leader.append([b"x"], cluster.now)
    leader.poll(cluster.now)
    end, old_hw = offset + 1, leader.high_watermark
    assert old_hw == offset  # only the leader has the record
    # f1 has the record: its fetch moves the high watermark and is answered at once.
    (answer,) = _answers(leader.handle_request(f1, 9001, _fetch(cluster, f1, end, old_hw), cluster.now), 9001)
    assert answer.responses[0].partitions[0].high_watermark == end
    # f2 has it too, but its fetch arrives after: the high watermark does not move, but f2 says it knows
    # the old one, so it is answered at once with the new one.
    (answer,) = _answers(leader.handle_request(f2, 9002, _fetch(cluster, f2, end, old_hw), cluster.now), 9002)
    assert answer.responses[0].partitions[0].high_watermark == end
    # A fetch that knows the high watermark has nothing to learn: parked.
    assert _answers(leader.handle_request(f2, 9003, _fetch(cluster, f2, end, end), cluster.now), 9003) == []
    # So is one of v17 or below (the field not sent), whatever it knows: Kafka 4.0's behaviour.
    assert _answers(leader.handle_request(f1, 9004, _fetch(cluster, f1, end, None), cluster.now), 9004) == []


def test_a_parked_fetch_is_answered_when_the_high_watermark_moves():
    """Five voters: the high watermark needs three. A follower that has the record parks its fetch (the
    leader and it are two); when a third voter's fetch moves the high watermark, the parked fetch is
    answered then, with the new high watermark, not at the end of its max wait."""
    cluster = Cluster(voters=(1, 2, 3, 4, 5))
    leader_id = _quiet(cluster)
    leader = cluster[leader_id]
    f1, f2 = [i for i in (1, 2, 3, 4, 5) if i != leader_id][:2]
    offset = leader.append([b"x"], cluster.now)
    leader.poll(cluster.now)
    end = offset + 1
    # f1's fetch at the end moves nothing (two of five): parked, even at v17 where it says nothing.
    assert _answers(leader.handle_request(f1, 9101, _fetch(cluster, f1, end, None), cluster.now), 9101) == []
    assert leader.high_watermark == offset
    # f2's fetch at the end makes three: the high watermark moves, and both are answered now.
    out = leader.handle_request(f2, 9102, _fetch(cluster, f2, end, offset), cluster.now)
    assert leader.high_watermark == end
    (parked,) = _answers(out, 9101)
    (moved,) = _answers(out, 9102)
    assert parked.responses[0].partitions[0].high_watermark == end
    assert moved.responses[0].partitions[0].high_watermark == end


# -- a dead leader found by its closed connections (RaftNode.handle_disconnect)


def _new_leader_after_leader_death(grace_ms: int, *, tell: bool) -> tuple[int, int, int]:
    """Kill the leader of a 3-voter quorum; with `tell`, its followers see its connections close (its host
    is up). Returns (old leader, new leader, simulated ms from the kill to the new leader)."""
    cluster = Cluster(voters=(1, 2, 3), fetch_timeout_ms=2000, election_timeout_ms=1000,
                      leader_disconnect_grace_ms=grace_ms)
    leader = elect(cluster)
    offset = cluster.append(b"before")
    cluster.run_until(lambda: cluster.committed_everywhere(offset))
    cluster.advance(100)
    cluster.crash(leader)
    followers = [i for i in cluster.nodes if i != leader]
    if tell:
        for f in followers:
            cluster.emit(f, cluster[f].handle_disconnect(leader, cluster.now))
    took = cluster.run_until(lambda: any(cluster[i].role == Role.LEADER for i in followers))
    new_leader = next(i for i in followers if cluster[i].role == Role.LEADER)
    assert cluster[new_leader].epoch > cluster.stores[leader].read().leader_epoch
    return leader, new_leader, took


def test_a_dead_leaders_closed_connections_bring_the_election_after_the_grace():
    for seed_grace in (300, 301, 302, 303, 304):  # several draws of the randomized wait
        _, _, took = _new_leader_after_leader_death(seed_grace, tell=True)
        # The first follower's wait (grace to 2x grace), then a pre-vote and a vote round (no message delay here).
        assert seed_grace <= took <= 2 * seed_grace + 20
    # Without the news (a frozen host, a cut network) or with the rule off: the whole fetch timeout.
    for grace, tell in ((300, False), (-1, True)):
        _, _, took = _new_leader_after_leader_death(grace, tell=tell)
        assert took >= 2000


def test_a_reset_connection_to_a_live_leader_does_not_depose_it():
    """A wrong suspicion: the connection closes but the leader lives. The follower's next fetch asks to
    be answered at once (max wait 0), the leader answers within the grace, and nothing changes."""
    cluster = Cluster(voters=(1, 2, 3), fetch_timeout_ms=2000, leader_disconnect_grace_ms=100)
    leader = elect(cluster)
    epoch = cluster[leader].epoch
    cluster.advance(600)  # every fetch parked at the leader
    x = next(i for i in cluster.nodes if i != leader)
    cluster.emit(x, cluster[x].handle_disconnect(leader, cluster.now))
    cluster.advance(3000)
    probes = [m for m in cluster.messages(FetchRequest) if m.replica_state.replica_id == x and m.max_wait_ms == 0]
    assert len(probes) == 1  # once answered, the follower parks its fetches again
    assert [i for i in cluster.nodes if cluster[i].role == Role.LEADER] == [leader]
    assert all(cluster[i].epoch == epoch for i in cluster.nodes)
    assert not [m for m in cluster.messages(VoteRequest) if m.topics[0].partitions[0].replica_id == x]


def test_one_follower_told_alone_cannot_depose_a_leader_the_others_hear():
    """Only the follower that saw the close stands: the other refuses its pre-vote while the leader answers
    it, so the epoch does not move (pre-vote, KIP-996), and the lone suspecter returns to the leader."""
    cluster = Cluster(voters=(1, 2, 3), fetch_timeout_ms=2000, leader_disconnect_grace_ms=50)
    leader = elect(cluster)
    epoch = cluster[leader].epoch
    x = next(i for i in cluster.nodes if i != leader)
    cluster.cut |= {(x, leader), (leader, x)}  # x cannot reach the leader and is told its connection closed
    cluster.emit(x, cluster[x].handle_disconnect(leader, cluster.now))
    cluster.advance(1500)
    pre_votes = [m for m in cluster.messages(VoteRequest) if m.topics[0].partitions[0].replica_id == x]
    assert pre_votes and all(m.topics[0].partitions[0].pre_vote for m in pre_votes)
    assert cluster[leader].role == Role.LEADER and all(cluster[i].epoch == epoch for i in cluster.nodes)
    cluster.heal()
    cluster.run_until(lambda: cluster[x].role == Role.FOLLOWER and cluster[x].leader_id == leader)
    assert cluster[leader].epoch == epoch
