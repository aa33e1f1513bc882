"""The group coordinator's settings, with Kafka's names and defaults."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["GroupCoordinatorConfig"]

INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    transaction_state_log_num_partitions: int = 50  # transaction.state.log.num.partitions (FindCoordinator)
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    # offsets.commit.timeout.ms: the longest a write to __consumer_offsets (commits, group state) waits to be
    # replicated before it is answered COORDINATOR_NOT_AVAILABLE (Kafka's write timeout of every group op)
    offsets_commit_timeout_ms: int = 5000
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    group_max_size: int = INT32_MAX  # group.max.size
    new_member_join_timeout_ms: int = 300_000  # Kafka's classic new-member join timeout (5 minutes)
    consumer_group_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_group_heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    consumer_group_max_size: int = INT32_MAX  # group.consumer.max.size
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    share_group_session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    share_group_heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    share_group_max_size: int = 200  # group.share.max.size
    # group.share.initialize.retry.interval.ms: a share-partition still "initializing" this long after it was
    # asked for (its InitializeShareGroupState answer was lost) is asked for again on the next heartbeat
    share_group_initialize_retry_interval_ms: int = 30_000
    # Where member ids come from; tests pass a seeded source for reproducible runs.
    uuid_factory: Callable[[], uuid.UUID] = field(default=uuid.uuid4, compare=False)

    @classmethod
    def from_broker_config(cls, config, **overrides) -> GroupCoordinatorConfig:
        """Read the settings off the broker's config object (by attribute name, without importing it)."""
        values = {}
        for name in ("offsets_topic_num_partitions", "transaction_state_log_num_partitions",
                     "offsets_retention_check_interval_ms", "offset_metadata_max_bytes", "offsets_commit_timeout_ms",
                     "group_initial_rebalance_delay_ms", "group_min_session_timeout_ms",
                     "group_max_session_timeout_ms", "group_max_size", "consumer_group_session_timeout_ms",
                     "consumer_group_heartbeat_interval_ms", "consumer_group_max_size",
                     "share_group_session_timeout_ms", "share_group_heartbeat_interval_ms", "share_group_max_size",
                     "share_group_initialize_retry_interval_ms"):
            value = getattr(config, name, None)
            if value is not None:
                values[name] = value
        minutes = getattr(config, "offsets_retention_minutes", None)
        if minutes is not None:
            values["offsets_retention_ms"] = minutes * 60_000
        assignors = getattr(config, "consumer_group_assignors", None)
        if assignors:
            values["consumer_group_assignors"] = tuple(assignors)
        values.update(overrides)
        return cls(**values)
