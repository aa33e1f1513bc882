"""`__share_group_state` is pruned on a real broker process, and a restart still reloads the exact state.

The broker runs the share coordinator's cold-snapshot round every 500 ms and its prune every 700 ms
(`share.coordinator.cold.partition.snapshot.interval.ms`, `share.coordinator.state.topic.prune.interval.ms`;
Kafka's defaults are 5 minutes). A confluent-kafka ShareConsumer in explicit mode accepts offsets 0-39 of 60
records in several commits (each a WriteShareGroupState: a snapshot, then updates) and leaves 40-59
acquired. The state topic's log start offset then moves past 0 (DeleteRecords on the partition: its low
watermark, as any client sees it), the broker logs `share state pruned` and counts the deleted records.
After a restart on the same data directory the coordinator loads what is left, and a new consumer of the
group gets exactly 40-59 again, each with delivery count 2: nothing accepted comes back, nothing else is lost.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, ShareConsumer
from confluent_kafka import TopicPartition as CkTP

from tests.brokerproc import BrokerProcess
from tests.harness.groups import REPO_ROOT, create_topic, name, produce, wait_for
from tests.harness.processes import free_port_block

pytestmark = pytest.mark.timeout(240)
STATE_TOPIC = "__share_group_state"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    metrics_port = free_port_block(1)
    proc = BrokerProcess(tmp_path_factory.mktemp("share-prune"),
                         "group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000",
                         "share.coordinator.cold.partition.snapshot.interval.ms=500",
                         "share.coordinator.state.topic.prune.interval.ms=700",
                         f"metrics.port={metrics_port}", "metrics.host=127.0.0.1").start()
    proc.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield proc
    proc.stop()


def _cli(bootstrap: str, *args: str) -> str:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    result = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                            env=env, cwd=REPO_ROOT)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _state_topic_log_starts(bootstrap: str) -> dict[int, int]:
    """Each `__share_group_state` partition's log start offset (low watermark) that is past 0."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": name("probe"), "log_level": 3})
    try:
        partitions = c.list_topics(STATE_TOPIC, timeout=30).topics[STATE_TOPIC].partitions
        starts = {}
        for p in partitions:
            low, _high = c.get_watermark_offsets(CkTP(STATE_TOPIC, p), timeout=30)
            if low > 0:
                starts[p] = low
        return starts
    finally:
        c.close()


def _pruned_records(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=10) as r:
        m = re.search(r"^odradek_share_coordinator_pruned_records_total ([0-9.e+]+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else 0.0


def _consumer(bootstrap: str, group: str, topic: str, client_id: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id, "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def _poll_until(c, want, timeout_s: float, what: str, on_records) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not want(got):
        seen = [(m.offset(), m.delivery_count()) for m in got]
        assert time.monotonic() < deadline, f"timed out waiting for {what}; got {seen}"
        batch = [m for m in (c.poll(0.5) or ())]
        assert all(m.error() is None for m in batch), [m.error() for m in batch]
        on_records(batch)
        got += batch
    return got


def test_the_state_topic_is_pruned_and_a_restart_reloads_exact_state(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="prune")
    group = name("sg")
    _cli(bootstrap, "config", "set", "group", group, "share.auto.offset.reset=earliest",
         "share.record.lock.duration.ms=60000")
    for _ in range(6):
        produce(bootstrap, topic, {0: 10})
    c = _consumer(bootstrap, group, topic, "before")

    def accept_and_commit(batch) -> None:
        accepted = [m for m in batch if m.offset() < 40]
        for m in accepted:
            c.acknowledge(m)
        if accepted:
            c.commit_sync(30)  # one WriteShareGroupState per poll that accepted something

    got = _poll_until(c, lambda g: len(g) >= 60, 60, "sixty records", accept_and_commit)
    assert sorted(m.offset() for m in got) == list(range(60))

    # The rounds run on their own: the log start of the group's state partition moves past 0.
    starts = wait_for(lambda: _state_topic_log_starts(bootstrap), 60, "a __share_group_state log start past 0",
                      interval_s=0.5)
    assert len(starts) == 1, starts  # the one state partition this group's share-partition hashes to
    wait_for(lambda: "share state pruned" in broker.log_text(), 30, "the prune log line")
    assert _pruned_records(broker.metrics_url) >= 1

    broker.stop()  # 40-59 still acquired by `c`: a new leader delivers them again
    broker.start()
    c.close()
    assert _state_topic_log_starts(bootstrap).keys() == starts.keys()  # the pruned log is what was loaded
    after = _consumer(bootstrap, group, topic, "after")
    try:
        again = _poll_until(after, lambda g: len(g) >= 20, 60, "the twenty unaccepted records",
                            lambda batch: [after.acknowledge(m) for m in batch])
        assert sorted(m.offset() for m in again) == list(range(40, 60))
        assert {m.delivery_count() for m in again} == {2}
        after.commit_sync(30)
        assert [m for m in (after.poll(2.0) or ())] == []
    finally:
        after.close()
