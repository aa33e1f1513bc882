"""Dynamic broker configs below the network: the controller's check, the image, each broker's effective
config and the DescribeConfigs view of it (broker/dynamic_config.py has the theory)."""

from __future__ import annotations

import uuid

import pytest

from odradek.broker.config import load_config
from odradek.broker.dynamic_config import (
    KAFKA_ONLY_DYNAMIC,
    LIVE_CONFIGS,
    DynamicBrokerConfig,
    DynamicConfigError,
    effective_config,
    validate_dynamic_configs,
)
from odradek.broker.controller_settings import is_built_from, new_controller
from odradek.broker.topic_config import ConfigSource, describe_broker, describe_topic
from odradek.broker.topics import topic_settings
from odradek.metadata.controller import ConfigChange, ControllerSettings
from odradek.metadata.controller.configuration_control import ConfigurationControlManager
from odradek.metadata.image import MetadataDelta, MetadataError, replay_all
from odradek.metadata.publisher import MetadataUpdate
from odradek.metadata.records import ConfigRecord, ConfigResourceType, PartitionRecord, TopicRecord
from odradek.protocol.errors import ErrorCode

BROKER, TOPIC = int(ConfigResourceType.BROKER), int(ConfigResourceType.TOPIC)
T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def image_with_topics():
    return replay_all([
        TopicRecord(name="a", topic_id=T1),
        PartitionRecord(partition_id=0, topic_id=T1, replicas=[1], isr=[1], leader=1),
        TopicRecord(name="b", topic_id=T2),
        PartitionRecord(partition_id=0, topic_id=T2, replicas=[1], isr=[1], leader=1),
    ])


def config_record(name, key, value):
    return ConfigRecord(resource_type=BROKER, resource_name=name, name=key, value=value)


def test_the_live_set_is_kafkas_dynamic_log_config():
    assert {"log.retention.ms", "log.segment.bytes", "message.max.bytes", "min.insync.replicas",
            "log.cleanup.policy", "compression.type", "unclean.leader.election.enable"} <= LIVE_CONFIGS
    # synonyms that are not the first one are static in Kafka too
    assert not {"log.retention.hours", "log.retention.minutes", "log.roll.hours"} & LIVE_CONFIGS
    assert not LIVE_CONFIGS & KAFKA_ONLY_DYNAMIC


@pytest.mark.parametrize("configs, message", [
    ({"log.dirs": "/x"}, "Cannot update these configs dynamically: [log.dirs]"),
    ({"node.id": "2", "log.dirs": "/x"}, "Cannot update these configs dynamically: [log.dirs, node.id]"),
    ({"max.connections": "5"}, "Cannot update these configs dynamically: [max.connections]. Kafka changes"),
    ({"listener.name.plaintext.max.connections": "5"}, "Cannot update these configs dynamically: [listener.name"),
    ({"nonsense.key": "5"}, "Unknown broker configs: [nonsense.key]"),
    ({"message.max.bytes": "big"}, "Invalid value big for configuration message.max.bytes:"),
    ({"log.cleanup.policy": "shred"}, "Invalid value shred for configuration log.cleanup.policy:"),
    ({"log.cleaner.min.compaction.lag.ms": "9", "log.cleaner.max.compaction.lag.ms": "3"},
     "Invalid value 9 for configuration log.cleaner.min.compaction.lag.ms: must be <="),
])
def test_validation_refuses_with_kafkas_message(configs, message):
    with pytest.raises(DynamicConfigError) as e:
        validate_dynamic_configs(configs)
    assert str(e.value).startswith(message)


def test_validation_accepts_live_keys_and_deletions():
    assert validate_dynamic_configs({"log.retention.ms": "1000", "message.max.bytes": "2000"}) == {
        "log.retention.ms": "1000", "message.max.bytes": "2000"}
    assert validate_dynamic_configs({"log.retention.ms": None}) == {}


def test_controller_checks_the_resource_after_the_change():
    manager = ConfigurationControlManager(ControllerSettings(), None, validate_dynamic_configs)
    image = replay_all([config_record("", "log.cleaner.max.compaction.lag.ms", "100")])
    # the stored max is checked together with the new min
    with pytest.raises(MetadataError) as e:
        manager.alter_config_change(image, ConfigChange(BROKER, "", {"log.cleaner.min.compaction.lag.ms": "500"}))
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    records, _ = manager.alter_config_change(image, ConfigChange(BROKER, "", {"log.cleaner.min.compaction.lag.ms": "50"}))
    assert [(r.resource_name, r.name, r.value) for r in records] == [("", "log.cleaner.min.compaction.lag.ms", "50")]
    # a deletion is never refused; a node that never registered can be configured (as in Kafka)
    records, _ = manager.alter_config_change(image, ConfigChange(BROKER, "7", {"message.max.bytes": "10"}))
    assert [(r.resource_name, r.name, r.value) for r in records] == [("7", "message.max.bytes", "10")]
    records, _ = manager.alter_config_change(image, ConfigChange(BROKER, "", {"log.cleaner.max.compaction.lag.ms": None}))
    assert [(r.name, r.value) for r in records] == [("log.cleaner.max.compaction.lag.ms", None)]
    with pytest.raises(MetadataError) as e:
        manager.alter_config_change(image, ConfigChange(BROKER, "one", {"message.max.bytes": "10"}))
    assert e.value.error_code == ErrorCode.INVALID_REQUEST
    with pytest.raises(MetadataError) as e:
        manager.alter_config_change(image, ConfigChange(BROKER, "1", {"num.io.threads": "4"}))
    assert e.value.error_code == ErrorCode.INVALID_REQUEST and "[num.io.threads]" in e.value.message


