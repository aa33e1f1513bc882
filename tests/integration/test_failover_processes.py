"""Failover without waiting for the session, on a three-node cluster of real processes whose brokers have a
60 s session (broker.session.timeout.ms=60000): everything below must happen within deadlines of 30 s, so
it can only be the work of the rules under test, never of a session expiring.

  * kill -9 of a partition's leader (not the active controller): its kernel closes its sockets, the active
    controller sees the heartbeat connection close and fences it after
    odradek.broker.session.disconnect.grace.ms; another in-sync replica leads and an idempotent acks=all
    producer is acknowledged again;
  * the killed node restarts (`cluster up`) and is registered and unfenced at once (its old registration
    is fenced, not a live session);
  * the whole cluster stops and starts again (docker-compose down, up): the node stopped last still holds
    an unfenced registration, which the new controller only presumes; its new incarnation registers at
    once instead of waiting out the 60 s, so acks=all writes are acknowledged again.

  * kill -9 of the active controller (a combined node: its broker dies with it): the other voters see
    its connections close and elect a new controller after odradek.controller.quorum.disconnect.grace.ms
    (not controller.quorum.fetch.timeout.ms, a minute here), which fences the dead broker after the
    broker disconnect grace (its quorum connection closed too), and its partitions take acks=all writes
    again.

Waits are bounded polls of the cluster's answers (Metadata, DescribeCluster, delivery reports), never
timed assertions.
"""

from __future__ import annotations

import os
import signal

import pytest

from odradek.protocol.messages import DescribeClusterRequest, MetadataRequest

from tests.harness.processes import Cluster, create_with_confluent

pytestmark = pytest.mark.timeout(240)

# The quorum's fetch timeout is a minute too: a new active controller within DEADLINE_S of the old one's
# death can only come from the followers seeing its connections close (raft handle_disconnect).
SESSION = ["broker.session.timeout.ms=60000", "auto.leader.rebalance.enable=false",
           "controller.quorum.fetch.timeout.ms=60000"]
DEADLINE_S = 30.0  # half the session: what happens within it is not the session's doing


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("failover") / "cluster", overrides=SESSION)
    c.up()
    yield c
    c.down()


def leaders(cluster: Cluster, node_id: int, topic: str) -> dict[int, tuple[int, list[int]]]:
    md = cluster.request(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    return {p.partition_index: (p.leader_id, list(p.isr_nodes)) for t in md.topics for p in t.partitions}


def fenced(cluster: Cluster, node_id: int) -> dict[int, bool]:
    described = cluster.request(node_id, DescribeClusterRequest(include_fenced_brokers=True), 2)
    return {b.broker_id: b.is_fenced for b in described.brokers}


def produce_one(bootstrap: str, value: bytes, partition: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": int(DEADLINE_S * 1000)})
    outcome: list = []
    producer.produce("failover", value, partition=partition, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(DEADLINE_S + 5)
    assert outcome == [None], outcome


def test_kill_9_of_a_leader_moves_its_leadership_without_waiting_for_the_session(cluster):
    create_with_confluent(cluster.bootstrap(1), "failover", 3, replication=3)
    controller = cluster.wait(lambda: cluster.leader([1, 2, 3]), "an active controller")
    parts = cluster.wait(lambda: (p := leaders(cluster, controller, "failover")) and all(
        len(isr) == 3 and leader >= 0 for leader, isr in p.values()) and p, "every replica in sync")
    partition, (victim, _) = next((i, v) for i, v in sorted(parts.items()) if v[0] != controller)
    produce_one(cluster.bootstrap(controller), b"before", partition)

    os.kill(cluster.pid(victim), signal.SIGKILL)
    new_leader, _ = cluster.wait(
        lambda: (v := leaders(cluster, controller, "failover")[partition])[0] not in (victim, -1) and v,
        "a new leader", timeout_s=DEADLINE_S)
    assert victim not in leaders(cluster, controller, "failover")[partition][1]
    assert fenced(cluster, controller)[victim]
    others = ",".join(cluster.bootstrap(n) for n in (1, 2, 3) if n != victim)
    produce_one(others, b"after", partition)
    log = (cluster.dir / f"node-{controller}" / "node.log").read_text()
    assert "heartbeat connection closed" in log and f"broker={victim}" in log


def test_the_killed_node_restarts_and_is_unfenced_at_once(cluster):
    victim = next(b for b, is_fenced in fenced(cluster, cluster.leader([1, 2, 3])).items() if is_fenced)
    cluster.up()  # restarts just the dead node; returns once every node is registered and unfenced
    controller = cluster.leader([1, 2, 3])
    cluster.wait(lambda: not fenced(cluster, controller)[victim], "the restarted node unfenced", timeout_s=DEADLINE_S)
    cluster.wait(lambda: all(victim in isr for _, isr in leaders(cluster, controller, "failover").values()),
                 "the restarted node back in every ISR", timeout_s=DEADLINE_S)


def test_down_then_up_takes_acks_all_writes_without_waiting_for_the_session(cluster):
    """docker-compose down, then up (issue 27): before, the node stopped last was refused
    (DUPLICATE_BROKER_REGISTRATION) until the session the new controller presumed for its old
    incarnation ran out, and acks=all writes to partitions it alone had in sync were refused meanwhile."""
    cluster.down()
    cluster.up()  # returns once every node answers Metadata listing all three
    controller = cluster.wait(lambda: cluster.leader([1, 2, 3]), "an active controller", timeout_s=DEADLINE_S)
    cluster.wait(lambda: not any(fenced(cluster, controller).values()), "every node unfenced", timeout_s=DEADLINE_S)
    for partition in range(3):
        produce_one(",".join(cluster.bootstrap(n) for n in (1, 2, 3)), b"after restart", partition)


def test_kill_9_of_the_active_controller_is_replaced_without_waiting_for_the_fetch_timeout(cluster):
    controller = cluster.wait(lambda: cluster.leader([1, 2, 3]), "an active controller", timeout_s=DEADLINE_S)
    cluster.wait(lambda: not any(fenced(cluster, controller).values()), "every node unfenced", timeout_s=DEADLINE_S)
    parts = cluster.wait(lambda: (p := leaders(cluster, controller, "failover")) and all(
        len(isr) == 3 and leader >= 0 for leader, isr in p.values()) and p, "every replica in sync")
    led = [i for i, (leader, _) in sorted(parts.items()) if leader == controller]
    survivors = [n for n in (1, 2, 3) if n != controller]

    os.kill(cluster.pid(controller), signal.SIGKILL)
    new_controller = cluster.wait(lambda: (c := cluster.leader(survivors)) is not None and c not in (-1, controller) and c,
                                  "a new active controller", timeout_s=DEADLINE_S)
    cluster.wait(lambda: fenced(cluster, new_controller).get(controller), "the dead node fenced", timeout_s=DEADLINE_S)
    bootstrap = ",".join(cluster.bootstrap(n) for n in survivors)
    for partition in led:
        produce_one(bootstrap, b"after the controller died", partition)
    log = (cluster.dir / f"node-{new_controller}" / "node.log").read_text()
    assert "the quorum leader's connection closed" in log, log[-3000:]
