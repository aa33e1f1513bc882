"""A secured broker process (uvloop, as deployed) and real clients: confluent-kafka (librdkafka), kcat,
aiokafka, kafka-python and the bundled client over SASL_SSL with SCRAM-SHA-512, SASL_PLAINTEXT with PLAIN
and mutual TLS; and the refusals those clients expect: a wrong password, an unknown user, a client that
skips SASL, an untrusted client certificate.

The broker is formatted with `odradek storage format --add-scram` (the first SCRAM user), its PLAIN users
come from a listener's JAAS setting, its certificates from tests/pki.py (openssl, a throwaway CA).
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid

import pytest

from tests.brokerproc import BrokerProcess
from tests.harness.security import bundled_round_trip, librdkafka_error
from tests.pki import make_pki

confluent_kafka = pytest.importorskip("confluent_kafka")

ALICE_PASSWORD = "alice-secret"  # SCRAM-SHA-512, made at format time
BOB_PASSWORD = "bob-secret"  # PLAIN, from the JAAS setting
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="bob-secret" '
        'user_bob="bob-secret";')
_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")


class Secured:
    def __init__(self, proc: BrokerProcess, pki, ports: dict[str, int]):
        self.proc, self.pki, self.ports = proc, pki, ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def librdkafka(self, listener: str, **extra) -> dict:
        """librdkafka/kcat settings for a listener, as its users write them."""
        conf = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": listener}
        if listener == "SASL_SSL":
            conf.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": ALICE_PASSWORD})
        elif listener == "SASL_PLAINTEXT":
            conf.update({"sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": BOB_PASSWORD})
        if listener in ("SSL", "SASL_SSL"):
            conf["ssl.ca.location"] = str(self.pki.ca)
        if listener == "SSL":
            cert, key = self.pki.client("carol")
            conf.update({"ssl.certificate.location": str(cert), "ssl.key.location": str(key)})
        conf.update(extra)
        return conf


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    base = tmp_path_factory.mktemp("secured")
    pki = make_pki(base / "pki")
    data = base / "data"
    properties = base / "server.properties"
    properties.write_text(f"log.dirs={data}\nnode.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    cluster_id = subprocess.run([sys.executable, "-m", "odradek", "storage", "random-uuid"], capture_output=True,
                                text=True, check=True).stdout.strip()
    formatted = subprocess.run(
        [sys.executable, "-m", "odradek", "storage", "format", "--cluster-id", cluster_id, "-c", str(properties),
         "--add-scram", f"SCRAM-SHA-512=[name=alice,password={ALICE_PASSWORD}]"],
        capture_output=True, text=True)
    assert formatted.returncode == 0, formatted.stderr
    assert "SCRAM credential" in formatted.stdout and ALICE_PASSWORD not in (data / "bootstrap.checkpoint").read_bytes().decode("latin-1")
    proc = BrokerProcess(
        data,
        "listeners=SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_store}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
        "listener.name.ssl.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),OU=test,.*$/$1/L,DEFAULT",
        "auto.create.topics.enable=true", "num.partitions=1",
        "listener.name.sasl_plaintext.connections.max.reauth.ms=3000",
    ).start()
    deadline = time.monotonic() + 30
    while True:
        ports = {m.group(1): int(m.group(3)) for line in list(proc.output) if (m := _LISTENING.search(line))}
        if len(ports) == 3:
            break
        assert time.monotonic() < deadline, "".join(proc.output[-30:])
        time.sleep(0.05)
    yield Secured(proc, pki, ports)
    proc.stop()


def _log_has(secured: Secured, text: str, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(text in line for line in list(secured.proc.output)):
            return True
        time.sleep(0.05)
    return False


LISTENERS = ["SASL_SSL", "SASL_PLAINTEXT", "SSL"]
PRINCIPALS = {"SASL_SSL": "User:alice", "SASL_PLAINTEXT": "User:bob", "SSL": "User:carol"}


@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent_kafka_produces_and_consumes(secured, listener):
    topic = f"ck-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer(secured.librdkafka(listener))
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(secured.librdkafka(listener, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 5 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(5)]
    assert listener == "SSL" or _log_has(secured, PRINCIPALS[listener])  # SASL logins are logged with the user


@pytest.mark.parametrize("listener", LISTENERS)
def test_kcat_round_trip(secured, listener):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    topic = f"kcat-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    flags = [a for k, v in secured.librdkafka(listener).items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", secured.bootstrap(listener), *flags, "-t", topic]
    produced = subprocess.run([*base, "-P"], input="one\ntwo\n", text=True, timeout=60, capture_output=True)
    assert produced.returncode == 0, produced.stderr
    out = subprocess.run([*base, "-C", "-o", "beginning", "-e", "-q"], text=True, timeout=60, capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["one", "two"]


def _aiokafka_options(secured: Secured, listener: str) -> dict:
    from aiokafka.helpers import create_ssl_context

    options = {"bootstrap_servers": secured.bootstrap(listener), "security_protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        cert, key = secured.pki.client("carol")
        options["ssl_context"] = create_ssl_context(
            cafile=str(secured.pki.ca), **({"certfile": str(cert), "keyfile": str(key)} if listener == "SSL" else {}))
    if listener == "SASL_SSL":
        options.update(sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password=ALICE_PASSWORD)
    elif listener == "SASL_PLAINTEXT":
        options.update(sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password=BOB_PASSWORD)
    return options


@pytest.mark.parametrize("listener", LISTENERS)
def test_aiokafka_round_trip(secured, listener):
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"aio-{listener.lower()}-{uuid.uuid4().hex[:6]}"

    async def run():
        producer = aiokafka.AIOKafkaProducer(**_aiokafka_options(secured, listener))
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio")
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**_aiokafka_options(secured, listener), auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            batch = await consumer.getmany(timeout_ms=10_000)
            return [r.value for records in batch.values() for r in records]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"aio"]


def _kafka_python_options(secured: Secured, listener: str) -> dict:
    options = {"bootstrap_servers": secured.bootstrap(listener), "security_protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        options["ssl_cafile"] = str(secured.pki.ca)
    if listener == "SSL":
        cert, key = secured.pki.client("carol")
        options.update(ssl_certfile=str(cert), ssl_keyfile=str(key))
    if listener == "SASL_SSL":
        options.update(sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password=ALICE_PASSWORD)
    elif listener == "SASL_PLAINTEXT":
        options.update(sasl_mechanism="PLAIN", sasl_plain_username="bob", sasl_plain_password=BOB_PASSWORD)
    return options


@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python_round_trip(secured, listener):
    kafka = pytest.importorskip("kafka")
    topic = f"kp-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    producer = kafka.KafkaProducer(**_kafka_python_options(secured, listener))
    producer.send(topic, b"kp").get(timeout=30)
    producer.close()
    consumer = kafka.KafkaConsumer(**_kafka_python_options(secured, listener), auto_offset_reset="earliest",
                                   consumer_timeout_ms=10_000)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    values = []
    for record in consumer:
        values.append(record.value)
        break
    consumer.close()
    assert values == [b"kp"]


def _bundled_options(secured: Secured, listener: str) -> dict:
    options = {"bootstrap_servers": secured.bootstrap(listener), "security_protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        options["ssl_ca_location"] = str(secured.pki.ca)
    if listener == "SSL":
        cert, key = secured.pki.client("carol")
        options.update(ssl_certificate_location=str(cert), ssl_key_location=str(key))
    if listener == "SASL_SSL":
        options.update(sasl_mechanism="SCRAM-SHA-512", sasl_username="alice", sasl_password=ALICE_PASSWORD)
    elif listener == "SASL_PLAINTEXT":
        options.update(sasl_mechanism="PLAIN", sasl_username="bob", sasl_password=BOB_PASSWORD)
    return options


@pytest.mark.parametrize("listener", LISTENERS)
def test_bundled_client_round_trip(secured, listener):
    topic = f"od-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    assert asyncio.run(bundled_round_trip(_bundled_options(secured, listener), topic)) == [b"bundled"]


# -- refusals


@pytest.mark.parametrize("listener, change, expected", [
    ("SASL_SSL", {"sasl.password": "wrong"}, "invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ("SASL_SSL", {"sasl.username": "nobody"}, "invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ("SASL_PLAINTEXT", {"sasl.password": "wrong"}, "Invalid username or password"),
    ("SASL_PLAINTEXT", {"sasl.mechanism": "SCRAM-SHA-256"}, "Unsupported SASL mechanism"),
])
def test_librdkafka_sees_the_authentication_error(secured, listener, change, expected):
    error = librdkafka_error(secured.librdkafka(listener, **change))
    assert "_AUTHENTICATION" in error or "AUTHENTICATION" in error.upper(), error
    assert expected.lower() in error.lower(), error


def test_a_client_skipping_sasl_is_disconnected(secured):
    before = sum("request before SASL authentication" in line for line in list(secured.proc.output))
    error = librdkafka_error({"bootstrap.servers": secured.bootstrap("SASL_PLAINTEXT"), "security.protocol": "PLAINTEXT"})
    assert "Disconnected" in error or "down" in error, error
    assert _log_has(secured, "request before SASL authentication")
    assert sum("request before SASL authentication" in line for line in list(secured.proc.output)) > before


def test_an_untrusted_client_certificate_is_refused(secured):
    cert, key = secured.pki.rogue_client
    # Under TLS 1.3 the client's handshake completes before the broker checks its certificate; the broker
    # then ends the connection, and librdkafka sees it reset while asking ApiVersions: it never gets in.
    error = librdkafka_error(secured.librdkafka("SSL", **{"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}))
    assert "brokers are down" in error or "SSL" in error or "Disconnected" in error, error
    ctx = ssl.create_default_context(cafile=str(secured.pki.ca))
    ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
                if not tls.recv(1):
                    raise ConnectionError("closed")


def test_a_client_without_a_certificate_is_refused_where_one_is_required(secured):
    conf = secured.librdkafka("SSL")
    del conf["ssl.certificate.location"], conf["ssl.key.location"]
    error = librdkafka_error(conf)
    assert error, "the broker accepted a client without a certificate"


def test_other_clients_refusals(secured, caplog):
    aiokafka = pytest.importorskip("aiokafka")
    kafka = pytest.importorskip("kafka")
    from odradek.client import Producer
    from odradek.client.errors import AuthenticationError

    async def aio_wrong():
        producer = aiokafka.AIOKafkaProducer(**{**_aiokafka_options(secured, "SASL_SSL"), "sasl_plain_password": "wrong"})
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(aiokafka.errors.KafkaError) as aio_error:
        asyncio.run(aio_wrong())
    assert "invalid credentials" in str(aio_error.value) or "Authentication" in repr(aio_error.value) or "bootstrap" in str(aio_error.value)

    # kafka-python keeps trying to bootstrap until max_block_ms, logging each SaslAuthenticationFailedError.
    with caplog.at_level(logging.WARNING, logger="kafka"):
        with pytest.raises(kafka.errors.KafkaError):
            kafka.KafkaProducer(**{**_kafka_python_options(secured, "SASL_PLAINTEXT"), "sasl_plain_password": "wrong"},
                                bootstrap_timeout_ms=3000)
    assert "SaslAuthenticationFailedError: Authentication failed: Invalid username or password" in caplog.text

    async def bundled_wrong():
        async with Producer(**{**_bundled_options(secured, "SASL_SSL"), "sasl_password": "wrong"}):
            pass

    with pytest.raises(AuthenticationError, match="invalid credentials"):
        asyncio.run(bundled_wrong())

    async def bundled_rogue():
        cert, key = secured.pki.rogue_client
        async with Producer(**{**_bundled_options(secured, "SSL"), "ssl_certificate_location": str(cert),
                               "ssl_key_location": str(key)}) as producer:
            await producer.send_and_wait("never", b"x")

    with pytest.raises((AuthenticationError,)):
        asyncio.run(bundled_rogue())


def test_scram_users_from_the_cli(secured):
    """odradek user create/list/delete (AlterUserScramCredentials through the metadata log), then log in."""
    cli = [sys.executable, "-m", "odradek", "-b", secured.bootstrap("SASL_SSL"),
           "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice",
           "-X", f"sasl.password={ALICE_PASSWORD}", "-X", f"ssl.ca.location={secured.pki.ca}"]
    made = subprocess.run([*cli, "user", "create", "dave", "--password", "dave-pw", "-m", "SCRAM-SHA-512", "-m", "SCRAM-SHA-256"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    listed = subprocess.run([*cli, "user", "list", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert '"dave"' in listed.stdout and '"alice"' in listed.stdout and "dave-pw" not in listed.stdout
    conf = secured.librdkafka("SASL_SSL", **{"sasl.username": "dave", "sasl.password": "dave-pw"})
    producer = confluent_kafka.Producer(conf)
    producer.produce("dave-topic", b"hi")
    assert producer.flush(30) == 0
    gone = subprocess.run([*cli, "user", "delete", "dave"], capture_output=True, text=True, timeout=60)
    assert gone.returncode == 0, gone.stderr
    assert "invalid credentials" in librdkafka_error(conf)


def test_large_fetches_over_tls_are_copied_not_sendfiled(secured):
    """Fetch answers carry file regions (sendfile on plaintext): over TLS they must be read and encrypted,
    or the client would get raw bytes inside its TLS stream. Regions above 16 KiB take the big-region path."""
    topic = f"big-{uuid.uuid4().hex[:6]}"
    values = [bytes([i]) * (300_000 + i) for i in range(4)]
    producer = confluent_kafka.Producer(secured.librdkafka("SSL", **{"message.max.bytes": 2_000_000}))
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(secured.librdkafka("SASL_SSL", **{"group.id": f"g-{topic}"}))
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == values


def test_librdkafka_reauthenticates_before_the_session_ends(secured):
    """KIP-368: SASL_PLAINTEXT sessions last 3 s here; librdkafka re-authenticates on the same connection
    and keeps producing; a session not renewed would be closed at its next request."""
    before = sum("re-authenticated" in line for line in list(secured.proc.output))
    producer = confluent_kafka.Producer(secured.librdkafka("SASL_PLAINTEXT", **{"linger.ms": 0}))
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    deadline = time.monotonic() + 20
    delivered = 0
    while time.monotonic() < deadline:
        producer.produce(topic, b"x")
        delivered += 1
        producer.flush(10)
        if sum("re-authenticated" in line for line in list(secured.proc.output)) > before and delivered > 20:
            break
        time.sleep(0.1)
    assert producer.flush(10) == 0
    assert sum("re-authenticated" in line for line in list(secured.proc.output)) > before


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_old_clients_handshake_v0_with_raw_tokens(secured, listener):
    """kafka-python told it talks to Kafka 0.10.2 sends SaslHandshake v0 and then the SASL tokens as bare
    size-prefixed frames (no SaslAuthenticate): PLAIN in one token, SCRAM in two."""
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(**_kafka_python_options(secured, listener), api_version=(0, 10, 2))
    try:
        assert isinstance(consumer.topics(), set)
    finally:
        consumer.close()
