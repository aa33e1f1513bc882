"""Share-group dead-letter queues end to end (KIP-1191): confluent-kafka's `ShareConsumer` against a real broker
process rejects a record and releases another up to the delivery limit, and both land on the group's DLQ
topic with Kafka 4.4's `__dlq.errors.*` headers; a group with no DLQ, or with a topic that did not opt in,
only archives; after a broker restart nothing is copied again, and a record left unacknowledged across it
is copied once when rejected after it. A second broker formatted with `--feature share.version=1` serves
share groups but refuses the DLQ group configs.

One broker for the module (the restart test is last); each test has its own topics and group, set through
the CLI as an operator would (`odradek config set group G ...`). Every wait is a poll loop with a generous
deadline; nothing asserts a duration.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from confluent_kafka import AcknowledgeType, Consumer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.brokerproc import BrokerProcess
from tests.harness.groups import REPO_ROOT, create_topic, name, produce, wait_for
from tests.harness.processes import free_port_block

pytestmark = pytest.mark.timeout(240)
LONG_LOCK_MS = 60000  # a lock that must not expire while a test runs
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("share-dlq"), "group.share.min.heartbeat.interval.ms=1000",
                         "group.share.heartbeat.interval.ms=1000",
                         f"metrics.port={free_port_block(1)}", "metrics.host=127.0.0.1").start()
    yield proc
    proc.stop()


def cli(bootstrap: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    result = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                            env=env, cwd=REPO_ROOT)
    if ok:
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def dlq_topic(bootstrap: str, *, opted_in: bool = True) -> str:
    """A DLQ topic (the broker's default prefix `dlq.`), with the topic-side opt-in unless told not to."""
    topic = name("dlq.t")
    config = {"errors.deadletterqueue.group.enable": "true"} if opted_in else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    return topic


def new_group(bootstrap: str, **configs: object) -> str:
    group = name("sg")
    pairs = [f"{k.replace('_', '.')}={v}" for k, v in {"share_auto_offset_reset": "earliest",
                                                         "share_record_lock_duration_ms": LONG_LOCK_MS,
                                                         **configs}.items()]
    cli(bootstrap, "config", "set", "group", group, *pairs)
    return group


def share_consumer(bootstrap: str, group: str, topic: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name("c"), "log_level": 3,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def poll_until(c: ShareConsumer, want, timeout_s: float, what: str, on_records=None) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not want(got):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; got {[(m.offset(), m.delivery_count()) for m in got]}"
        batch = [m for m in c.poll(0.5) if m.error() is None]
        if on_records is not None:
            on_records(batch)
        got += batch
    return got


def read_dlq(bootstrap: str, topic: str, at_least: int, timeout_s: float = 60) -> list[tuple[bytes | None, dict]]:
    """Everything on the DLQ topic (at least `at_least` records, and what follows them within a second):
    (value, headers as a dict of str -> str)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": name("dlq-reader"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while True:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.value(), {k: v.decode() for k, v in (m.headers() or [])}))
                quiet_until = None
            now = time.monotonic()
            if len(out) >= at_least:
                quiet_until = quiet_until or now + 1.0
                if now >= quiet_until:
                    return out
            assert now < deadline, f"timed out reading {at_least} records of {topic}; got {out}"
    finally:
        c.close()


def metric(broker: BrokerProcess, series: str) -> float:
    port = next(o.split("=")[1] for o in broker.overrides if o.startswith("metrics.port="))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{re.escape(series)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def start_offset(bootstrap: str, group: str) -> dict[int, int]:
    import json

    return {o["partition"]: o["start_offset"]
            for o in json.loads(cli(bootstrap, "--output", "json", "group", "describe", group).stdout)["offsets"]}


def test_rejected_and_released_to_the_limit_land_on_the_dlq_with_kafkas_headers(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="share")
    dlq = dlq_topic(bootstrap)
    group = new_group(bootstrap, share_delivery_count_limit=2, errors_deadletterqueue_topic_name=dlq,
                      errors_deadletterqueue_copy_record_enable="true")
    described = cli(bootstrap, "config", "get", "group", group).stdout
    assert dlq in described and "errors.deadletterqueue.copy.record.enable" in described
    before = metric(broker, "odradek_share_dlq_records_total")
    produce(bootstrap, topic, {0: 3})  # values p0-0, p0-1, p0-2
    c = share_consumer(bootstrap, group, topic)
    try:
        kinds = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.ACCEPT}
        first = poll_until(c, lambda g: len(g) >= 3, 60, "three records",
                           on_records=lambda batch: [c.acknowledge(m, kinds[m.offset()]) for m in batch])
        assert [(m.offset(), m.delivery_count()) for m in first] == [(0, 1), (1, 1), (2, 1)]
        c.commit_sync(30)
        again = poll_until(c, lambda g: len(g) >= 1, 30, "the released record",
                           on_records=lambda batch: [c.acknowledge(m, AcknowledgeType.RELEASE) for m in batch])
        assert [(m.offset(), m.delivery_count()) for m in again] == [(1, 2)]
        c.commit_sync(30)  # released at the limit of 2: archived, and copied first
        wait_for(lambda: start_offset(bootstrap, group) == {0: 3}, 30, "the share-partition start offset at 3")
    finally:
        c.close()
    copies = sorted(read_dlq(bootstrap, dlq, 2), key=lambda r: r[1]["__dlq.errors.offset"])
    assert [value for value, _ in copies] == [b"p0-0", b"p0-1"]  # copy.record.enable: the values came along
    assert [h for _, h in copies] == [
        {"__dlq.errors.topic": topic, "__dlq.errors.partition": "0", "__dlq.errors.offset": "0",
         "__dlq.errors.group": group, "__dlq.errors.delivery.count": "1",
         "__dlq.errors.message": "Offset rejected by client."},
        {"__dlq.errors.topic": topic, "__dlq.errors.partition": "0", "__dlq.errors.offset": "1",
         "__dlq.errors.group": group, "__dlq.errors.delivery.count": "2",
         "__dlq.errors.message": "Offset delivery count exceeded the threshold."},
    ]
    wait_for(lambda: metric(broker, "odradek_share_dlq_records_total") >= before + 2, 30, "the DLQ counter")
    assert metric(broker, f'odradek_share_partition_dlq_records{{group="{group}",partition="0",topic="{topic}"}}') == 2
    assert any("share records dead-lettered" in line and group in line for line in broker.output)


def test_without_a_dlq_or_with_a_topic_that_did_not_opt_in_records_are_only_archived(broker):
    bootstrap = broker.bootstrap
    refused = dlq_topic(bootstrap, opted_in=False)
    for configs in ({}, {"errors_deadletterqueue_topic_name": refused}):
        topic = create_topic(bootstrap, 1, prefix="share")
        group = new_group(bootstrap, **configs)
        produce(bootstrap, topic, {0: 2})
        written = metric(broker, "odradek_share_dlq_records_total")
        c = share_consumer(bootstrap, group, topic)
        try:
            poll_until(c, lambda g: len(g) >= 2, 60, "two records",
                       on_records=lambda batch: [c.acknowledge(m, AcknowledgeType.REJECT) for m in batch])
            c.commit_sync(30)
            wait_for(lambda: start_offset(bootstrap, group) == {0: 2}, 30, "both records archived")
            assert [m for m in c.poll(1.0) if m.error() is None] == []  # rejected: never again
        finally:
            c.close()
        assert metric(broker, "odradek_share_dlq_records_total") == written
    assert any("DLQ is not enabled on configured DLQ topic" in line for line in broker.output)
    assert metric(broker, "odradek_share_dlq_failures_total") >= 1
    # An internal topic is refused as the group config is set, with Kafka's words.
    bad = cli(bootstrap, "config", "set", "group", name("sg"), "errors.deadletterqueue.topic.name=__consumer_offsets",
              ok=False)
    assert bad.returncode != 0 and "must not start with '__'" in bad.stdout + bad.stderr


def test_a_share_version_1_cluster_refuses_the_dlq_group_configs(tmp_path):
    data = tmp_path / "sv1"
    config = tmp_path / "server.properties"
    config.write_text(f"node.id=1\nlog.dirs={data}\n")
    odradek = [sys.executable, "-m", "odradek", "storage"]
    cluster_id = subprocess.run([*odradek, "random-uuid"], capture_output=True, text=True, check=True).stdout.strip()
    formatted = subprocess.run([*odradek, "format", "-t", cluster_id, "-c", str(config),
                                "--feature", "share.version=1"], capture_output=True, text=True)
    assert formatted.returncode == 0, formatted.stderr
    assert "Finalizing share.version at level 1" in formatted.stdout
    proc = BrokerProcess(data, "num.partitions=1", "offsets.topic.num.partitions=1").start()
    try:
        group = name("sg")
        refused = cli(proc.bootstrap, "config", "set", "group", group, "errors.deadletterqueue.topic.name=dlq.x",
                      ok=False)
        assert refused.returncode != 0 and "needs share.version 2" in refused.stdout + refused.stderr
        cli(proc.bootstrap, "config", "set", "group", group, "share.auto.offset.reset=earliest")  # share groups: on
        assert "errors.deadletterqueue" not in cli(proc.bootstrap, "config", "get", "group", group).stdout
    finally:
        proc.stop()


def test_after_a_restart_nothing_is_copied_again(broker):
    """Records archived (and copied) before a restart are not copied again after it; a record left
    unacknowledged across the restart comes back and, rejected then, is copied once."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="share")
    dlq = dlq_topic(bootstrap)
    group = new_group(bootstrap, share_delivery_count_limit=2, errors_deadletterqueue_topic_name=dlq)
    produce(bootstrap, topic, {0: 3})
    c = share_consumer(bootstrap, group, topic)
    kinds = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.ACCEPT}
    try:
        poll_until(c, lambda g: len(g) >= 3, 60, "three records",
                   on_records=lambda batch: [c.acknowledge(m, kinds[m.offset()]) for m in batch])
        c.commit_sync(30)
        poll_until(c, lambda g: len(g) >= 1, 30, "the released record",
                   on_records=lambda batch: [c.acknowledge(m, AcknowledgeType.RELEASE) for m in batch])
        c.commit_sync(30)
    finally:
        c.close()
    assert len(read_dlq(bootstrap, dlq, 2)) == 2
    produce(bootstrap, topic, {0: 1})  # offset 3, acquired and held across the restart
    holder = share_consumer(bootstrap, group, topic)
    held = poll_until(holder, lambda g: len(g) >= 1, 60, "the new record")
    assert [m.offset() for m in held] == [3]
    broker.stop()
    broker.start()
    try:
        holder.close()
    except Exception:  # noqa: BLE001 - librdkafka refuses to close with the held record unacknowledged
        pass
    after = share_consumer(bootstrap, group, topic)
    try:
        again = poll_until(after, lambda g: len(g) >= 1, 60, "the held record again",
                           on_records=lambda batch: [after.acknowledge(m, AcknowledgeType.REJECT) for m in batch])
        assert [m.offset() for m in again] == [3]  # 0-2 archived or accepted before: never again
        after.commit_sync(30)
        wait_for(lambda: start_offset(bootstrap, group) == {0: 4}, 30, "offset 3 archived")
    finally:
        after.close()
    copies = read_dlq(bootstrap, dlq, 3)
    assert sorted((h["__dlq.errors.offset"], h["__dlq.errors.message"]) for _, h in copies) == [
        ("0", "Offset rejected by client."), ("1", "Offset delivery count exceeded the threshold."),
        ("3", "Offset rejected by client.")]
    assert all(value is None for value, _ in copies)  # copy.record.enable defaults to false: headers only
