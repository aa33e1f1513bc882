"""The partitions hosted on this broker and their leader-side data path: append, read, purgatories.

Theory of operation
-------------------
`append_records` validates nothing itself beyond leadership and acks: each partition's log validates and
stamps the batches (storage), then the partition's high watermark is advanced and the purgatories are
poked at exactly that point (`check_and_complete`), which is how a waiting fetch or an acks=all produce
learns that the state moved. acks=all waits in the produce purgatory as a `DelayedProduce`; with one
replica the high watermark equals the log end offset after the append, so it completes on its first try.

`fetch_records` reads whole batches below the end offset the isolation level allows (high watermark for
consumers, last stable offset for read_committed, log end for followers) and returns them as file regions;
a read_committed read that meets aborted transactions lists them (`FetchResult.aborted_transactions`,
from the logs' aborted-transaction indexes), and says nothing when it meets none, so that the answer can
still be packed. Transaction markers come in through `append_records` with origin COORDINATOR.

Transaction verification (KIP-890 part 1, Kafka's ReplicaManager.handleProduceAppend): before the broker
asks a producer's coordinator whether a partition is in its transaction, it takes a guard from the
partition's log (`maybe_start_transaction_verification`), and `append_records` hands each client append
the guard of its partition (`verification_guards`; the SENTINEL for a partition without one), which the
log checks against a transaction-opening batch at the moment of the write. `verification_guards=None`
means the broker does not verify (`transaction.partition.verification.enable=false`): nothing is checked.
When fewer than `min_bytes` are available it parks a `DelayedFetch`, woken by appends, never by polling;
on completion or expiry the read is done again and the result delivered through `respond`.

A follower's parked fetch and a partition it does not ask for yet (Kafka does not do this; it is why a
new RF=3 partition's first acks=all produce waited up to replica.fetch.wait.max.ms): a follower fetches
every partition it follows on this leader in one sessionless Fetch, parked here up to
replica.fetch.wait.max.ms (500 ms) when there is nothing new. When this broker starts leading a
partition (a new topic, a new epoch, new replicas), its followers' parked fetches were sent without it,
and the follower will only ask for it in its next fetch (Kafka leaves it at that). The follower cannot
fix that alone: a broker serves one request of a connection at a time (Kafka's mute/unmute,
broker/network.py), so a second fetch on the same connection waits behind the parked one; on another
connection it would put a partition in two requests in flight (two answers, one of them stale, for one
log); with fetch sessions (KIP-227) a second incremental fetch before the first is answered carries an
epoch the session has not reached (INVALID_FETCH_SESSION_EPOCH, and the session is lost); and a parked
request cannot be taken back without closing the connection. The leader knows from its image which followers should fetch
what, so it decides (`_expect_followers`):

  * a parked fetch of each follower of the partition that does not carry it is completed now (answered
    with whatever its partitions have, usually nothing): the follower's next fetch, sent at once,
    carries the partition if the follower's metadata has it;
  * a follower may learn of the partition a few milliseconds after this leader: until its fetch carries
    the partition, for at most `AWAIT_FOLLOWER_MS` (5 s) after the leadership began, its fetches are
    parked at most `AWAITED_PARK_MS` (20 ms) instead of the full wait, so it asks again soon. A follower
    that does not ask in 5 s (its log directory failed, it is fenced) is parked as usual again.

The other order (the follower learns first, and this leader refuses a partition it does not lead yet)
is the follower's quick retry (fetcher_state.py). Neither costs anything while no leadership is new: a
follower fetch checks one empty dict.

Everything here is synchronous and takes `now_ms`; callers (the broker) own the clock and the tasks.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from odradek.protocol.errors import ErrorCode, error_code_of
from odradek.protocol.fast_fetch import NO_HIGH_WATERMARK
from odradek.storage.errors import KafkaStorageError, OffsetOutOfRangeError, StorageError
from odradek.storage.names import TopicPartition
from odradek.storage.producer_state import SENTINEL, AppendOrigin, VerificationGuard

from .delayed import DelayedDeleteRecords, DelayedFetch, DelayedProduce, FetchPartitionStatus, ProducePartitionStatus
from .errors import NotLeaderOrFollowerError, ReplicationError
from .partition import NO_LEADER_EPOCH, FetchIsolation, HostedPartition, Partition
from odradek.purgatory.delayed_operation import DelayedOperationPurgatory
from .replica_selector import ClientMetadata, ReplicaSelector, ReplicaView
from .topic_stats import BrokerTopicStats
from odradek.purgatory.timing_wheel import Timer

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage
    from odradek.metadata.publisher import MetadataUpdate
    from odradek.storage.log import Log
    from odradek.storage.log_manager import LogManager

    from .hosting import FetcherTargets, TopicSettings

events = structlog.get_logger("odradek.replication")  # (`log` is a partition's Log here)
# Its level, asked before a per-partition line is built: structlog's lazy logger binds on every call, which
# was a seventh of hosting a new partition when 10,000 arrive at once and the level is WARNING.
_events_level = logging.getLogger("odradek.replication")

NO_TIMESTAMP = -1


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = NO_TIMESTAMP
    log_start_offset: int = -1
    error_message: str | None = None
    last_offset: int = -1
    record_errors: list[tuple[int, str]] | tuple = ()  # (batch index, message): KIP-467's per-record errors


@dataclass(slots=True)
class FetchRequestPartition:
    topic_partition: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_LEADER_EPOCH
    last_fetched_epoch: int = -1  # a follower's (v12+): checked against this leader's epoch history
    log_start_offset: int = -1  # a follower's (v5+): DeleteRecords waits for every replica's to pass
    # The high watermark a follower knows (Fetch v18, KIP-1166; -1: none): a parked fetch is answered when
    # the leader's passes it. NO_HIGH_WATERMARK: not said (a consumer, or an older follower).
    high_watermark: int = NO_HIGH_WATERMARK


@dataclass(slots=True)
class FetchResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # What a plain consumer fetch never carries; a response with any of them is encoded by the codec,
    # not the packed fast path (protocol.fast_fetch), which cannot say them.
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) where a follower's log diverges
    aborted_transactions: list | None = None  # [(producer id, first offset)] for read_committed
    preferred_read_replica: int = -1
    records: list = field(default_factory=list)  # FileRegion-like chunks (fd, position, length)
    size: int = 0


AWAIT_FOLLOWER_MS = 5_000  # how long a new leadership waits for a follower to ask for it (see the module doc)
AWAITED_PARK_MS = 20  # the longest park of a follower fetch that does not ask for it yet


def _base_offset(segment) -> int:
    return segment.base_offset


class ReplicaManager:
    def __init__(self, *, node_id: int, timer: Timer, defer_fetch_completion: bool = False,
                 replica_lag_time_max_ms: int = 30_000):
        self.node_id = node_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.timer = timer
        # With deferral, appends only note which partitions moved; the caller completes the waiting fetches
        # (`complete_delayed_fetches`) once the produce response is on its way, so that a consumer being
        # woken never delays the producer's acknowledgement.
        self.defer_fetch_completion = defer_fetch_completion
        self._moved: set[TopicPartition] = set()
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self.produce_purgatory = DelayedOperationPurgatory("Produce", timer)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)
        self.delete_records_purgatory = DelayedOperationPurgatory("DeleteRecords", timer)
        # Whether a broker is registered and unfenced (from the image; set by the broker): a replica on a
        # broker that is not does not hold DeleteRecords' low watermark.
        self.is_broker_alive: Callable[[int], bool] = lambda broker_id: True
        # Brokers that may not join an ISR now (fenced, or in controlled shutdown), from the image.
        self.ineligible_replicas: frozenset[int] = frozenset()
        # KIP-392 (replica_selector.py): the selector (None: consumers read from leaders only) and where a
        # broker is for a listener: `replica_rack(broker_id, listener)` is (reachable there, its rack).
        self.replica_selector: ReplicaSelector | None = None
        self.replica_rack: Callable[[int, str], tuple[bool, str | None]] = lambda broker_id, listener: (False, None)
        # Consumer fetches of a partition answered here as a follower (with records), and answered with a
        # preferred read replica as leader: the metrics say which broker serves whom.
        self.follower_consumer_reads = 0
        self.preferred_replica_answers = 0
        # Kafka's BrokerTopicStats: bytes and messages appended per topic here, bytes out counted by the
        # fetch handlers (replication/topic_stats.py).
        self.topic_stats = BrokerTopicStats()
        # A broker of a cluster whose heartbeats have gone unanswered for broker.session.timeout.ms, and the
        # replicated partitions led here that need an ISR change it cannot make then (see set_lease_expired).
        self.lease_expired = False
        self.stranded: frozenset[TopicPartition] = frozenset()
        # JBOD: partitions whose log directory failed (answered KAFKA_STORAGE_ERROR, as Kafka's offline
        # partitions are), and who hears of an I/O error met here: `on_storage_error(log directory, error)`.
        self.offline_partitions: set[TopicPartition] = set()
        self.on_storage_error: Callable[[str, str], None] | None = None
        # ... and who hears of a replica the image gives this broker but that cannot be hosted because a log
        # directory is offline (`on_offline_replica(tp, why)`: the controller must take it out of the ISR).
        self.on_offline_replica: Callable[[TopicPartition, str], None] | None = None
        # The metadata log end offset this broker had when it started (-1: none): a partition whose creation
        # is replayed from below it existed before this start, so it is not new (see apply_delta).
        self.metadata_known_through = -1
        # Follower fetches parked here, by follower (each with the set of its partitions, made when first
        # needed), and the partitions led here that a follower has not asked for since the leadership
        # began, until when it is waited for: see the module doc.
        self._parked_follower_fetches: dict[int, dict[DelayedFetch, frozenset[TopicPartition] | None]] = {}
        self._awaited: dict[int, dict[TopicPartition, int]] = {}
        self.follower_fetches_woken = 0  # parked follower fetches completed early for a new leadership
        # Applying committed metadata (apply_delta): partitions of the last image still to be made what it
        # says, oldest first (topic id, whether the partition is new), and what applying them needs.
        self._pending_hosting: OrderedDict[TopicPartition, tuple[uuid.UUID, bool]] = OrderedDict()
        self._hosting_image: MetadataImage | None = None
        self._hosting_ports: tuple = (None, None, None)
        self._min_isr_of: dict[uuid.UUID, int] = {}
        self._rechecks: dict[TopicPartition, None] | None = None  # gathered while applying (_rechecking_once)

    def know_brokers_by(self, *, replica_selector: ReplicaSelector | None,
                        replica_rack: Callable[[int, str], tuple[bool, str | None]],
                        is_broker_alive: Callable[[int], bool]) -> None:
        """What this broker knows of the others, from its image (set by the broker when it starts): KIP-392's
        selector and each broker's reachability and rack for a listener, and which brokers are alive."""
        self.replica_selector = replica_selector
        self.replica_rack = replica_rack
        self.is_broker_alive = is_broker_alive

    def report_storage_errors_to(self, on_storage_error: Callable[[str, str], None],
                                 on_offline_replica: Callable[[TopicPartition, str], None] | None = None) -> None:
        """Who hears of an I/O error met here: `on_storage_error(log directory, error)` (the log directories),
        and of a replica that cannot be hosted while a directory is offline: `on_offline_replica(tp, why)`."""
        self.on_storage_error = on_storage_error
        self.on_offline_replica = on_offline_replica

    # -- hosting --

    def get_partition(self, tp: TopicPartition) -> HostedPartition | None:
        return self.partitions.get(tp)

    def add_leader_partition(
        self, tp: TopicPartition, *, topic_id: uuid.UUID, log: Log, leader_epoch: int, replicas: Iterable[int],
        isr: Iterable[int], min_insync_replicas: int, now_ms: int,
    ) -> HostedPartition:
        return self.apply_partition_state(
            tp, topic_id=topic_id, log=log, leader_id=self.node_id, leader_epoch=leader_epoch, replicas=replicas,
            isr=isr, min_insync_replicas=min_insync_replicas, now_ms=now_ms,
        )

    def apply_partition_state(
        self, tp: TopicPartition, *, topic_id: uuid.UUID, log: Log, leader_id: int, leader_epoch: int, replicas: Iterable[int],
        isr: Iterable[int], min_insync_replicas: int, now_ms: int, partition_epoch: int = -1, wake_followers: bool = True,
    ) -> HostedPartition:
        """Host `tp` as the metadata image says: led here when `leader_id` is this node, else following
        `leader_id` (-1: no leader at the moment). Calling it again with the same state changes nothing;
        a new leader epoch or ISR is taken as given, and waiting produce and fetch requests re-check."""
        partition = self.partitions.get(tp)
        if partition is None:
            partition = Partition(
                tp, topic_id=topic_id, log=log, local_broker_id=self.node_id, min_insync_replicas=min_insync_replicas,
                first_unstable_offset=lambda: log.first_unstable_offset,
                producer_state=log.producer_state, is_replica_eligible=self._is_replica_eligible,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            )
            self.partitions[tp] = partition
        partition.min_insync_replicas = min_insync_replicas
        if partition_epoch != partition.partition_epoch:
            partition.partition_epoch = partition_epoch
            partition.pending_isr = None  # the image moved on: whatever was proposed is answered
        replicas, isr = tuple(replicas), tuple(isr)
        if (partition.leader_id, partition.leader_epoch, partition.replicas, partition.isr) == (
            leader_id if leader_id >= 0 else None, leader_epoch, replicas, isr
        ):
            return partition
        if (partition.leader_id, partition.leader_epoch) != (leader_id if leader_id >= 0 else None, leader_epoch) \
                and _events_level.isEnabledFor(logging.INFO):
            # This replica's role, logged here on the broker hosting it (Kafka's "Leader/Follower ... starts
            # at leader epoch"); an ISR-only change is the controller's to log (event_log.py).
            events.info("became leader" if leader_id == self.node_id else "became follower" if leader_id >= 0
                        else "replica has no leader", topic=tp.topic, partition=tp.partition, leader=leader_id,
                        leader_epoch=leader_epoch, isr=list(isr), replicas=list(replicas),
                        log_end_offset=partition.log.log_end_offset)
        new_leadership = leader_id == self.node_id and (
            partition.leader_id != leader_id or partition.leader_epoch != leader_epoch or partition.replicas != replicas)
        if leader_id == self.node_id:
            # As Kafka's makeLeader: a new leader epoch begins at the log end in the epoch history, before any
            # batch of it. A follower's divergence is found against it (without it, a follower holding
            # batches of an epoch between the last one written here and this one learns nothing, and is
            # taken as caught up on records this leader does not have: the replication simulation found it).
            plog = partition.log
            if leader_epoch > plog.latest_epoch:
                plog.assign_epoch_start_offset(leader_epoch, plog.log_end_offset)
            partition.make_leader(leader_epoch=leader_epoch, replicas=replicas, isr=isr, now_ms=now_ms)
        elif leader_id >= 0:
            partition.make_follower(leader_id=leader_id, leader_epoch=leader_epoch, replicas=replicas, isr=isr)
        else:
            partition.make_leaderless(leader_epoch=leader_epoch, replicas=replicas, isr=isr)
        # Requests waiting on this partition re-check: a deposed leader's acks=all produce fails now.
        if self._rechecks is not None:
            self._rechecks[tp] = None  # (once for the whole metadata update: see _rechecking_once)
        else:
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
            self.delete_records_purgatory.check_and_complete(tp)
        if new_leadership and wake_followers:
            self._expect_followers(tp, replicas, now_ms)
        return partition

    def _expect_followers(self, tp: TopicPartition, replicas: tuple[int, ...], now_ms: int) -> None:
        """`tp` is newly led here: each follower's parked fetch without it answers now, and the follower is
        waited for until its fetch carries it (the module doc says why)."""
        for follower in replicas:
            if follower == self.node_id:
                continue
            parked = self._parked_follower_fetches.get(follower, {})
            if any(tp in self._partitions_of(parked, op) for op in list(parked)):
                continue  # asked for already (at this epoch: a parked fetch at an older one has completed)
            self._awaited.setdefault(follower, {})[tp] = now_ms + AWAIT_FOLLOWER_MS
            for op in list(parked):
                if op.force_complete():
                    self.follower_fetches_woken += 1

    @staticmethod
    def _partitions_of(parked: dict[DelayedFetch, frozenset[TopicPartition] | None], op: DelayedFetch
                       ) -> frozenset[TopicPartition]:
        tps = parked[op]
        if tps is None:
            tps = parked[op] = frozenset(s.topic_partition for s in op.fetch_partitions)
        return tps

    def _follower_wait_ms(self, replica_id: int, partitions: list[FetchRequestPartition], max_wait_ms: int,
                          now_ms: int) -> int:
        """How long a fetch of follower `replica_id` may be parked: `AWAITED_PARK_MS` while a partition led
        here is waited for and this fetch does not carry it, else its own max_wait_ms."""
        awaited = self._awaited.get(replica_id)
        if not awaited:
            return max_wait_ms
        for p in partitions:
            awaited.pop(p.topic_partition, None)
        for tp, until_ms in list(awaited.items()):
            partition = self.partitions.get(tp)
            if until_ms <= now_ms or partition is None or not partition.is_leader or replica_id not in partition.replicas:
                del awaited[tp]
        if not awaited:
            del self._awaited[replica_id]
            return max_wait_ms
        return min(max_wait_ms, AWAITED_PARK_MS)

    def _is_replica_eligible(self, replica_id: int) -> bool:
        return replica_id not in self.ineligible_replicas

    def set_ineligible_replicas(self, broker_ids, now_ms: int) -> None:
        """The brokers that may not join an ISR changed (fenced, shutting down): a caught-up follower among
        them no longer holds the high watermark of the partitions led here, which may move now."""
        broker_ids = frozenset(broker_ids)
        if broker_ids == self.ineligible_replicas:
            return
        self.ineligible_replicas = broker_ids
        for tp, partition in self.partitions.items():
            if partition.is_leader and partition.maybe_advance_high_watermark(now_ms):
                self.produce_purgatory.check_and_complete(tp)
                self._log_grew(tp)

    def set_lease_expired(self, expired: bool, now_ms: int) -> None:
        """This broker lost (or regained) its lease with the controller: no heartbeat answered for a session.

        From here it cannot tell a lost controller quorum (every broker keeps its last committed metadata,
        and nobody moves anything) from being cut off alone (the controller fenced it and moved its
        leaderships). Kafka's rule holds for both: a broker serves on its last committed metadata, so what
        it leads keeps taking acks=0/1 produce, fetches and group writes, and Metadata still names it.

        The one thing that cannot go on is a replicated partition whose ISR needs a change (a follower in
        it has not caught up within replica.lag.time.max.ms): the shrink needs the controller, so its
        acks=all appends could only wait for their timeout, one after another, and a client connected
        only here would never look for a new leader if there is one. Such a partition is *stranded*: its
        waiting acks=all appends fail with NOT_LEADER_OR_FOLLOWER and new ones are refused so before the
        append (retriable; the client refreshes its metadata and finds the new leader when the cluster
        moved on, or retries here). acks=all goes on where the ISR needs no change (its followers fetch,
        or it has none). Records appended and not committed are truncated if this broker later follows a
        new leader, as any deposed leader's (acks=1's promise is the leader's log only)."""
        self.lease_expired = expired
        self.refresh_stranded(now_ms)

    def refresh_stranded(self, now_ms: int) -> frozenset[TopicPartition]:
        """Recompute the stranded partitions (see set_lease_expired) at `now_ms`: a follower may fall out of
        sync after the lease was lost. Newly stranded partitions' waiting acks=all appends fail now; they
        are returned (the broker logs them)."""
        if not self.lease_expired:
            self.stranded = frozenset()
            return frozenset()
        stranded = frozenset(tp for tp, p in self.partitions.items() if self._is_stranded(p, now_ms))
        new, self.stranded = stranded - self.stranded, stranded
        for tp in sorted(new):
            self.produce_purgatory.check_and_complete(tp)
        return new

    def _is_stranded(self, partition: HostedPartition, now_ms: int) -> bool:
        return (self.lease_expired and partition.is_leader and len(partition.replicas) > 1
                and bool(partition.out_of_sync_replicas(now_ms)))

    def _leading(self, tp: TopicPartition) -> HostedPartition | None:
        """The partition as acks=all sees it: None (not led here) while it is stranded."""
        if tp in self.stranded:
            return None
        return self.partitions.get(tp)

    def proposed_isr_changes(self, now_ms: int) -> list[tuple[HostedPartition, tuple[int, ...]]]:
        """The ISR changes the partitions led here should ask the controller for (see Partition.proposed_isr)."""
        changes = []
        for partition in self.partitions.values():
            if partition.is_leader and len(partition.replicas) > 1:
                new_isr = partition.proposed_isr(now_ms)
                if new_isr is not None:
                    changes.append((partition, new_isr))
        return changes

    def take_offline(self, tp: TopicPartition) -> None:
        """The partition's log directory failed: it is hosted no more, and answers KAFKA_STORAGE_ERROR."""
        self.offline_partitions.add(tp)
        self.remove_partition(tp)

    def replace_log(self, tp: TopicPartition, log) -> None:
        """The partition's log moved to another directory (AlterReplicaLogDirs): the same records, a new
        Log object."""
        partition = self.partitions.get(tp)
        if partition is not None:
            partition.replace_log(log)

    def _storage_failed(self, partition: HostedPartition, error: OSError) -> None:
        if self.on_storage_error is not None:
            self.on_storage_error(partition.log.directory, str(error))

    def remove_partition(self, tp: TopicPartition) -> HostedPartition | None:
        partition = self.partitions.pop(tp, None)
        if partition is not None:
            # Waiting operations re-look the partition up, find it gone and complete with an error.
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
            self.delete_records_purgatory.check_and_complete(tp)
        return partition

    # -- applying committed metadata (Kafka's applyDelta; replication/hosting.py has the theory) --

    def _rechecking_once(self, work: Callable[[], int]) -> int:
        """Run `work` (applying metadata to many partitions) with the waiting requests' re-checks gathered,
        then re-check each waiting request once (`check_and_complete_any`). Per partition, a parked follower
        fetch of thousands of partitions was re-checked once per partition: at 10,000 partitions changing
        at once (an ISR shrink after a broker is fenced) a node's loop stood still for over a minute."""
        if self._rechecks is not None:
            return work()
        self._rechecks = {}
        try:
            return work()
        finally:
            keys, self._rechecks = self._rechecks, None
            if keys:
                self.fetch_purgatory.check_and_complete_any(keys)
                self.produce_purgatory.check_and_complete_any(keys)
                self.delete_records_purgatory.check_and_complete_any(keys)

    def apply_delta(self, update: MetadataUpdate, *, now_ms: int, log_manager: LogManager,
                    topic_settings: TopicSettings, fetchers: FetcherTargets | None, budget: int | None = None) -> int:
        return self._rechecking_once(lambda: self._apply_delta(update, now_ms=now_ms, log_manager=log_manager,
                                                               topic_settings=topic_settings, fetchers=fetchers,
                                                               budget=budget))

    def _apply_delta(self, update: MetadataUpdate, *, now_ms: int, log_manager: LogManager,
                     topic_settings: TopicSettings, fetchers: FetcherTargets | None, budget: int | None) -> int:
        """Make the partitions hosted here what the committed image of `update` says: logs opened, created
        or deleted through `log_manager`, each partition led, followed (its leader added to `fetchers`) or
        leaderless, topic configs applied (`topic_settings`), and the brokers that may not join an ISR noted.

        With `budget` None all of it happens now. Otherwise the partitions that may wait (see hosting.py:
        not led here, not of an internal topic) are queued, at most `budget` of the queue is applied now,
        and the rest by `apply_pending`; returns how many partitions are left queued."""
        image = update.image
        self._hosting_image = image
        self._hosting_ports = (log_manager, topic_settings, fetchers)
        self._min_isr_of = {}
        self.set_ineligible_replicas(
            (b.broker_id for b in image.brokers.values() if b.fenced or b.in_controlled_shutdown), now_ms
        )
        pending = self._pending_hosting
        for removed in update.removed_topics.values():
            for tp in [tp for tp in [*self.partitions, *self.offline_partitions] if tp.topic == removed.name]:
                self._drop(tp, log_manager, fetchers)
            for tp in [tp for tp, (topic_id, _) in pending.items() if topic_id == removed.topic_id]:
                del pending[tp]
        urgent: list[TopicPartition] = []
        for topic_id in update.changed_topic_ids:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                continue
            log_config, self._min_isr_of[topic_id] = topic_settings(image, topic.name)
            log_manager.update_topic_config(topic.name, log_config)
            internal = topic.name.startswith("__")
            previous = update.previous.topics_by_id.get(topic_id)
            # Kafka's getOrCreateLog(isNew): a replica with no log here is created only if the partition is new
            # (not in the image before this update) or no data directory is offline. Otherwise its log may be on
            # the failed directory, and an empty one made elsewhere could be elected leader (it is in the ISR
            # until the controller hears) and serve a log without its records. New: created by this update, and
            # not replayed at start from the metadata log this broker already had (its log may be on the disk).
            fresh_update = not update.is_snapshot and (update.offset < 0 or update.offset > self.metadata_known_through)
            for index in update.partitions_changed(topic):
                tp = TopicPartition(topic.name, index)
                hosted = self.partitions.get(tp)
                if (self.node_id not in topic.partitions[index].replicas and hosted is None
                        and tp not in self.offline_partitions):
                    pending.pop(tp, None)  # not assigned here, and nothing of it is here: nothing to do
                    continue
                new = fresh_update and (previous is None or index not in previous.partitions)
                queued = pending.get(tp)
                if queued is not None and queued[0] == topic_id:
                    new = new or queued[1]  # still not created: as new as when first queued
                pending[tp] = (topic_id, new)
                if budget is None or internal or (hosted is not None and hosted.is_leader):
                    urgent.append(tp)
        for tp in urgent:
            self._host_pending(tp, now_ms)
        return self.apply_pending(now_ms, budget)

    @property
    def pending_hosting(self) -> int:
        """Partitions of the last applied image not yet made what it says (see apply_delta's budget)."""
        return len(self._pending_hosting)

    def is_hosting_pending(self, tp: TopicPartition) -> bool:
        return tp in self._pending_hosting

    def apply_pending(self, now_ms: int, limit: int | None = None, *, wake_followers: bool = True) -> int:
        """Apply up to `limit` (None: all) queued partitions of the last image, oldest first; returns how many
        are left. Each is made what the *last* image says, whichever update queued it.

        `wake_followers` False: a leadership begun here does not wake its followers' parked fetches nor
        shorten their parking (`_expect_followers`). Slices of a large update pass it: their followers host
        the same partitions slice by slice too, and woken every slice, each would re-send a fetch of
        thousands of partitions every AWAITED_PARK_MS for the whole update. Without it a follower asks for
        the partition in its next fetch, within replica.fetch.wait.max.ms, as in Kafka."""
        pending = self._pending_hosting

        def work() -> int:
            done = 0
            while pending and (limit is None or done < limit):
                tp = next(iter(pending))
                self._host_pending(tp, now_ms, wake_followers)
                done += 1
            return len(pending)

        return self._rechecking_once(work)

    def _missing_partition_error(self, tp: TopicPartition) -> ErrorCode:
        """The error for a partition not hosted here: KAFKA_STORAGE_ERROR when its directory failed,
        NOT_LEADER_OR_FOLLOWER when the image has it here but it waits its turn (Kafka's answer for a
        partition its metadata cache knows and the replica manager does not: the client refreshes its
        metadata and retries), else UNKNOWN_TOPIC_OR_PARTITION."""
        if tp in self.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if tp in self._pending_hosting:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def _host_pending(self, tp: TopicPartition, now_ms: int, wake_followers: bool = True) -> None:
        queued = self._pending_hosting.pop(tp, None)
        if queued is None:
            return
        topic_id, new = queued
        image = self._hosting_image
        assert image is not None  # (queued only by apply_delta, which sets it)
        log_manager, topic_settings, fetchers = self._hosting_ports
        topic = image.topics_by_id.get(topic_id)
        p = topic.partitions.get(tp.partition) if topic is not None else None
        if topic is None or p is None:
            return  # (a removed topic's partitions were dropped when the removal was applied)
        if self.node_id not in p.replicas:
            if self.get_partition(tp) is not None or tp in self.offline_partitions:
                self._drop(tp, log_manager, fetchers)  # reassigned away
            return
        if tp in self.offline_partitions:
            return  # its log directory failed: offline here until the broker restarts, as in Kafka
        min_isr = self._min_isr_of.get(topic_id)
        if min_isr is None:
            min_isr = self._min_isr_of[topic_id] = topic_settings(image, topic.name)[1]
        partition = self.get_partition(tp)
        if partition is not None:
            plog = partition.log
        else:
            try:
                plog = log_manager.get_or_create_log(tp, topic_id=topic.topic_id.bytes, now_ms=now_ms, is_new=new)
            except KafkaStorageError as e:
                self.offline_partitions.add(tp)
                if self.on_offline_replica is not None:
                    self.on_offline_replica(tp, str(e))
                return
        self.apply_partition_state(
            tp, topic_id=topic.topic_id, log=plog, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replicas=p.replicas, isr=p.isr, min_insync_replicas=min_isr, now_ms=now_ms,
            partition_epoch=p.partition_epoch, wake_followers=wake_followers,
        )
        if fetchers is not None:
            if p.leader >= 0 and p.leader != self.node_id:
                fetchers.follow(tp, topic_id=topic.topic_id, leader_id=p.leader, leader_epoch=p.leader_epoch)
            else:
                fetchers.unfollow(tp)

    def _drop(self, tp: TopicPartition, log_manager: LogManager, fetchers: FetcherTargets | None) -> None:
        """No longer hosted here (reassigned away, or its topic deleted): unfollowed, removed, log deleted."""
        if fetchers is not None:
            fetchers.unfollow(tp)
        self.remove_partition(tp)
        self.offline_partitions.discard(tp)
        log_manager.delete_log(tp)

    # -- produce --

    def append_records(
        self,
        entries: Mapping[TopicPartition, object],
        *,
        required_acks: int,
        timeout_ms: int,
        now_ms: int,
        respond: Callable[[dict[TopicPartition, ProduceResult]], None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guards: dict[TopicPartition, VerificationGuard] | None = None,
    ) -> None:
        """Append each partition's batches; `respond` gets the results now, or later for acks=all.
        `origin` COORDINATOR: batches this broker built (transaction markers), which clients may not send.
        `verification_guards`: see the module doc (None: transactional writes are not checked)."""
        results: dict[TopicPartition, ProduceResult] = {}
        if verification_guards is None:
            for tp, records in entries.items():
                results[tp] = self._append_one(tp, records, required_acks, now_ms, origin)
        else:
            for tp, records in entries.items():
                results[tp] = self._append_one(tp, records, required_acks, now_ms, origin,
                                               verification_guards.get(tp, SENTINEL))
        if required_acks != -1 or all(r.error_code for r in results.values()) or self._replicated(results):
            respond(results)
            return
        status = {
            tp: ProducePartitionStatus(
                required_offset=r.last_offset + 1 if not r.error_code else -1,
                error_code=ErrorCode(r.error_code),
            )
            for tp, r in results.items()
        }

        def on_done(errors: dict[TopicPartition, ErrorCode]) -> None:
            for tp, code in errors.items():
                if code != ErrorCode.NONE and results[tp].error_code == 0:
                    results[tp] = ProduceResult(error_code=int(code), base_offset=-1, log_start_offset=results[tp].log_start_offset)
            respond(results)

        op = DelayedProduce(
            timeout_ms, now_ms=now_ms, produce_status=status, get_partition=self._leading, response_callback=on_done,
        )
        self.produce_purgatory.try_complete_else_watch(op, op.watch_keys)

    def _replicated(self, results: dict[TopicPartition, ProduceResult]) -> bool:
        """acks=all is satisfied already when every high watermark covers its append (one in-sync replica)."""
        for tp, r in results.items():
            if r.error_code:
                continue
            partition = self.partitions.get(tp)
            if partition is None or partition.high_watermark <= r.last_offset:
                return False
        return True

    def _append_one(self, tp: TopicPartition, records, required_acks: int, now_ms: int,
                    origin: AppendOrigin = AppendOrigin.CLIENT, guard: VerificationGuard | None = None) -> ProduceResult:
        partition = self.partitions.get(tp)
        if partition is None:
            return ProduceResult(error_code=int(self._missing_partition_error(tp)))
        if required_acks == -1 and self.lease_expired and self._is_stranded(partition, now_ms):
            return ProduceResult(error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER), log_start_offset=partition.log_start_offset,
                                 error_message="no controller has answered this broker for a session and the ISR "
                                               "needs a change it cannot make: the leadership may have moved")
        try:
            partition.check_append_as_leader(required_acks)
            if origin == AppendOrigin.CLIENT:
                info = partition.log.append(records, leader_epoch=partition.leader_epoch, now_ms=now_ms,
                                            verification_guard=guard)
            else:
                info = partition.log.append(records, leader_epoch=partition.leader_epoch, now_ms=now_ms, origin=origin)
        except (StorageError, ReplicationError) as e:
            return ProduceResult(error_code=error_code_of(e), log_start_offset=partition.log_start_offset,
                                 error_message=str(e) or None, record_errors=getattr(e, "record_errors", ()))
        except OSError as e:  # the disk failed under us: the client may retry elsewhere
            self._storage_failed(partition, e)
            return ProduceResult(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), error_message=str(e))
        if partition.maybe_advance_high_watermark(now_ms):
            self.produce_purgatory.check_and_complete(tp)
        self._log_grew(tp)  # consumers wait on the HW, followers on the log end: both may go on
        self.topic_stats.appended(tp.topic, len(records), info.last_offset - info.first_offset + 1)
        return ProduceResult(
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time_ms=info.log_append_time,  # NO_TIMESTAMP unless the topic uses LogAppendTime
            log_start_offset=info.log_start_offset,
        )

    def maybe_start_transaction_verification(self, tp: TopicPartition, producer_id: int, sequence: int, epoch: int,
                                             now_ms: int) -> VerificationGuard | None:
        """The guard for a producer's transactional write to `tp`, taken before its coordinator is asked:
        SENTINEL when its transaction is open on the partition already (no need to ask), None when the
        partition is not led here (the append answers why)."""
        partition = self.partitions.get(tp)
        if partition is None or not partition.is_leader:
            return None
        return partition.log.maybe_start_transaction_verification(producer_id, sequence, epoch, now_ms)

    def append_internal(self, tp: TopicPartition, batches, *, now_ms: int):
        """Append batches written by this broker's coordinators (trusted, never a client's)."""
        partition = self.partitions.get(tp)
        if partition is None:
            raise ReplicationError(f"{tp} is not hosted here")
        try:
            info = partition.log.append(batches, leader_epoch=partition.leader_epoch, now_ms=now_ms,
                                        origin=AppendOrigin.COORDINATOR)
        except OSError as e:  # the coordinator's write fails as a client's would, and the directory goes offline
            self._storage_failed(partition, e)
            raise KafkaStorageError(f"{tp}: {e}") from e
        if partition.maybe_advance_high_watermark(now_ms):
            self.produce_purgatory.check_and_complete(tp)
        self._log_grew(tp)
        return info

    def _log_grew(self, tp: TopicPartition) -> None:
        if not self.fetch_purgatory.watched(tp):
            return  # nobody waits on this partition; a fetch arriving later reads the log itself
        if self.defer_fetch_completion:
            self._moved.add(tp)
        else:
            self.fetch_purgatory.check_and_complete(tp)

    @property
    def has_deferred_fetches(self) -> bool:
        return bool(self._moved)

    def complete_delayed_fetches(self) -> int:
        """Retry the fetches waiting on partitions whose log grew since the last call (see __init__)."""
        moved, self._moved = self._moved, set()
        return sum(self.fetch_purgatory.check_and_complete(tp) for tp in moved)

    # -- fetch --

    def fetch_records(
        self,
        partitions: list[FetchRequestPartition],
        *,
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        isolation: FetchIsolation,
        now_ms: int,
        respond: Callable[[dict[TopicPartition, FetchResult]], None],
        replica_id: int = -1,
        client_metadata: ClientMetadata | None = None,
    ) -> None:
        """A consumer's fetch (`replica_id` -1) or a follower's (its broker id: reads up to the log end
        and moves that follower's position, which may advance the high watermark). A consumer's fetch
        with `client_metadata` (Fetch v11+) may be served by a follower, and may be pointed elsewhere by
        the leader (a preferred read replica, answered at once)."""
        # KIP-1166: the high watermarks before this fetch moved them (a follower's fetch may advance them).
        hw_before = self._high_watermarks(partitions) if replica_id >= 0 else None
        results = self.read(partitions, max_bytes=max_bytes, isolation=isolation, replica_id=replica_id, now_ms=now_ms,
                            client_metadata=client_metadata)
        if replica_id >= 0 and self._awaited:
            max_wait_ms = self._follower_wait_ms(replica_id, partitions, max_wait_ms, now_ms)
        total = sum(r.size for r in results.values())
        errored = any(r.error_code or r.preferred_read_replica >= 0 for r in results.values())
        if max_wait_ms <= 0 or total >= min_bytes or errored or not partitions:
            respond(results)
            return
        advanced: list[TopicPartition] = []
        if hw_before:
            for p in partitions:
                before = hw_before.get(p.topic_partition)
                if before is None:
                    continue
                if p.high_watermark < before:  # the follower missed a high watermark: not parked (KIP-1166)
                    respond(results)
                    return
                partition = self.partitions.get(p.topic_partition)
                if partition is not None and p.high_watermark < partition.high_watermark:
                    advanced.append(p.topic_partition)
        statuses = [
            FetchPartitionStatus(p.topic_partition, p.fetch_offset, p.max_bytes, p.current_leader_epoch,
                                 p.high_watermark if not advanced else NO_HIGH_WATERMARK)
            for p in partitions
        ]

        def respond_later() -> None:
            if replica_id >= 0:
                parked = self._parked_follower_fetches.get(replica_id)
                if parked is not None:
                    parked.pop(op, None)
                    if not parked:
                        del self._parked_follower_fetches[replica_id]
            respond(self.read(partitions, max_bytes=max_bytes, isolation=isolation, replica_id=replica_id, now_ms=now_ms,
                              client_metadata=client_metadata))

        op = DelayedFetch(
            max_wait_ms, now_ms=now_ms, fetch_partitions=statuses, min_bytes=min_bytes, get_partition=self.get_partition,
            bytes_available=self._bytes_available, respond=respond_later, isolation=isolation,
            fetch_only_from_leader=replica_id >= 0 or client_metadata is None,
        )
        if replica_id >= 0:
            self._parked_follower_fetches.setdefault(replica_id, {})[op] = None
        if self.fetch_purgatory.try_complete_else_watch(op, op.watch_keys) or not advanced:
            return
        # This fetch advanced the high watermark past the one its follower knows, which may have completed
        # an acks=all produce: the follower is answered with the new one (KIP-1166) right after that
        # produce's answer is written, not before it. The fetch was parked without the high watermark
        # condition; armed now, it is retried with the partitions whose logs grew (see __init__).
        op.fetch_partitions = tuple(
            FetchPartitionStatus(p.topic_partition, p.fetch_offset, p.max_bytes, p.current_leader_epoch, p.high_watermark)
            for p in partitions
        )
        if self.defer_fetch_completion:
            self._moved.update(advanced)
        else:
            self.fetch_purgatory.check_and_complete(advanced[0])

    def _high_watermarks(self, partitions: list[FetchRequestPartition]) -> dict[TopicPartition, int] | None:
        """The high watermarks of the partitions led here whose follower said the one it knows (v18)."""
        out: dict[TopicPartition, int] | None = None
        for p in partitions:
            if p.high_watermark != NO_HIGH_WATERMARK:
                partition = self.partitions.get(p.topic_partition)
                if partition is not None and partition.is_leader:
                    if out is None:
                        out = {}
                    out[p.topic_partition] = partition.high_watermark
        return out

    @staticmethod
    def _bytes_available(partition: HostedPartition, fetch_offset: int, end_offset: int) -> int:
        if end_offset <= fetch_offset:
            return 0
        info = partition.log.read(fetch_offset, 1, max_offset=end_offset, min_one_message=True)
        return max(1, sum(r[2] for r in info.regions))

    def read(
        self, partitions: list[FetchRequestPartition], *, max_bytes: int, isolation: FetchIsolation,
        replica_id: int = -1, now_ms: int = 0, client_metadata: ClientMetadata | None = None,
    ) -> dict[TopicPartition, FetchResult]:
        results: dict[TopicPartition, FetchResult] = {}
        remaining = max_bytes
        first_with_data = True
        # Followers fetch from the leader only; so do consumers before Fetch v11, which know no other replica.
        only_from_leader = replica_id >= 0 or client_metadata is None
        consumer = None if only_from_leader else client_metadata  # a consumer that may read from a follower
        for p in partitions:
            tp = p.topic_partition
            partition = self.partitions.get(tp)
            if partition is None:
                results[tp] = FetchResult(error_code=int(self._missing_partition_error(tp)))
                continue
            try:
                if consumer is not None:
                    preferred = self._preferred_read_replica(partition, p, consumer, now_ms)
                    if preferred is not None:
                        results[tp] = preferred
                        continue
                    self._check_serves_consumers(partition)
                snap = partition.fetch_offset_snapshot(p.current_leader_epoch, fetch_only_from_leader=only_from_leader)
            except (StorageError, ReplicationError) as e:
                results[tp] = FetchResult(error_code=error_code_of(e))
                continue
            result = FetchResult(
                high_watermark=snap.high_watermark, last_stable_offset=snap.last_stable_offset,
                log_start_offset=snap.log_start_offset,
            )
            end = snap.end_offset(isolation)
            if replica_id >= 0:
                if replica_id not in partition.replicas or replica_id == self.node_id:
                    results[tp] = FetchResult(error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
                    continue
                diverging = self._diverging_epoch(partition, p)
                if diverging is not None:
                    result.diverging_epoch = diverging
                    results[tp] = result
                    continue
            if p.fetch_offset < snap.log_start_offset or p.fetch_offset > snap.log_end_offset:
                result.error_code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
            elif p.fetch_offset < end and (remaining > 0 or first_with_data):
                budget = min(p.max_bytes, remaining)
                try:
                    info = partition.log.read(p.fetch_offset, budget, max_offset=end, min_one_message=first_with_data)
                except OffsetOutOfRangeError:
                    result.error_code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                except StorageError as e:
                    result.error_code = error_code_of(e)
                except OSError as e:
                    result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                    self._storage_failed(partition, e)
                else:
                    result.records = list(info.regions)
                    result.size = sum(r[2] for r in info.regions)
                    if result.size:
                        first_with_data = False
                        remaining -= result.size
                        if isolation is FetchIsolation.TXN_COMMITTED:
                            result.aborted_transactions = self._aborted_in(partition, p.fetch_offset, end)
                        if not partition.is_leader:
                            self.follower_consumer_reads += 1
            if replica_id >= 0 and not result.error_code:
                self._follower_fetched(partition, replica_id, p.fetch_offset, now_ms, p.log_start_offset)
            results[tp] = result
        return results

    def _preferred_read_replica(self, partition: HostedPartition, p: FetchRequestPartition, client: ClientMetadata,
                                now_ms: int) -> FetchResult | None:
        """As leader, the answer pointing a consumer to another replica (KIP-392, as Kafka's
        findPreferredReadReplica): the candidates are the leader and the in-sync, caught-up followers known
        to hold the fetch offset (reachable on the client's listener; `Partition.is_read_replica_candidate`
        says why caught up too); None when the selector keeps the leader."""
        selector = self.replica_selector
        if selector is None or not partition.is_leader:
            return None
        listener = client.listener_name
        leader_reachable, leader_rack = self.replica_rack(self.node_id, listener)
        leader = ReplicaView(self.node_id, leader_rack, partition.log_end_offset, 0)
        candidates = [leader]
        for replica_id in partition.isr:
            if replica_id == self.node_id or not partition.is_read_replica_candidate(replica_id, now_ms):
                continue
            state = partition.follower_state(replica_id)
            # (Kafka also checks the follower's own log start offset, which it sends in its fetches; a
            # follower's log start follows the leader's, so the leader's stands in for it.)
            if state is None or not partition.log_start_offset <= p.fetch_offset <= state.log_end_offset:
                continue
            reachable, rack = self.replica_rack(replica_id, listener)
            if not reachable:
                continue
            caught_up = state.last_caught_up_time_ms
            since_ms = now_ms - caught_up if caught_up is not None else now_ms
            candidates.append(ReplicaView(replica_id, rack, state.log_end_offset, since_ms))
        chosen = selector.select(client, leader, candidates)
        if chosen.broker_id == self.node_id:
            return None
        snap = partition.fetch_offset_snapshot(p.current_leader_epoch)
        self.preferred_replica_answers += 1
        return FetchResult(
            high_watermark=snap.high_watermark, last_stable_offset=snap.last_stable_offset,
            log_start_offset=snap.log_start_offset, preferred_read_replica=chosen.broker_id,
        )

    def _check_serves_consumers(self, partition: HostedPartition) -> None:
        """A follower serves consumers while it is in the ISR. Kafka's follower serves any consumer that
        comes; here one that left the ISR answers NOT_LEADER_OR_FOLLOWER, which sends the consumer back to
        the leader (Java and librdkafka clients both do so) rather than leaving it on a replica that lags."""
        if partition.is_leader:
            return
        if partition.leader_id is None or self.node_id not in partition.isr:
            raise NotLeaderOrFollowerError(f"{partition.topic_partition}: this replica is not in sync; fetch from the leader")

    def follower_high_watermarks_moved(self, tps: Iterable[TopicPartition]) -> int:
        """A follower's fetcher applied a response: the consumers waiting here for data below these
        partitions' high watermarks (KIP-392 reads from a follower) look again."""
        done = 0
        for tp in tps:
            if self.fetch_purgatory.watched(tp):
                done += self.fetch_purgatory.check_and_complete(tp)
        return done

    @staticmethod
    def _aborted_in(partition: HostedPartition, fetch_offset: int, end_offset: int) -> list[tuple[int, int]] | None:
        """(producer id, first offset) of the aborted transactions a read_committed fetch from
        `fetch_offset` may meet: up to the end of the segment it read from (a read stays in one), or the
        LSO. None when there are none, so the answer can still be packed."""
        log = partition.log
        if not log.has_aborted_txns:
            return None
        segments = log.segments
        following = bisect.bisect_right(segments, fetch_offset, key=_base_offset)
        upper = min(end_offset, segments[following].base_offset) if following < len(segments) else end_offset
        found = log.collect_aborted_transactions(fetch_offset, upper)
        return [(t.producer_id, t.first_offset) for t in found] or None

    @staticmethod
    def _diverging_epoch(partition: HostedPartition, p: FetchRequestPartition) -> tuple[int, int] | None:
        """Where a follower's log stops agreeing with this leader's (KIP-320, as Kafka's Partition does it):
        its last fetched epoch ends here earlier than its fetch offset, or is not in this log at all."""
        if p.last_fetched_epoch < 0:
            return None
        epoch, end_offset = partition.log.end_offset_for_epoch(p.last_fetched_epoch)
        if epoch < 0:
            return None
        if end_offset < p.fetch_offset or epoch < p.last_fetched_epoch:
            return epoch, end_offset
        return None

    def _follower_fetched(self, partition: HostedPartition, replica_id: int, fetch_offset: int, now_ms: int,
                          log_start_offset: int = -1) -> None:
        """A follower asked from `fetch_offset`: it holds everything before it. The high watermark may move,
        and with it acks=all produce waiting here and consumers waiting for data below it; its log start
        offset may complete a waiting DeleteRecords."""
        tp = partition.topic_partition
        state = partition.follower_state(replica_id)
        start_before = state.log_start_offset if state is not None else -1
        if partition.update_follower_fetch_state(replica_id, fetch_offset, now_ms, log_start_offset):
            self.produce_purgatory.check_and_complete(tp)
            self._log_grew(tp)
        if log_start_offset > start_before and self.delete_records_purgatory.watched(tp):
            self.delete_records_purgatory.check_and_complete(tp)

    # -- DeleteRecords

    def delete_records(self, offsets: list[tuple[TopicPartition, int]], *, timeout_ms: int, now_ms: int,
                       respond: Callable[[list[tuple[int, int]]], None]) -> None:
        """DeleteRecords as Kafka's ReplicaManager.deleteRecords: each partition's leader moves its log
        start to the offset (-1: the high watermark; past it OFFSET_OUT_OF_RANGE; a compacted-only topic
        POLICY_VIOLATION), then the answer waits until the low watermark (the smallest log start offset of
        the replicas on live brokers) has reached it, or `timeout_ms` (REQUEST_TIMED_OUT). `respond` gets
        (error code, low watermark) for each entry of `offsets`, in order."""
        results: list[tuple[int, int]] = []
        required: dict[int, tuple[TopicPartition, int]] = {}
        for tp, offset in offsets:
            results.append(self._delete_records_one(tp, offset, now_ms))
            if results[-1][0] == 0:
                required[len(results) - 1] = (tp, self.partitions[tp].log_start_offset)
        if all(results[i][1] >= target for i, (_tp, target) in required.items()):
            respond(results)
            return
        op = DelayedDeleteRecords(timeout_ms, now_ms=now_ms, required=required, results=results,
                                  low_watermark=self._low_watermark, respond=respond)
        self.delete_records_purgatory.try_complete_else_watch(op, list({tp for tp, _ in required.values()}))

    def _delete_records_one(self, tp: TopicPartition, offset: int, now_ms: int) -> tuple[int, int]:
        partition = self.partitions.get(tp)
        if partition is None:
            code = ErrorCode.KAFKA_STORAGE_ERROR if tp in self.offline_partitions else ErrorCode.NOT_LEADER_OR_FOLLOWER
            return int(code), -1
        try:
            if not partition.is_leader:
                raise NotLeaderOrFollowerError(f"{tp} is not led here")
            log = partition.log
            if not log.config.delete:
                return int(ErrorCode.POLICY_VIOLATION), -1
            target = partition.high_watermark if offset == -1 else offset
            if target < 0 or target > partition.high_watermark:
                return int(ErrorCode.OFFSET_OUT_OF_RANGE), -1
            log.delete_records_before(target, now_ms=now_ms)
        except (StorageError, ReplicationError) as e:
            return error_code_of(e), -1
        except OSError as e:
            self._storage_failed(partition, e)
            return int(ErrorCode.KAFKA_STORAGE_ERROR), -1
        return 0, partition.low_watermark(self._is_live)

    def _is_live(self, broker_id: int) -> bool:
        return broker_id not in self.ineligible_replicas and self.is_broker_alive(broker_id)

    def _low_watermark(self, tp: TopicPartition) -> int | None:
        """None when `tp` is no longer led here."""
        partition = self.partitions.get(tp)
        if partition is None or not partition.is_leader:
            return None
        return partition.low_watermark(self._is_live)
