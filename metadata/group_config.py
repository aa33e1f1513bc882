"""Dynamic GROUP configs (KIP-848/KIP-932: `kafka-configs.sh --entity-type groups`), the share-group ones.

A group's configs are ConfigRecords on resource (GROUP, group id) in the metadata log, set and deleted by
IncrementalAlterConfigs and read back by DescribeConfigs, as a topic's are. Each overrides, for one group,
a broker config that is its default (Kafka's GroupConfig):

    share.session.timeout.ms        group.share.session.timeout.ms       within group.share.{min,max}.session.timeout.ms
    share.heartbeat.interval.ms     group.share.heartbeat.interval.ms    within group.share.{min,max}.heartbeat.interval.ms
    share.record.lock.duration.ms   group.share.record.lock.duration.ms  within group.share.{min,max}.record.lock.duration.ms
    share.delivery.count.limit      group.share.delivery.count.limit     within group.share.{min,max}.delivery.count.limit
    share.auto.offset.reset         latest                               latest | earliest | by_duration:<ISO-8601 duration>
    share.isolation.level           read_uncommitted                     read_uncommitted | read_committed
    errors.deadletterqueue.topic.name          ""  (no DLQ)              a topic name not starting with __
    errors.deadletterqueue.copy.record.enable  false                     true | false

The two `errors.deadletterqueue.*` ones are KIP-1191's share-group dead-letter queue (Kafka 4.4's GroupConfig):
the topic the group's rejected records and those archived at the delivery limit are copied to, and whether
the copy carries the record's key and value or only the context headers (broker/share/dlq.py). They need
share.version 2, the level that gates the DLQ in Kafka 4.4 (ShareVersion.supportsShareGroupDLQ): on a
cluster at share.version 1 the broker refuses to set them (INVALID_CONFIG naming the feature) rather than
accept a DLQ it would never write, and does not list them in DescribeConfigs. The topic name is checked
here only as Kafka's GroupConfig checks it (not an internal `__` name); whether the topic may serve as a
DLQ (the broker's name prefix, the topic's own opt-in) is decided when a record is copied, since both can
change after the group config is set.

The controller checks names and the form of values (`validate_group_configs` without bounds); the broker
that takes the request also checks the ranges against its own group.share.* bounds, as Kafka validates
GroupConfig against the GroupCoordinatorConfig and ShareGroupConfig of the node that decides. Consumer
group (`consumer.*`) and streams group configs are not served: the keys are refused as unknown rather
than accepted and ignored.

Who reads them: the group coordinator takes a share group's session timeout and heartbeat interval from
here on each heartbeat; the share-partition leader takes the lock duration, delivery limit, isolation level
and auto offset reset (`share_group_settings`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["DLQ_COPY_RECORD", "DLQ_GROUP_CONFIGS", "DLQ_TOPIC_NAME", "GROUP_CONFIGS", "GroupConfigDef", "ShareGroupSettings", "by_duration_ms", "parse_bool",
           "share_group_settings", "validate_group_configs"]

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an integer") from None


def _auto_offset_reset(value: str) -> str:
    if value in ("latest", "earliest"):
        return value
    if value.startswith("by_duration:"):
        duration = value[len("by_duration:"):]
        if duration and duration != "P" and not duration.endswith("T") and _DURATION.fullmatch(duration):
            return value
        raise ValueError(f"{duration!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    raise ValueError(f"{value!r} is not one of latest, earliest, by_duration:<ISO-8601 duration>")


def by_duration_ms(value: str) -> int | None:
    """The length in ms of a `by_duration:<ISO-8601 duration>` reset (Java's Duration.parse subset the
    check above accepts: PnDTnHnMn.nS), or None for `latest` / `earliest`."""
    if not value.startswith("by_duration:"):
        return None
    m = _DURATION.fullmatch(value[len("by_duration:"):])
    if m is None:
        raise ValueError(f"{value!r} is not a by_duration reset")
    days, hours, minutes, seconds = m.groups()
    return round(((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
                 + float(seconds or 0) * 1000)


def _dlq_topic_name(value: str) -> str:
    if value.startswith("__"):
        raise ValueError("DLQ topic name must not start with '__'")
    return value


def parse_bool(value: str) -> bool:
    """Kafka's ConfigDef BOOLEAN: true or false, in any case."""
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"{value!r} is not a boolean (true or false)")


DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
DLQ_GROUP_CONFIGS = frozenset({DLQ_TOPIC_NAME, DLQ_COPY_RECORD})
"""The group configs that need share.version 2 (KIP-1191)."""


