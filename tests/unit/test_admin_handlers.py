"""The admin handlers (topics, configs, cluster) called directly on an in-process broker.

Every response is encoded at the version it answers, so a field set outside its versions shows up here
rather than on a client's socket. The pure mapping code (incremental config operations, broker resource
names) is tested on its own first.
"""

from __future__ import annotations

import types
import uuid

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.handlers.configs import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    ResourceError,
    check_broker_name,
    incremental_changes,
)
from odradek.broker.testing import running_broker
from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS
from odradek.storage.names import TopicPartition

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 19, 20, 21, 32, 33
DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 35, 37, 44, 60
TOPIC, BROKER = 2, 4


# ---- pure mapping


def test_incremental_set_and_delete():
    changes = incremental_changes({"retention.ms": "5"}, [("retention.ms", DELETE, None), ("segment.ms", SET, "9")], BrokerConfig())
    assert changes == {"retention.ms": None, "segment.ms": "9"}


def test_incremental_append_starts_from_the_default_then_the_override():
    cfg = BrokerConfig()
    assert incremental_changes({}, [("cleanup.policy", APPEND, "compact")], cfg) == {"cleanup.policy": "delete,compact"}
    assert incremental_changes({"cleanup.policy": "compact"}, [("cleanup.policy", APPEND, "compact")], cfg) == {
        "cleanup.policy": "compact"
    }
    assert incremental_changes({"cleanup.policy": "compact,delete"}, [("cleanup.policy", SUBTRACT, "delete")], cfg) == {
        "cleanup.policy": "compact"
    }
    # Kafka starts from the topic config's own default, not the broker's log.cleanup.policy
    # (ConfigurationControlManager.getParts -> KafkaConfigSchema.getDefault(TOPIC, key)).
    broker_compacts = BrokerConfig.from_properties({"log.cleanup.policy": "compact"})
    assert incremental_changes({}, [("cleanup.policy", APPEND, "delete")], broker_compacts) == {
        "cleanup.policy": "delete"
    }
    # SUBTRACT of the only item leaves the empty list, as Kafka's String.join(",", []) does.
    assert incremental_changes({"cleanup.policy": "compact"}, [("cleanup.policy", SUBTRACT, "compact")], cfg) == {
        "cleanup.policy": ""
    }
    assert incremental_changes({}, [("cleanup.policy", SUBTRACT, "delete")], cfg) == {"cleanup.policy": ""}
    assert incremental_changes({}, [("leader.replication.throttled.replicas", APPEND, "0:1,1:1")], cfg) == {
        "leader.replication.throttled.replicas": "0:1,1:1"
    }


def test_incremental_append_to_a_non_list_names_the_key():
    with pytest.raises(ResourceError) as e:
        incremental_changes({}, [("retention.ms", APPEND, "1")], BrokerConfig())
    assert e.value.error_code == ErrorCode.INVALID_CONFIG and "retention.ms" in e.value.message
    with pytest.raises(ResourceError) as e:
        incremental_changes({}, [("no.such.key", SUBTRACT, "1")], BrokerConfig())
    assert e.value.error_code == ErrorCode.INVALID_CONFIG and "no.such.key" in e.value.message


def test_incremental_rejects_null_values_and_unknown_operations():
    with pytest.raises(ResourceError) as e:
        incremental_changes({}, [("retention.ms", SET, None)], BrokerConfig())
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(ResourceError) as e:
        incremental_changes({}, [("retention.ms", 7, "1")], BrokerConfig())
    assert e.value.error_code == ErrorCode.INVALID_REQUEST


def test_broker_resource_names():
    b = types.SimpleNamespace(node_id=3)
    check_broker_name(b, "3")
    check_broker_name(b, "")
    for bad in ("4", "x", "-3", " 3"):
        with pytest.raises(ResourceError) as e:
            check_broker_name(b, bad)
        assert e.value.error_code == ErrorCode.INVALID_REQUEST


# ---- handlers on a running broker


class Calls:
    def __init__(self, broker):
        self.broker = broker

    def __call__(self, api_key: int, version: int, request):
        registration = self.broker.registry[api_key]
        assert registration.min_version <= version <= registration.max_version
        ctx = types.SimpleNamespace(api_key=api_key, api_version=version, listener="PLAINTEXT",
                                    connection=types.SimpleNamespace(scope="broker"))
        response = registration.handler(self.broker.services, ctx, request)
        response.encode(version)  # the codec refuses fields outside their versions
        return response

    def every_version(self, api_key: int, make_request):
        """The response at each accepted version (make_request(version) builds a fresh request)."""
        registration = self.broker.registry[api_key]
        return {
            v: self(api_key, v, make_request(v)) for v in range(registration.min_version, registration.max_version + 1)
        }


