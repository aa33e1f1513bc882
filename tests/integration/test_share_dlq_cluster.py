"""Share-group dead-letter queues on a three-node cluster of real processes (`odradek cluster up`): the copy
goes from the share-partition's leader to the DLQ partition's leader on ANOTHER node (a Produce over the
inter-broker listener, acks=all on three replicas), and a group naming a DLQ topic that does not exist gets
it created when `errors.deadletterqueue.auto.create.topics.enable=true` (with the topic-side opt-in set, as
Kafka creates it). Waits are bounded polls of the cluster's own answers, never timed assertions.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.harness.groups import name, produce
from tests.harness.processes import Cluster, create_with_confluent

pytestmark = pytest.mark.timeout(240)
SETTINGS = ["group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000",
            "min.insync.replicas=2", "share.coordinator.state.topic.num.partitions=3",
            "errors.deadletterqueue.auto.create.topics.enable=true", "default.replication.factor=3"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("share-dlq-cluster") / "cluster", overrides=SETTINGS)
    c.up()
    yield c
    c.down()


def _leader_of(cluster: Cluster, topic: str, partition: int = 0) -> int:
    def leader():
        for t in cluster.metadata(1).topics:
            if t.name == topic and len(t.partitions) > partition and t.partitions[partition].leader_id > 0:
                return t.partitions[partition].leader_id
        return None
    return cluster.wait(leader, f"a leader for {topic}-{partition}", 60)


def _set_group(admin: AdminClient, group: str, **configs: str) -> None:
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)


def _reject_all(bootstrap: str, group: str, topic: str, n: int) -> None:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < n:
            assert time.monotonic() < deadline, f"{got} of {n} records"
            for m in c.poll(0.5):
                if m.error() is None:
                    c.acknowledge(m, AcknowledgeType.REJECT)
                    got += 1
        c.commit_sync(30)
    finally:
        c.close()


def _read(bootstrap: str, topic: str, n: int) -> list[dict[str, str]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": name("reader"), "auto.offset.reset": "earliest",
                  "topic.metadata.refresh.interval.ms": 1000})
    c.subscribe([topic])
    out: list[dict[str, str]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < n:
            assert time.monotonic() < deadline, f"{len(out)} of {n} DLQ records on {topic}"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append({k: v.decode() for k, v in (m.headers() or [])})
    finally:
        c.close()
    return out


def test_the_copy_goes_to_the_dlq_leader_on_another_node_and_a_missing_topic_is_created(cluster):
    bootstrap = ",".join(cluster.bootstrap(n) for n in (1, 2, 3))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = name("work")
    create_with_confluent(bootstrap, topic, 1, 3)
    source_leader = _leader_of(cluster, topic)
    # The DLQ partition 0 (= source partition 0 mod 1) led by another node: its preferred replica first.
    others = [n for n in (1, 2, 3) if n != source_leader]
    dlq = name("dlq.t")
    created = admin.create_topics([NewTopic(dlq, num_partitions=1, replica_assignment=[[others[0], others[1], source_leader]],
                                            config={"errors.deadletterqueue.group.enable": "true"})])
    for f in created.values():
        f.result(30)
    assert _leader_of(cluster, dlq) != source_leader
    group = name("sg")
    _set_group(admin, group, **{"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": dlq,
                                "errors.deadletterqueue.copy.record.enable": "true"})
    produce(bootstrap, topic, {0: 3})
    _reject_all(bootstrap, group, topic, 3)
    copies = _read(bootstrap, dlq, 3)
    assert sorted(h["__dlq.errors.offset"] for h in copies) == ["0", "1", "2"]
    assert {(h["__dlq.errors.topic"], h["__dlq.errors.group"]) for h in copies} == {(topic, group)}

    # A DLQ topic that does not exist: created (the broker's auto-create), with the topic-side opt-in.
    auto = name("dlq.auto")
    group2 = name("sg")
    _set_group(admin, group2, **{"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": auto})
    _reject_all(bootstrap, group2, topic, 3)
    copies = _read(bootstrap, auto, 3)
    assert sorted(h["__dlq.errors.offset"] for h in copies) == ["0", "1", "2"]
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, auto)])
    (config,) = [f.result(30) for f in described.values()]
    assert config["errors.deadletterqueue.group.enable"].value == "true"
