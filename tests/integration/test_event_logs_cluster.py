"""The events of a real three-node cluster (`odradek cluster up`, log.format=json), read from each node's
log and asserted on their fields, each logged once in the cluster and on the node where it happened:
quorum leader and active controller, brokers registered and unfenced, a topic created and its replicas
becoming leader or follower, a consumer group created, rebalanced and emptied, transactions aborted and
timed out, client connections (DEBUG), and after a kill -9 of one node: the broker fenced and the ISRs
shrunk (on the active controller), then its logs recovered (on the node) and, once it is back, the broker
registered and unfenced again and the ISRs expanded. Last, every line each node wrote to stdout and stderr
parses as JSON. One cluster for the whole module; waits are bounded polls of the logs."""

from __future__ import annotations

import os
import signal

import pytest

from tests.harness.eventlogs import matching, parse_json_lines, wait_for
from tests.harness.processes import OVERRIDES, Cluster, create_with_confluent, odradek

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(300)

NODES = (1, 2, 3)
TOPIC = "ev"
JSON_OVERRIDES = [
    "log.format=json",
    "log.levels=odradek.network=DEBUG",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
]


class JsonCluster(Cluster):
    def up(self) -> None:
        args = ["cluster", "up", "--nodes", str(self.nodes), "--dir", str(self.dir), "--port", str(self.port)]
        for o in [*OVERRIDES, *JSON_OVERRIDES]:
            args += ["--override", o]
        result = odradek(*args)
        assert result.returncode == 0, result.stderr + self.logs()

    def lines(self, node_id: int) -> list[str]:
        path = self.dir / f"node-{node_id}" / "node.log"
        return path.read_text().splitlines() if path.exists() else []

    def events(self, node_id: int) -> list[dict]:
        # A line being written as it is read is left for the next read.
        return [e for e in parse_json_lines(line for line in self.lines(node_id) if line.endswith("}"))]

    def all_events(self) -> list[dict]:
        return [dict(e, _node=n) for n in NODES for e in self.events(n)]

    def wait_event(self, name: str, **fields) -> list[dict]:
        return wait_for(self.all_events, name, what=self.logs, **fields)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = JsonCluster(tmp_path_factory.mktemp("eventlogs") / "cluster")
    c.up()
    try:
        c.wait(lambda: c.leader(list(NODES)) is not None, "a quorum leader")
        yield c
    finally:
        c.down()


def _active(cluster: JsonCluster) -> int:
    leader = cluster.wait(lambda: cluster.leader(list(NODES)), "a quorum leader")
    assert leader is not None
    return leader


def test_the_quorum_leader_and_the_active_controller(cluster):
    leader = _active(cluster)
    epoch = cluster.quorum(leader).leader_epoch
    (won,) = wait_for(lambda: cluster.events(leader), "quorum state changed", role="LEADER", epoch=epoch)
    assert won["level"] == "info" and won["node"] == leader and won["leader"] == leader
    wait_for(lambda: cluster.events(leader), "active controller", epoch=epoch)
    for other in set(NODES) - {leader}:
        (follows, *_) = wait_for(lambda: cluster.events(other), "quorum state changed", role="FOLLOWER", epoch=epoch)
        assert follows["leader"] == leader and follows["node"] == other and follows["level"] == "info"


def test_each_broker_registered_and_unfenced_once(cluster):
    for broker in NODES:
        registered = cluster.wait_event("broker registered", broker=broker)
        for r in registered:  # one line per registration in the whole cluster, by the controller of the time
            assert len(matching(cluster.all_events(), "broker registered", broker=broker,
                                broker_epoch=r["broker_epoch"])) == 1
            assert r["level"] == "info" and r["logger"] == "odradek.controller" and r["cause"] == "registration"
            assert r["listeners"][0].startswith("PLAINTEXT://127.0.0.1:") and r["fenced"] is True
        unfenced = cluster.wait_event("broker unfenced", broker=broker)
        assert unfenced[0]["level"] == "info"


def test_a_topic_created_once_and_its_replicas_leader_or_follower_where_they_live(cluster):
    create_with_confluent(cluster.bootstrap(2), TOPIC, 2, replication=3)
    (created,) = cluster.wait_event("topic created", topic=TOPIC)
    assert created["partitions"] == 2 and created["replication_factor"] == 3 and created["level"] == "info"
    for partition in (0, 1):
        (leader,) = cluster.wait_event("became leader", topic=TOPIC, partition=partition, leader_epoch=0)
        assert leader["_node"] == leader["leader"] and sorted(leader["isr"]) == [1, 2, 3]
        followers = cluster.wait_event("became follower", topic=TOPIC, partition=partition, leader_epoch=0, count=2)
        assert len(followers) == 2 and {f["_node"] for f in followers} == set(NODES) - {leader["_node"]}
        assert all(f["leader"] == leader["_node"] for f in followers)


