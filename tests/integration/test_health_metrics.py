"""Cluster health at a glance, scraped from the /metrics of a real three-node cluster (`odradek cluster up`).

One cluster for the module. The states are provoked in order and each is read back from the nodes' /metrics:
the quorum (leader, epoch, one active controller), log directories online, a consumer group with lag (on the
group's coordinator), transactions (one committed, one left open), per-API latency histograms, the Grafana
dashboard's queries against the names served; then one node is stopped (SIGSTOP, not the active controller)
and the others report it fenced, the partitions it held under-replicated (under min ISR for a topic that asks
for 3), its single-replica partition offline, and its voter lagging on the quorum leader. Waits are bounded
polls of the metrics themselves, never timed assertions.
"""

from __future__ import annotations

import os
import signal
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import processes
from tests.harness.grafana import load_dashboard, metric_names, queries, served_names
from tests.harness.processes import Cluster, free_metrics_prefix

pytestmark = pytest.mark.timeout(300)

TOPIC = "health-lag"  # 1 partition, RF 3: every node hosts it, so its coordinator measures lag
STRICT = "health-strict"  # RF 3, min.insync.replicas=3: under min ISR with one node stopped
SOLO = "health-solo"  # RF 1 on the node that will be stopped: offline once it is fenced
GROUP = "health-group"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    prefix = free_metrics_prefix(3)
    saved = processes.OVERRIDES
    processes.OVERRIDES = saved + [f"metrics.port={prefix}{{node}}", "metrics.host=127.0.0.1"]
    c = Cluster(tmp_path_factory.mktemp("health"))
    try:
        c.up()
        c.metrics_port = lambda node_id: prefix * 10 + node_id  # type: ignore[attr-defined]
        yield c
    finally:
        processes.OVERRIDES = saved
        c.down()


def scrape(cluster: Cluster, node_id: int) -> str:
    url = f"http://127.0.0.1:{cluster.metrics_port(node_id)}/metrics"  # type: ignore[attr-defined]
    return urllib.request.urlopen(url, timeout=10).read().decode()


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples named `name`, by their sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text, name).get(tuple(sorted(labels.items())))


def total(cluster: Cluster, nodes: list[int], name: str, **labels: str) -> float:
    found = [value(scrape(cluster, n), name, **labels) for n in nodes]
    return sum(v for v in found if v is not None)


