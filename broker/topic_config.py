"""Topic-level configs (what CreateTopics, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
speak of) and the DescribeConfigs view of broker resources.

Each topic config has a Kafka type, Kafka's own default, a validator, a one-line description, and the
broker properties that supply its default ("synonyms", most specific first: `retention.ms` takes
`log.retention.ms`, else `log.retention.minutes`, else `log.retention.hours`). A topic's *effective*
config is therefore: its own override if it has one, else the broker's value, else Kafka's default.

DescribeConfigs reports where each value comes from with Kafka's ConfigSource numbers and synonyms, built
as Kafka builds them (see "DescribeConfigs" below): DYNAMIC_TOPIC_CONFIG for a topic override,
DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG for a dynamic broker config of this node / of the
cluster (broker/dynamic_config.py), STATIC_BROKER_CONFIG when server.properties (or env, or an override) set
the broker property, DEFAULT_CONFIG otherwise.

The storage layer's `LogConfig` uses snake_case names (`retention_ms`); `to_log_config_kwargs` maps an
effective config onto them without importing storage.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import (
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    INT64_MAX,
    MIN_INDEX_BYTES,
    MIN_SEGMENT_BYTES,
    TIMESTAMP_TYPES,
    BrokerConfig,
    ConfigError,
    ConfigType,
    broker_config_keys,
    broker_default,
    parse_bool,
    parse_double,
    parse_int32,
    parse_int64,
    parse_list,
    render_value,
)

__all__ = [
    "ConfigType",
    "ConfigSource",
    "ConfigResourceType",
    "ConfigSynonym",
    "ConfigEntry",
    "BrokerLayers",
    "TopicConfigDef",
    "TOPIC_CONFIGS",
    "validate_topic_configs",
    "effective_topic_configs",
    "describe",
    "describe_topic",
    "describe_broker",
    "describe_broker_defaults",
    "DYNAMIC_BROKER_CONFIGS",
    "to_log_config_kwargs",
]


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type as sent in `resource_type`."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One DescribeConfigs result entry, in Kafka's field names."""

    name: str
    value: str | None
    read_only: bool
    source: ConfigSource
    is_sensitive: bool
    type: ConfigType
    documentation: str
    synonyms: tuple[ConfigSynonym, ...] = ()

    @property
    def is_default(self) -> bool:
        """DescribeConfigs v0's `is_default`."""
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class BrokerLayers:
    """One broker's configuration as DescribeConfigs speaks of it (broker/dynamic_config.py): the static
    config, the dynamic layers over it, and the effective result of all of them."""

    static: BrokerConfig
    effective: BrokerConfig
    per_broker: Mapping[str, str] = field(default_factory=dict)  # DYNAMIC_BROKER_CONFIG
    cluster_default: Mapping[str, str] = field(default_factory=dict)  # DYNAMIC_DEFAULT_BROKER_CONFIG

    @classmethod
    def of(cls, config: BrokerConfig) -> BrokerLayers:
        """A broker with no dynamic configs."""
        return cls(config, config)


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: ConfigType
    default: Any
    parse: Callable[[Any], Any]  # raw text (or typed value) -> parsed value; ValueError(reason) if invalid
    doc: str
    synonyms: tuple[str, ...] = ()  # broker properties supplying the default, most specific first
    broker_value: Callable[[BrokerConfig], Any] | None = field(default=None)  # when not a plain synonym

    def default_from(self, broker: BrokerConfig) -> Any:
        if self.broker_value is not None:
            return self.broker_value(broker)
        if self.synonyms:
            return broker.get(self.synonyms[0])
        return self.default


# ---- validators


def _int(lo: int | None = None, hi: int | None = None, *, long: bool = False) -> Callable[[Any], int]:
    base = parse_int64 if long else parse_int32

    def parse(value: Any) -> int:
        number = base(value)
        if lo is not None and number < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and number > hi:
            raise ValueError(f"must be <= {hi}")
        return number

    return parse


