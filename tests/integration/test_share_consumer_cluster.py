"""Share groups across a leader kill: confluent-kafka's `ShareConsumer` on a three-node cluster of real
processes (`odradek cluster up`, share groups on). The topic has three replicas (min ISR 2); the member
accepts half of what it got and holds the rest when the partition's leader is killed (-9). A new leader
loads the share-partition from the share coordinator (`__share_group_state`, itself replicated and failed
over if it was on the killed node): the accepted records never come back, the held ones do, with their
delivery count carried over, to another member of the group (librdkafka finds the new leader itself).

Waits are bounded polls of the cluster's own answers, never timed assertions.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import Producer, ShareConsumer

from tests.harness.processes import Cluster, create_with_confluent

pytestmark = pytest.mark.timeout(240)
TOPIC = "queue"
SETTINGS = ["odradek.share.enabled=true", "group.share.min.heartbeat.interval.ms=1000",
            "group.share.heartbeat.interval.ms=1000", "min.insync.replicas=2",
            "share.coordinator.state.topic.num.partitions=3", "group.share.min.record.lock.duration.ms=1000"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("share-consumer-cluster") / "cluster", overrides=SETTINGS)
    c.up()
    yield c
    c.down()


def _leader(cluster: Cluster, alive: list[int]) -> int:
    def leader():
        for node in alive:
            try:
                topics = cluster.metadata(node).topics
            except Exception:
                continue
            for t in topics:
                if t.name == TOPIC and t.partitions and t.partitions[0].leader_id in alive:
                    return t.partitions[0].leader_id
        return None
    return cluster.wait(leader, "the partition's leader among the live nodes", 60)


def test_acknowledged_records_stay_acknowledged_across_a_leader_kill(cluster):
    bootstrap = ",".join(cluster.bootstrap(n) for n in (1, 2, 3))
    create_with_confluent(bootstrap, TOPIC, 1, 3)
    group = "workers"
    # share.auto.offset.reset=earliest as the group's config, through the admin API the CLI uses.
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(TOPIC, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "worker", "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([TOPIC])
    try:
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 20:
            assert time.monotonic() < deadline, [m.offset() for m in got]
            for m in c.poll(0.5):
                assert m.error() is None, m.error()
                if m.offset() < 10:
                    c.acknowledge(m)  # ACCEPT 0-9; 10-19 stay acquired (no acknowledgement at all)
                got.append(m)
        assert sorted(m.offset() for m in got) == list(range(20))
        c.commit_sync(30)

        leader = _leader(cluster, [1, 2, 3])
        os.kill(cluster.pid(leader), signal.SIGKILL)
        alive = [n for n in (1, 2, 3) if n != leader]
        assert _leader(cluster, alive) != leader

        # `c` still holds 10-19 (explicit mode: it may not poll again without acknowledging them); another
        # member of the group gets them from the new leader.
        d = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "successor",
                           "log_level": 3, "share.acknowledgement.mode": "explicit"})
        d.subscribe([TOPIC])
        try:
            again: list = []
            deadline = time.monotonic() + 90
            while len(again) < 10:
                assert time.monotonic() < deadline, f"after the kill of node {leader}: {[m.offset() for m in again]}"
                for m in d.poll(0.5):
                    if m.error() is not None:
                        continue  # the dead leader's errors while librdkafka moves to the new one
                    d.acknowledge(m)
                    again.append(m)
            assert sorted(m.offset() for m in again) == list(range(10, 20))
            assert all(m.delivery_count() >= 2 for m in again), [m.delivery_count() for m in again]
            d.commit_sync(30)
        finally:
            d.close()
    finally:
        c.close()
