"""Per-log configuration: Kafka's topic configs in snake_case, with Kafka's defaults.

`LogConfig.from_topic_configs({"segment.bytes": "1048576", ...})` takes the dotted names a client sends in
CreateTopics / AlterConfigs and overrides the fields it names; unknown names are rejected so that a typo
does not silently fall back to a default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass

LONG_MAX = 2**63 - 1

# "": neither (Kafka allows an empty list, what SUBTRACT of the last policy leaves): nothing is compacted and
# only DeleteRecords moves the log start.
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: no time limit
    retention_bytes: int = -1  # -1: no size limit
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600 * 1000  # Kafka 4.0's default (KIP-1030)
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    flush_messages: int | None = None  # None: leave flushing to the OS (Kafka's Long.MAX_VALUE)
    flush_ms: int | None = None
    producer_id_expiration_ms: int = 24 * 3600 * 1000  # a broker config in Kafka (producer.id.expiration.ms)

    def __post_init__(self) -> None:
        if self.segment_bytes < 64:
            raise ValueError(f"segment.bytes must be at least 64, got {self.segment_bytes}")
        if self.segment_index_bytes < 12:
            raise ValueError(f"segment.index.bytes must hold at least one entry, got {self.segment_index_bytes}")
        if self.index_interval_bytes < 0:
            raise ValueError("index.interval.bytes must not be negative")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ValueError(f"cleanup.policy must be one of {CLEANUP_POLICIES}, got {self.cleanup_policy!r}")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message.timestamp.type must be one of {TIMESTAMP_TYPES}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min.cleanable.dirty.ratio must lie in [0, 1]")
        if self.flush_messages is not None and self.flush_messages < 1:
            raise ValueError("flush.messages must be at least 1")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def with_overrides(self, **fields) -> LogConfig:
        return dataclasses.replace(self, **fields)

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str | None], base: LogConfig | None = None) -> LogConfig:
        """Override `base` (defaults if None) with Kafka-named topic configs; None values are ignored."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        overrides: dict[str, Any] = {}  # field -> its value, of the field's type
        for name, raw in configs.items():
            if raw is None:
                continue
            field = name.replace(".", "_")
            if field not in types:
                raise ValueError(f"unknown topic config {name!r}")
            kind = types[field]
            value: str | int | float | None
            if field in ("cleanup_policy", "message_timestamp_type"):
                value = ",".join(sorted(p.strip() for p in raw.split(","))) if field == "cleanup_policy" else raw
            elif kind == "float":
                value = float(raw)
            else:
                value = int(raw)
                if field in ("flush_messages", "flush_ms") and value == LONG_MAX:
                    value = None
            overrides[field] = value
        return dataclasses.replace(base or cls(), **overrides)