def _long(lo: int | None = None, hi: int | None = None) -> Callable[[Any], int]:
    return _int(lo, hi, long=True)


def _ratio(value: Any) -> float:
    number = parse_double(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError("must be between 0 and 1")
    return number


def _one_of(*allowed: str, case_sensitive: bool = True) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip()
        for option in allowed:
            if text == option or (not case_sensitive and text.lower() == option.lower()):
                return option
        raise ValueError(f"must be one of: {', '.join(allowed)}")

    return parse


def _cleanup_policy(value: Any) -> tuple[str, ...]:
    # Kafka's ValidList.in("compact", "delete") checks each item and so lets an empty list through: the
    # value IncrementalAlterConfigs SUBTRACT leaves when it removes the only policy (Kafka 4.2 keeps that
    # explicitly, KAFKA-19112: no deletion, no compaction).
    items = tuple(item.lower() for item in parse_list(value))
    if any(item not in CLEANUP_POLICIES for item in items):
        raise ValueError(f"each item must be one of: {', '.join(CLEANUP_POLICIES)}")
    return tuple(dict.fromkeys(items))


def _gzip_level(value: Any) -> int:
    number = parse_int32(value)
    if number != -1 and not 1 <= number <= 9:
        raise ValueError("must be -1 or 1..9")
    return number


def _throttled_replicas(value: Any) -> tuple[str, ...]:
    # "*" or partition:broker pairs, as kafka-reassign-partitions writes them. Accepted, not acted on.
    items = parse_list(value)
    if items == ("*",):
        return items
    for item in items:
        partition, sep, broker = item.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ValueError("must be * or a list of partition:broker pairs")
    return items


_MS_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
_MS_ROLL = ("log.roll.ms", "log.roll.hours")
_MS_JITTER = ("log.roll.jitter.ms", "log.roll.jitter.hours")
_MS_FLUSH = ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")

_DEFS = [
    TopicConfigDef(
        "cleanup.policy",
        ConfigType.LIST,
        ("delete",),
        _cleanup_policy,
        "delete old segments, compact to the latest value per key, or both.",
        ("log.cleanup.policy",),
    ),
    TopicConfigDef(
        "compression.type",
        ConfigType.STRING,
        "producer",
        _one_of(*COMPRESSION_TYPES, case_sensitive=False),
        "Codec of stored batches; 'producer' keeps what the producer sent.",
        ("compression.type",),
    ),
    TopicConfigDef(
        "compression.gzip.level",
        ConfigType.INT,
        -1,
        _gzip_level,
        "gzip level when compression.type is gzip.",
        ("compression.gzip.level",),
    ),
    TopicConfigDef(
        "compression.lz4.level",
        ConfigType.INT,
        9,
        _int(1, 17),
        "lz4 level when compression.type is lz4.",
        ("compression.lz4.level",),
    ),
    TopicConfigDef(
        "compression.zstd.level",
        ConfigType.INT,
        3,
        _int(-131072, 22),
        "zstd level when compression.type is zstd.",
        ("compression.zstd.level",),
    ),
    TopicConfigDef(
        "delete.retention.ms",
        ConfigType.LONG,
        86400000,
        _long(0),
        "How long a tombstone survives in a compacted topic.",
        ("log.cleaner.delete.retention.ms",),
    ),
    TopicConfigDef(
        # KIP-1191: the topic's owner lets share groups use it as their dead-letter queue (broker/share/dlq.py).
        "errors.deadletterqueue.group.enable",
        ConfigType.BOOLEAN,
        False,
        parse_bool,
        "Enable this topic to be used as a dead-letter queue for share groups.",
    ),
    TopicConfigDef(
        "file.delete.delay.ms",
        ConfigType.LONG,
        60000,
        _long(0),
        "Delay before a deleted segment's files are removed.",
        ("log.segment.delete.delay.ms",),
    ),
    TopicConfigDef(
        "flush.messages",
        ConfigType.LONG,
        INT64_MAX,
        _long(1),
        "Messages appended before the partition is fsynced.",
        ("log.flush.interval.messages",),
    ),
    TopicConfigDef(
        "flush.ms",
        ConfigType.LONG,
        INT64_MAX,
        _long(0),
        "Longest time appended data stays unflushed.",
        _MS_FLUSH,
        lambda b: b.log_flush_interval_ms_effective,
    ),
    TopicConfigDef(
        "follower.replication.throttled.replicas",
        ConfigType.LIST,
        (),
        _throttled_replicas,
        "Replicas throttled on the follower side (accepted, not enforced).",
    ),
    TopicConfigDef(
        "index.interval.bytes",
        ConfigType.INT,
        4096,
        _int(0),
        "Bytes between offset index entries.",
        ("log.index.interval.bytes",),
    ),
    TopicConfigDef(
        "leader.replication.throttled.replicas",
        ConfigType.LIST,
        (),
        _throttled_replicas,
        "Replicas throttled on the leader side (accepted, not enforced).",
    ),
    TopicConfigDef(
        "max.compaction.lag.ms",
        ConfigType.LONG,
        INT64_MAX,
        _long(1),
        "Longest a record may stay uncompacted.",
        ("log.cleaner.max.compaction.lag.ms",),
    ),
    TopicConfigDef(
        "max.message.bytes",
        ConfigType.INT,
        1048588,
        _int(0),
        "Largest record batch the topic accepts.",
        ("message.max.bytes",),
    ),
    TopicConfigDef(
        "message.timestamp.after.max.ms",
        ConfigType.LONG,
        3600000,
        _long(0),
        "How far ahead of the broker's clock a CreateTime timestamp may be.",
        ("log.message.timestamp.after.max.ms",),
    ),
    TopicConfigDef(
        "message.timestamp.before.max.ms",
        ConfigType.LONG,
        INT64_MAX,
        _long(0),
        "How far behind the broker's clock a CreateTime timestamp may be.",
        ("log.message.timestamp.before.max.ms",),
    ),
    TopicConfigDef(
        "message.timestamp.type",
        ConfigType.STRING,
        "CreateTime",
        _one_of(*TIMESTAMP_TYPES),
        "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's.",
        ("log.message.timestamp.type",),
    ),
    TopicConfigDef(
        "min.cleanable.dirty.ratio",
        ConfigType.DOUBLE,
        0.5,
        _ratio,
        "Dirty fraction of the log at which compaction starts.",
        ("log.cleaner.min.cleanable.ratio",),
    ),
    TopicConfigDef(
        "min.compaction.lag.ms",
        ConfigType.LONG,
        0,
        _long(0),
        "Youngest a record may be and still be compacted.",
        ("log.cleaner.min.compaction.lag.ms",),
    ),
    TopicConfigDef(
        "min.insync.replicas",
        ConfigType.INT,
        1,
        _int(1),
        "In-sync replicas an acks=all write needs.",
        ("min.insync.replicas",),
    ),
    TopicConfigDef(
        "preallocate",
        ConfigType.BOOLEAN,
        False,
        parse_bool,
        "Preallocate the file of a new segment.",
        ("log.preallocate",),
    ),
    TopicConfigDef(
        "retention.bytes",
        ConfigType.LONG,
        -1,
        _long(),
        "Most bytes kept per partition before old segments go; -1 means no limit.",
        ("log.retention.bytes",),
    ),
    TopicConfigDef(
        "retention.ms",
        ConfigType.LONG,
        604800000,
        _long(-1),
        "How long a segment is kept before deletion; -1 means forever.",
        _MS_RETENTION,
        lambda b: b.log_retention_ms_effective,
    ),
    TopicConfigDef(
        "segment.bytes",
        ConfigType.INT,
        1073741824,
        _int(MIN_SEGMENT_BYTES),
        "Size at which the active segment is rolled.",
        ("log.segment.bytes",),
    ),
    TopicConfigDef(
        "segment.index.bytes",
        ConfigType.INT,
        10485760,
        _int(MIN_INDEX_BYTES),
        "Size of a segment's offset index file.",
        ("log.index.size.max.bytes",),
    ),
    TopicConfigDef(
        "segment.jitter.ms",
        ConfigType.LONG,
        0,
        _long(0),
        "Most random jitter subtracted from segment.ms.",
        _MS_JITTER,
        lambda b: b.log_roll_jitter_ms_effective,
    ),
    TopicConfigDef(
        "segment.ms",
        ConfigType.LONG,
        604800000,
        _long(1),
        "Age at which the active segment is rolled even if not full.",
        _MS_ROLL,
        lambda b: b.log_roll_ms_effective,
    ),
    TopicConfigDef(
        "unclean.leader.election.enable",
        ConfigType.BOOLEAN,
        False,
        parse_bool,
        "Let an out-of-sync replica become leader, losing data.",
        ("unclean.leader.election.enable",),
    ),
]

TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in sorted(_DEFS, key=lambda d: d.name)}


