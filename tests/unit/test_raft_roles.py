"""The Raft core's roles (raft/state.py, raft/leader.py): one object per role, one table of moves that
refuses anything off it, and a lone voter that leads and commits without a single message."""

from __future__ import annotations

import random

import pytest

from odradek.raft import (
    TRANSITIONS,
    IllegalTransitionError,
    MemoryQuorumStateStore,
    MemoryRaftLog,
    RaftConfig,
    RaftInvariantError,
    RaftNode,
    Role,
    check_transition,
)
from odradek.raft.leader import LeaderState
from odradek.raft.state import NO_DEADLINE_MS, CandidateState, FollowerState, UnattachedState

from .raft_harness import Cluster, Machine


def lone_node(log: MemoryRaftLog, store: MemoryQuorumStateStore, machine: Machine, now: int) -> RaftNode:
    return RaftNode(RaftConfig(node_id=7, voters=(7,), cluster_id="lone"), log, store, machine,
                    random.Random(1), now)


# ---------------------------------------------------------------------------------- a lone voter


def test_a_lone_voter_leads_at_its_first_poll_and_commits_with_no_messages():
    log, store, machine = MemoryRaftLog(), MemoryQuorumStateStore(), Machine()
    node = lone_node(log, store, machine, now=1000)
    assert node.poll(1000) == []  # no timeout to wait out: it stands, wins its own vote, leads
    assert node.is_leader and node.epoch == 1 and node.leader_id == 7 and node.voted_id == 7
    assert machine.leaders == [(7, 1)]
    assert store.state.leader_id == 7 and store.state.leader_epoch == 1
    assert node.high_watermark == 1 and machine.commits[0].is_control  # its LeaderChange batch

    offset = node.append([b"a", b"b"], 1000)
    assert node.poll(1000) == []  # flushed, and a majority of one holds it: committed
    assert node.high_watermark == offset + 1
    assert machine.values == [(1, b"a"), (2, b"b")]
    assert node.next_deadline_ms == NO_DEADLINE_MS  # nothing to flush, nobody to check the quorum with


def test_a_lone_voter_that_restarts_leads_again_at_once():
    log, store, machine = MemoryRaftLog(), MemoryQuorumStateStore(), Machine()
    node = lone_node(log, store, machine, now=0)
    node.poll(0)
    offset = node.append([b"a"], 0)
    node.poll(0)
    assert node.high_watermark == offset + 1

    # It led epoch 1, so it restarts Resigned in it; being the only voter, it does not wait to stand.
    machine = Machine()
    node = lone_node(log.crash(), store, machine, now=50)
    assert node.role == Role.RESIGNED
    assert node.poll(50) == []
    assert node.is_leader and node.epoch == 2
    assert machine.values == [(1, b"a")]  # what it committed before is committed history


def test_a_lone_voter_in_the_harness_sends_nothing():
    cluster = Cluster(voters=(1,))
    cluster.tick()
    assert cluster[1].is_leader
    offset = cluster.append(b"x")
    assert cluster.committed_everywhere(offset)
    assert cluster.sent == []


# ---------------------------------------------------------------------------------- the table


def test_the_table_names_every_role():
    assert set(TRANSITIONS) == set(Role)


@pytest.mark.parametrize("source", list(Role))
@pytest.mark.parametrize("target", list(Role))
def test_a_voter_may_make_exactly_the_moves_on_the_table(source, target):
    if target in TRANSITIONS[source]:
        check_transition(source, target, is_voter=True)
    else:
        with pytest.raises(IllegalTransitionError):
            check_transition(source, target, is_voter=True)


@pytest.mark.parametrize("source, target", [
    (Role.UNATTACHED, Role.CANDIDATE),  # an election starts with pre-votes
    (Role.UNATTACHED, Role.LEADER),
    (Role.FOLLOWER, Role.CANDIDATE),
    (Role.FOLLOWER, Role.LEADER),
    (Role.PROSPECTIVE, Role.LEADER),  # pre-votes do not make a leader
    (Role.CANDIDATE, Role.CANDIDATE),  # a lost round pre-votes again
    (Role.LEADER, Role.LEADER),
    (Role.LEADER, Role.PROSPECTIVE),
    (Role.LEADER, Role.CANDIDATE),
    (Role.RESIGNED, Role.LEADER),  # never lead an epoch twice
    (Role.RESIGNED, Role.RESIGNED),
])
def test_moves_off_the_table_raise(source, target):
    with pytest.raises(IllegalTransitionError, match=f"{source.name} may not become {target.name}"):
        check_transition(source, target, is_voter=True)


@pytest.mark.parametrize("source, target", [(Role.UNATTACHED, Role.PROSPECTIVE), (Role.PROSPECTIVE, Role.CANDIDATE),
                                            (Role.CANDIDATE, Role.LEADER), (Role.LEADER, Role.RESIGNED)])
def test_an_observer_holds_no_voter_role(source, target):
    check_transition(source, target, is_voter=True)
    with pytest.raises(IllegalTransitionError, match="observer"):
        check_transition(source, target, is_voter=False)
    check_transition(Role.UNATTACHED, Role.FOLLOWER, is_voter=False)
    check_transition(Role.FOLLOWER, Role.UNATTACHED, is_voter=False)


def test_an_illegal_transition_is_an_invariant_error():
    assert issubclass(IllegalTransitionError, RaftInvariantError)


# ---------------------------------------------------------------------------------- the node


def elect(cluster: Cluster) -> int:
    cluster.run_until(lambda: len(cluster.leaders()) == 1 and all(
        n is None or n.leader_id == cluster.leaders()[0] for n in cluster.nodes.values()))
    return cluster.leaders()[0]


def test_the_node_refuses_a_move_off_the_table_and_keeps_its_role():
    cluster = Cluster()
    leader = elect(cluster)
    follower = cluster[next(i for i in cluster.nodes if i != leader)]
    before = follower.state
    assert isinstance(before, FollowerState)
    usurper = LeaderState.elected(node_id=follower.node_id, epoch=follower.epoch, voted_id=follower.voted_id,
                                  voters=cluster.voters, majority=2, epoch_start_offset=0,
                                  check_quorum_timeout_ms=3000, now_ms=cluster.now)
    writes = cluster.stores[follower.node_id].writes
    with pytest.raises(IllegalTransitionError):
        follower._transition_to(usurper)
    assert follower.state is before and cluster.stores[follower.node_id].writes == writes

    with pytest.raises(IllegalTransitionError):
        cluster[leader]._transition_to(CandidateState(epoch=cluster[leader].epoch + 1, voted_id=leader,
                                                      timeout_ms=cluster.now + 1000, granted={leader}))
    assert cluster[leader].is_leader


def test_an_observer_node_refuses_to_stand():
    cluster = Cluster(voters=(1, 2, 3), observers=(100,))
    elect(cluster)
    observer = cluster[100]
    with pytest.raises(IllegalTransitionError, match="observer"):
        observer._become_prospective()
    assert observer.role == Role.FOLLOWER


def test_leaving_a_role_drops_its_object():
    cluster = Cluster()
    leader = cluster[elect(cluster)]
    led = leader.state
    assert isinstance(led, LeaderState) and set(led.replicas) == {1, 2, 3}
    cluster.isolate(leader.node_id)
    cluster.advance(3100)  # no majority fetched for 1.5 x fetch timeout: check quorum resigns it
    assert leader.role == Role.RESIGNED and leader.leader_id == leader.node_id and leader.epoch == led.epoch
    assert leader.state is not led
    assert not hasattr(leader.state, "replicas") and not hasattr(leader.state, "parked")
