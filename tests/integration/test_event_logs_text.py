"""The events an operator reads in one real broker's console log (log.format=console, the default), read
back from its output line by line: where it listens and serves metrics, a topic created and its partition
led, client connections (DEBUG, through log.levels), a failed SASL authentication (WARN, no secret),
retention and compaction passes, and the recovery of its logs after a kill -9. The cluster's events, in
JSON mode, are test_event_logs_cluster.py's."""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests.brokerproc import BrokerProcess
from tests.harness.eventlogs import matching, parse_console, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(180)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="bob-secret" '
        'user_bob="bob-secret";')
WRONG_PASSWORD = "not-bobs-password-4711"
_LISTENING = re.compile(r"odradek broker 1 listening on (\w+)://([^:\s]+):(\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Logged:
    def __init__(self, proc: BrokerProcess, metrics_port: int) -> None:
        self.proc, self.metrics_port = proc, metrics_port

    def events(self) -> list[dict]:
        return [e for line in list(self.proc.output) if (e := parse_console(line)) is not None]

    def wait(self, name: str, **fields) -> list[dict]:
        return wait_for(self.events, name, what=lambda: "".join(self.proc.output[-40:]), **fields)

    def listening(self) -> dict[str, int]:
        return {m[1]: int(m[3]) for line in list(self.proc.output) if (m := _LISTENING.search(line))}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    metrics_port = _free_port()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("eventlogs-text"),
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=PLAIN", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"metrics.port={metrics_port}", "log.levels=odradek.network=DEBUG",
        "log.retention.check.interval.ms=300", "log.cleaner.backoff.ms=200",
    ).start()
    yield Logged(proc, metrics_port)
    proc.stop()


def _create(bootstrap: str, name: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1, config=config)], request_timeout=20).values():
        future.result(timeout=30)


def _produce(bootstrap: str, topic: str, count: int, *, keys: int | None = None) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(count):
        producer.produce(topic, key=None if keys is None else f"k{i % keys}".encode(), value=b"v" * 200)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_where_it_listens_and_serves_metrics(logged):
    # the process counts as started at its first listening line; the second follows it
    deadline = time.monotonic() + 30
    while set(logged.listening()) != {"PLAINTEXT", "SASL_PLAINTEXT"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(logged.listening()) == {"PLAINTEXT", "SASL_PLAINTEXT"}  # the human line, once per listener
    assert sum(1 for line in logged.proc.output if " listening on PLAINTEXT://" in line) == 1
    (served,) = logged.wait("metrics served", port=logged.metrics_port)
    assert served["level"] == "info" and served["url"] == f"http://127.0.0.1:{logged.metrics_port}/metrics"


def test_a_topic_created_and_its_partition_led_here(logged):
    _create(logged.proc.bootstrap, "text-created", {})
    (created,) = logged.wait("topic created", topic="text-created")
    assert created["level"] == "info" and created["logger"] == "odradek.controller"
    assert created["partitions"] == 1 and created["replication_factor"] == 1
    (leader,) = logged.wait("became leader", topic="text-created", partition=0)
    assert leader["level"] == "info" and leader["leader"] == 1 and leader["leader_epoch"] == 0 and leader["isr"] == [1]


def test_client_connections_are_logged_at_debug_through_log_levels(logged):
    port = logged.listening()["PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port)) as s:
        local = "%s:%d" % s.getsockname()
    accepted = logged.wait("connection accepted", remote_address=local)
    assert accepted[0]["level"] == "debug" and accepted[0]["listener"] == "PLAINTEXT"
    (closed,) = wait_for(logged.events, "connection closed", client=accepted[0]["client"])
    assert closed["level"] == "debug" and closed["listener"] == "PLAINTEXT"


def test_a_failed_authentication_is_a_warning_that_names_no_secret(logged):
    port = logged.listening()["SASL_PLAINTEXT"]
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "bob", "sasl.password": WRONG_PASSWORD, "socket.timeout.ms": 5000,
    })
    try:
        producer.list_topics(timeout=3)  # refused: connecting and authenticating is what is wanted
    except confluent_kafka.KafkaException:
        pass
    (failed, *_) = logged.wait("authentication failed", listener="SASL_PLAINTEXT")
    assert failed["level"] == "warning" and failed["mechanism"] == "PLAIN"
    assert failed["remote_address"] == "127.0.0.1" and failed["reason"]
    assert WRONG_PASSWORD not in "".join(logged.proc.output) and "bob-secret" not in "".join(logged.proc.output)


def test_retention_and_compaction_passes(logged):
    bootstrap = logged.proc.bootstrap
    _create(bootstrap, "text-retained", {"segment.bytes": "1024", "retention.ms": "100"})
    _create(bootstrap, "text-compacted", {"cleanup.policy": "compact", "segment.bytes": "1024",
                                          "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100"})
    _produce(bootstrap, "text-retained", 60)
    _produce(bootstrap, "text-compacted", 60, keys=3)
    deleted = logged.wait("retention deleted segments", topic="text-retained", partition=0)
    assert deleted[0]["level"] == "info" and deleted[0]["segments"] >= 1 and "retention.ms" in deleted[0]["deleted_by"]
    assert deleted[-1]["log_start_offset"] > 0
    cleaned = logged.wait("log cleaned", topic="text-compacted", partition=0)
    assert cleaned[0]["level"] == "info" and cleaned[0]["records_removed"] > 0 and cleaned[0]["segments"] >= 1


def test_recovery_after_a_kill_names_each_log_and_what_it_found(logged):
    _produce(logged.proc.bootstrap, "text-created", 20)
    before = len(logged.proc.output)
    logged.proc.kill()
    logged.proc.start()
    after = lambda: [e for line in list(logged.proc.output)[before:] if (e := parse_console(line)) is not None]  # noqa: E731
    (directory,) = wait_for(after, "log directory recovered after an unclean shutdown")
    assert directory["level"] == "warning" and directory["logs"] >= 1 and directory["batches"] >= 1
    recovered = matching(after(), "log recovered", topic="text-created", partition=0)
    assert len(recovered) == 1
    assert recovered[0]["clean_shutdown"] is False and recovered[0]["batches"] >= 1
    assert recovered[0]["log_end_offset"] >= 20 and recovered[0]["truncated_bytes"] == 0