# ---- validation and effective values


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Check topic config overrides, returning them parsed (`{"retention.ms": 1000}`).

    A None value (AlterConfigs' "remove the override") is kept as None. Raises ConfigError naming the
    key for an unknown name or an invalid value, and for min.compaction.lag.ms > max.compaction.lag.ms."""
    parsed: dict[str, Any] = {}
    for key, raw in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise ConfigError(f"unknown topic config {key!r}", key=key)
        if raw is None:
            parsed[key] = None
            continue
        try:
            parsed[key] = definition.parse(raw)
        except ValueError as exc:
            shown = raw if isinstance(raw, str) else render_value(raw)
            raise ConfigError(f"invalid value for {key!r}: {exc} (got {shown!r})", key=key) from None
    low, high = parsed.get("min.compaction.lag.ms"), parsed.get("max.compaction.lag.ms")
    if low is not None and high is not None and low > high:
        raise ConfigError(
            f"invalid value for 'min.compaction.lag.ms': must be <= max.compaction.lag.ms ({high})"
            f" (got '{low}')",
            key="min.compaction.lag.ms",
        )
    return parsed


def effective_topic_configs(overrides: Mapping[str, Any], broker: BrokerConfig) -> dict[str, Any]:
    """Every topic config's parsed value for a topic: its override, else the broker's default."""
    parsed = validate_topic_configs(overrides)
    result = {name: d.default_from(broker) for name, d in TOPIC_CONFIGS.items()}
    result.update({k: v for k, v in parsed.items() if v is not None})
    if result["min.compaction.lag.ms"] > result["max.compaction.lag.ms"]:
        raise ConfigError(
            "invalid value for 'min.compaction.lag.ms': must be <= max.compaction.lag.ms "
            f"({result['max.compaction.lag.ms']}) (got '{result['min.compaction.lag.ms']}')",
            key="min.compaction.lag.ms",
        )
    return result


def to_log_config_kwargs(effective: Mapping[str, Any], fields: Iterable[str] | None = None) -> dict[str, Any]:
    """`{"retention.ms": 1}` -> `{"retention_ms": 1}`, for storage's `LogConfig(**kwargs)`.

    List values become comma-joined text, `cleanup.policy` in canonical order ("delete", "compact" or
    "compact,delete"). With `fields` (e.g. the names of LogConfig's dataclass fields), keys LogConfig
    does not have are dropped."""
    result: dict[str, Any] = {}
    for key, value in effective.items():
        if key == "cleanup.policy" and isinstance(value, (tuple, list)):
            value = ",".join(sorted(set(value)))
        elif isinstance(value, (tuple, list)):
            value = ",".join(value)
        result[key.replace(".", "_")] = value
    if fields is not None:
        wanted = set(fields)
        result = {key: value for key, value in result.items() if key in wanted}
    return result


# ---- DescribeConfigs
#
# Kafka builds each entry's synonyms the same way for topic and broker resources (ConfigHelper.scala,
# configSynonyms): for the broker property behind the config and the properties that stand in for it
# (DynamicBrokerConfig.brokerConfigSynonyms: log.retention.ms, .minutes, .hours; log.roll.ms, .hours;
# log.roll.jitter.ms, .hours; log.flush.interval.ms, log.flush.scheduler.interval.ms), every one set in
# the broker's properties (STATIC_BROKER_CONFIG), then every one with a non-null default (DEFAULT_CONFIG),
# each group in that order; then it drops the leading synonyms until the first one named as the property
# itself. A topic override (DYNAMIC_TOPIC_CONFIG) goes first. Dynamic broker configs (broker/dynamic_config.py)
# come before the static ones: every one of the chain set for this node (DYNAMIC_BROKER_CONFIG), then every
# one set as the cluster-wide default (DYNAMIC_DEFAULT_BROKER_CONFIG); the cluster-default resource ("")
# lists no DYNAMIC_BROKER_CONFIG synonym. The entry's config_source is the first synonym's source,
# DEFAULT_CONFIG when none is left. (So with only log.retention.hours set, retention.ms reports
# DEFAULT_CONFIG and no synonyms, as Kafka does.)

_BROKER_SYNONYMS = {key: chain for chain in (_MS_RETENTION, _MS_ROLL, _MS_JITTER) for key in chain}
_BROKER_SYNONYMS[_MS_FLUSH[0]] = _MS_FLUSH


def broker_synonym_chain(key: str) -> tuple[str, ...]:
    """DynamicBrokerConfig.brokerConfigSynonyms (listener-prefixed overrides aside)."""
    return _BROKER_SYNONYMS.get(key, (key,))


# The broker properties that change at run time (Kafka's DynamicLogConfig.ReconfigurableConfigs): each
# topic config's first broker synonym. broker/dynamic_config.py says why no other.
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(d.synonyms[0] for d in _DEFS if d.synonyms)


def _layers(broker: BrokerConfig | BrokerLayers) -> BrokerLayers:
    return broker if isinstance(broker, BrokerLayers) else BrokerLayers.of(broker)


def broker_synonyms(broker: BrokerConfig | BrokerLayers, key: str, *, per_broker: bool = True) -> list[ConfigSynonym]:
    """Kafka's configSynonyms(key, brokerConfigSynonyms(key)) for this broker's configuration (static, or
    static with its dynamic layers); `per_broker` False for the cluster-default resource."""
    layers = _layers(broker)
    chain = broker_synonym_chain(key)
    found: list[ConfigSynonym] = []
    if per_broker:
        found += [ConfigSynonym(k, layers.per_broker[k], ConfigSource.DYNAMIC_BROKER_CONFIG)
                  for k in chain if k in layers.per_broker]
    found += [ConfigSynonym(k, layers.cluster_default[k], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
              for k in chain if k in layers.cluster_default]
    static = layers.static
    explicit = static.explicit_keys
    found += [ConfigSynonym(k, render_value(static.get(k)), ConfigSource.STATIC_BROKER_CONFIG)
              for k in chain if k in explicit]
    for k in chain:
        default = broker_default(k)
        if default is not None:
            found.append(ConfigSynonym(k, default, ConfigSource.DEFAULT_CONFIG))
    while found and found[0].name != key:
        found.pop(0)
    return found


def describe_topic(
    topic_overrides: Mapping[str, Any], broker: BrokerConfig | BrokerLayers, keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries for a TOPIC resource, sorted by name. `keys` (the request's
    configuration_keys) restricts the answer; unknown names are left out, as Kafka does. A value not
    overridden is the broker's effective default (a dynamic broker config, if one is set)."""
    layers = _layers(broker)
    wanted = None if keys is None else set(keys)
    overrides = {k: v for k, v in validate_topic_configs(topic_overrides).items() if v is not None}
    entries = []
    for name, definition in TOPIC_CONFIGS.items():
        if wanted is not None and name not in wanted:
            continue
        synonyms = broker_synonyms(layers, definition.synonyms[0]) if definition.synonyms else []
        if name in overrides:
            value = render_value(overrides[name])
            synonyms.insert(0, ConfigSynonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        elif synonyms and synonyms[0].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG:
            value = synonyms[0].value
        else:
            value = render_value(definition.default_from(layers.effective))
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                read_only=False,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                is_sensitive=False,
                type=definition.type,
                documentation=definition.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


# The brief's name for the topic describe.
describe = describe_topic


def describe_broker(broker: BrokerConfig | BrokerLayers, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs entries for a BROKER resource naming this node (ConfigHelper.createBrokerConfigEntry):
    every property with its effective value, source and synonyms as above; read-only unless Odradek changes
    it at run time (DYNAMIC_BROKER_CONFIGS: Kafka marks its dynamically updatable ones read_only=false, and
    Odradek does not mark what it would refuse)."""
    layers = _layers(broker)
    wanted = None if keys is None else set(keys)
    entries = []
    for key, ktype, doc in sorted(broker_config_keys()):
        if wanted is not None and key not in wanted:
            continue
        synonyms = broker_synonyms(layers, key)
        value = render_value(layers.effective.get(key))
        if key == "broker.id" and value is None:
            value, synonyms = _broker_id_from_node_id(layers)
        entries.append(
            ConfigEntry(
                name=key,
                value=value,
                read_only=key not in DYNAMIC_BROKER_CONFIGS,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                is_sensitive=False,
                type=ktype,
                documentation=doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def _broker_id_from_node_id(layers: BrokerLayers) -> tuple[str | None, list[ConfigSynonym]]:
    """broker.id when only node.id is set: Kafka copies node.id into broker.id as it loads server.properties,
    so its DescribeConfigs shows broker.id = node.id from node.id's source, over broker.id's own default -1
    (seen side by side with Kafka 4.4: tests/integration/test_kafka_differential.py). Odradek keeps broker.id
    unset (it is only checked against node.id) and describes it as Kafka does."""
    node_id = render_value(layers.effective.get("node.id"))
    source = next((s.source for s in broker_synonyms(layers, "node.id")), ConfigSource.DEFAULT_CONFIG)
    synonyms = [ConfigSynonym("broker.id", node_id, source)]
    if source != ConfigSource.DEFAULT_CONFIG:
        synonyms.append(ConfigSynonym("broker.id", "-1", ConfigSource.DEFAULT_CONFIG))
    return node_id, synonyms


def describe_broker_defaults(layers: BrokerLayers, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """DescribeConfigs entries for the cluster-default BROKER resource (""): the dynamic cluster-wide
    defaults only, each with its own value, as Kafka answers (createResponseConfig over
    currentDynamicDefaultConfigs, perBrokerConfig=false: no DYNAMIC_BROKER_CONFIG synonym)."""
    wanted = None if keys is None else set(keys)
    types = {key: (ktype, doc) for key, ktype, doc in broker_config_keys()}
    entries = []
    for key in sorted(layers.cluster_default):
        if (wanted is not None and key not in wanted) or key not in types:
            continue
        ktype, doc = types[key]
        synonyms = broker_synonyms(layers, key, per_broker=False)
        entries.append(
            ConfigEntry(
                name=key,
                value=layers.cluster_default[key],
                read_only=key not in DYNAMIC_BROKER_CONFIGS,
                source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                is_sensitive=False,
                type=ktype,
                documentation=doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries
