"""A broker process started from a secured Kafka server.properties (tests/unit/test_kafka_server_properties.py),
with only its paths and ports changed: `odradek storage format --add-scram` then `odradek broker start -c`,
and real clients on its listeners: SCRAM-SHA-512 over SASL_SSL as the super user, PLAIN over SASL_SSL for a
user without ACLs, mutual TLS for a certificate's principal.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.harness.kafka_properties import KAFKA_SERVER_PROPERTIES
from tests.pki import make_pki

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient  # noqa: E402
from confluent_kafka.admin import ResourcePatternType, ResourceType  # noqa: E402

_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def kafka_style(tmp_path_factory):
    base = tmp_path_factory.mktemp("kafka-style")
    pki = make_pki(base / "pki")
    controller = _free_port()
    text = KAFKA_SERVER_PROPERTIES.format(dir=base, keystore=pki.pkcs12_keystore("server", "ks-secret"),
                                          truststore=pki.pkcs12_truststore("ts-secret"))
    # Ports: the controller's stays fixed (the voters name it), the others are picked by the OS.
    text = re.sub(r"localhost:909[346]", "localhost:0", text).replace("localhost:9097", f"localhost:{controller}")
    properties = base / "server.properties"
    properties.write_text(text)
    odradek = [sys.executable, "-m", "odradek"]
    cluster_id = subprocess.run([*odradek, "storage", "random-uuid"], capture_output=True, text=True, check=True).stdout.strip()
    formatted = subprocess.run([*odradek, "storage", "format", "--cluster-id", cluster_id, "-c", str(properties),
                                "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"],
                               capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    proc = subprocess.Popen([*odradek, "broker", "start", "-c", str(properties)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    ports: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while not {"CLIENT", "MTLS"} <= ports.keys():
        assert proc.poll() is None and time.monotonic() < deadline, "".join(output[-40:])
        ports = {m.group(1): int(m.group(3)) for line in list(output) if (m := _LISTENING.search(line))}
        time.sleep(0.05)
    try:
        yield pki, ports
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)


def client_conf(pki, ports, who: str) -> dict:
    if who == "carol":  # mutual TLS
        cert, key = pki.client("carol")
        return {"bootstrap.servers": f"127.0.0.1:{ports['MTLS']}", "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    mechanism, password = ("SCRAM-SHA-512", "admin-secret") if who == "admin" else ("PLAIN", "bob-secret")
    return {"bootstrap.servers": f"127.0.0.1:{ports['CLIENT']}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": who, "sasl.password": password, "ssl.ca.location": str(pki.ca)}


def produce(conf: dict, topic: str) -> KafkaError | None:
    errors: list = []
    producer = Producer({**conf, "message.timeout.ms": 20000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors, "no delivery report"
    return errors[0]


def test_clients_on_a_broker_started_from_a_kafka_server_properties(kafka_style):
    pki, ports = kafka_style
    assert produce(client_conf(pki, ports, "admin"), "orders") is None  # the super user, over SCRAM
    assert produce(client_conf(pki, ports, "bob"), "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    carol = AdminClient(client_conf(pki, ports, "carol"))
    assert "orders" not in carol.list_topics(timeout=20).topics  # no ACL: not even described
    admin = AdminClient(client_conf(pki, ports, "admin"))
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:carol", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding], request_timeout=30).values():
        future.result()
    deadline = time.monotonic() + 30
    while "orders" not in carol.list_topics(timeout=20).topics:  # User:carol from her certificate's CN
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_kafka4_sample_server_properties_starts(tmp_path):
    """Kafka 4.0's own config/server.properties, with only its log directory and ports changed (and its
    listeners bound to 127.0.0.1): `odradek storage format --standalone`, as Kafka 4's quick start formats,
    then `broker start -c`. The advertised CONTROLLER listener is the controller's endpoint; the Metadata a
    client gets names the PLAINTEXT one only."""
    from tests.harness.kafka_properties import KAFKA4_SAMPLE

    client, controller = _free_port(), _free_port()
    text = (KAFKA4_SAMPLE.replace("/tmp/kraft-combined-logs", str(tmp_path / "data"))
            .replace("PLAINTEXT://:9092,CONTROLLER://:9093", f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}")
            .replace(":9092", f":{client}").replace(":9093", f":{controller}"))
    properties = tmp_path / "server.properties"
    properties.write_text(text)
    odradek = [sys.executable, "-m", "odradek"]
    cluster_id = subprocess.run([*odradek, "storage", "random-uuid"], capture_output=True, text=True, check=True).stdout.strip()
    formatted = subprocess.run([*odradek, "storage", "format", "--standalone", "-t", cluster_id, "-c", str(properties)],
                               capture_output=True, text=True, timeout=60)
    assert formatted.returncode == 0, formatted.stderr
    proc = subprocess.Popen([*odradek, "broker", "start", "-c", str(properties)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any(f"listening on PLAINTEXT://127.0.0.1:{client}" in line for line in list(output)):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(output[-40:])
            time.sleep(0.05)
        conf = {"bootstrap.servers": f"localhost:{client}"}
        assert produce(conf, "kafka4") is None
        brokers = AdminClient(conf).list_topics(timeout=20).brokers
        assert [(b.id, b.host, b.port) for b in brokers.values()] == [(1, "localhost", client)]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
    assert proc.returncode == 0, "".join(output[-40:])
