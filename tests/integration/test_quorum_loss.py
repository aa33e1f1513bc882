"""The controller quorum lost: 2 of 3 combined nodes stopped (SIGSTOP), the survivor keeps serving on its last
committed metadata, as a Kafka broker does; then the 2 continue, the quorum returns and metadata changes go on.

One cluster of real processes (`odradek cluster up --nodes 3`) for the whole scenario. The survivor is the
active controller and the leader of the replicated topic's partition 0; the offsets topic has one replica per partition (so that a
group whose offsets partition the survivor leads needs no ISR change to commit) and the group id is chosen
so that it does. While the two are stopped (past broker.session.timeout.ms, and past
replica.lag.time.max.ms, so the survivor's lease is lost and its ISR would need a change):

  * Metadata from the survivor still lists the three brokers and names itself leader of partition 0;
  * acks=1 produce to partition 0 is acknowledged (its followers are gone, so its high watermark, and what
    consumers see, stays where it was until they return: the ISR shrink needs the controller, as in Kafka);
  * on a topic with the survivor as its only replica (an ISR that needs no change), acks=1 and acks=all are
    acknowledged and a consumer reads them back;
  * a group offset commit is answered, and the committed offset reads back;
  * a CreateTopics sent meanwhile answers a retriable error (REQUEST_TIMED_OUT) after its timeout instead of
    hanging; DescribeQuorum and `odradek cluster status` say there is no quorum leader, and `odradek topic
    create`, timing out, says that this is why.

Then SIGCONT: a quorum leader is elected, a CreateTopics succeeds, and every record acknowledged before and
during the loss is read back at its offset (tests/checker.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest, FindCoordinatorRequest, MetadataRequest
from odradek.protocol.messages import DescribeQuorumRequest

from tests.harness.processes import Cluster, create_with_confluent

from ..checker import Seen, Sent, check

pytestmark = pytest.mark.timeout(300)

TOPIC = "ql"
SOLO = "ql-solo"  # one replica, on the survivor


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("quorumloss") / "cluster", overrides=(
        "offsets.topic.replication.factor=1", "offsets.topic.num.partitions=6", "replica.lag.time.max.ms=4000"))
    c.up()
    yield c
    for node_id in range(1, c.nodes + 1):  # a node left stopped must not hold down's SIGTERM
        try:
            os.kill(c.pid(node_id), signal.SIGCONT)
        except (ProcessLookupError, FileNotFoundError, ValueError):
            pass
    c.down()


def _partitions(cluster: Cluster, node_id: int, topic: str):
    md = cluster.metadata(node_id, [MetadataRequest.MetadataRequestTopic(name=topic)])
    topics = [t for t in md.topics if t.name == topic and t.error_code == 0]
    return {p.partition_index: p for p in topics[0].partitions} if topics else None


def _produce(bootstrap: str, partition: int, values: list[bytes], acks: str, topic: str = TOPIC) -> list[Sent]:
    from confluent_kafka import Producer

    acked: list[Sent] = []
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is None:
            acked.append(Sent(topic, msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
                         "message.timeout.ms": 30000, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    producer.flush(60)
    assert not errors and len(acked) == len(values), errors
    return acked


def _read(bootstrap: str, topic: str, expected: int) -> list[Seen]:
    """Partition 0 of `topic` from offset 0 until `expected` records are read or a minute has passed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ql-reader", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    seen: list[Seen] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        for _ in range(300):
            if len(seen) >= expected:
                break
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                if msg.error() is None:
                    seen.append(Seen(topic, msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return seen


def _create_on(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    """A topic with these replicas per partition (the first one leads); min.insync.replicas 1 where a
    partition has one replica (the cluster says 2)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "1"} if len(assignment[0]) == 1 else {}
    new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=config)
    for future in admin.create_topics([new], request_timeout=20).values():
        future.result(timeout=30)


def _group_led_by(cluster: Cluster, node_id: int) -> str:
    """A group id whose coordinator (the leader of its offsets partition) is `node_id`."""
    def find():
        for i in range(200):
            group = f"ql-group-{i}"
            answer = cluster.request(node_id, FindCoordinatorRequest(key=group, key_type=0), 3)
            if answer.error_code:
                return None  # the offsets topic is being created: ask again
            if answer.node_id == node_id:
                return group
        return None

    return cluster.wait(find, f"a group coordinated by node {node_id}")


def _describe_quorum(cluster: Cluster, node_id: int):
    request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
    return cluster.request(node_id, request, 2).topics[0].partitions[0]


def _on_controller_listener(cluster: Cluster, node_id: int, message, version: int, timeout_s: float):
    """A request on the node's controller listener, as another node sends it (PLAINTEXT, no authorizer)."""
    import asyncio

    from odradek.broker.cluster_tool import node_ports
    from odradek.broker.node_client import NodeConnection

    async def call():
        conn = NodeConnection(node_id, "127.0.0.1", node_ports(node_id, cluster.port)[1], backoff_s=0.0)
        try:
            return await conn.request(message, version, timeout_s=timeout_s)
        finally:
            await conn.close()

    return asyncio.run(call())


def _quorum_without_leader(bootstrap: str) -> str | None:
    import asyncio

    from odradek.client.admin import Admin

    async def ask():
        admin = Admin(bootstrap_servers=bootstrap)
        try:
            return await admin.quorum_without_leader(timeout_s=20)
        finally:
            await admin.close()

    return asyncio.run(ask())


def test_the_survivor_serves_on_its_last_metadata_and_the_quorum_returns(cluster):
    from confluent_kafka import Consumer, TopicPartition

    # The survivor is the active controller (so the metadata change asked for as the quorum goes is decided
    # there and fails as the lead is lost, not after the 30 s forwarding timeout) and leads partition 0.
    survivor = cluster.wait(lambda: cluster.leader([1, 2, 3]), "a quorum leader")
    stopped = [n for n in (1, 2, 3) if n != survivor]
    bootstrap = cluster.bootstrap(survivor)
    _create_on(bootstrap, TOPIC, [[survivor, *stopped], [*stopped, survivor], [stopped[1], survivor, stopped[0]]])
    cluster.wait(lambda: (lambda p: p if p and all(len(q.isr_nodes) == 3 for q in p.values()) else None)(
        _partitions(cluster, survivor, TOPIC)), "the topic fully in sync")
    _create_on(bootstrap, SOLO, [[survivor]])
    cluster.wait(lambda: (lambda p: p and p[0].leader_id == survivor)(_partitions(cluster, survivor, SOLO)),
                 "the one-replica topic led by the survivor")
    sent = _produce(bootstrap, 0, [b"before-%d" % i for i in range(50)], acks="all")
    solo = _produce(bootstrap, 0, [b"solo-before-%d" % i for i in range(20)], acks="all", topic=SOLO)
    group = _group_led_by(cluster, survivor)

    for node_id in stopped:
        os.kill(cluster.pid(node_id), signal.SIGSTOP)
    # A metadata change asked for as the quorum goes waits for a controller, then answers a retriable error, never hangs.
    created: list = []
    create = CreateTopicsRequest(timeout_ms=5000, topics=[CreateTopicsRequest.CreatableTopic(
        name="during-loss", num_partitions=1, replication_factor=1)])
    creating = threading.Thread(target=lambda: created.append(cluster.request(survivor, create, 7, timeout_s=120)))
    creating.start()

    log_path = cluster.dir / f"node-{survivor}" / "node.log"
    cluster.wait(lambda: "no controller has answered this broker" in log_path.read_text(),
                 "the survivor's lease lost", timeout_s=90)
    cluster.wait(lambda: "controller quorum leader lost" in log_path.read_text(), "the quorum leader reported lost")

    # Metadata: the last committed image, brokers and leaders as they were.
    md = cluster.metadata(survivor, [MetadataRequest.MetadataRequestTopic(name=TOPIC)])
    assert sorted(b.node_id for b in md.brokers) == [1, 2, 3]
    during = {p.partition_index: p for p in md.topics[0].partitions}
    assert during[0].leader_id == survivor and during[0].error_code == 0
    assert all(p.leader_id >= 0 for p in during.values())

    # acks=1 produce to what the survivor leads; consumers see what was committed before the loss.
    before = list(sent)
    sent += _produce(bootstrap, 0, [b"during-%d" % i for i in range(50)], acks="1")
    report = check(before, _read(bootstrap, TOPIC, expected=len(before)))
    assert not report.problems(), report.summary()
    # Where the ISR needs no change, acks=all too, and consumers read it at once.
    solo += _produce(bootstrap, 0, [b"solo-acks1-%d" % i for i in range(50)], acks="1", topic=SOLO)
    solo += _produce(bootstrap, 0, [b"solo-acksall-%d" % i for i in range(50)], acks="all", topic=SOLO)
    report = check(solo, _read(bootstrap, SOLO, expected=len(solo)))
    assert not report.problems(), report.summary()

    # A group's offset commit on the survivor, its coordinator.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 42)], asynchronous=False)
        committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=30)
        assert committed[0].offset == 42
    finally:
        consumer.close()

    # A node's own request on the survivor's controller listener (what a broker sends the controller it
    # believes active): NOT_CONTROLLER at once, as Kafka's controller answers. It used to be relayed to a
    # leader the survivor does not have, held (with every request behind it on that connection) for the
    # 30 s forwarding timeout, and its connection then closed without an answer.
    probe = CreateTopicsRequest(timeout_ms=5000, topics=[CreateTopicsRequest.CreatableTopic(
        name="probe-during-loss", num_partitions=1, replication_factor=1)])
    answer = _on_controller_listener(cluster, survivor, probe, 7, timeout_s=20)
    assert [t.error_code for t in answer.topics] == [ErrorCode.NOT_CONTROLLER]

    # The quorum, as the survivor sees it: no leader, said at once.
    quorum = _describe_quorum(cluster, survivor)
    assert quorum.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and quorum.leader_id == -1
    status = subprocess.run([sys.executable, "-m", "odradek", "cluster", "status", "--dir", str(cluster.dir),
                             "-b", bootstrap], capture_output=True, text=True, timeout=60)
    print(status.stdout)
    assert "quorum: no leader" in status.stdout
    # An admin command that needs the controller says why it timed out: the quorum has no leader (the broker's
    # words from DescribeQuorum), and where to look, not only the address that did not answer in time.
    create_cli = subprocess.run([sys.executable, "-m", "odradek", "-b", bootstrap, "--timeout", "5", "topic", "create",
                                 "cli-during-loss", "--partitions", "1"], capture_output=True, text=True, timeout=60)
    print(create_cli.stderr)
    assert create_cli.returncode == 3, create_cli.stderr
    assert "the controller quorum has no leader" in create_cli.stderr, create_cli.stderr
    assert "no controller quorum leader: node" in create_cli.stderr and "odradek cluster quorum" in create_cli.stderr

    creating.join(timeout=120)
    assert created and created[0].topics[0].error_code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER)

    # The two continue: a leader is elected, metadata changes go on, nothing acknowledged is lost.
    for node_id in stopped:
        os.kill(cluster.pid(node_id), signal.SIGCONT)
    cluster.wait(lambda: _describe_quorum(cluster, survivor).error_code == 0, "a quorum leader again", timeout_s=90)
    assert _quorum_without_leader(bootstrap) is None  # (what the command line asks when a command timed out)
    create_with_confluent(bootstrap, "after-loss", 1)
    cluster.wait(lambda: "the controller answers this broker again" in log_path.read_text(), "the lease regained")
    assert "controller quorum leader known again" in log_path.read_text()
    for topic, acknowledged in ((TOPIC, sent), (SOLO, solo)):
        report = check(acknowledged, _read(cluster.bootstrap(stopped[0]), topic, expected=len(acknowledged)))
        print(topic, report.summary())
        assert not report.problems(), report.summary()
