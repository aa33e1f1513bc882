"""Authentication meets authorization: the principal a client proves (SASL user, certificate subject) is
the one ACLs are checked against. On an in-process broker with StandardAuthorizer: User:admin (super user,
PLAIN) grants alice WRITE on one topic through librdkafka's CreateAcls; alice (PLAIN) is refused a topic she
has no ACL for with TOPIC_AUTHORIZATION_FAILED and may write the granted one; carol (mTLS, mapped from
CN=carol) is refused too.
"""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.broker.testing import BrokerThread
from tests.pki import make_pki

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType  # noqa: E402

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("authz")
    pki = make_pki(base / "pki")
    with BrokerThread(base / "data", **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_store),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca), "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "auto.create.topics.enable": "false",
    }) as kafka:
        ports = {name: port for name, _, port in kafka.broker.bound}
        yield ports, pki


def sasl(ports, user: str, password: str, **extra) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password, **extra}


def produce_error(conf: dict, topic: str) -> str | None:
    result: list = []
    producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, _m: result.append(err))
    producer.flush(15)
    return None if not result or result[0] is None else result[0].name()


def test_acls_apply_to_the_authenticated_principal(broker):
    ports, pki = broker
    topic, other = f"granted-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(sasl(ports, "admin", "admin-secret"))
    for f in admin.create_topics([NewTopic(topic, 1, 1), NewTopic(other, 1, 1)]).values():
        f.result(30)
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(30)
    alice = sasl(ports, "alice", "alice-secret")
    deadline = time.monotonic() + 20
    while produce_error(alice, topic) is not None and time.monotonic() < deadline:  # the ACL reaches the image
        time.sleep(0.2)
    assert produce_error(alice, topic) is None
    assert produce_error(alice, other) == "TOPIC_AUTHORIZATION_FAILED"
    cert, key = pki.client("carol")
    carol = {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
             "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    assert produce_error(carol, topic) == "TOPIC_AUTHORIZATION_FAILED"
    # carol, by the name her certificate maps to, gets the same grant
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:carol", "*",
                                           AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        f.result(30)
    deadline = time.monotonic() + 20
    while produce_error(carol, topic) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert produce_error(carol, topic) is None
