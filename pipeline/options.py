"""Options of the `odradek` data source, spelled as Spark's Kafka connector spells them.

Spark hands a data source its options as a case-insensitive dict whose keys are stored lower-case, so
every lookup here goes through `_get(options, "startingOffsets")`, which lower-cases the name. Parsing
happens on the driver (in `DataSource.reader()` / `writer()`), so a bad option fails the query at once
with a message naming the option, and the result is a frozen, picklable dataclass that the executors
receive inside their input partitions.

`kafka.*` options go to the bundled client with the prefix stripped and the dots turned into the
client's snake_case field names (`kafka.max.partition.fetch.bytes` -> `max_partition_fetch_bytes`).
As in Spark, the settings that would fight the connector are refused: offsets come from
`startingOffsets`, keys and values are always bytes, and the source never commits consumer offsets.
A name the client does not know is ignored (Kafka's Java clients warn likewise). Security settings go
to the bundled client under librdkafka's names (`kafka.security.protocol`, `kafka.sasl.mechanism`,
`kafka.sasl.username`, `kafka.sasl.password`, `kafka.ssl.ca.location` ...); Java's `kafka.sasl.jaas.config`
gives the username and password of its login module.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from odradek.client.cluster import TopicPartition
from odradek.client.config import ClientConfig, ConsumerConfig, ProducerConfig, parse_bootstrap

from .errors import OptionError, parse_bool
from .offsets import EARLIEST, LATEST, offsets_to_json, parse_assign, parse_partition_values

__all__ = [
    "ClientOptions", "OffsetSpec", "OptionError", "SinkOptions", "SourceOptions", "Subscription",
    "is_secret", "parse_bool", "parse_duration_ms",
]


# kafka.* settings the connector owns (Spark's KafkaSourceProvider refuses the same ones).
_REJECTED = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as bytes; cast or decode them in a DataFrame operation",
    "value.deserializer": "values are always read as bytes; cast or decode them in a DataFrame operation",
    "key.serializer": "keys are always written as bytes; serialize them in a DataFrame operation",
    "value.serializer": "values are always written as bytes; serialize them in a DataFrame operation",
    "enable.auto.commit": "the source does not commit consumer offsets; Spark checkpoints them",
    "interceptor.classes": "interceptors are not supported",
}
# Accepted for compatibility with Spark jobs, but meaningless for this connector.
_IGNORED = {"group.id", "bootstrap.servers", "client.dns.lookup"}

DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
DEFAULT_COMMIT_TOPIC = "_odradek-spark-sink-commits"
ROWS_PER_ARROW_BATCH = 10_000


_SECRET = re.compile(r"password|secret|jaas|oauthbearer[._]config|token", re.IGNORECASE)


def is_secret(name: str) -> bool:
    """True for an option whose value is a credential (`kafka.sasl.password`, `kafka.sasl.jaas.config`,
    `kafka.ssl.key.password`, `kafka.ssl.keystore.password`, `kafka.sasl.oauthbearer.config` ...), in
    Spark's spelling or the client's; such values are never printed."""
    return _SECRET.search(name) is not None


def _get(options: Mapping[str, str], name: str, default: Any = None) -> Any:
    value = options.get(name.lower())
    if value is None:
        value = options.get(name)
    return default if value is None else value


def _parse_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer (got {value!r})") from None
    if minimum is not None and number < minimum:
        raise OptionError(f"option {name!r} must be at least {minimum} (got {number})")
    return number


_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_UNITS_MS = {
    "": 1, "ms": 1, "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000,
    "days": 86_400_000,
}


def parse_duration_ms(value: Any, name: str = "duration") -> int:
    """'15m', '30s', '500ms', '1h', '2 days' or a bare number of milliseconds, as Spark's timeStringAsMs."""
    m = _DURATION.match(str(value).lower())
    if not m or m.group(2) not in _UNITS_MS:
        raise OptionError(f"option {name!r} must be a duration such as 30s, 15m or 500ms (got {value!r})")
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


# ---------------------------------------------------------------------------------------- client settings


def _field_types(cls: type) -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(cls)}


_CONSUMER_FIELDS = _field_types(ConsumerConfig)
_PRODUCER_FIELDS = _field_types(ProducerConfig)
_CLIENT_FIELDS = _field_types(ClientConfig)


