"""Fetch from the closest replica (KIP-392) on a real three-node cluster with racks.

`odradek cluster up` with `broker.rack=rack-{node}` and the RackAwareReplicaSelector: a confluent-kafka
consumer with `client.rack` set to a follower's rack is pointed there by the leader (preferred read
replica), reads every record produced with acks=all from that follower, and the brokers' metrics say who
served what: the leader answered with a preferred replica, the follower served consumer reads.
Waits are bounded polls of the cluster's own answers, never timed assertions.
"""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.harness import processes
from tests.harness.processes import Cluster, create_with_confluent, free_metrics_prefix

from ..checker import Seen, Sent, check

pytestmark = pytest.mark.timeout(240)

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RECORDS = 1000


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the metrics of port {port}")


@pytest.fixture
def rack_cluster(tmp_path, monkeypatch):
    prefix = free_metrics_prefix(3)
    overrides = processes.OVERRIDES + [
        "broker.rack=rack-{node}", f"replica.selector.class={RACK_AWARE}", f"metrics.port={prefix}{{node}}",
        "metrics.host=127.0.0.1",
    ]
    monkeypatch.setattr(processes, "OVERRIDES", overrides)
    c = Cluster(tmp_path / "cluster")
    c.metrics_prefix = prefix
    c.up()
    yield c
    c.down()


def test_a_consumer_reads_everything_from_the_follower_in_its_rack(rack_cluster):
    from confluent_kafka import Consumer, Producer

    cluster = rack_cluster
    # Racks are registered and shown (Metadata, as DescribeCluster does).
    md = cluster.metadata(1)
    assert {b.node_id: b.rack for b in md.brokers} == {1: "rack-1", 2: "rack-2", 3: "rack-3"}

    create_with_confluent(cluster.bootstrap(1), "racked", 1, replication=3)

    def partition_state():
        topics = [t for t in cluster.metadata(1, topics=None).topics if t.name == "racked"]
        if not topics or not topics[0].partitions:
            return None
        p = topics[0].partitions[0]
        return p if p.leader_id >= 0 and len(p.isr_nodes) == 3 else None

    state = cluster.wait(partition_state, "the partition with a leader and a full ISR")
    leader = state.leader_id
    follower = min(n for n in (1, 2, 3) if n != leader)

    producer = Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": "all", "enable.idempotence": True})
    sent: list[Sent] = []

    def delivered(err, msg) -> None:
        if err is None:
            sent.append(Sent(msg.topic(), msg.partition(), msg.offset(), msg.value(), "p", int(msg.key())))

    for i in range(RECORDS):
        producer.produce("racked", key=b"%d" % i, value=b"v%d" % i, on_delivery=delivered)
    assert producer.flush(60) == 0

    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap(leader), "group.id": "rack-aware", "auto.offset.reset": "earliest",
        "client.rack": f"rack-{follower}", "enable.auto.commit": False,
    })
    consumer.subscribe(["racked"])
    seen: list[Seen] = []
    deadline = time.monotonic() + 90
    while len(seen) < RECORDS and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(Seen(m.topic(), m.partition(), m.offset(), m.value()))
    consumer.close()
    report = check(sent, seen)
    assert len(sent) == RECORDS and len(seen) == RECORDS and report.problems() == {}, report.summary()

    port = lambda node_id: cluster.metrics_prefix * 10 + node_id  # noqa: E731
    assert metric(port(leader), "odradek_fetch_preferred_replica_answers") >= 1
    assert metric(port(follower), "odradek_fetch_follower_reads") >= 1
    third = ({1, 2, 3} - {leader, follower}).pop()
    assert metric(port(third), "odradek_fetch_follower_reads") == 0
    # Exported (a count since start; whether a new leadership found a parked follower fetch is timing).
    assert metric(port(leader), "odradek_fetch_follower_fetches_woken") >= 0
