"""Dynamic broker configs (Kafka's DynamicBrokerConfig): broker properties changed at run time, cluster-wide
or for one node, through (Incremental)AlterConfigs on a BROKER resource, as `kafka-configs.sh --entity-type
brokers` sends them.

Theory of operation
-------------------
A dynamic broker config is a ConfigRecord in the metadata log: resource type BROKER (4), resource name the
node id ("2") for one broker, or "" for the cluster-wide default every broker takes. Being metadata, it is
replicated to every node, survives restarts, and reaches each broker the way every committed change does:
through the metadata publisher (metadata/publisher.py). Nothing is written to server.properties.

Each broker's *effective* configuration is four layers, the first that sets a key winning (Kafka's order,
the same as DescribeConfigs' synonyms list them):

    DYNAMIC_BROKER_CONFIG (BROKER "<this node>")  >  DYNAMIC_DEFAULT_BROKER_CONFIG (BROKER "")
        >  STATIC_BROKER_CONFIG (server.properties, ODRADEK_* environment, --override)  >  DEFAULT_CONFIG

`DynamicBrokerConfig.current(image)` builds it by re-parsing the static keys with the dynamic ones laid over
them through the very parsers the start-up uses (`BrokerConfig.from_properties`), so a dynamic value means
exactly what the same line in server.properties would. The result is cached per image (the image's config
mappings are copied on write, so an unchanged identity means an unchanged layer).

Which keys may change: only those Odradek applies without a restart (`LIVE_CONFIGS`). They are Kafka's
DynamicLogConfig set: the broker defaults of topic configs, each named by its first synonym in Kafka's
ServerTopicConfigSynonyms (`log.retention.ms`, `log.segment.bytes`, `message.max.bytes`,
`min.insync.replicas`, `log.cleanup.policy`, `compression.type`, ...; `log.retention.hours` is a static
synonym only, as in Kafka). A topic without its own override takes the new default: when a BROKER
ConfigRecord is replayed the image marks every topic changed (metadata/image.py), so the replica manager
hands every open log its recomputed LogConfig and every partition its min.insync.replicas
(replication/hosting.py), the same road a topic's own config change takes. `unclean.leader.election.enable`
is read by the controller from the cluster-wide default.

Kafka also changes thread pools, cleaner throughput, connection limits, listeners and TLS keystores at run
time; Odradek reads those once, at start (KAFKA_ONLY_DYNAMIC). Accepting them would store a value the broker
does not act on, so they are refused with Kafka's own refusal for a static key, "Cannot update these configs
dynamically: [num.io.threads]", plus why and what to do; every other known key is refused with Kafka's
message alone. Kafka lets an unknown (custom) key be stored for plugins; Odradek has no plugins, so an unknown
key is refused as it is in server.properties. The error code is INVALID_REQUEST for all of these, bad values
included, as Kafka's broker answers (ConfigAdminManager; KAFKA-13609 keeps INVALID_REQUEST for
compatibility).

How it meets the controller's own cluster default: on activation with ELR the controller writes
`min.insync.replicas` as a BROKER "" ConfigRecord; it is one more cluster-wide default here, applied to
topics and described as DYNAMIC_DEFAULT_BROKER_CONFIG like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from odradek.metadata.image import MetadataImage
from odradek.metadata.publisher import MetadataUpdate
from odradek.metadata.records import ConfigResourceType

from .config import BrokerConfig, ConfigError, ConfigType, broker_config_keys
from .topic_config import DYNAMIC_BROKER_CONFIGS, BrokerLayers

log = structlog.get_logger("odradek.dynamic_config")

__all__ = [
    "LIVE_CONFIGS",
    "KAFKA_ONLY_DYNAMIC",
    "DynamicConfigError",
    "BrokerLayers",
    "DynamicBrokerConfig",
    "validate_dynamic_configs",
    "effective_config",
    "DynamicConfigCollector",
]

# Kafka's DynamicLogConfig.ReconfigurableConfigs as far as Odradek has the topic config: each topic config's
# first broker synonym (kept with the topic configs, whose DescribeConfigs view marks them not read-only).
LIVE_CONFIGS: frozenset[str] = DYNAMIC_BROKER_CONFIGS

# Keys Kafka changes at run time (DynamicBrokerConfig.AllDynamicConfigs: the cleaner, thread pools, metric
# reporters, listeners and their security, connection quotas, producer state) that Odradek reads at start.
KAFKA_ONLY_DYNAMIC: frozenset[str] = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
    "num.io.threads", "num.network.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
    "background.threads", "metric.reporters",
    "listeners", "advertised.listeners", "listener.security.protocol.map",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate",
    "producer.id.expiration.ms", "transaction.partition.verification.enable",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.protocol", "ssl.enabled.protocols",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.client.auth",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
    # Broker quotas (QuotaConfig.brokerQuotaConfigs), set by kafka-reassign-partitions --throttle.
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})

_TYPES: dict[str, ConfigType] = {key: ktype for key, ktype, _doc in broker_config_keys()}


class DynamicConfigError(ValueError):
    """A dynamic broker config change refused; `key` names the (first) key at fault."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def config_type(key: str) -> ConfigType | None:
    """The broker property's Kafka type; None for a key that is no broker property."""
    return _TYPES.get(key)


