"""Admin APIs against a real broker process, through confluent-kafka's AdminClient (librdkafka) and
kafka-python's KafkaAdminClient: topics, partitions, records, configs and the cluster description.

Every client call is bounded by a timeout, so a response a client cannot match hangs nothing.
"""

from __future__ import annotations

import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import TopicPartition as KTopicPartition  # noqa: E402
from kafka import errors as kerrors  # noqa: E402
from kafka.admin import ConfigResource as KConfigResource  # noqa: E402
from kafka.admin import ConfigResourceType as KConfigResourceType  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402

T = 15  # seconds for any one client call

# The legacy AlterConfigs is tested on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": T * 1000})


@pytest.fixture(scope="module")
def kp_admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=T * 1000, client_id="kp-admin-test")
    yield client
    client.close()


def error_of(future) -> int:
    """The KafkaError code a confluent-kafka admin future failed with (0: it succeeded)."""
    try:
        future.result(timeout=T)
    except KafkaException as e:
        return e.args[0].code()
    return 0


def create(admin, *topics, validate_only=False):
    futures = admin.create_topics(list(topics), validate_only=validate_only, request_timeout=T)
    return {topic: error_of(f) for topic, f in futures.items()}


def partitions_of(admin, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=T).topics[topic].partitions)


def produce(bootstrap: str, topic: str, values, partition: int = 0) -> list:
    """Produce `values` and return the delivery errors (None for each success)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": T * 1000})
    errors = []
    for value in values:
        producer.produce(topic, value, partition=partition, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(T) == 0
    return errors


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name("wm")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=T, cached=False)
    finally:
        consumer.close()


# ---- confluent-kafka (librdkafka)


def test_create_list_and_delete_topics(admin):
    a, b = name("ck-a"), name("ck-b")
    assert create(admin, NewTopic(a, num_partitions=3, replication_factor=1), NewTopic(b)) == {a: 0, b: 0}
    assert partitions_of(admin, a) == 3
    assert partitions_of(admin, b) >= 1  # the broker's num.partitions
    assert create(admin, NewTopic(a, num_partitions=1)) == {a: KafkaError.TOPIC_ALREADY_EXISTS}

    futures = admin.delete_topics([a, b, name("ck-none")], request_timeout=T)
    assert sorted(error_of(f) for f in futures.values()) == [0, 0, KafkaError.UNKNOWN_TOPIC_OR_PART]
    topics = admin.list_topics(timeout=T).topics
    assert a not in topics and b not in topics


def test_create_topics_errors_and_validate_only(admin):
    dry, bad_rf, bad_p, bad_conf, unknown_conf = (name(p) for p in ("dry", "rf", "parts", "conf", "unknown"))
    result = create(
        admin,
        NewTopic(dry, num_partitions=4, replication_factor=1, config={"retention.ms": "1000"}),
        NewTopic(bad_rf, num_partitions=1, replication_factor=3),
        NewTopic(bad_conf, num_partitions=1, config={"retention.ms": "tomorrow"}),
        NewTopic(unknown_conf, num_partitions=1, config={"no.such.thing": "1"}),
        validate_only=True,
    )
    assert result == {
        dry: 0,
        bad_rf: KafkaError.INVALID_REPLICATION_FACTOR,
        bad_conf: KafkaError.INVALID_CONFIG,
        unknown_conf: KafkaError.INVALID_CONFIG,
    }
    assert dry not in admin.list_topics(timeout=T).topics  # validate_only created nothing
    assert create(admin, NewTopic("bad name!", num_partitions=1)) == {"bad name!": KafkaError.TOPIC_EXCEPTION}
    assert create(admin, NewTopic(bad_p, num_partitions=0)) == {bad_p: KafkaError.INVALID_PARTITIONS}


def test_create_topic_with_manual_assignment(admin, broker):
    topic = name("manual")
    # librdkafka wants the partition count spelled out next to an assignment (it sends -1 for both).
    assignment = [[broker.node_id], [broker.node_id]]
    assert create(admin, NewTopic(topic, num_partitions=2, replica_assignment=assignment)) == {topic: 0}
    assert partitions_of(admin, topic) == 2
    result = create(admin, NewTopic(name("manual"), num_partitions=1, replica_assignment=[[99]]))
    assert list(result.values()) == [KafkaError.INVALID_REPLICA_ASSIGNMENT]


def test_create_partitions(admin):
    topic = name("grow")
    assert create(admin, NewTopic(topic, num_partitions=1)) == {topic: 0}
    futures = admin.create_partitions([NewPartitions(topic, 3)], validate_only=True, request_timeout=T)
    assert [error_of(f) for f in futures.values()] == [0]
    assert partitions_of(admin, topic) == 1
    futures = admin.create_partitions([NewPartitions(topic, 3)], request_timeout=T)
    assert [error_of(f) for f in futures.values()] == [0]
    assert partitions_of(admin, topic) == 3
    futures = admin.create_partitions([NewPartitions(topic, 2)], request_timeout=T)
    assert [error_of(f) for f in futures.values()] == [KafkaError.INVALID_PARTITIONS]
    futures = admin.create_partitions([NewPartitions(name("nope"), 2)], request_timeout=T)
    assert [error_of(f) for f in futures.values()] == [KafkaError.UNKNOWN_TOPIC_OR_PART]


def test_delete_records(admin, broker):
    topic = name("records")
    assert create(admin, NewTopic(topic, num_partitions=1)) == {topic: 0}
    assert produce(broker.bootstrap, topic, [b"v%d" % i for i in range(10)]) == [None] * 10

    futures = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=T)
    (future,) = futures.values()
    assert future.result(timeout=T).low_watermark == 4
    assert watermarks(broker.bootstrap, topic) == (4, 10)

    (future,) = admin.delete_records([TopicPartition(topic, 0, 11)], request_timeout=T).values()
    assert error_of(future) == KafkaError.OFFSET_OUT_OF_RANGE

    # OFFSET_END (-1): everything up to the high watermark.
    (future,) = admin.delete_records([TopicPartition(topic, 0, -1)], request_timeout=T).values()
    assert future.result(timeout=T).low_watermark == 10
    assert watermarks(broker.bootstrap, topic) == (10, 10)


def describe(admin, resource: ConfigResource) -> dict:
    (future,) = admin.describe_configs([resource], request_timeout=T).values()
    return future.result(timeout=T)


def test_describe_configs(admin, broker):
    topic = name("desc")
    assert create(admin, NewTopic(topic, num_partitions=1, config={"retention.ms": "123456"})) == {topic: 0}
    configs = describe(admin, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["retention.ms"].is_read_only
    assert "retention.ms" in [s for s in configs["retention.ms"].synonyms]

    node = describe(admin, ConfigResource(ResourceType.BROKER, str(broker.node_id)))
    assert node["node.id"].value == str(broker.node_id) and node["node.id"].is_read_only

    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name("absent"))], request_timeout=T).values()
    assert error_of(future) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_alter_configs_replaces_and_takes_effect(admin, broker):
    topic = name("alter")
    assert create(admin, NewTopic(topic, num_partitions=1, config={"retention.ms": "1000", "segment.ms": "600000"})) == {topic: 0}
    assert produce(broker.bootstrap, topic, [b"x" * 5000]) == [None]

    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "86400000", "max.message.bytes": "2000"})
    (future,) = admin.alter_configs([resource], request_timeout=T).values()
    assert error_of(future) == 0
    configs = describe(admin, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["retention.ms"].value == "86400000"
    assert configs["max.message.bytes"].value == "2000"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # AlterConfigs replaced the whole set

    errors = produce(broker.bootstrap, topic, [b"y" * 5000])
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]
    assert produce(broker.bootstrap, topic, [b"small"]) == [None]

    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "never"})
    (future,) = admin.alter_configs([bad], request_timeout=T).values()
    assert error_of(future) == KafkaError.INVALID_CONFIG
    node = ConfigResource(ResourceType.BROKER, str(broker.node_id), set_config={"num.partitions": "1"})
    (future,) = admin.alter_configs([node], request_timeout=T).values()
    assert error_of(future) == KafkaError.INVALID_REQUEST


def test_incremental_alter_configs(admin, broker):
    topic = name("incr")
    assert create(admin, NewTopic(topic, num_partitions=1, config={"retention.ms": "1000"})) == {topic: 0}
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("max.message.bytes", "3000", incremental_operation=AlterConfigOpType.SET),
    ])
    (future,) = admin.incremental_alter_configs([resource], request_timeout=T).values()
    assert error_of(future) == 0
    configs = describe(admin, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert set(configs["cleanup.policy"].value.split(",")) == {"delete", "compact"}
    assert configs["max.message.bytes"].value == "3000"

    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
    ])
    (future,) = admin.incremental_alter_configs([resource], request_timeout=T).values()
    assert error_of(future) == 0
    assert describe(admin, ConfigResource(ResourceType.TOPIC, topic))["cleanup.policy"].value == "compact"

    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
    ])
    (future,) = admin.incremental_alter_configs([resource], request_timeout=T).values()
    with pytest.raises(KafkaException) as e:
        future.result(timeout=T)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG and "segment.ms" in e.value.args[0].str()


def test_describe_cluster(admin, broker):
    cluster = admin.describe_cluster(request_timeout=T).result(timeout=T)
    assert cluster.cluster_id
    assert [n.id for n in cluster.nodes] == [broker.node_id]
    assert cluster.controller.id == broker.node_id


# ---- kafka-python


def test_kafka_python_topics_and_partitions(kp_admin):
    topic = name("kp")
    result = kp_admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1, "configs": {"retention.ms": "3600000"}}})
    (created,) = result["topics"]
    assert created["error_code"] == 0 and created["num_partitions"] == 2
    assert created["configs"]["retention.ms"]["value"] == "3600000"
    with pytest.raises(kerrors.TopicAlreadyExistsError):
        kp_admin.create_topics([topic])
    result = kp_admin.create_topics({name("kp"): {"num_partitions": -1, "replication_factor": 5}}, raise_errors=False)
    assert result["topics"][0]["error_code"] == kerrors.InvalidReplicationFactorError.errno

    kp_admin.create_partitions({topic: 4})
    assert len(kp_admin.describe_topics([topic])[0]["partitions"]) == 4
    with pytest.raises(kerrors.InvalidPartitionsError):
        kp_admin.create_partitions({topic: 1})

    result = kp_admin.delete_topics([topic])
    assert [t["error_code"] for t in result["topics"]] == [0]
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        kp_admin.delete_topics([topic])


def test_kafka_python_configs(kp_admin, broker):
    topic = name("kpconf")
    kp_admin.create_topics({topic: {"num_partitions": 1}})
    resource = KConfigResource(KConfigResourceType.TOPIC, topic)
    described = kp_admin.describe_configs([resource], config_filter="all")
    assert described["topic"][topic]["retention.ms"]["config_source"] == "DEFAULT_CONFIG"

    result = kp_admin.alter_configs([KConfigResource(KConfigResourceType.TOPIC, topic, {"retention.ms": "7200000"})])
    assert result == {"topic": {topic: "OK"}}
    described = kp_admin.describe_configs([resource], include_synonyms=True)
    assert described["topic"][topic]["retention.ms"]["value"] == "7200000"
    assert described["topic"][topic]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

    # The legacy AlterConfigs (kafka-python fills in the other overrides itself).
    result = kp_admin.alter_configs(
        [KConfigResource(KConfigResourceType.TOPIC, topic, {"segment.ms": "3600000"})], incremental=False
    )
    assert result == {"topic": {topic: "OK"}}
    described = kp_admin.describe_configs([resource])["topic"][topic]
    assert {k: v["value"] for k, v in described.items()} == {"retention.ms": "7200000", "segment.ms": "3600000"}

    result = kp_admin.alter_configs([KConfigResource(KConfigResourceType.TOPIC, topic, {"retention.ms": "x"})])
    assert result["topic"][topic].startswith("[Error 40] InvalidConfigurationError")

    node = KConfigResource(KConfigResourceType.BROKER, str(broker.node_id))
    described = kp_admin.describe_configs([node], config_filter="all")["broker"][str(broker.node_id)]
    assert described["node.id"]["value"] == str(broker.node_id)


def test_kafka_python_delete_records_and_cluster(kp_admin, broker):
    topic = name("kprec")
    kp_admin.create_topics({topic: {"num_partitions": 1}})
    assert produce(broker.bootstrap, topic, [b"a", b"b", b"c"]) == [None] * 3
    result = kp_admin.delete_records({KTopicPartition(topic, 0): 2})
    assert result[KTopicPartition(topic, 0)]["low_watermark"] == 2
    with pytest.raises(kerrors.OffsetOutOfRangeError):
        kp_admin.delete_records({KTopicPartition(topic, 0): 99})

    cluster = kp_admin.describe_cluster()
    assert cluster["controller_id"] == broker.node_id
    assert [b["broker_id"] for b in cluster["brokers"]] == [broker.node_id]
    assert cluster["cluster_id"]

    (dirs,) = kp_admin.describe_log_dirs({topic: [0]})
    (log_dir,) = dirs["log_dirs"]
    assert [t["name"] for t in log_dir["topics"]] == [topic]
    assert log_dir["topics"][0]["partitions"][0]["partition_size"] > 0
