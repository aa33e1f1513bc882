"""Config semantics as Kafka answers them, through confluent-kafka's and kafka-python's admin clients.

What Kafka returns, from its sources (Kafka 4.0/4.1, KRaft):

- IncrementalAlterConfigs APPEND/SUBTRACT (metadata/.../controller/ConfigurationControlManager.java,
  incrementalAlterConfigResource): only LIST-typed keys ("Can't SUBTRACT to key K because its type is not
  LIST."); the base is the topic's override, else the topic config's own default (getParts ->
  KafkaConfigSchema.getDefault: "delete" for cleanup.policy); APPEND adds each item not present, SUBTRACT
  removes each; the result is comma-joined, so SUBTRACT of the only value stores "". cleanup.policy's
  validator, ConfigDef.ValidList.in("compact", "delete"), checks each item and so accepts the empty list
  (Kafka 4.2 keeps that on purpose, KAFKA-19112); the log then neither deletes by retention nor compacts
  (UnifiedLog.deleteOldSegments). DescribeConfigs then shows value "" from DYNAMIC_TOPIC_CONFIG (1).
- DescribeConfigs (core/.../server/ConfigHelper.scala, createTopicConfigEntry / createBrokerConfigEntry /
  configSynonyms): synonyms are the topic override (DYNAMIC_TOPIC_CONFIG), then the broker property and
  its stand-ins set in server.properties (STATIC_BROKER_CONFIG, 4), then their non-null defaults
  (DEFAULT_CONFIG, 5), leading ones not named as the property dropped; config_source is the first
  synonym's, DEFAULT_CONFIG when there is none; is_default (what clients derive) is source == 5.
  So log.retention.ms, which has no default, reports source 5, value null and no synonyms; a property set
  with --override reports 4 with [(name, value, 4), (name, default, 5)].
"""

from __future__ import annotations

import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from confluent_kafka import KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import AlterConfigOp, KafkaAdminClient  # noqa: E402
from kafka.admin import ConfigResource as KConfigResource  # noqa: E402
from kafka.admin import ConfigResourceType as KConfigResourceType  # noqa: E402

T = 15


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def kp_admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=T * 1000)
    yield client
    client.close()


def incremental(admin, topic: str, *ops: tuple[str, str | None, AlterConfigOpType]) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, value, op in ops])
    admin.incremental_alter_configs([resource], request_timeout=T)[resource].result(timeout=T)


def describe(admin, resource_type, resource_name: str) -> dict:
    (future,) = admin.describe_configs([ConfigResource(resource_type, resource_name)], request_timeout=T).values()
    return future.result(timeout=T)


def produce(bootstrap: str, topic: str, keys) -> list:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list = []
    for key in keys:
        producer.produce(topic, value=b"v", key=key, partition=0, on_delivery=lambda err, msg: errors.append(err))
        producer.flush(T)
    return [e.code() if e else None for e in errors]


