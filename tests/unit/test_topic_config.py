"""Topic configs: validation, broker-supplied defaults, DescribeConfigs entries, storage mapping."""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError, load_config
from odradek.broker.topic_config import (
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    describe,
    describe_broker,
    effective_topic_configs,
    to_log_config_kwargs,
    validate_topic_configs,
)


def by_name(entries):
    return {entry.name: entry for entry in entries}


def test_kafka_numbers():
    assert [ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG] == [
        1,
        2,
        3,
        4,
        5,
    ]
    assert [ConfigType.DOUBLE, ConfigType.LIST, ConfigType.CLASS, ConfigType.PASSWORD] == [6, 7, 8, 9]
    assert ConfigSource.DYNAMIC_TOPIC_CONFIG == 1
    assert ConfigSource.STATIC_BROKER_CONFIG == 4
    assert ConfigSource.DEFAULT_CONFIG == 5


def test_definitions_are_complete():
    for name in [
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "segment.index.bytes",
        "segment.jitter.ms",
        "cleanup.policy",
        "max.message.bytes",
        "message.timestamp.type",
        "min.insync.replicas",
        "compression.type",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "index.interval.bytes",
        "flush.messages",
        "flush.ms",
        "file.delete.delay.ms",
        "unclean.leader.election.enable",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "preallocate",
    ]:
        assert name in TOPIC_CONFIGS, name
    broker = BrokerConfig()
    for definition in TOPIC_CONFIGS.values():
        assert definition.doc
        for synonym in definition.synonyms:
            broker.get(synonym)  # every synonym is a real broker key
        # Kafka's default parses through the validator and equals what a default broker supplies.
        assert definition.default_from(broker) == definition.default, definition.name


def test_validate_parses_values():
    parsed = validate_topic_configs(
        {
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "unclean.leader.election.enable": "TRUE",
            "compression.type": "lz4",
            "segment.bytes": "1048576",
            "max.message.bytes": None,
        }
    )
    assert parsed == {
        "retention.ms": 1000,
        "cleanup.policy": ("compact", "delete"),
        "min.cleanable.dirty.ratio": 0.1,
        "unclean.leader.election.enable": True,
        "compression.type": "lz4",
        "segment.bytes": 1048576,
        "max.message.bytes": None,
    }


@pytest.mark.parametrize(
    "key, value, reason",
    [
        ("retention.ms", "-2", ">= -1"),
        ("retention.ms", "soon", "integer"),
        ("segment.bytes", "0", ">= 64"),
        ("cleanup.policy", "shred", "compact"),
        ("compression.type", "brotli", "zstd"),
        ("min.cleanable.dirty.ratio", "2", "between 0 and 1"),
        ("min.insync.replicas", "0", ">= 1"),
        ("message.timestamp.type", "WallClock", "CreateTime"),
        ("preallocate", "maybe", "true or false"),
        ("max.message.bytes", "9999999999", "32-bit"),
        ("compression.gzip.level", "10", "-1 or 1..9"),
        ("leader.replication.throttled.replicas", "x", "partition:broker"),
    ],
)
def test_validate_refuses(key, value, reason):
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({key: value})
    assert info.value.key == key
    assert f"invalid value for '{key}'" in str(info.value)
    assert f"(got '{value}')" in str(info.value)
    assert reason in str(info.value)


def test_unknown_topic_config():
    with pytest.raises(ConfigError, match="unknown topic config 'retention.days'") as info:
        validate_topic_configs({"retention.days": "1"})
    assert info.value.key == "retention.days"


def test_compaction_lags_must_be_ordered():
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    broker = load_config(None, ["log.cleaner.max.compaction.lag.ms=100"], {})
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        effective_topic_configs({"min.compaction.lag.ms": "1000"}, broker)


def test_effective_uses_broker_defaults_then_overrides():
    broker = load_config(
        None,
        [
            "log.retention.hours=1",
            "log.segment.bytes=2048",
            "log.cleanup.policy=compact",
            "message.max.bytes=500",
        ],
        {},
    )
    effective = effective_topic_configs({"segment.bytes": "4096"}, broker)
    assert effective["retention.ms"] == 3600000
    assert effective["segment.bytes"] == 4096
    assert effective["cleanup.policy"] == ("compact",)
    assert effective["max.message.bytes"] == 500
    assert effective["segment.ms"] == 168 * 3600000
    assert set(effective) == set(TOPIC_CONFIGS)


def test_to_log_config_kwargs():
    effective = effective_topic_configs({}, BrokerConfig())
    kwargs = to_log_config_kwargs(effective)
    assert kwargs["retention_ms"] == 604800000
    assert kwargs["segment_bytes"] == 1073741824
    assert kwargs["min_cleanable_dirty_ratio"] == 0.5
    assert all("." not in key for key in kwargs)
    assert kwargs["cleanup_policy"] == "delete"
    both = effective_topic_configs({"cleanup.policy": "delete,compact"}, BrokerConfig())
    assert to_log_config_kwargs(both)["cleanup_policy"] == "compact,delete"
    assert to_log_config_kwargs(effective, fields=["retention_ms", "segment_ms", "not_a_config"]) == {
        "retention_ms": 604800000,
        "segment_ms": 604800000,
    }