def _key_set(keys: Iterable[str]) -> str:
    """The keys as Kafka 4.4's message renders its Java Set: `[a, b]` (Kafka 3.x, in Scala, wrote `Set(a, b)`;
    seen side by side in tests/integration/test_kafka_differential.py)."""
    return f"[{', '.join(sorted(keys))}]"


def validate_dynamic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check a dynamic broker config set (name -> value; a None value, a deletion, is only name-checked):
    every key live-changeable and every value what the start-up would accept, alone and together (as
    `log.cleaner.min.compaction.lag.ms` <= `.max.`). Returns the values set, in Kafka's text form as given.
    Raises DynamicConfigError with Kafka's message."""
    listener_keys = sorted(k for k in configs if k.startswith("listener.name."))
    kafka_dynamic = sorted(k for k in configs if k in KAFKA_ONLY_DYNAMIC) + listener_keys
    if kafka_dynamic:
        raise DynamicConfigError(
            f"Cannot update these configs dynamically: {_key_set(kafka_dynamic)}. Kafka changes them at run "
            "time, Odradek reads them only at start: set them in the broker's properties and restart it.",
            kafka_dynamic[0],
        )
    unknown = sorted(k for k in configs if k not in _TYPES)
    if unknown:
        raise DynamicConfigError(f"Unknown broker configs: {_key_set(unknown)}", unknown[0])
    static = sorted(k for k in configs if k not in LIVE_CONFIGS)
    if static:
        raise DynamicConfigError(f"Cannot update these configs dynamically: {_key_set(static)}", static[0])
    values = {k: v for k, v in configs.items() if v is not None}
    for key, value in values.items():
        try:
            BrokerConfig.from_properties({key: value})
        except ConfigError as e:
            raise DynamicConfigError(f"Invalid value {value} for configuration {key}: {_reason(e)}", key) from None
    try:
        BrokerConfig.from_properties(values)
    except ConfigError as e:
        key = e.key or "?"
        raise DynamicConfigError(f"Invalid value {values.get(key)} for configuration {key}: {_reason(e)}", key) from None
    return values


def _reason(e: ConfigError) -> str:
    """ConfigError's reason without its own "invalid value for 'key': " and "(got ...)" framing."""
    reason = e.reason
    prefix = f"invalid value for {e.key!r}: "
    if reason.startswith(prefix):
        reason = reason[len(prefix):]
    cut = reason.rfind(" (got ")
    return reason[:cut] if cut > 0 else reason


def effective_config(static: BrokerConfig, cluster_default: Mapping[str, str],
                     per_broker: Mapping[str, str]) -> BrokerConfig:
    """`static` with the live-changeable dynamic keys laid over it (per-broker over cluster default), parsed
    as at start-up. A dynamic key that does not apply (not live-changeable, or refused together with the
    static values, which the controller could not see) is left out and logged, as Kafka's broker ignores an
    invalid dynamic config rather than fail: the record is committed already."""
    dynamic = {k: v for k, v in {**cluster_default, **per_broker}.items() if k in LIVE_CONFIGS}
    ignored = sorted(k for k in {**cluster_default, **per_broker} if k not in LIVE_CONFIGS)
    if ignored:
        log.warning("dynamic broker configs ignored: not changeable at run time", keys=ignored)
    if not dynamic:
        return static
    base = {k: v for k, v in static.to_properties(include_defaults=False).items() if v is not None}
    while dynamic:
        try:
            config = BrokerConfig.from_properties({**base, **dynamic})
        except ConfigError as e:
            bad = e.key if e.key in dynamic else next(iter(dynamic))
            log.error("dynamic broker config ignored: invalid with this broker's settings", key=bad,
                      value=dynamic[bad], error=str(e))
            del dynamic[bad]
            continue
        config._listener_settings = dict(static._listener_settings)
        return config
    return static


class DynamicBrokerConfig:
    """This node's effective configuration for an image (see the module doc). `on_metadata_update` is a
    metadata listener that logs each applied change once (key, value, scope) and counts it."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self.node_id = static.node_id
        self._cached: tuple[object, object, BrokerLayers] | None = None
        self.changes_applied = 0

    def layers(self, image: MetadataImage) -> BrokerLayers:
        cluster_default = image.broker_configs()
        per_broker = image.broker_configs(self.node_id)
        cached = self._cached
        if cached is not None and cached[0] is cluster_default and cached[1] is per_broker:
            return cached[2]
        layers = BrokerLayers(self.static, effective_config(self.static, cluster_default, per_broker),
                              per_broker, cluster_default)
        self._cached = (cluster_default, per_broker, layers)
        return layers

    def current(self, image: MetadataImage) -> BrokerConfig:
        return self.layers(image).effective

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        """Log every dynamic broker config of this node that the update changed (a metadata listener)."""
        for name, scope in (("", "cluster-default"), (str(self.node_id), "broker")):
            before = update.previous.configs.get((ConfigResourceType.BROKER, name), {})
            after = update.image.configs.get((ConfigResourceType.BROKER, name), {})
            if before is after:
                continue
            for key in sorted(set(before) | set(after)):
                if before.get(key) != after.get(key):
                    self.changes_applied += 1
                    log.info("dynamic broker config changed", key=key, value=after.get(key),
                             previous=before.get(key), scope=scope, node=self.node_id,
                             applied=key in LIVE_CONFIGS)
        self.layers(update.image)  # built now, so a later read of the same image is free


class DynamicConfigCollector:
    """Prometheus families of this node's dynamic broker configs, read at scrape time:
    `odradek_dynamic_broker_configs{scope="broker"|"cluster-default"}` (keys set now) and
    `odradek_dynamic_broker_config_changes_total` (changes this node has applied since it started)."""

    def __init__(self, dynamic: DynamicBrokerConfig, image: Callable[[], MetadataImage]) -> None:
        self.dynamic = dynamic
        self.image = image

    def collect(self) -> Iterator[Metric]:
        image = self.image()
        configs = GaugeMetricFamily("odradek_dynamic_broker_configs",
                                    "Dynamic broker configs set for this node and as the cluster-wide default",
                                    labels=["scope"])
        configs.add_metric(["broker"], len(image.broker_configs(self.dynamic.node_id)))
        configs.add_metric(["cluster-default"], len(image.broker_configs()))
        yield configs
        changes = CounterMetricFamily("odradek_dynamic_broker_config_changes",
                                      "Dynamic broker config changes this node has applied since it started")
        changes.add_metric([], self.dynamic.changes_applied)
        yield changes
