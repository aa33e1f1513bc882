"""The partitions of this broker following the committed metadata image (Kafka's ReplicaManager.applyDelta).

Theory of operation
-------------------
Topics change only through the controller: CreateTopics, automatic creation, DeleteTopics,
CreatePartitions, reassignments, elections and config changes are metadata records first. Once records
are committed, the metadata publisher (metadata/publisher.py) hands every listener a `MetadataUpdate`
(start-up's whole image included); `PartitionHosting` is the listener that gives it to the replica
manager, whose `apply_delta` makes the broker's partitions what the image says:

  * a partition with this node among its replicas gets its log (opened, or created empty, through the
    log manager) and becomes led here when the image names this node its leader, else follows the named
    leader; followed, it is fetched from that leader, led here or leaderless it is fetched from nowhere;
  * a partition no longer assigned here, or of a removed topic, is dropped and its log deleted;
  * changed topic configs reach the open logs and the partitions' min.insync.replicas;
  * the brokers that may not join an ISR (fenced, in controlled shutdown) are noted first, so a leader's
    high watermark no longer waits for them.

Everything on that road is here or below (storage's log manager), except two ports the broker passes in,
because what they stand for lives with the broker:

  * `FetcherTargets` (the broker's replica fetcher manager): `follow(tp, ...)` / `unfollow(tp)` add and
    remove a partition from the fetcher task of its leader. It only moves targets; the fetch loop and its
    socket stay in the broker.
  * `TopicSettings`: a topic's effective LogConfig and min.insync.replicas for the image (its overrides
    over the broker's defaults; the topic-config table is the broker's, broker/topic_config.py).

Time is an argument: the listener's `clock` is the caller's (the broker's `now_ms`); nothing here reads one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from odradek.metadata.image import MetadataImage
from odradek.metadata.publisher import MetadataUpdate
from odradek.storage.config import LogConfig
from odradek.storage.names import TopicPartition

if TYPE_CHECKING:
    from odradek.storage.log_manager import LogManager

    from .replica_manager import ReplicaManager

__all__ = ["FetcherTargets", "TopicSettings", "PartitionHosting"]


class FetcherTargets(Protocol):
    """Which leader each followed partition is fetched from (the broker's ReplicaFetcherManager)."""

    def follow(self, tp: TopicPartition, *, topic_id: uuid.UUID, leader_id: int, leader_epoch: int) -> None:
        """Fetch `tp` from `leader_id` at `leader_epoch` (moving it off another leader's fetcher)."""

    def unfollow(self, tp: TopicPartition) -> None:
        """Fetch `tp` from nowhere: led here, leaderless, or dropped."""


# (image, topic name) -> (the topic's LogConfig, its min.insync.replicas)
TopicSettings = Callable[[MetadataImage, str], tuple[LogConfig, int]]


class PartitionHosting:
    """The metadata listener of the replica manager: every committed update goes to its `apply_delta`."""

    def __init__(self, replicas: ReplicaManager, log_manager: LogManager, topic_settings: TopicSettings,
                 clock: Callable[[], int], fetchers: FetcherTargets | None = None) -> None:
        self.replicas = replicas
        self.log_manager = log_manager
        self.topic_settings = topic_settings
        self.clock = clock
        self.fetchers = fetchers  # None: a broker that follows nothing (no fetchers were built)

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        self.replicas.apply_delta(update, now_ms=self.clock(), log_manager=self.log_manager,
                                  topic_settings=self.topic_settings, fetchers=self.fetchers)