def _admin(cluster: Cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": ",".join(cluster.bootstrap(n) for n in (1, 2, 3))})


def _create(cluster: Cluster, *topics) -> None:
    admin = _admin(cluster)  # held until the results are in: a collected handle fails its futures
    for future in admin.create_topics(list(topics), request_timeout=30).values():
        future.result(timeout=40)


def test_quorum_controller_and_log_dirs(cluster):
    leader = cluster.wait(lambda: cluster.leader([1, 2, 3]), "a quorum leader")
    texts = {n: scrape(cluster, n) for n in (1, 2, 3)}
    assert {value(t, "odradek_raft_current_leader") for t in texts.values()} == {leader}
    epochs = {value(t, "odradek_raft_current_epoch") for t in texts.values()}
    assert len(epochs) == 1 and epochs.pop() >= 1
    assert sum(value(t, "odradek_active_controller_count") for t in texts.values()) == 1
    assert value(texts[leader], "odradek_active_controller_count") == 1
    lags = samples(texts[leader], "odradek_raft_voter_lag_records")
    assert {dict(k)["voter"] for k in lags} == {"1", "2", "3"}
    assert lags[(("voter", str(leader)),)] == 0
    for n in (1, 2, 3):
        assert not samples(texts[n], "odradek_raft_voter_lag_records") or n == leader  # the leader's only
        dirs = samples(texts[n], "odradek_log_dir_online")
        assert dirs and all(v == 1 for v in dirs.values()), dirs
        assert samples(texts[n], "odradek_log_dir_size_bytes")
        assert value(texts[n], "odradek_metadata_lag_records") is not None


def test_consumer_group_lag_on_its_coordinator(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    _create(cluster, NewTopic(TOPIC, 1, 3))
    producer = Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": "all"})
    for i in range(10):
        producer.produce(TOPIC, f"r{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(2), "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
    finally:
        consumer.close()

    def lag_series():
        found = {}
        for n in (1, 2, 3):
            text = scrape(cluster, n)
            lag = value(text, "odradek_consumer_group_lag", group=GROUP, topic=TOPIC, partition="0")
            if lag is not None:
                found[n] = (lag, value(text, "odradek_consumer_group_committed_offset", group=GROUP, topic=TOPIC,
                                       partition="0"))
        return found if found and all(lag == 6 for lag, _ in found.values()) else None

    found = cluster.wait(lag_series, "the group's lag of 6 on its coordinator")
    assert list(found.values()) == [(6, 4)]  # one coordinator reports it: high watermark 10 - committed 4
    hw = [value(scrape(cluster, n), "odradek_partition_high_watermark", topic=TOPIC, partition="0") for n in (1, 2, 3)]
    assert [v for v in hw if v is not None] == [10]  # its leader's


def test_transactions_ongoing_and_committed(cluster):
    from confluent_kafka import Producer

    before = total(cluster, [1, 2, 3], "odradek_transactions_completed_total", result="committed")
    done = Producer({"bootstrap.servers": cluster.bootstrap(1), "transactional.id": "health-done"})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(TOPIC, b"committed")
    done.commit_transaction(30)
    cluster.wait(lambda: total(cluster, [1, 2, 3], "odradek_transactions_completed_total",
                               result="committed") >= before + 1, "a committed transaction counted")
    cluster.open_txn = Producer({"bootstrap.servers": cluster.bootstrap(1), "transactional.id": "health-open"})
    cluster.open_txn.init_transactions(30)
    cluster.open_txn.begin_transaction()
    cluster.open_txn.produce(TOPIC, b"open")
    assert cluster.open_txn.flush(30) == 0
    cluster.wait(lambda: total(cluster, [1, 2, 3], "odradek_transactions_ongoing") >= 1, "an ongoing transaction")


def test_latency_histograms_per_api_and_the_dashboards_names_are_served(cluster):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap(1)})  # (this test may run alone: -k)
    producer.produce("health-latency", b"x")
    assert producer.flush(30) == 0
    buckets = {}
    for n in (1, 2, 3):  # (produce requests went to the partitions' leaders)
        buckets.update(samples(scrape(cluster, n), "odradek_request_latency_seconds_bucket"))
    apis = {dict(k)["api"] for k in buckets}
    assert {"Produce", "Metadata", "ApiVersions"} <= apis
    assert {dict(k)["le"] for k in buckets} >= {"0.0001", "0.00025", "0.0005", "+Inf"}  # sub-ms resolution
    served = set.union(*(served_names(scrape(cluster, n)) for n in (1, 2, 3)))
    used = set().union(*map(metric_names, queries(load_dashboard())))
    assert used and used <= served, f"the dashboard queries metrics no broker serves: {sorted(used - served)}"


def test_a_stopped_broker_is_fenced_and_its_partitions_degrade(cluster):
    from confluent_kafka.admin import NewTopic

    leader = cluster.wait(lambda: cluster.leader([1, 2, 3]), "a quorum leader")
    stopped = next(n for n in (3, 2, 1) if n != leader)
    alive = [n for n in (1, 2, 3) if n != stopped]
    _create(cluster, NewTopic(STRICT, 3, 3, config={"min.insync.replicas": "3"}),
            NewTopic(SOLO, num_partitions=1, replica_assignment=[[stopped]]))
    cluster.wait(lambda: total(cluster, [stopped], "odradek_partitions_leader") >= 1, "the stopped node leads")
    assert total(cluster, [1, 2, 3], "odradek_brokers_fenced") == 0
    os.kill(cluster.pid(stopped), signal.SIGSTOP)
    try:
        cluster.wait(lambda: all(value(scrape(cluster, n), "odradek_brokers_fenced") == 1 for n in alive),
                     "the stopped broker fenced", timeout_s=60)
        cluster.wait(lambda: total(cluster, alive, "odradek_partitions_under_replicated") >= 4,
                     "under-replicated partitions (the stopped node's replicas left the ISRs)", timeout_s=60)
        cluster.wait(lambda: total(cluster, alive, "odradek_partitions_under_min_isr") >= 3,
                     f"{STRICT}'s partitions under min ISR", timeout_s=60)
        cluster.wait(lambda: all(value(scrape(cluster, n), "odradek_partitions_offline") >= 1 for n in alive),
                     f"{SOLO} offline", timeout_s=60)
        quorum_leader = cluster.wait(lambda: cluster.leader(alive), "a quorum leader")
        cluster.wait(lambda: (value(scrape(cluster, quorum_leader), "odradek_raft_voter_lag_records",
                                    voter=str(stopped)) or 0) > 0, "the stopped voter lagging", timeout_s=60)
        assert sum(value(scrape(cluster, n), "odradek_active_controller_count") for n in alive) == 1
    finally:
        os.kill(cluster.pid(stopped), signal.SIGCONT)
        open_txn = getattr(cluster, "open_txn", None)
        if open_txn is not None:
            try:
                open_txn.abort_transaction(10)
            except Exception:  # noqa: BLE001 - the cluster goes down next anyway
                pass