def _coerce(value: str, type_text: str, name: str) -> Any:
    """A string option to the type of the client config field (annotations are strings here)."""
    kinds = [t.strip() for t in type_text.split("|")]
    if "None" in kinds and str(value).strip().lower() in ("", "none", "null"):
        return None
    if "bool" in kinds:
        return parse_bool(value, f"kafka.{name}")
    if "int" in kinds:
        try:
            return int(str(value).strip())
        except ValueError:
            if "str" in kinds:
                return str(value)
            raise OptionError(f"option 'kafka.{name}' must be an integer (got {value!r})") from None
    return str(value)


@dataclass(frozen=True)
class ClientOptions:
    """The `kafka.*` options, split per client kind; plain data, so it pickles into input partitions."""

    bootstrap_servers: str
    common: tuple[tuple[str, Any], ...] = ()
    consumer: tuple[tuple[str, Any], ...] = ()
    producer: tuple[tuple[str, Any], ...] = ()
    ignored: tuple[str, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "ClientOptions":
        bootstrap = _get(options, "kafka.bootstrap.servers")
        if not bootstrap:
            raise OptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
        try:
            parse_bootstrap(bootstrap)
        except ValueError as e:
            raise OptionError(f"option 'kafka.bootstrap.servers': {e}") from None
        common, consumer, producer, ignored = {}, {}, {}, []
        for raw_key, value in options.items():
            key = raw_key.lower()
            if not key.startswith("kafka."):
                continue
            name = key[len("kafka."):]
            if name in _REJECTED:
                raise OptionError(f"Kafka option '{name}' is not supported: {_REJECTED[name]}")
            if name == "sasl.jaas.config":  # Java's spelling of the credentials
                for option, text in re.findall(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"', str(value)):
                    common[f"sasl_{option}"] = re.sub(r"\\(.)", r"\1", text)
                continue
            if name == "sasl.mechanisms":
                name = "sasl.mechanism"
            if name in _IGNORED:
                continue
            field = name.replace(".", "_").replace("-", "_")
            known = False
            if field in _CLIENT_FIELDS:
                common[field] = _coerce(value, _CLIENT_FIELDS[field], name)
                known = True
            else:
                if field in _CONSUMER_FIELDS:
                    consumer[field] = _coerce(value, _CONSUMER_FIELDS[field], name)
                    known = True
                if field in _PRODUCER_FIELDS:
                    producer[field] = _coerce(value, _PRODUCER_FIELDS[field], name)
                    known = True
            if not known:
                ignored.append(name)
        result = cls(str(bootstrap), tuple(sorted(common.items())), tuple(sorted(consumer.items())),
                     tuple(sorted(producer.items())), tuple(sorted(ignored)))
        try:  # fail on the driver, not in a task, when a value is out of range
            result.consumer_config()
            result.producer_config()
        except ValueError as e:
            raise OptionError(f"bad Kafka option: {e}") from None
        return result

    def client_config(self) -> ClientConfig:
        return ClientConfig(bootstrap_servers=self.bootstrap_servers, allow_auto_create_topics=False,
                            **dict(self.common))

    def consumer_config(self) -> ConsumerConfig:
        settings: dict[str, Any] = {"max_poll_records": ROWS_PER_ARROW_BATCH, "allow_auto_create_topics": False}
        settings.update(self.common)
        settings.update(self.consumer)
        # The connector's own: positions are always given by seek(); "earliest" only answers a position
        # lookup racing the seek, and a reset by the broker (data loss) is detected by the reader.
        settings.update(bootstrap_servers=self.bootstrap_servers, group_id=None, enable_auto_commit=False,
                        auto_offset_reset="earliest")
        return ConsumerConfig(**settings)

    def producer_config(self) -> ProducerConfig:
        settings: dict[str, Any] = {"batch_size": 262_144, "linger_ms": 5}
        settings.update(self.common)
        settings.update(self.producer)
        settings["bootstrap_servers"] = self.bootstrap_servers
        return ProducerConfig(**settings)

    def __repr__(self) -> str:
        """Secrets (passwords, the OAuth settings) are shown as '[redacted]': this object travels inside
        every input partition and may be printed in a traceback or a log line."""
        def shown(items: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
            return tuple((k, "[redacted]" if is_secret(k) else v) for k, v in items)

        return (f"ClientOptions(bootstrap_servers={self.bootstrap_servers!r}, common={shown(self.common)!r}, "
                f"consumer={shown(self.consumer)!r}, producer={shown(self.producer)!r}, ignored={self.ignored!r})")

    @property
    def key(self) -> tuple:
        """Identifies equal settings, for the per-process client caches."""
        return (self.bootstrap_servers, self.common, self.consumer, self.producer)


# ---------------------------------------------------------------------------------------- source options


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: exactly one of assign, subscribe and subscribePattern."""

    kind: str  # "assign", "subscribe" or "subscribePattern"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern or "", topic) is not None
        return any(tp.topic == topic for tp in self.partitions)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions)


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: earliest, latest, per-partition offsets, or timestamps.

    kind "offsets": `values` maps partitions to an offset, or EARLIEST (-2) / LATEST (-1);
    kind "timestamp": `timestamp` for every partition; kind "timestamps": `values` maps partitions to one.
    """

    kind: str  # "earliest", "latest", "offsets", "timestamp", "timestamps"
    values: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None

    @property
    def mapping(self) -> dict[TopicPartition, int]:
        return dict(self.values)


def _offset_spec(options: Mapping[str, str], prefix: str, *, default: str) -> tuple[OffsetSpec, str]:
    """Spark's precedence: <prefix>Timestamp, then <prefix>OffsetsByTimestamp, then <prefix>Offsets."""
    name = f"{prefix}Timestamp"
    value = _get(options, name)
    if value is not None:
        return OffsetSpec("timestamp", timestamp=_parse_int(value, name, minimum=0)), name
    name = f"{prefix}OffsetsByTimestamp"
    value = _get(options, name)
    if value is not None:
        values = parse_partition_values(value, name)
        for tp, ts in values.items():
            if ts < 0:
                raise OptionError(f"option {name!r}: timestamp {ts} of {tp.topic}-{tp.partition} is negative")
        return OffsetSpec("timestamps", tuple(sorted(values.items()))), name
    name = f"{prefix}Offsets"
    value = str(_get(options, name, default)).strip()
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(value.lower()), name
    values = parse_partition_values(value, name)
    for tp, offset in values.items():
        if offset < LATEST and offset != EARLIEST:
            raise OptionError(f"option {name!r}: offset {offset} of {tp.topic}-{tp.partition} is invalid "
                              "(use -2 for earliest, -1 for latest)")
    return OffsetSpec("offsets", tuple(sorted(values.items()))), name


@dataclass(frozen=True)
class SourceOptions:
    client: ClientOptions
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only
    timestamp_strategy: str  # "error" or "latest": no record at or after the timestamp
    fail_on_data_loss: bool
    include_headers: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    poll_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> "SourceOptions":
        client = ClientOptions.parse(options)
        subscription = _subscription(options)

        starting, starting_name = _offset_spec(options, "starting", default="latest" if streaming else "earliest")
        ending: OffsetSpec | None = None
        ending_given = [n for n in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
                        if _get(options, n) is not None]
        if streaming:
            if ending_given:
                raise OptionError(f"option {ending_given[0]!r} is not valid in streaming queries")
        else:
            ending, ending_name = _offset_spec(options, "ending", default="latest")
            if starting.kind == "latest":
                raise OptionError("startingOffsets=latest is not allowed for batch queries")
            if starting.kind == "offsets" and any(o == LATEST for o in starting.mapping.values()):
                raise OptionError("startingOffsets: latest (-1) is not allowed for batch queries")
            if ending.kind == "earliest":
                raise OptionError("endingOffsets=earliest is not allowed for batch queries")
            if ending.kind == "offsets" and any(o == EARLIEST for o in ending.mapping.values()):
                raise OptionError("endingOffsets: earliest (-2) is not allowed for batch queries")
        if subscription.kind == "assign":
            wanted = set(subscription.partitions)
            for spec, name in ((starting, starting_name), (ending, "endingOffsets")):
                if spec is not None and spec.kind in ("offsets", "timestamps"):
                    extra = set(spec.mapping) - wanted
                    if extra:
                        raise OptionError(f"option {name!r} names partitions that are not assigned: "
                                          + ", ".join(f"{t}-{p}" for t, p in sorted(extra)))

        strategy = str(_get(options, "startingOffsetsByTimestampStrategy", "error")).strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest")

        def optional_int(name: str, minimum: int) -> int | None:
            value = _get(options, name)
            return None if value is None else _parse_int(value, name, minimum=minimum)

        max_offsets = optional_int("maxOffsetsPerTrigger", 1)
        min_offsets = optional_int("minOffsetsPerTrigger", 1)
        if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
            raise OptionError(f"minOffsetsPerTrigger ({min_offsets}) must not exceed "
                              f"maxOffsetsPerTrigger ({max_offsets})")
        delay = _get(options, "maxTriggerDelay")
        return cls(
            client=client,
            subscription=subscription,
            starting=starting,
            ending=ending,
            timestamp_strategy=strategy,
            fail_on_data_loss=parse_bool(_get(options, "failOnDataLoss", "true"), "failOnDataLoss"),
            include_headers=parse_bool(_get(options, "includeHeaders", "false"), "includeHeaders"),
            max_offsets_per_trigger=max_offsets,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=(DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None
                                  else parse_duration_ms(delay, "maxTriggerDelay")),
            min_partitions=optional_int("minPartitions", 1),
            max_records_per_partition=optional_int("maxRecordsPerPartition", 1),
            poll_timeout_ms=_parse_int(_get(options, "kafkaConsumer.pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS),
                                       "kafkaConsumer.pollTimeoutMs", minimum=1),
        )


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {name: _get(options, name) for name in ("assign", "subscribe", "subscribePattern")}
    given = {k: v for k, v in given.items() if v is not None}
    if len(given) != 1:
        raise OptionError("exactly one of the options 'assign', 'subscribe' and 'subscribePattern' is required"
                          + (f" (got {', '.join(sorted(given))})" if given else ""))
    kind, value = next(iter(given.items()))
    if kind == "subscribe":
        topics = tuple(sorted({t.strip() for t in str(value).split(",") if t.strip()}))
        if not topics:
            raise OptionError("option 'subscribe' must name at least one topic")
        return Subscription(kind, topics=topics)
    if kind == "subscribePattern":
        pattern = str(value).strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {e}") from None
        return Subscription(kind, pattern=pattern)
    partitions = parse_assign(value)
    if not partitions:
        raise OptionError("option 'assign' must name at least one partition")
    return Subscription(kind, partitions=tuple(sorted(partitions)))


# ---------------------------------------------------------------------------------------- sink options


@dataclass(frozen=True)
class SinkOptions:
    client: ClientOptions
    topic: str | None  # overrides the topic column
    exactly_once: bool  # streaming only: a transaction per task, replays skip what is committed (sink.py)
    commit_topic: str  # names the partition the tasks' progress offsets are committed for

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> "SinkOptions":
        topic = _get(options, "topic")
        if topic is not None and not str(topic).strip():
            raise OptionError("option 'topic' must not be empty")
        for name in ("subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets"):
            if _get(options, name) is not None:
                raise OptionError(f"option {name!r} is for reading; a write takes 'topic' or a topic column")
        exactly_once = parse_bool(_get(options, "sink.exactlyOnce", "true" if streaming else "false"),
                                  "sink.exactlyOnce")
        if exactly_once and not streaming:
            raise OptionError("sink.exactlyOnce applies to streaming writes only (a batch write has no "
                              "micro-batch id to deduplicate on)")
        client = ClientOptions.parse(options)
        if any(k == "transactional_id" for k, _ in client.producer):
            raise OptionError("Kafka option 'transactional.id' is not supported: the sink manages transactions "
                              "itself (the exactly-once sink derives an id per query and task, see sink.py)")
        if exactly_once:
            try:  # each task's producer is transactional: acks=all and idempotence are required
                client.producer_config().replace(transactional_id="check")
            except ValueError as e:
                raise OptionError(f"bad Kafka option for the exactly-once sink: {e} (or set "
                                  "sink.exactlyOnce=false)") from None
        return cls(
            client=client,
            topic=None if topic is None else str(topic).strip(),
            exactly_once=exactly_once,
            commit_topic=str(_get(options, "sink.commitTopic", DEFAULT_COMMIT_TOPIC)),
        )


def dumps_offsets_option(offsets: Mapping[TopicPartition, int]) -> str:
    """The JSON for startingOffsets / endingOffsets from {TopicPartition: offset}."""
    return json.dumps(offsets_to_json(offsets))