def _isolation_level(value: str) -> str:
    if value in ("read_uncommitted", "read_committed"):
        return value
    raise ValueError(f"{value!r} is not one of read_uncommitted, read_committed")


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """A group config: its name, type ("int", "string" or "boolean"), the broker config that is its default, the
    broker configs bounding it (min, max) if any, and how a value is read."""

    name: str
    ktype: str
    default_key: str | None
    default: str
    bounds: tuple[str, str] | None
    parse: Callable[[str], object]
    doc: str


GROUP_CONFIGS: Mapping[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef("share.session.timeout.ms", "int", "group.share.session.timeout.ms", "45000",
                   ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"), _int,
                   "Session timeout of this share group's members."),
    GroupConfigDef("share.heartbeat.interval.ms", "int", "group.share.heartbeat.interval.ms", "5000",
                   ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"), _int,
                   "Heartbeat interval of this share group's members."),
    GroupConfigDef("share.record.lock.duration.ms", "int", "group.share.record.lock.duration.ms", "30000",
                   ("group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"), _int,
                   "How long a member holds the records it acquired before they are delivered again."),
    GroupConfigDef("share.delivery.count.limit", "int", "group.share.delivery.count.limit", "5",
                   ("group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"), _int,
                   "Deliveries of a record before it is archived."),
    GroupConfigDef("share.auto.offset.reset", "string", None, "latest", None, _auto_offset_reset,
                   "Where a share-partition starts when it has no start offset yet: latest, earliest or "
                   "by_duration:<ISO-8601 duration>."),
    GroupConfigDef("share.isolation.level", "string", None, "read_uncommitted", None, _isolation_level,
                   "read_committed: records of aborted transactions are never delivered."),
    GroupConfigDef(DLQ_TOPIC_NAME, "string", None, "", None, _dlq_topic_name,
                   "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. "
                   "If blank (the default), the group does not have a DLQ topic."),
    GroupConfigDef(DLQ_COPY_RECORD, "boolean", None, "false", None, parse_bool,
                   "When writing onto the dead-letter queue topic, whether to copy the original record onto the "
                   "DLQ topic, or just write a record containing the context information headers."),
)}


def validate_group_configs(changes: Mapping[str, str | None], bounds: Mapping[str, int] | None = None,
                           current: Mapping[str, str] | None = None) -> None:
    """ValueError naming the key for an unknown group config or a bad value; with `bounds` (broker config
    name -> value), a value outside its min/max too, and a share heartbeat interval not below the session
    timeout (the values after the change, `current` overlaid with `changes`). Deletions pass."""
    for key, value in changes.items():
        definition = GROUP_CONFIGS.get(key)
        if definition is None:
            raise ValueError(f"Unknown group config name: {key}")
        if value is None:
            continue
        try:
            parsed = definition.parse(value)
        except ValueError as e:
            if key == DLQ_TOPIC_NAME:  # Kafka's GroupConfig words it so
                raise ValueError(f"{key}: {e}") from None
            raise ValueError(f"Invalid value {value} for configuration {key}: {e}") from None
        if bounds is not None and definition.bounds is not None:
            low, high = bounds[definition.bounds[0]], bounds[definition.bounds[1]]
            if not low <= parsed <= high:  # type: ignore[operator]
                raise ValueError(f"Invalid value {value} for configuration {key}: must be between {low} "
                                 f"({definition.bounds[0]}) and {high} ({definition.bounds[1]})")
    if bounds is not None:
        after = {**(current or {}), **changes}
        session = int(after.get("share.session.timeout.ms") or bounds["group.share.session.timeout.ms"])
        interval = int(after.get("share.heartbeat.interval.ms") or bounds["group.share.heartbeat.interval.ms"])
        if interval >= session:
            raise ValueError(f"Invalid value {interval} for configuration share.heartbeat.interval.ms: must be "
                             f"less than share.session.timeout.ms ({session})")


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """A share group's effective settings: its GROUP configs over the broker's defaults."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    delivery_count_limit: int
    auto_offset_reset: str
    isolation_level: str


def share_group_settings(configs: Mapping[str, str], defaults: Mapping[str, int]) -> ShareGroupSettings:
    """`configs`: the group's GROUP configs (the image's, for (GROUP, group id)); `defaults`: the broker's
    group.share.* values by name."""
    def number(key: str) -> int:
        value = configs.get(key)
        default_key = GROUP_CONFIGS[key].default_key
        assert default_key is not None
        return int(value) if value is not None else int(defaults[default_key])

    return ShareGroupSettings(
        session_timeout_ms=number("share.session.timeout.ms"),
        heartbeat_interval_ms=number("share.heartbeat.interval.ms"),
        record_lock_duration_ms=number("share.record.lock.duration.ms"),
        delivery_count_limit=number("share.delivery.count.limit"),
        auto_offset_reset=configs.get("share.auto.offset.reset", "latest"),
        isolation_level=configs.get("share.isolation.level", "read_uncommitted"),
    )