@pytest.fixture
async def call(tmp_path):
    async with running_broker(tmp_path, num_partitions=2) as kafka:
        yield Calls(kafka.broker)


CT = REQUESTS[CREATE_TOPICS]
CTopic = CT.CreatableTopic


def create_request(*topics, validate_only=False):
    return CT(topics=list(topics), timeout_ms=5000, validate_only=validate_only)


def topic(name, partitions=-1, rf=-1, configs=None, assignments=None):
    return CTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[CTopic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
        assignments=[CTopic.CreatableReplicaAssignment(partition_index=i, broker_ids=b) for i, b in (assignments or {}).items()],
    )


def codes(results):
    return [(r.name, r.error_code) for r in results]


async def test_create_topics_every_version(call):
    responses = call.every_version(CREATE_TOPICS, lambda v: create_request(topic(f"t{v}", configs={"retention.ms": "1234"})))
    for v, response in responses.items():
        (r,) = response.topics
        assert (r.name, r.error_code) == (f"t{v}", 0)
        image = call.broker.metadata.image.topics_by_name[f"t{v}"]
        assert len(image.partitions) == 2  # the broker's num.partitions
        if v >= 5:
            assert (r.num_partitions, r.replication_factor) == (2, 1)
            configs = {c.name: c for c in r.configs}
            assert configs["retention.ms"].value == "1234" and configs["retention.ms"].config_source == 1
            assert configs["segment.ms"].config_source == 5
        if v >= 7:
            assert r.topic_id == image.topic_id


async def test_create_topics_errors(call):
    call(CREATE_TOPICS, 7, create_request(topic("exists")))
    response = call(CREATE_TOPICS, 7, create_request(
        topic("exists"),
        topic("bad name"),
        topic("zero", partitions=0),
        topic("rf", partitions=1, rf=0),
        topic("rf3", partitions=1, rf=3),
        topic("conf", configs={"retention.ms": "soon"}),
        topic("unknown-conf", configs={"no.such.config": "1"}),
        topic("null-conf", configs={"retention.ms": None}),
        topic("dup"),
        topic("dup"),
        topic("both", partitions=2, assignments={0: [1]}),
        topic("gap", assignments={0: [1], 2: [1]}),
        topic("nobroker", assignments={0: [7]}),
    ))
    E = ErrorCode
    assert codes(response.topics) == [
        ("exists", E.TOPIC_ALREADY_EXISTS),
        ("bad name", E.INVALID_TOPIC_EXCEPTION),
        ("zero", E.INVALID_PARTITIONS),
        ("rf", E.INVALID_REPLICATION_FACTOR),
        ("rf3", E.INVALID_REPLICATION_FACTOR),
        ("conf", E.INVALID_CONFIG),
        ("unknown-conf", E.INVALID_CONFIG),
        ("null-conf", E.INVALID_CONFIG),
        ("dup", E.INVALID_REQUEST),
        ("dup", E.INVALID_REQUEST),
        ("both", E.INVALID_REQUEST),
        ("gap", E.INVALID_REPLICA_ASSIGNMENT),
        ("nobroker", E.INVALID_REPLICA_ASSIGNMENT),
    ]
    assert "retention.ms" in response.topics[5].error_message
    assert "no.such.config" in response.topics[6].error_message
    assert set(call.broker.metadata.image.topics_by_name) - {"__consumer_offsets"} == {"exists"}


async def test_create_topics_manual_assignment_and_validate_only(call):
    response = call(CREATE_TOPICS, 7, create_request(topic("manual", assignments={0: [1], 1: [1], 2: [1]})))
    assert response.topics[0].error_code == 0 and response.topics[0].num_partitions == 3
    assert len(call.broker.metadata.image.topics_by_name["manual"].partitions) == 3
    assert call.broker.data.get_partition(TopicPartition("manual", 2)) is not None

    response = call(CREATE_TOPICS, 7, create_request(topic("dry", partitions=5, configs={"cleanup.policy": "compact"}), validate_only=True))
    (r,) = response.topics
    assert (r.error_code, r.num_partitions, r.replication_factor, r.topic_id) == (0, 5, 1, ZERO_UUID)
    assert {c.name: c.value for c in r.configs}["cleanup.policy"] == "compact"
    assert "dry" not in call.broker.metadata.image.topics_by_name
    response = call(CREATE_TOPICS, 4, create_request(topic("dry", rf=2), validate_only=True))
    assert response.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR


DT = REQUESTS[DELETE_TOPICS]


async def test_delete_topics_by_name_and_id(call):
    call(CREATE_TOPICS, 7, create_request(topic("a"), topic("b"), topic("c")))
    image = call.broker.metadata.image
    id_b = image.topics_by_name["b"].topic_id
    response = call(DELETE_TOPICS, 4, DT(topic_names=["a", "nope", "a"], timeout_ms=1000))
    assert codes(response.responses) == [("a", 42), ("nope", 3), ("a", 42)]
    response = call(DELETE_TOPICS, 5, DT(topic_names=["a"], timeout_ms=1000))
    assert codes(response.responses) == [("a", 0)]
    S = DT.DeleteTopicState
    unknown = uuid.uuid4()
    response = call(DELETE_TOPICS, 6, DT(topics=[
        S(name=None, topic_id=id_b), S(name=None, topic_id=unknown), S(name="c", topic_id=ZERO_UUID),
        S(name="c", topic_id=id_b), S(name=None, topic_id=ZERO_UUID),
    ], timeout_ms=1000))
    got = [(r.name, r.topic_id, r.error_code) for r in response.responses]
    assert got[0] == ("b", id_b, 0)
    assert got[1] == (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID)
    assert got[2][0] == "c" and got[2][2] == 0 and got[2][1] != ZERO_UUID
    assert got[3][2] == got[4][2] == ErrorCode.INVALID_REQUEST
    assert not call.broker.metadata.image.topics_by_name
    assert not call.broker.data.partitions


