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

Large updates, applied in slices
--------------------------------
Creating a partition's log costs about a millisecond here (a directory, the first segment, the epoch
checkpoint: file-system calls), so one CreateTopics of 10,000 RF=3 partitions is seconds of work on every
broker. Done in the publisher's call, it held the broker's event loop for all of it: heartbeats, the
quorum's fetches and every client waited, the controller quorum lost its leader, and partitions ended
leaderless (bench/partition_scale.py). Kafka applies the delta on its own metadata thread; Odradek has one
loop, so with a `budget` the listener makes the update's *image* current at once, as one whole (the
publisher replaced it before calling here: Metadata, the coordinators and every other listener see the
new image together), and only the local work on the partitions is queued and done in slices: `budget`
partitions in the publisher's call, the rest by `apply_pending(limit)`, which the broker calls between
turns of its loop (broker/hosting_driver.py), `on_pending` telling it that a queue began.

What may wait and what may not:

  * a partition led here is applied at once, whatever the budget: a leader that lost its leadership or
    epoch must stop taking writes now (a deposed leader that kept acknowledging acks=all produce while
    its ISR is itself alone would acknowledge records the new leader does not have);
  * so are the partitions of internal topics (`__consumer_offsets`, `__transaction_state`, ...): the
    coordinators, which hear the same update right after this listener, load them from their logs;
  * everything else waits its turn: a new partition (not hosted yet: its produce and fetch get a retriable
    error meanwhile, as on a broker that has not applied the delta yet), a follower moving to a new leader
    or epoch (its fetches from the old leader are refused as fenced meanwhile), a partition becoming led
    here (its followers wait a little longer), one reassigned away.

A queued partition is made what the *latest* image says when its turn comes, so a partition queued by
two updates is applied once, in its final state; whether it is new (may get an empty log) is remembered
from the update that queued it. A removed topic's partitions leave the queue when the removal is applied.
Without a budget (the default, and the unit harnesses) everything is applied in the call, as before.
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
                 clock: Callable[[], int], fetchers: FetcherTargets | None = None, *, budget: int | None = None,
                 on_pending: Callable[[], None] | None = None) -> None:
        self.replicas = replicas
        self.log_manager = log_manager
        self.topic_settings = topic_settings
        self.clock = clock
        self.fetchers = fetchers  # None: a broker that follows nothing (no fetchers were built)
        self.budget = budget  # partitions applied in the publisher's call (None: all; see the module doc)
        self.on_pending = on_pending  # told when partitions are left for apply_pending

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        left = self.replicas.apply_delta(update, now_ms=self.clock(), log_manager=self.log_manager,
                                         topic_settings=self.topic_settings, fetchers=self.fetchers, budget=self.budget)
        if left and self.on_pending is not None:
            self.on_pending()

    @property
    def pending(self) -> int:
        """Partitions of the current image not yet applied here."""
        return self.replicas.pending_hosting

    def apply_pending(self, limit: int | None = None) -> int:
        """Apply up to `limit` queued partitions (None: all); returns how many are left. The followers of a
        leadership begun in a later slice are not woken (ReplicaManager.apply_pending says why)."""
        return self.replicas.apply_pending(self.clock(), limit, wake_followers=False)
