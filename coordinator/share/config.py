"""The share coordinator's settings: Kafka's ShareCoordinatorConfig, as far as this coordinator acts on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ShareCoordinatorConfig"]


@dataclass(frozen=True, slots=True)
class ShareCoordinatorConfig:
    # share.coordinator.state.topic.num.partitions: the partitions keys hash over (the topic's real count
    # once it exists, as the other coordinators place their keys).
    state_topic_num_partitions: int = 50
    # share.coordinator.snapshot.update.records.per.snapshot: ShareUpdate records a share-partition gets
    # before its next write is a whole ShareSnapshot again (0: every write is a snapshot).
    snapshot_update_records_per_snapshot: int = 500
    # share.coordinator.write.timeout.ms: a write not replicated within it is answered
    # COORDINATOR_NOT_AVAILABLE (its record stays in the log and takes effect if it is replicated later).
    write_timeout_ms: int = 5000
    # share.coordinator.cold.partition.snapshot.interval.ms: how often every share-partition without a
    # ShareSnapshot since the last round gets one, so that the log below the round before can go.
    cold_partition_snapshot_interval_ms: int = 300_000
    # share.coordinator.state.topic.prune.interval.ms: how often records below the oldest offset still
    # needed are deleted from `__share_group_state` (DeleteRecords on the partition, as Kafka does).
    state_topic_prune_interval_ms: int = 300_000

    @classmethod
    def from_broker_config(cls, cfg: Any, *, state_topic_num_partitions: int | None = None) -> ShareCoordinatorConfig:
        return cls(
            state_topic_num_partitions=state_topic_num_partitions or cfg.share_coordinator_state_topic_num_partitions,
            snapshot_update_records_per_snapshot=cfg.share_coordinator_snapshot_update_records_per_snapshot,
            write_timeout_ms=cfg.share_coordinator_write_timeout_ms,
            cold_partition_snapshot_interval_ms=cfg.share_coordinator_cold_partition_snapshot_interval_ms,
            state_topic_prune_interval_ms=cfg.share_coordinator_state_topic_prune_interval_ms,
        )
