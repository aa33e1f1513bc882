"""Authorization with real clients: a broker with StandardAuthorizer and allow.everyone.if.no.acl.found=false.

On a PLAINTEXT listener every client is User:ANONYMOUS. The broker is first started with
allow.everyone.if.no.acl.found=true, long enough to give ANONYMOUS the cluster rights it needs to manage
ACLs (ALTER, DESCRIBE, CREATE on the cluster) and to create a topic; then it is restarted with the default
false, the ACLs coming back from the metadata log. From then on ANONYMOUS has no ACL on any topic or group:
it sees no topics, and produce, fetch and group requests are refused with TOPIC_AUTHORIZATION_FAILED /
GROUP_AUTHORIZATION_FAILED, until CreateAcls (through confluent-kafka's AdminClient) grants them.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.brokerproc import BrokerProcess

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP = "secured", "secured-group"
ANON = "User:ANONYMOUS"


def _binding(rtype, name, op, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, ANON, "*", op, AclPermissionType.ALLOW)


def _create_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = tmp_path_factory.mktemp("authz-data")
    proc = BrokerProcess(data, AUTHORIZER, "allow.everyone.if.no.acl.found=true").start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        _create_acls(admin, [_binding(ResourceType.BROKER, "kafka-cluster", op)
                             for op in (AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CREATE)])
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result()
    finally:
        proc.stop()
    proc = BrokerProcess(data, AUTHORIZER)
    proc.port = None
    proc.start()
    yield proc
    proc.stop()


def _produce(bootstrap: str) -> KafkaError | None:
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    producer.produce(TOPIC, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


def _consume_error(bootstrap: str) -> tuple[int | None, bytes | None]:
    """(the first error code the consumer reports, the first value it reads), within 30 s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    return msg.error().code(), None
                continue
            consumer.commit(msg, asynchronous=False)
            return None, msg.value()
        return None, None
    finally:
        consumer.close()


def test_without_acls_nothing_is_visible_or_writable_and_acls_open_it_up(secured):
    bootstrap = secured.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # No ACL on any topic: the topic exists but Metadata does not show it.
    assert TOPIC not in admin.list_topics(timeout=10).topics
    assert _produce(bootstrap).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    code, _ = _consume_error(bootstrap)
    assert code == KafkaError.GROUP_AUTHORIZATION_FAILED

    # kafka-python sees the same.
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    kc = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        assert kc.topics() == set()
    finally:
        kc.close()
    kp = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(TOPIC, b"v").get(timeout=20)
    finally:
        kp.close()

    # The group is readable but not the topic yet: the consumer's fetch is refused for the topic.
    _create_acls(admin, [_binding(ResourceType.GROUP, GROUP, AclOperation.READ)])
    code, _ = _consume_error(bootstrap)
    assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Grant the topic (a prefixed ACL): produce and consume work, and Metadata lists the topic.
    _create_acls(admin, [_binding(ResourceType.TOPIC, "secu", AclOperation.WRITE, ResourcePatternType.PREFIXED),
                         _binding(ResourceType.TOPIC, TOPIC, AclOperation.READ)])
    assert TOPIC in admin.list_topics(timeout=10).topics
    assert _produce(bootstrap) is None
    code, value = _consume_error(bootstrap)
    assert (code, value) == (None, b"v")

    # DescribeAcls and DeleteAcls through the same admin client.
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    described = admin.describe_acls(everything, request_timeout=30).result()
    topic_acls = {(b.name, b.resource_pattern_type, b.operation) for b in described if b.restype == ResourceType.TOPIC}
    assert topic_acls == {("secu", ResourcePatternType.PREFIXED, AclOperation.WRITE),
                          (TOPIC, ResourcePatternType.LITERAL, AclOperation.READ)}
    topic_filter = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                    AclPermissionType.ANY)
    deleted = list(admin.delete_acls([topic_filter], request_timeout=30).values())[0].result()
    assert len(deleted) == 2
    assert _produce(bootstrap).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert TOPIC not in admin.list_topics(timeout=10).topics


def test_admin_requests_are_checked(secured):
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    # CREATE on the cluster was granted: topics may be made, but not deleted (no DELETE on them).
    name = f"made-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result()
    for future in admin.delete_topics([name], operation_timeout=10).values():
        with pytest.raises(KafkaException) as e:
            future.result()
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_authenticated_principals_over_sasl_plain(tmp_path):
    """With SASL (PLAIN) the principal is the authenticated user: User:admin is a super user, User:alice is
    refused until an ACL names her."""
    from odradek.broker.testing import BrokerThread

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    with BrokerThread(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users": "User:admin",
    }) as kafka:
        def conf(user: str) -> dict:
            return {"bootstrap.servers": kafka.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.username": user, "sasl.password": f"{user}-secret"}

        def produce_as_alice() -> KafkaError | None:
            errors: list = []
            producer = Producer({**conf("alice"), "message.timeout.ms": 10000})
            producer.produce("orders", b"v", on_delivery=lambda err, msg: errors.append(err))
            producer.flush(20)
            return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)

        admin = AdminClient(conf("admin"))
        for future in admin.create_topics([NewTopic("orders", 1, 1)]).values():
            future.result()
        assert "orders" not in AdminClient(conf("alice")).list_topics(timeout=10).topics
        assert produce_as_alice().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        _create_acls(admin, [AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                                        AclOperation.WRITE, AclPermissionType.ALLOW)])
        assert produce_as_alice() is None
        assert "orders" in AdminClient(conf("alice")).list_topics(timeout=10).topics


async def test_aiokafka_without_a_topic_acl(secured):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError

    producer = AIOKafkaProducer(bootstrap_servers=secured.bootstrap, request_timeout_ms=20000)
    await producer.start()
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(TOPIC, b"v")
    finally:
        await producer.stop()