def test_the_node_controller_is_built_with_the_check():
    cfg = load_config(None, [], {})
    controller = new_controller(cfg)
    assert controller.validate_broker_configs is validate_dynamic_configs and is_built_from(controller, cfg)


def test_a_broker_config_record_changes_every_topic():
    image = image_with_topics()
    delta = MetadataDelta(image)
    delta.replay(config_record("", "log.retention.ms", "5"))
    assert delta.changed_topic_ids == {T1, T2}
    after = delta.apply()
    assert after.broker_configs() == {"log.retention.ms": "5"} and after.broker_configs(1) == {}
    delta = MetadataDelta(after)
    delta.replay(config_record("", "log.retention.ms", None))
    assert delta.apply().configs.get((BROKER, "")) is None


def test_effective_config_layers_node_over_cluster_over_static():
    static = load_config(None, ["log.retention.hours=1", "message.max.bytes=500"], {})
    assert effective_config(static, {}, {}) is static
    both = effective_config(static, {"message.max.bytes": "600", "log.retention.ms": "7"}, {"message.max.bytes": "700"})
    assert both.message_max_bytes == 700 and both.log_retention_ms_effective == 7
    cluster = effective_config(static, {"message.max.bytes": "600"}, {})
    assert cluster.message_max_bytes == 600 and cluster.log_retention_ms_effective == 3_600_000
    # a dynamic value that cannot stand with this broker's static settings is left out, not fatal
    strict = load_config(None, ["log.cleaner.max.compaction.lag.ms=100"], {})
    kept = effective_config(strict, {"log.cleaner.min.compaction.lag.ms": "500", "message.max.bytes": "9"}, {})
    assert kept.log_cleaner_min_compaction_lag_ms == 0 and kept.message_max_bytes == 9
    # a key that is not live (a record no Odradek controller writes) is ignored
    assert effective_config(static, {"num.io.threads": "3"}, {}) is static


def test_topic_settings_and_describe_follow_the_image():
    static = load_config(None, ["node.id=1", "min.insync.replicas=1"], {})
    dynamic = DynamicBrokerConfig(static)
    image = replay_all([config_record("", "min.insync.replicas", "2"), config_record("1", "log.segment.bytes", "1048576"),
                        config_record("2", "log.segment.bytes", "2097152")], image_with_topics())
    log_config, min_isr = topic_settings(dynamic)(image, "a")
    assert min_isr == 2 and log_config.segment_bytes == 1048576
    layers = dynamic.layers(image)
    assert dynamic.layers(image) is layers  # cached while the image's config layers are the same
    (mir,) = describe_broker(layers, ["min.insync.replicas"])
    assert (mir.value, mir.source, mir.read_only) == ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
    assert [(s.value, s.source) for s in mir.synonyms] == [
        ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG), ("1", ConfigSource.STATIC_BROKER_CONFIG),
        ("1", ConfigSource.DEFAULT_CONFIG)]
    (segment,) = describe_topic({}, layers, ["segment.bytes"])
    assert (segment.value, segment.source) == ("1048576", ConfigSource.DYNAMIC_BROKER_CONFIG)


def test_each_change_is_counted_once():
    static = load_config(None, ["node.id=1"], {})
    dynamic = DynamicBrokerConfig(static)
    before = image_with_topics()
    after = replay_all([config_record("", "message.max.bytes", "10"), config_record("2", "message.max.bytes", "20")], before)
    dynamic.on_metadata_update(MetadataUpdate(before, after, frozenset()))
    assert dynamic.changes_applied == 1  # node 2's value is not this node's
    assert dynamic.current(after).message_max_bytes == 10


def test_metrics_count_the_configs_and_changes():
    from prometheus_client import CollectorRegistry

    from odradek.broker.dynamic_config import DynamicConfigCollector

    dynamic = DynamicBrokerConfig(load_config(None, ["node.id=2"], {}))
    before = image_with_topics()
    after = replay_all([config_record("", "message.max.bytes", "10"), config_record("2", "log.retention.ms", "5"),
                        config_record("2", "message.max.bytes", "20")], before)
    dynamic.on_metadata_update(MetadataUpdate(before, after, frozenset()))
    registry = CollectorRegistry()
    registry.register(DynamicConfigCollector(dynamic, lambda: after))
    assert registry.get_sample_value("odradek_dynamic_broker_configs", {"scope": "broker"}) == 2
    assert registry.get_sample_value("odradek_dynamic_broker_configs", {"scope": "cluster-default"}) == 1
    assert registry.get_sample_value("odradek_dynamic_broker_config_changes_total") == 3


def test_a_broker_key_set_to_its_value_is_written_again_as_kafka_does():
    manager = ConfigurationControlManager(ControllerSettings(), None, validate_dynamic_configs)
    image = replay_all([config_record("", "min.insync.replicas", "2")])
    records, _ = manager.alter_config_change(image, ConfigChange(BROKER, "", {"min.insync.replicas": "2"}))
    assert [(r.name, r.value) for r in records] == [("min.insync.replicas", "2")]
    records, _ = manager.alter_config_change(image, ConfigChange(BROKER, "", {"log.retention.ms": None}))
    assert records == []  # deleting what is not set writes nothing