def test_a_large_topic_is_hosted_in_slices_on_every_node_and_every_partition_takes_acks_all(cluster):
    """CreateTopics of 300 RF=3 partitions: each node makes the new image current at once and creates the logs
    in slices of 64 between turns of its loop (replication/hosting.py), saying once when it is done; then an
    acks=all record to every partition is acknowledged (a partition still waiting for its slice answers
    NOT_LEADER_OR_FOLLOWER, which the client retries). The topic is deleted after: the kill below meets the
    small topic only."""
    from confluent_kafka.admin import AdminClient

    big, n = "ev-big", 300
    create_with_confluent(cluster.bootstrap(1), big, n, replication=3)
    for node in NODES:
        (done, *_) = wait_for(lambda node=node: cluster.events(node), "partitions hosted as the committed metadata says",
                              what=cluster.logs, timeout_s=120)
        assert done["level"] == "info" and done["slices"] >= 2 and 0 < done["partitions"] <= n and done["took_ms"] >= 0
    failed = []
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": "all",
                                         "message.timeout.ms": 60000})
    for partition in range(n):
        producer.produce(big, b"x", partition=partition, on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(90) == 0 and failed == []
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(1)})  # (held: its futures die with it)
    for future in admin.delete_topics([big], operation_timeout=60).values():
        future.result(timeout=90)


def test_a_group_created_rebalanced_and_emptied_on_its_coordinator(cluster):
    group = "ev-group"
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap(1), "group.id": group, "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
    })
    consumer.subscribe([TOPIC])
    try:
        cluster.wait_event("group rebalanced", group=group)
        while not consumer.assignment():
            consumer.poll(0.2)
    finally:
        consumer.close()
    (created,) = cluster.wait_event("group created", group=group)
    coordinator = created["_node"]
    (rebalancing, *_) = cluster.wait_event("group rebalancing", group=group)
    (rebalanced, *_) = cluster.wait_event("group rebalanced", group=group)
    (emptied,) = cluster.wait_event("group emptied", group=group)
    assert {e["_node"] for e in (rebalancing, rebalanced, emptied)} == {coordinator}
    assert rebalancing["previous_state"] == "Empty" and rebalanced["generation"] == 1 and rebalanced["members"] == 1
    assert rebalanced["protocol"] and emptied["members"] == 0 and emptied["level"] == "info"


def test_transactions_aborted_and_timed_out_on_their_coordinator(cluster):
    def producer(transactional_id: str, **extra):
        p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap(3), "transactional.id": transactional_id,
                                      **extra})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPIC, b"in a transaction")
        assert p.flush(30) == 0
        return p

    aborting = producer("ev-abort")
    aborting.abort_transaction(30)
    (aborted,) = cluster.wait_event("transaction aborted", transactional_id="ev-abort")
    assert aborted["level"] == "info" and aborted["cause"] == "EndTxn" and aborted["partitions"] >= 1
    assert aborted["producer_id"] >= 0

    producer("ev-timeout", **{"transaction.timeout.ms": 1000})  # left open: the coordinator aborts it
    (timed_out,) = cluster.wait_event("transaction timed out; aborting it", transactional_id="ev-timeout")
    assert timed_out["level"] == "warning" and timed_out["txn_timeout_ms"] == 1000 and timed_out["partitions"] >= 1


def test_client_connections_at_debug(cluster):
    accepted = cluster.wait_event("connection accepted", listener="PLAINTEXT")
    assert accepted[0]["level"] == "debug" and accepted[0]["remote_address"].startswith("127.0.0.1:")
    closed = cluster.wait_event("connection closed", listener="PLAINTEXT")
    assert closed[0]["level"] == "debug" and "principal" in closed[0]


def test_a_killed_node_fenced_its_isrs_shrunk_then_recovered_and_back_in_sync(cluster):
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": "all"})
    for i in range(20):
        producer.produce(TOPIC, f"before the kill {i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    controller = _active(cluster)
    victim = max(set(NODES) - {controller})
    os.kill(cluster.pid(victim), signal.SIGKILL)

    (fenced,) = cluster.wait_event("broker fenced", broker=victim)
    assert fenced["level"] == "warning" and fenced["cause"] == "session expired"
    for partition in (0, 1):
        (shrunk,) = cluster.wait_event("isr shrunk", topic=TOPIC, partition=partition, removed=[victim])
        assert shrunk["level"] == "warning" and victim in shrunk["previous_isr"] and victim not in shrunk["isr"]
        assert shrunk["_node"] == fenced["_node"]  # both decided by the active controller

    cluster.up()  # starts the killed node again, on its data (the others run on)
    on_victim = lambda: cluster.events(victim)  # noqa: E731
    (directory,) = wait_for(on_victim, "log directory recovered after an unclean shutdown", what=cluster.logs)
    assert directory["level"] == "warning" and directory["logs"] >= 2
    for partition in (0, 1):
        (recovered, *_) = wait_for(on_victim, "log recovered", topic=TOPIC, partition=partition)
        assert recovered["clean_shutdown"] is False and recovered["log_end_offset"] >= 10
        (expanded,) = cluster.wait_event("isr expanded", topic=TOPIC, partition=partition, added=[victim])
        assert expanded["level"] == "info" and victim in expanded["isr"]
    registered = cluster.wait_event("broker registered", broker=victim, count=2)
    assert registered[-1]["broker_epoch"] > registered[0]["broker_epoch"]
    cluster.wait_event("broker unfenced", broker=victim, count=2)


def test_every_line_on_stdout_and_stderr_of_every_node_is_json(cluster):
    for node in NODES:
        lines = cluster.lines(node)
        events = parse_json_lines(lines)  # raises on the first line that is not a JSON object
        assert len(events) == len([line for line in lines if line.strip()]) > 0
        assert all({"event", "level", "timestamp", "logger"} <= e.keys() for e in events)
        assert not [e for e in events if "never retrieved" in str(e.get("event"))]
        assert matching(events, "listening", listener="PLAINTEXT", node=node)  # the daemon's line, as an event
