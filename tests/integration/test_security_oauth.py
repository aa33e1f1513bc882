"""PKCS12 key and trust stores, and OAUTHBEARER with unsecured JWTs, against a broker process and real
clients.

One broker: an SSL listener requiring client certificates, a SASL_SSL listener and a SASL_PLAINTEXT
listener serving OAUTHBEARER (the latter requiring the scope "kafka"), all TLS from PKCS12 stores written
by tests/pki.py, StandardAuthorizer on with User:admin and User:carol (mTLS) as super users. librdkafka
mints its own unsecured tokens (`enable.sasl.oauthbearer.unsecure.jwt`), or takes ours through oauth_cb
(an expired one, one without the scope); kcat and the bundled client and CLI mint theirs the same way;
kafka-python and aiokafka take theirs from a token provider. Last, a 3-node in-process cluster with
OAUTHBEARER on every listener, nodes included.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
import uuid

import pytest

from odradek.protocol.sasl import unsecured_jwt
from tests.brokerproc import BrokerProcess
from tests.pki import make_pki

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography")
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType  # noqa: E402
from tests.harness.security import librdkafka_error, bundled_round_trip

STORE_PASSWORD = "store-secret"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")


def _broker_settings(pki) -> list[str]:
    return [
        "listeners=SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type=PKCS12", f"ssl.keystore.location={pki.pkcs12_keystore('server', STORE_PASSWORD)}",
        f"ssl.keystore.password={STORE_PASSWORD}",
        "ssl.truststore.type=PKCS12", f"ssl.truststore.location={pki.pkcs12_truststore(STORE_PASSWORD)}",
        f"ssl.truststore.password={STORE_PASSWORD}",
        "listener.name.ssl.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]+),OU=test,.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        f'listener.name.sasl_ssl.oauthbearer.sasl.jaas.config={LOGIN_MODULE} required unsecuredLoginStringClaim_sub="admin";',
        f'listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={LOGIN_MODULE} required '
        'unsecuredLoginStringClaim_sub="admin" unsecuredValidatorRequiredScope="kafka" unsecuredValidatorAllowableClockSkewMs="1000";',
        "listener.name.sasl_ssl.connections.max.reauth.ms=3000",  # sessions: min(3 s, what the token has left)
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin;User:carol", "auto.create.topics.enable=false", "num.partitions=1",
    ]


class Broker:
    def __init__(self, proc: BrokerProcess, pki, ports: dict[str, int]):
        self.proc, self.pki, self.ports = proc, pki, ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def oauth(self, listener: str, principal: str, **extra) -> dict:
        """librdkafka minting its own unsecured token for `principal` (with the scope the listener wants)."""
        conf = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": listener,
                "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": f"principal={principal} scope=kafka"}
        if listener == "SASL_SSL":
            conf["ssl.ca.location"] = str(self.pki.ca)
        conf.update(extra)
        return conf

    def logged(self, text: str, timeout_s: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.proc.output)):
                return True
            time.sleep(0.05)
        return False


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("oauth")
    pki = make_pki(base / "pki")
    proc = BrokerProcess(base / "data", *_broker_settings(pki)).start(timeout_s=60)
    deadline = time.monotonic() + 60
    while True:
        ports = {m.group(1): int(m.group(3)) for line in list(proc.output) if (m := _LISTENING.search(line))}
        if len(ports) == 3:
            break
        assert time.monotonic() < deadline, "".join(proc.output[-30:])
        time.sleep(0.05)
    yield Broker(proc, pki, ports)
    proc.stop()


def _consume(conf: dict, topic: str, count: int, timeout_s: float = 30.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            values.append(m.value())
    consumer.close()
    return values


def _produce_error(conf: dict, topic: str) -> str | None:
    result: list = []
    producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, _m: result.append(err))
    producer.flush(20)
    return "no delivery report" if not result else None if result[0] is None else result[0].name()


def _create_topics(broker: Broker, *names: str) -> AdminClient:
    admin = AdminClient(broker.oauth("SASL_SSL", "admin"))
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(30)
    return admin


# -- PKCS12


def test_mutual_tls_with_pkcs12_stores_on_both_sides(broker):
    """The broker's key and trust stores are PKCS12; so is carol's (librdkafka's ssl.keystore.location)."""
    conf = {"bootstrap.servers": broker.bootstrap("SSL"), "security.protocol": "SSL", "ssl.ca.location": str(broker.pki.ca),
            "ssl.keystore.location": str(broker.pki.pkcs12_keystore("carol", "carol-pw")), "ssl.keystore.password": "carol-pw"}
    topic = f"p12-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)  # carol is a super user: the principal came from her certificate
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    producer = confluent_kafka.Producer(conf)
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    assert _consume(conf, topic, 3) == [b"v0", b"v1", b"v2"]
    from odradek.client import Producer
    from odradek.client.errors import AuthenticationError

    async def bundled(password: str):
        async with Producer(bootstrap_servers=broker.bootstrap("SSL"), security_protocol="SSL",
                            ssl_ca_location=str(broker.pki.ca), ssl_keystore_location=conf["ssl.keystore.location"],
                            ssl_keystore_password=password) as producer:
            await producer.send_and_wait(topic, b"bundled")

    asyncio.run(bundled("carol-pw"))  # the bundled client takes librdkafka's PKCS12 settings too
    with pytest.raises(AuthenticationError, match="wrong ssl.keystore.password"):
        asyncio.run(bundled("wrong"))
    assert _consume(conf, topic, 4)[-1] == b"bundled"
    rogue_cert, rogue_key = broker.pki.rogue_client
    rogue = {**conf, "ssl.certificate.location": str(rogue_cert), "ssl.key.location": str(rogue_key)}
    del rogue["ssl.keystore.location"], rogue["ssl.keystore.password"]
    assert librdkafka_error(rogue), "a certificate from an untrusted CA was accepted"


@pytest.mark.parametrize("setting", ["ssl.keystore.password", "ssl.truststore.password"])
def test_a_wrong_store_password_refuses_to_start(broker, tmp_path, setting):
    overrides = [s for s in _broker_settings(broker.pki) if not s.startswith(f"{setting}=")] + [f"{setting}=wrong"]
    args = [sys.executable, "-m", "odradek", "broker", "start", "--override", f"log.dirs={tmp_path / 'data'}",
            "--override", "node.id=1"]
    for o in overrides:
        args += ["--override", o]
    started = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert started.returncode != 0
    output = started.stdout + started.stderr
    assert f"wrong {setting}" in output and "PKCS12" in output, output[-2000:]
    assert "Traceback" not in output


# -- OAUTHBEARER


def test_librdkafka_oauthbearer_principal_reaches_the_authorizer(broker):
    granted, other = f"alice-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    admin = _create_topics(broker, granted, other)
    bindings = [AclBinding(ResourceType.TOPIC, granted, ResourcePatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ)]
    bindings.append(AclBinding(ResourceType.GROUP, f"g-{granted}", ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.READ, AclPermissionType.ALLOW))
    for f in admin.create_acls(bindings).values():
        f.result(30)
    for listener in ("SASL_SSL", "SASL_PLAINTEXT"):
        alice = broker.oauth(listener, "alice")
        deadline = time.monotonic() + 30
        while _produce_error(alice, granted) is not None and time.monotonic() < deadline:  # the ACL reaches the image
            time.sleep(0.2)
        assert _produce_error(alice, granted) is None
        assert _produce_error(alice, other) == "TOPIC_AUTHORIZATION_FAILED"
        assert _produce_error(broker.oauth(listener, "bob"), granted) == "TOPIC_AUTHORIZATION_FAILED"
    assert _consume(broker.oauth("SASL_SSL", "alice"), granted, 2) == [b"x", b"x"]
    assert broker.logged("principal=User:alice") and broker.logged("mechanism=OAUTHBEARER")


def test_librdkafka_reauthenticates_with_a_fresh_oauthbearer_login(broker):
    """KIP-368 over OAUTHBEARER: SASL_SSL sessions last 3 s here; librdkafka re-authenticates on the same
    connection (SaslHandshake + SaslAuthenticate with its token) and keeps producing."""
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    _create_topics(broker, topic)

    def reauthentications() -> int:
        return sum("re-authenticated" in line and "OAUTHBEARER" in line and "User:admin" in line for line in list(broker.proc.output))

    before = reauthentications()
    producer = confluent_kafka.Producer(broker.oauth("SASL_SSL", "admin", **{"linger.ms": 0}))
    deadline = time.monotonic() + 30
    delivered = 0
    while time.monotonic() < deadline and not (reauthentications() > before and delivered > 20):
        producer.produce(topic, b"x")
        delivered += 1
        producer.flush(10)
        time.sleep(0.1)
    assert producer.flush(10) == 0
    assert reauthentications() > before


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_kcat_round_trip(broker, listener):
    """kcat (librdkafka 2.x): OAUTHBEARER with its own unsecured token, or mTLS from a PKCS12 key store."""
    import shutil

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    topic = f"kcat-{listener.lower()}-{uuid.uuid4().hex[:6]}"
    _create_topics(broker, topic)
    if listener == "SASL_SSL":
        conf = {k: str(v).lower() if isinstance(v, bool) else v for k, v in broker.oauth(listener, "admin").items()}
    else:
        conf = {"security.protocol": "SSL", "ssl.ca.location": str(broker.pki.ca),
                "ssl.keystore.location": str(broker.pki.pkcs12_keystore("carol", "carol-pw")), "ssl.keystore.password": "carol-pw"}
    flags = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", broker.bootstrap(listener), *flags, "-t", topic]
    produced = subprocess.run([*base, "-P"], input="one\ntwo\n", text=True, timeout=60, capture_output=True)
    assert produced.returncode == 0, produced.stderr
    out = subprocess.run([*base, "-C", "-o", "beginning", "-e", "-q"], text=True, timeout=60, capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["one", "two"]


def _token_cb(claims: dict):
    """An oauth_cb handing librdkafka our token; librdkafka is told it lives an hour (it refuses to use a
    token it knows to be expired), whatever the token's own exp says."""
    def cb(_config):
        return unsecured_jwt(claims), time.time() + 3600
    return cb


@pytest.mark.parametrize("listener, claims, status", [
    ("SASL_SSL", {"sub": "alice", "exp": 1_000_000_000}, "invalid_token"),  # expired in 2001
    ("SASL_PLAINTEXT", {"sub": "alice", "exp": 4_000_000_000, "scope": ["other"]}, "insufficient_scope"),
    ("SASL_PLAINTEXT", {"sub": "alice", "exp": 4_000_000_000}, "insufficient_scope"),
])
def test_refused_tokens_fail_authentication(broker, listener, claims, status):
    conf = broker.oauth(listener, "unused", oauth_cb=_token_cb(claims))
    del conf["enable.sasl.oauthbearer.unsecure.jwt"], conf["sasl.oauthbearer.config"]
    error = librdkafka_error(conf)
    assert "AUTHENTICATION" in error.upper() and status in error, error
    assert broker.logged("OAUTHBEARER token refused")


def test_a_token_without_exp_or_with_a_signature_is_refused(broker):
    signed = unsecured_jwt({"sub": "alice", "exp": 4_000_000_000}) + "c2lnbmF0dXJl"
    for token in (unsecured_jwt({"sub": "alice"}), signed):
        conf = broker.oauth("SASL_SSL", "unused", oauth_cb=lambda _c, t=token: (t, time.time() + 3600))
        del conf["enable.sasl.oauthbearer.unsecure.jwt"], conf["sasl.oauthbearer.config"]
        assert "invalid_token" in librdkafka_error(conf)


class _Provider:
    def __init__(self, principal: str):
        self.principal = principal

    def _token(self) -> str:
        return unsecured_jwt({"sub": self.principal, "iat": int(time.time()), "exp": int(time.time()) + 600, "scope": "kafka"})

    def extensions(self):
        return {}


def test_kafka_python_and_aiokafka_token_providers(broker):
    kafka = pytest.importorskip("kafka")
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.abc import AbstractTokenProvider as AioProvider
    try:  # kafka-python 3 moved it
        from kafka.net.sasl.oauth import AbstractTokenProvider as KafkaPythonProvider
    except ImportError:
        from kafka.sasl.oauth import AbstractTokenProvider as KafkaPythonProvider

    class KpProvider(_Provider, KafkaPythonProvider):
        def token(self):
            return self._token()

    class AioTokenProvider(_Provider, AioProvider):
        async def token(self):
            return self._token()

    topic = f"providers-{uuid.uuid4().hex[:6]}"
    _create_topics(broker, topic)
    plain = {"bootstrap_servers": broker.bootstrap("SASL_PLAINTEXT"), "security_protocol": "SASL_PLAINTEXT",
             "sasl_mechanism": "OAUTHBEARER"}
    producer = kafka.KafkaProducer(**plain, sasl_oauth_token_provider=KpProvider("admin"))
    producer.send(topic, b"kp").get(timeout=30)
    producer.close()

    async def aio():
        p = aiokafka.AIOKafkaProducer(**plain, sasl_oauth_token_provider=AioTokenProvider("admin"))
        await p.start()
        try:
            await p.send_and_wait(topic, b"aio")
        finally:
            await p.stop()

    asyncio.run(aio())
    assert _consume(broker.oauth("SASL_SSL", "admin"), topic, 2) == [b"kp", b"aio"]


def test_bundled_client_and_cli_with_unsecured_tokens(broker):
    from odradek.client import Producer
    from odradek.client.errors import AuthenticationError

    topic = f"bundled-{uuid.uuid4().hex[:6]}"
    _create_topics(broker, topic)
    options = {"bootstrap_servers": broker.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
               "ssl_ca_location": str(broker.pki.ca), "sasl_mechanism": "OAUTHBEARER",
               "enable_sasl_oauthbearer_unsecure_jwt": True, "sasl_oauthbearer_config": "principal=admin scope=kafka"}

    assert asyncio.run(bundled_round_trip(options, topic)) == [b"bundled"]

    async def expired():
        expired_cb = _token_cb({"sub": "admin", "exp": 1_000_000_000})
        async with Producer(**{**options, "oauth_cb": expired_cb, "enable_sasl_oauthbearer_unsecure_jwt": False}) as producer:
            await producer.send_and_wait(topic, b"never")

    with pytest.raises(AuthenticationError, match="invalid_token"):
        asyncio.run(expired())
    cli = [sys.executable, "-m", "odradek", "-b", broker.bootstrap("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
           "-X", "sasl.mechanism=OAUTHBEARER", "-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
           "-X", "sasl.oauthbearer.config=principal=admin scope=kafka", "topic", "list"]
    listed = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and topic in listed.stdout, listed.stderr
    scopeless = subprocess.run([*cli[:-3], "sasl.oauthbearer.config=principal=admin", "topic", "list"],
                               capture_output=True, text=True, timeout=120)
    assert scopeless.returncode != 0 and "insufficient_scope" in scopeless.stderr + scopeless.stdout


# -- a cluster with OAUTHBEARER everywhere


async def test_three_nodes_with_oauthbearer_on_every_listener(tmp_path):
    """Kafka's development setup copied: clients, brokers and controllers all on SASL_SSL with OAUTHBEARER,
    each node minting its own unsecured token from its JAAS entry (unsecuredLoginStringClaim_sub), TLS from
    PKCS12 stores. The nodes' tokens live 8 s: their sessions end with them, so the nodes must open fresh,
    re-authenticated connections to keep replicating (broker/node_client.py renews at 85%)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from odradek.broker.server import Broker
    from odradek.broker.testing import broker_config
    from odradek.metadata.image import new_cluster_id
    from odradek.storage.meta_properties import format_log_dir
    from odradek.storage.names import TopicPartition

    from tests.harness.inprocess import QUICK, active, free_ports, until

    pki = make_pki(tmp_path / "pki")
    keystore, truststore = pki.pkcs12_keystore("server", STORE_PASSWORD), pki.pkcs12_truststore(STORE_PASSWORD)
    cluster_id, n = new_cluster_id(), 3
    ports = free_ports(3 * n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * n + i]}" for i in range(n))
    node_jaas = f'{LOGIN_MODULE} required unsecuredLoginStringClaim_sub="node" unsecuredLoginLifetimeSeconds="8";'
    configs = []
    for i in range(n):
        data = tmp_path / f"node{i + 1}"
        format_log_dir(str(data), node_id=i + 1, cluster_id=cluster_id, directory_id=new_cluster_id())
        configs.append(broker_config(data, **{
            "node.id": i + 1, "process.roles": "broker,controller", "controller.quorum.voters": voters,
            "listeners": f"CLIENT://127.0.0.1:{ports[i]},INTERNAL://127.0.0.1:{ports[n + i]},"
                         f"CONTROLLER://127.0.0.1:{ports[2 * n + i]}",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "advertised.listeners": f"CLIENT://127.0.0.1:{ports[i]},INTERNAL://127.0.0.1:{ports[n + i]}",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER", "sasl.mechanism.controller.protocol": "OAUTHBEARER",
            "listener.name.client.oauthbearer.sasl.jaas.config": f"{LOGIN_MODULE} required;",
            "listener.name.internal.oauthbearer.sasl.jaas.config": node_jaas,
            "listener.name.controller.oauthbearer.sasl.jaas.config": node_jaas,
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore), "ssl.keystore.password": STORE_PASSWORD,
            "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(truststore),
            "ssl.truststore.password": STORE_PASSWORD,
            "default.replication.factor": 3, "offsets.topic.replication.factor": 3, "min.insync.replicas": 2,
            "replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
            **QUICK,
        }))
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), timeout_s=60,
                    what="three unfenced brokers (registered over the OAUTHBEARER controller listener)")
        bootstrap = ",".join(f"127.0.0.1:{port}" for b in nodes for name, _, port in b.bound if name == "CLIENT")
        conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
                "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=alice"}

        def produce(first: int) -> list[str]:
            if first == 0:
                admin = AdminClient(conf)  # held: a collected client fails its futures with _DESTROY
                admin.create_topics([NewTopic("oauth", 3, 3)])["oauth"].result(30)
            errors: list[str] = []
            producer = Producer({**conf, "acks": "all"})
            for i in range(first, first + 30):
                producer.produce("oauth", f"v{i}".encode(), partition=i % 3,
                                 on_delivery=lambda err, _m: err is not None and errors.append(str(err)))
            if producer.flush(60):
                errors.append("not all delivered")
            return errors

        def consume(count: int) -> list[bytes]:
            consumer = Consumer({**conf, "group.id": "oauth-readers"})
            consumer.assign([confluent_kafka.TopicPartition("oauth", p, 0) for p in range(3)])
            values: list[bytes] = []
            deadline = time.monotonic() + 45
            while len(values) < count and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    values.append(m.value())
            consumer.close()
            return values

        async def all_replicas_hold(end_offset: int) -> None:
            for p in range(3):
                tp = TopicPartition("oauth", p)
                await until(lambda tp=tp: all(b.data.get_partition(tp) is not None
                                              and b.data.get_partition(tp).log.log_end_offset == end_offset for b in nodes),
                            timeout_s=60, what=f"partition {p} up to offset {end_offset} on all three replicas")

        loop = asyncio.get_running_loop()
        started = time.monotonic()
        assert await loop.run_in_executor(None, produce, 0) == []
        await all_replicas_hold(10)
        # past the nodes' first tokens: replication and the quorum go on over renewed sessions
        while time.monotonic() - started < 12:
            await asyncio.sleep(0.5)
        assert all(b.services.live_brokers() == [1, 2, 3] for b in nodes)
        assert await loop.run_in_executor(None, produce, 30) == []
        await all_replicas_hold(20)
        assert sorted(await loop.run_in_executor(None, consume, 60)) == sorted(f"v{i}".encode() for i in range(60))
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
