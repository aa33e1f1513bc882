"""A three-node cluster of real processes (`odradek cluster up`), driven by real Kafka admin clients through
kill -9, SIGSTOP and restarts.

  * confluent-kafka, kafka-python and aiokafka create and delete topics through any node (the request is
    forwarded to the active controller), and data produced through one node is consumed through another;
  * kill -9 of the active controller: another node takes over and metadata changes keep working; the killed
    node restarts with its data and catches up with the quorum;
  * SIGSTOP of the active controller: the others elect a leader and carry on; after SIGCONT it follows;
  * kill -9 of a broker: once its session expires the controller fences it and moves the leaderships of
    replicated partitions to in-sync replicas (metadata only: followers fetching data is part 2).
Waits are bounded polls of the cluster's own answers (DescribeQuorum, Metadata), never timed assertions.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from odradek.protocol.messages import MetadataRequest

from tests.harness.processes import Cluster, create_with_confluent

from ..checker import Seen, Sent, check

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster")
    c.up()
    yield c
    for node_id in range(1, c.nodes + 1):  # a node left stopped must not hold down's SIGTERM
        try:
            os.kill(c.pid(node_id), signal.SIGCONT)
        except (ProcessLookupError, FileNotFoundError, ValueError):
            pass
    c.down()


def test_admin_clients_through_any_node_and_failover_of_the_active_controller(cluster):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic
    from confluent_kafka import Consumer, Producer
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KafkaNewTopic

    # Three admin clients, each through another node.
    # The data topic is replicated three times (the cluster's min.insync.replicas is 2).
    create_with_confluent(cluster.bootstrap(3), "by-confluent", 3, replication=3)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(2), request_timeout_ms=20000)
    kp.create_topics([KafkaNewTopic("by-kafka-python", 3, 1)])
    kp.close()

    async def aio_create(bootstrap: str, name: str) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(name, 3, 1)])
        finally:
            await admin.close()

    asyncio.run(aio_create(cluster.bootstrap(1), "by-aiokafka"))
    for node_id in (1, 2, 3):
        names = cluster.wait(lambda n=node_id: {t.name for t in cluster.metadata(n).topics}, "topics")
        cluster.wait(lambda n=node_id: {"by-confluent", "by-kafka-python", "by-aiokafka"} <= {t.name for t in cluster.metadata(n).topics},
                     f"the topics on node {node_id}")

    producer = Producer({"bootstrap.servers": cluster.bootstrap(1), "enable.idempotence": True})
    sent: list[Sent] = []

    def delivered(err, msg) -> None:
        if err is None:
            sent.append(Sent(msg.topic(), msg.partition(), msg.offset(), msg.value(), "p", int(msg.key())))

    for i in range(300):
        producer.produce("by-confluent", key=b"%d" % i, value=b"v%d" % i, on_delivery=delivered)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(2), "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["by-confluent"])
    seen: list[Seen] = []
    deadline = time.monotonic() + 60
    while len(seen) < 300 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(Seen(m.topic(), m.partition(), m.offset(), m.value()))
    consumer.close()
    report = check(sent, seen)
    assert len(sent) == 300 and report.problems() == {}, report.summary()

    # kill -9 the active controller: another takes over; changes keep working through a survivor.
    leader = cluster.wait(lambda: cluster.leader([1, 2, 3]), "a leader")
    os.kill(cluster.pid(leader), signal.SIGKILL)
    survivors = [n for n in (1, 2, 3) if n != leader]
    new_leader = cluster.wait(lambda: (lambda x: x if x not in (None, leader) else None)(cluster.leader(survivors)),
                              "a new leader")
    assert new_leader in survivors
    create_with_confluent(cluster.bootstrap(survivors[0]), "after-kill", 2)
    # Until its session expires the dead node is still listed (as in Kafka); kafka-python's admin sends to a
    # listed node without retrying, so it goes on once the controller has fenced it.
    cluster.wait(lambda: sorted(b.node_id for b in cluster.metadata(survivors[1]).brokers) == survivors, "the dead node fenced")
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(survivors[1]), request_timeout_ms=20000)
    kp.delete_topics(["by-kafka-python"])
    kp.close()
    cluster.wait(lambda: "by-kafka-python" not in {t.name for t in cluster.metadata(survivors[0]).topics}, "the deletion")

    # Acknowledged records survive the kill (RF=3, min.insync.replicas=2): 200 more through a survivor,
    # then every one of the 500 is read back from the start, at the offset it was acknowledged at.
    producer = Producer({"bootstrap.servers": cluster.bootstrap(survivors[0]), "enable.idempotence": True})
    for i in range(300, 500):
        producer.produce("by-confluent", key=b"%d" % i, value=b"v%d" % i, on_delivery=delivered)
    assert producer.flush(60) == 0

    # The killed node restarts with its data and catches up.
    cluster.up()
    cluster.wait(lambda: (lambda p: p is not None and all(v.log_end_offset >= p.high_watermark for v in p.current_voters))(
        cluster.quorum(survivors[0])), "every voter caught up")
    assert "after-kill" in {t.name for t in cluster.metadata(leader).topics}
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(leader), "group.id": "after", "auto.offset.reset": "earliest"})
    consumer.subscribe(["by-confluent"])
    seen = []
    deadline = time.monotonic() + 60
    while len({r.value for r in seen}) < 500 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(Seen(m.topic(), m.partition(), m.offset(), m.value()))
    consumer.close()
    report = check(sent, seen)
    assert len(sent) == 500 and report.problems() == {}, report.summary()

    # SIGSTOP the active controller: the others carry on; after SIGCONT it follows the new leader.
    stopped = cluster.wait(lambda: cluster.leader([1, 2, 3]), "a leader")
    os.kill(cluster.pid(stopped), signal.SIGSTOP)
    others = [n for n in (1, 2, 3) if n != stopped]
    cluster.wait(lambda: (lambda x: x if x not in (None, stopped) else None)(cluster.leader(others)), "a leader while one is stopped")
    create_with_confluent(cluster.bootstrap(others[0]), "while-stopped", 1)
    os.kill(cluster.pid(stopped), signal.SIGCONT)
    cluster.wait(lambda: (lambda p: p is not None and p.leader_id != stopped)(cluster.quorum(stopped)), "the stopped node following")
    cluster.wait(lambda: "while-stopped" in {t.name for t in cluster.metadata(stopped).topics}, "the stopped node caught up")


def test_a_dead_broker_is_fenced_and_its_leaderships_move(cluster):
    create_with_confluent(cluster.bootstrap(1), "replicated", 6, replication=3)
    before = cluster.wait(lambda: (lambda t: t if t and len(t.partitions) == 6 else None)(
        next((t for t in cluster.metadata(1, [MetadataRequest.MetadataRequestTopic(name="replicated")]).topics), None)), "the topic")
    leaders = {p.partition_index: p.leader_id for p in before.partitions}
    victim = leaders[0]
    os.kill(cluster.pid(victim), signal.SIGKILL)
    alive = [n for n in (1, 2, 3) if n != victim]

    def moved():
        md = cluster.metadata(alive[0], [MetadataRequest.MetadataRequestTopic(name="replicated")])
        if victim in {b.node_id for b in md.brokers}:
            return None  # not fenced yet
        parts = {p.partition_index: p for p in md.topics[0].partitions}
        if any(p.leader_id in (victim, -1) for p in parts.values()):
            return None
        return parts

    parts = cluster.wait(moved, "the dead broker fenced and its leaderships moved")
    for index, p in parts.items():
        assert p.leader_id in alive and victim not in p.isr_nodes and victim in p.offline_replicas
        if leaders[index] == victim:
            assert p.leader_epoch > next(q.leader_epoch for q in before.partitions if q.partition_index == index)