def test_append_then_subtract_every_cleanup_policy(admin, broker):
    """librdkafka's own test (0011, test_message_single_partition_record_fail) APPENDs compact to a new
    topic and SUBTRACTs it afterwards; here the last policy goes too and "" is what remains."""
    topic = name("policy")
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=T)[topic].result(timeout=T)
    incremental(admin, topic, ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    entry = describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"]
    assert (entry.value, entry.source) == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert produce(broker.bootstrap, topic, [None]) == [KafkaError.INVALID_RECORD]  # compacted now

    incremental(admin, topic, ("cleanup.policy", "delete,compact", AlterConfigOpType.SUBTRACT))
    entry = describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"]
    assert (entry.value, entry.source, entry.is_default) == ("", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    assert [(s.name, s.value, s.source) for s in entry.synonyms.values()] == [
        ("cleanup.policy", "", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG.value),
    ]
    assert produce(broker.bootstrap, topic, [None, b"k"]) == [None, None]  # not compacted any more

    incremental(admin, topic, ("cleanup.policy", "compact", AlterConfigOpType.APPEND))  # APPEND onto ""
    assert describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact"
    incremental(admin, topic, ("cleanup.policy", None, AlterConfigOpType.DELETE))
    entry = describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"]
    assert (entry.value, entry.source, entry.is_default) == ("delete", ConfigSource.DEFAULT_CONFIG.value, True)

    with pytest.raises(KafkaException) as e:
        incremental(admin, topic, ("retention.ms", "5", AlterConfigOpType.SUBTRACT))
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Can't SUBTRACT to key retention.ms because its type is not LIST." in e.value.args[0].str()


def test_kafka_python_subtract_the_only_policy(kp_admin, broker):
    topic = name("kp-policy")
    kp_admin.create_topics({topic: {"num_partitions": 1, "configs": {"cleanup.policy": "compact"}}})
    resource = KConfigResource(KConfigResourceType.TOPIC, topic,
                               {"cleanup.policy": (AlterConfigOp.SUBTRACT, "compact")})
    assert kp_admin.alter_configs([resource], incremental=True) == {"topic": {topic: "OK"}}
    described = kp_admin.describe_configs([KConfigResource(KConfigResourceType.TOPIC, topic)],
                                          include_synonyms=True)["topic"][topic]
    policy = described["cleanup.policy"]
    assert (policy["value"], policy["config_source"]) == ("", "DYNAMIC_TOPIC_CONFIG")
    assert [(s["name"], s["value"], s["source"]) for s in policy["synonyms"]] == [
        ("cleanup.policy", "", "DYNAMIC_TOPIC_CONFIG"), ("log.cleanup.policy", "delete", "DEFAULT_CONFIG")]
    # A leader-side throttle list, LIST-typed as well: APPEND from Kafka's default "", SUBTRACT back to "".
    throttled = "leader.replication.throttled.replicas"
    for op, value, expected in ((AlterConfigOp.APPEND, "0:1", "0:1"), (AlterConfigOp.SUBTRACT, "0:1", "")):
        resource = KConfigResource(KConfigResourceType.TOPIC, topic, {throttled: (op, value)})
        assert kp_admin.alter_configs([resource], incremental=True) == {"topic": {topic: "OK"}}
        described = kp_admin.describe_configs([KConfigResource(KConfigResourceType.TOPIC, topic)],
                                              config_filter="all")["topic"][topic]
        assert described[throttled]["value"] == expected


def test_broker_config_sources_and_synonyms(admin, kp_admin, broker):
    """The test broker is started with --override listeners, log.dirs, node.id and
    group.initial.rebalance.delay.ms (tests/brokerproc.py): those are STATIC_BROKER_CONFIG, the rest
    DEFAULT_CONFIG, with Kafka's synonym lists."""
    node = str(broker.node_id)
    configs = describe(admin, ResourceType.BROKER, node)
    static = ConfigSource.STATIC_BROKER_CONFIG.value
    default = ConfigSource.DEFAULT_CONFIG.value
    for key in ("listeners", "log.dirs", "group.initial.rebalance.delay.ms"):
        assert (configs[key].source, configs[key].is_default) == (static, False), key
    assert configs["group.initial.rebalance.delay.ms"].value == "0"
    assert (configs["num.partitions"].source, configs["num.partitions"].is_default) == (default, True)
    retention_ms = configs["log.retention.ms"]
    assert (retention_ms.value, retention_ms.source, retention_ms.synonyms) == (None, default, {})

    described = kp_admin.describe_configs([KConfigResource(KConfigResourceType.BROKER, node)],
                                          include_synonyms=True, config_filter="all")["broker"][node]
    delay = described["group.initial.rebalance.delay.ms"]
    assert [(s["name"], s["value"], s["source"]) for s in delay["synonyms"]] == [
        ("group.initial.rebalance.delay.ms", "0", "STATIC_BROKER_CONFIG"),
        ("group.initial.rebalance.delay.ms", "3000", "DEFAULT_CONFIG"),
    ]
    hours = described["log.retention.hours"]
    assert (hours["value"], hours["config_source"]) == ("168", "DEFAULT_CONFIG")
    assert [(s["name"], s["value"], s["source"]) for s in hours["synonyms"]] == [
        ("log.retention.hours", "168", "DEFAULT_CONFIG")]
    assert described["log.retention.ms"]["synonyms"] == []
    # Without include_synonyms, none at all.
    plain = kp_admin.describe_configs([KConfigResource(KConfigResourceType.BROKER, node)],
                                      config_filter="all")["broker"][node]
    assert all(not entry.get("synonyms") for entry in plain.values())
    # The topic view of the same chain: retention.ms takes log.retention.ms only, which nothing sets.
    topic = name("syn")
    kp_admin.create_topics({topic: {"num_partitions": 1}})
    described = kp_admin.describe_configs([KConfigResource(KConfigResourceType.TOPIC, topic)],
                                          include_synonyms=True, config_filter="all")["topic"][topic]
    assert (described["retention.ms"]["value"], described["retention.ms"]["config_source"],
            described["retention.ms"]["synonyms"]) == ("604800000", "DEFAULT_CONFIG", [])
    assert [(s["name"], s["source"]) for s in described["segment.bytes"]["synonyms"]] == [
        ("log.segment.bytes", "DEFAULT_CONFIG")]