def test_describe_sources():
    broker = load_config(None, ["log.retention.hours=24"], {})
    entries = by_name(describe({"segment.bytes": "4096"}, broker))
    assert set(entries) == set(TOPIC_CONFIGS)

    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.read_only, seg.is_sensitive) == (
        "4096",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        False,
        False,
    )
    assert seg.type == ConfigType.INT
    assert (
        seg.synonyms[0].name == "segment.bytes"
        and seg.synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    )
    assert (
        seg.synonyms[1].name == "log.segment.bytes" and seg.synonyms[1].source == ConfigSource.DEFAULT_CONFIG
    )
    assert not seg.is_default

    # Kafka's ConfigHelper.configSynonyms drops the synonyms before the first one named log.retention.ms:
    # with only log.retention.hours set, retention.ms reports its value from it but DEFAULT_CONFIG and none.
    ret = entries["retention.ms"]
    assert (ret.value, ret.source, ret.type, ret.synonyms) == (
        str(24 * 3600000), ConfigSource.DEFAULT_CONFIG, ConfigType.LONG, ())

    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.type) == (
        "delete",
        ConfigSource.DEFAULT_CONFIG,
        ConfigType.LIST,
    )
    assert policy.is_default
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["preallocate"].value == "false"
    assert entries["leader.replication.throttled.replicas"].value == ""


def test_describe_synonyms_as_kafka_builds_them():
    """ConfigHelper.configSynonyms (Kafka 3.x/4.x): static settings of the broker property and its stand-ins
    (log.retention.ms, .minutes, .hours) first, then their non-null defaults, then the leading ones not
    named as the property dropped; config_source is the first synonym's."""
    broker = load_config(None, ["log.retention.ms=5000", "log.retention.hours=24", "log.cleanup.policy=compact"], {})
    entries = by_name(describe({"cleanup.policy": "delete"}, broker))
    ret = entries["retention.ms"]
    assert (ret.value, ret.source) == ("5000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in ret.synonyms] == [
        ("log.retention.ms", "5000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in policy.synonyms] == [
        ("cleanup.policy", "delete", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.cleanup.policy", "compact", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
    ]
    # Nothing set anywhere: log.retention.ms has no default (null), so no synonym survives the drop.
    plain = by_name(describe({}, BrokerConfig()))
    assert (plain["retention.ms"].source, plain["retention.ms"].synonyms) == (ConfigSource.DEFAULT_CONFIG, ())
    assert [(s.name, s.source) for s in plain["segment.bytes"].synonyms] == [("log.segment.bytes", ConfigSource.DEFAULT_CONFIG)]
    nodes = by_name(describe_broker(broker))
    assert [(s.name, s.value, s.source) for s in nodes["log.retention.hours"].synonyms] == [
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert nodes["log.retention.minutes"].synonyms == () and nodes["log.retention.minutes"].is_default
    assert nodes["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert [s.name for s in nodes["log.retention.ms"].synonyms] == ["log.retention.ms", "log.retention.hours",
                                                                      "log.retention.hours"]


def test_describe_selected_keys():
    entries = describe({}, BrokerConfig(), keys=["retention.ms", "no.such.key"])
    assert [entry.name for entry in entries] == ["retention.ms"]


def test_describe_broker():
    broker = load_config(None, ["num.partitions=3"], {})
    entries = by_name(describe_broker(broker))
    assert entries["num.partitions"].value == "3"
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].type == ConfigType.INT
    assert entries["log.retention.ms"].value is None
    assert entries["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG
    assert entries["log.retention.ms"].synonyms == ()  # a null default is no synonym (staticDefaultConfigs)
    assert [(s.value, s.source) for s in entries["num.partitions"].synonyms] == [
        ("3", ConfigSource.STATIC_BROKER_CONFIG), ("1", ConfigSource.DEFAULT_CONFIG)]
    assert entries["listeners"].value == "PLAINTEXT://localhost:9092"
    assert entries["auto.create.topics.enable"].type == ConfigType.BOOLEAN
    assert all(not entry.is_sensitive and entry.documentation for entry in entries.values())
    # read-only unless Odradek changes it at run time (dynamic broker configs: the topic configs' defaults)
    assert {name for name, entry in entries.items() if not entry.read_only} == DYNAMIC_BROKER_CONFIGS
    assert entries["num.partitions"].read_only and not entries["log.retention.ms"].read_only
    assert [e.name for e in describe_broker(broker, keys=["log.dirs"])] == ["log.dirs"]


def test_describe_broker_id_copies_node_id():
    """Kafka copies node.id into broker.id when loading its config: broker.id describes as node.id, from
    node.id's source, over its own default -1 (as Kafka 4.4 answers, tests/integration/test_kafka_differential.py)."""
    entry = by_name(describe_broker(load_config(None, ["node.id=7"], {})))["broker.id"]
    assert (entry.value, entry.source) == ("7", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("broker.id", "7", ConfigSource.STATIC_BROKER_CONFIG), ("broker.id", "-1", ConfigSource.DEFAULT_CONFIG)]
    both = by_name(describe_broker(load_config(None, ["node.id=7", "broker.id=7"], {})))["broker.id"]
    assert (both.value, both.source) == ("7", ConfigSource.STATIC_BROKER_CONFIG)


def test_storage_log_config_accepts_the_mapping():
    # The storage layer's LogConfig is the consumer of to_log_config_kwargs; skip while it is absent.
    storage = pytest.importorskip("odradek.storage.config")
    import dataclasses

    names = [f.name for f in dataclasses.fields(storage.LogConfig)]
    broker = load_config(None, ["log.segment.bytes=64", "log.index.size.max.bytes=12"], {})
    effective = effective_topic_configs({"cleanup.policy": "compact,delete", "retention.ms": "-1"}, broker)
    config = storage.LogConfig(**to_log_config_kwargs(effective, fields=names))
    assert config.segment_bytes == 64 and config.retention_ms == -1
    assert config.compact and config.delete