async def test_internal_topics_are_not_deleted_by_name_or_id(call):
    assert call.broker.groups is not None  # the first group use creates __consumer_offsets, as in Kafka
    internal = call.broker.metadata.image.topics_by_name["__consumer_offsets"].topic_id
    S = DT.DeleteTopicState
    response = call(DELETE_TOPICS, 6, DT(topics=[S(name=None, topic_id=internal)], timeout_ms=1000))
    assert [(r.name, r.error_code) for r in response.responses] == [("__consumer_offsets", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    response = call(DELETE_TOPICS, 3, DT(topic_names=["__consumer_offsets"], timeout_ms=1000))
    assert codes(response.responses) == [("__consumer_offsets", ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    assert "__consumer_offsets" in call.broker.metadata.image.topics_by_name


CP = REQUESTS[CREATE_PARTITIONS]


async def test_create_partitions(call):
    call(CREATE_TOPICS, 7, create_request(topic("grow", partitions=1)))
    T = CP.CreatePartitionsTopic

    def request(*topics, validate_only=False):
        return CP(topics=list(topics), timeout_ms=1000, validate_only=validate_only)

    response = call(CREATE_PARTITIONS, 3, request(T(name="grow", count=4, assignments=None), validate_only=True))
    assert response.results[0].error_code == 0
    assert len(call.broker.metadata.image.topics_by_name["grow"].partitions) == 1
    response = call(CREATE_PARTITIONS, 0, request(T(name="grow", count=3, assignments=None)))
    assert response.results[0].error_code == 0
    assert len(call.broker.metadata.image.topics_by_name["grow"].partitions) == 3
    assert len([tp for tp in call.broker.data.partitions if tp.topic == "grow"]) == 3
    response = call(CREATE_PARTITIONS, 2, request(
        T(name="grow", count=3, assignments=None), T(name="grow2", count=1, assignments=None),
    ))
    assert codes(response.results) == [("grow", ErrorCode.INVALID_PARTITIONS), ("grow2", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    response = call(CREATE_PARTITIONS, 1, request(T(name="grow", count=2, assignments=None)))
    assert response.results[0].error_code == ErrorCode.INVALID_PARTITIONS and response.results[0].error_message
    response = call(CREATE_PARTITIONS, 3, request(
        T(name="grow", count=5, assignments=[T.CreatePartitionsAssignment(broker_ids=[1])]),
    ))
    assert response.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


DR = REQUESTS[DELETE_RECORDS]


async def test_delete_records_on_an_empty_log_and_errors(call):
    call(CREATE_TOPICS, 7, create_request(topic("dr", partitions=1), topic("compacted", partitions=1, configs={"cleanup.policy": "compact"})))
    T = DR.DeleteRecordsTopic
    P = T.DeleteRecordsPartition
    for v in (0, 1, 2):
        response = call(DELETE_RECORDS, v, DR(topics=[
            T(name="dr", partitions=[P(partition_index=0, offset=-1), P(partition_index=0, offset=1), P(partition_index=5, offset=0)]),
            T(name="compacted", partitions=[P(partition_index=0, offset=0)]),
            T(name="missing", partitions=[P(partition_index=0, offset=0)]),
        ], timeout_ms=1000))
        got = [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in response.topics for p in t.partitions]
        assert got == [
            ("dr", 0, 0, 0),
            ("dr", 0, ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            ("dr", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("compacted", 0, ErrorCode.POLICY_VIOLATION, -1),
            ("missing", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ]


DC = REQUESTS[DESCRIBE_CONFIGS]


def describe_request(*resources, synonyms=False, docs=False):
    R = DC.DescribeConfigsResource
    return DC(
        resources=[R(resource_type=t, resource_name=n, configuration_keys=k) for t, n, k in resources],
        include_synonyms=synonyms, include_documentation=docs,
    )


async def test_describe_configs_every_version(call):
    call(CREATE_TOPICS, 7, create_request(topic("dc", configs={"retention.ms": "60000"})))
    responses = call.every_version(DESCRIBE_CONFIGS, lambda v: describe_request(
        (TOPIC, "dc", None), (TOPIC, "dc", ["retention.ms", "nonsense"]), (BROKER, "1", ["num.partitions"]),
        synonyms=True, docs=True,
    ))
    for v, response in responses.items():
        everything, some, node = response.results
        assert everything.error_code == some.error_code == node.error_code == 0
        by_name = {c.name: c for c in everything.configs}
        assert len(by_name) > 20
        retention = by_name["retention.ms"]
        assert (retention.value, retention.config_source, retention.read_only) == ("60000", 1, False)
        # (log.retention.ms has no default: Kafka lists no broker synonym after the override)
        assert [s.name for s in retention.synonyms] == ["retention.ms"]
        assert [c.name for c in some.configs] == ["retention.ms"]
        (partitions,) = node.configs
        assert (partitions.name, partitions.value, partitions.config_source, partitions.read_only) == ("num.partitions", "2", 4, True)
        if v >= 3:
            assert retention.config_type == 5 and retention.documentation
        else:
            assert retention.config_type == 0 and not retention.documentation


async def test_describe_configs_without_synonyms_and_errors(call):
    # (a BROKER_LOGGER resource names this node: another node's is refused; this one's is served, see
    # tests/integration/test_authorization_kafka_apis.py)
    response = call(DESCRIBE_CONFIGS, 1, describe_request(
        (TOPIC, "absent", None), (TOPIC, "bad name", None), (BROKER, "2", None), (BROKER, "x", None),
        (BROKER, "", None), (8, "2", None), (BROKER, "1", None),
    ))
    got = [(r.resource_type, r.resource_name, r.error_code) for r in response.results]
    E = ErrorCode
    assert got == [
        (TOPIC, "absent", E.UNKNOWN_TOPIC_OR_PARTITION), (TOPIC, "bad name", E.INVALID_TOPIC_EXCEPTION),
        (BROKER, "2", E.INVALID_REQUEST), (BROKER, "x", E.INVALID_REQUEST), (BROKER, "", 0), (8, "2", E.INVALID_REQUEST),
        (BROKER, "1", 0),
    ]
    # the cluster-wide resource lists only its dynamic configs: the min.insync.replicas the controller writes
    # at bootstrap with ELR on (KIP-966)
    assert [(c.name, c.value) for c in response.results[4].configs] == [("min.insync.replicas", "1")]
    assert all(not c.synonyms for c in response.results[6].configs)
    assert len(response.results[6].configs) > 50


AC = REQUESTS[ALTER_CONFIGS]
IAC = REQUESTS[INCREMENTAL_ALTER_CONFIGS]


def alter_request(*resources, validate_only=False):
    R = AC.AlterConfigsResource
    return AC(resources=[
        R(resource_type=t, resource_name=n, configs=[R.AlterableConfig(name=k, value=v) for k, v in c]) for t, n, c in resources
    ], validate_only=validate_only)


def incremental_request(*resources, validate_only=False):
    R = IAC.AlterConfigsResource
    return IAC(resources=[
        R(resource_type=t, resource_name=n, configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in c])
        for t, n, c in resources
    ], validate_only=validate_only)


async def test_alter_configs_replaces_the_whole_set(call):
    call(CREATE_TOPICS, 7, create_request(topic("ac", configs={"retention.ms": "1000", "segment.ms": "2000"})))
    image = lambda: dict(call.broker.metadata.image.topic_configs("ac"))  # noqa: E731
    response = call(ALTER_CONFIGS, 0, alter_request((TOPIC, "ac", [("retention.ms", "5000")]), validate_only=True))
    assert response.responses[0].error_code == 0 and image() == {"retention.ms": "1000", "segment.ms": "2000"}
    response = call(ALTER_CONFIGS, 1, alter_request((TOPIC, "ac", [("retention.ms", "5000"), ("max.message.bytes", "100")])))
    assert response.responses[0].error_code == 0
    assert image() == {"retention.ms": "5000", "max.message.bytes": "100"}
    assert call.broker.log_manager.config_for("ac").max_message_bytes == 100
    assert call.broker.data.get_partition(TopicPartition("ac", 0)).log.config.max_message_bytes == 100

    response = call(ALTER_CONFIGS, 2, alter_request(
        (TOPIC, "ac", [("retention.ms", "-7")]),
        (TOPIC, "nope", []),
        (TOPIC, "x", [("a", "1"), ("a", "2")]),
        (BROKER, "1", [("num.partitions", "3")]),
        (BROKER, "x", []),
    ))
    E = ErrorCode
    assert [r.error_code for r in response.responses] == [
        E.INVALID_CONFIG, E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST,
    ]
    assert "retention.ms" in response.responses[0].error_message
    assert "num.partitions" in response.responses[3].error_message
    assert image() == {"retention.ms": "5000", "max.message.bytes": "100"}
    response = call(ALTER_CONFIGS, 2, alter_request((BROKER, "", []), (TOPIC, "ac", [])))
    assert [r.error_code for r in response.responses] == [0, 0]
    assert image() == {}


async def test_incremental_alter_configs(call):
    call(CREATE_TOPICS, 7, create_request(topic("iac", configs={"retention.ms": "1000"})))
    image = lambda: dict(call.broker.metadata.image.topic_configs("iac"))  # noqa: E731
    for v in (0, 1):
        response = call(INCREMENTAL_ALTER_CONFIGS, v, incremental_request((TOPIC, "iac", [
            ("retention.ms", DELETE, None), ("cleanup.policy", APPEND, "compact"), ("segment.bytes", SET, "1048576"),
        ])))
        assert response.responses[0].error_code == 0
        assert image() == {"cleanup.policy": "delete,compact", "segment.bytes": "1048576"}
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((TOPIC, "iac", [("cleanup.policy", SUBTRACT, "delete")])))
    assert response.responses[0].error_code == 0 and image()["cleanup.policy"] == "compact"
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request(
        (TOPIC, "iac", [("cleanup.policy", SUBTRACT, "compact")]),
        (TOPIC, "iac", [("retention.ms", APPEND, "1")]),
        (BROKER, "1", [("num.partitions", SET, "1")]),
        (TOPIC, "iac2", [("retention.ms", SET, "1")]),
    ))
    E = ErrorCode
    assert [r.error_code for r in response.responses] == [E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST, E.UNKNOWN_TOPIC_OR_PARTITION]
    # SUBTRACT of the last policy: Kafka stores "" (ValidList lets the empty list through): no deletion, no
    # compaction (ConfigurationControlManager.incrementalAlterConfigResource, UnifiedLog.deleteOldSegments).
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((TOPIC, "iac", [("cleanup.policy", SUBTRACT, "compact")])))
    assert response.responses[0].error_code == 0 and image()["cleanup.policy"] == ""
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((TOPIC, "iac", [("retention.ms", SET, "77")]), validate_only=True))
    assert response.responses[0].error_code == 0 and "retention.ms" not in image()

    partition = call.broker.data.get_partition(TopicPartition("iac", 0))
    assert partition.log.config.cleanup_policy == "" and partition.log.config.segment_bytes == 1048576
    assert not partition.log.config.compact and not partition.log.config.delete
    call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((TOPIC, "iac", [("min.insync.replicas", SET, "2")])))
    assert partition.min_insync_replicas == 2


DCL = REQUESTS[DESCRIBE_CLUSTER]


async def test_describe_cluster(call):
    responses = call.every_version(DESCRIBE_CLUSTER, lambda v: DCL(include_cluster_authorized_operations=False, include_fenced_brokers=v >= 2))
    broker = call.broker
    for v, r in responses.items():
        assert (r.error_code, r.cluster_id, r.controller_id) == (0, broker.metadata.image.cluster_id, broker.node_id)
        (b,) = r.brokers
        assert (b.broker_id, b.port) == (broker.node_id, broker.advertised_endpoint[1])
        assert r.cluster_authorized_operations == -(2**31)
    r = call(DESCRIBE_CLUSTER, 1, DCL(include_cluster_authorized_operations=True, endpoint_type=2))
    assert r.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE and r.brokers == []
    r = call(DESCRIBE_CLUSTER, 0, DCL(include_cluster_authorized_operations=True))
    assert r.cluster_authorized_operations > 0


DLD = REQUESTS[DESCRIBE_LOG_DIRS]


async def test_describe_log_dirs(call):
    call(CREATE_TOPICS, 7, create_request(topic("ld", partitions=3), topic("other", partitions=1)))
    T = DLD.DescribableLogDirTopic
    responses = call.every_version(DESCRIBE_LOG_DIRS, lambda v: DLD(topics=None))
    for v, response in responses.items():
        (result,) = response.results
        assert result.error_code == 0 and result.log_dir == call.broker.log_manager.log_dir
        assert {(t.name, p.partition_index) for t in result.topics for p in t.partitions} == {
            ("ld", 0), ("ld", 1), ("ld", 2), ("other", 0),
        }
        assert all(p.offset_lag == 0 and not p.is_future_key and p.partition_size >= 0 for t in result.topics for p in t.partitions)
        if v >= 4:
            assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
        else:
            assert result.total_bytes == -1
    response = call(DESCRIBE_LOG_DIRS, 2, DLD(topics=[T(topic="ld", partitions=[1, 7]), T(topic="absent", partitions=[0])]))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.results[0].topics] == [("ld", [1])]


# ---- dynamic broker configs (broker/dynamic_config.py)


def _broker_entries(call, name, keys=None):
    (result,) = call(DESCRIBE_CONFIGS, 4, describe_request((BROKER, name, keys), synonyms=True)).results
    assert result.error_code == 0, result.error_message
    return {c.name: c for c in result.configs}


async def test_dynamic_broker_configs_apply_to_topics_and_describe_their_source(call):
    call(CREATE_TOPICS, 7, create_request(topic("dyn"), topic("own", configs={"retention.ms": "1000"})))
    partition = call.broker.data.get_partition(TopicPartition("dyn", 0))
    own = call.broker.data.get_partition(TopicPartition("own", 0))
    assert partition.log.config.max_message_bytes == 1048588 and partition.min_insync_replicas == 1

    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request(
        (BROKER, "", [("log.retention.ms", SET, "600000"), ("message.max.bytes", SET, "2000")])))
    assert [r.error_code for r in response.responses] == [0]
    assert dict(call.broker.metadata.image.broker_configs()) == {
        "log.retention.ms": "600000", "message.max.bytes": "2000", "min.insync.replicas": "1"}
    # applied without a restart: the open logs take the new defaults; a topic override still wins
    assert partition.log.config.retention_ms == 600000 and partition.log.config.max_message_bytes == 2000
    assert own.log.config.retention_ms == 1000 and own.log.config.max_message_bytes == 2000

    # this node's own value wins over the cluster default
    response = call(INCREMENTAL_ALTER_CONFIGS, 0, incremental_request((BROKER, "1", [("message.max.bytes", SET, "3000"),
                                                                                        ("min.insync.replicas", SET, "1")])))
    assert response.responses[0].error_code == 0
    assert partition.log.config.max_message_bytes == 3000

    # DescribeConfigs: this node's effective values with Kafka's sources and synonyms, in Kafka's order
    node = _broker_entries(call, "1", ["message.max.bytes", "log.retention.ms", "num.partitions"])
    mmb = node["message.max.bytes"]
    assert (mmb.value, mmb.config_source, mmb.read_only) == ("3000", 2, False)
    assert [(s.value, s.source) for s in mmb.synonyms] == [("3000", 2), ("2000", 3), ("1048588", 5)]
    assert (node["log.retention.ms"].value, node["log.retention.ms"].config_source) == ("600000", 3)
    assert node["num.partitions"].read_only
    # the cluster default resource: the dynamic defaults alone, no per-broker synonym
    defaults = _broker_entries(call, "")
    assert set(defaults) == {"log.retention.ms", "message.max.bytes", "min.insync.replicas"}
    assert (defaults["message.max.bytes"].value, defaults["message.max.bytes"].config_source) == ("2000", 3)
    assert [s.source for s in defaults["message.max.bytes"].synonyms] == [3, 5]
    # a topic inheriting the changed default says where it comes from
    (result,) = call(DESCRIBE_CONFIGS, 4, describe_request((TOPIC, "dyn", ["retention.ms", "max.message.bytes"]),
                                                           synonyms=True)).results
    by_name = {c.name: c for c in result.configs}
    assert (by_name["retention.ms"].value, by_name["retention.ms"].config_source) == ("600000", 3)
    assert (by_name["max.message.bytes"].value, by_name["max.message.bytes"].config_source) == ("3000", 2)
    assert [s.source for s in by_name["max.message.bytes"].synonyms] == [2, 3, 5]

    # DELETE of the node's value falls back to the cluster default; legacy AlterConfigs replaces the set
    call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((BROKER, "1", [("message.max.bytes", DELETE, None)])))
    assert partition.log.config.max_message_bytes == 2000
    response = call(ALTER_CONFIGS, 2, alter_request((BROKER, "", [("log.cleaner.delete.retention.ms", "5000")])))
    assert response.responses[0].error_code == 0
    assert dict(call.broker.metadata.image.broker_configs()) == {"log.cleaner.delete.retention.ms": "5000"}
    assert partition.log.config.retention_ms == 604800000 and partition.log.config.max_message_bytes == 1048588
    assert partition.log.config.delete_retention_ms == 5000


async def test_dynamic_broker_config_refusals(call):
    E = ErrorCode
    got = []
    for resource in [
        (BROKER, "", [("log.dirs", SET, "/elsewhere")]),
        (BROKER, "1", [("num.io.threads", SET, "4")]),
        (BROKER, "", [("log.retention.ms", SET, "soon")]),
        (BROKER, "", [("no.such.config", SET, "1")]),
        (BROKER, "x", [("log.retention.ms", SET, "1")]),
        (BROKER, "2", [("log.segment.bytes", SET, "10")]),
    ]:
        (r,) = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request(resource)).responses
        got.append((r.error_code, r.error_message))
    assert [code for code, _ in got] == [E.INVALID_REQUEST] * 6
    assert got[0][1] == "Cannot update these configs dynamically: [log.dirs]"
    assert got[1][1].startswith("Cannot update these configs dynamically: [num.io.threads]. Kafka changes")
    assert "restart" in got[1][1]
    assert got[2][1].startswith("Invalid value soon for configuration log.retention.ms")
    assert "no.such.config" in got[3][1]
    assert "Broker id must be an integer" in got[4][1]
    assert got[5][1] == "Invalid value 10 for configuration log.segment.bytes: must be >= 64"
    assert call.broker.metadata.image.configs.get((BROKER, "")) == {"min.insync.replicas": "1"}  # the bootstrap's alone
    # keys that must agree are checked together, as at start-up
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((BROKER, "", [
        ("log.cleaner.min.compaction.lag.ms", SET, "10"), ("log.cleaner.max.compaction.lag.ms", SET, "5")])))
    assert response.responses[0].error_code == E.INVALID_REQUEST
    assert "log.cleaner.min.compaction.lag.ms" in response.responses[0].error_message
    # validate_only checks and writes nothing
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request(
        (BROKER, "", [("log.segment.bytes", SET, "1048576")]), validate_only=True))
    assert response.responses[0].error_code == 0 and call.broker.metadata.image.broker_configs() == {"min.insync.replicas": "1"}
    # APPEND / SUBTRACT work on a list-typed broker property, from Kafka's default
    call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((BROKER, "", [("log.cleanup.policy", APPEND, "compact")])))
    assert call.broker.metadata.image.broker_configs()["log.cleanup.policy"] == "delete,compact"
    response = call(INCREMENTAL_ALTER_CONFIGS, 1, incremental_request((BROKER, "", [("log.retention.ms", APPEND, "1")])))
    assert response.responses[0].error_code == E.INVALID_CONFIG
