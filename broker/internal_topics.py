"""The internal topics coordinators keep their state in (`__consumer_offsets`, later `__transaction_state`).

A coordinator (coordinator/runtime.py) knows nothing of storage: it writes and loads its partitions
through a `PartitionWriter`. `InternalTopicWriter` is that writer for one internal topic of this broker:

- `append` writes the records as one batch through the replica manager (as the coordinator's, never a
  client's, append) and says whether they are committed already. With one replica the high watermark
  moves with the append, so they are; otherwise it returns the offset to wait for. With
  `enforce_min_isr` it is an acks=all append, as Kafka's coordinators write: refused (NOT_ENOUGH_REPLICAS,
  before anything is written, so the runtime replays nothing) while the partition's ISR is smaller than
  its min.insync.replicas; the coordinator answers that COORDINATOR_NOT_AVAILABLE. The min.insync.replicas
  that counts is Kafka's effective one (Partition.effectiveMinIsr): the topic's, capped at its replication
  factor, so a broker-wide `min.insync.replicas=2` does not refuse every write to an offsets topic of one
  replica. `is_under_min_isr` is the same test for the group coordinator's runtime, which answers a write
  whose ISR shrank below it after the append NOT_ENOUGH_REPLICAS_AFTER_APPEND (coordinator/runtime.py).
  The transaction coordinator does not take that answer: a Prepare record the high watermark passed is
  committed, its markers must follow, and an EndTxn answered as failed would leave the transaction in
  PrepareCommit with no one to send them (Kafka's TransactionStateManager answers it an error but leaves
  its cache Ongoing, so the retried EndTxn writes Prepare again; the replayed shard here cannot).
  Both coordinators write this way: `__transaction_state` is created with `transaction.state.log.min.isr`
  as its min.insync.replicas; `__consumer_offsets` with none of its own (Kafka's
  groupMetadataTopicConfigs sets cleanup.policy, compression.type and segment.bytes only, and there is no
  `offsets.topic.min.isr`), so the broker-wide `min.insync.replicas` applies to it, capped as above.
  Kafka 4's CoordinatorPartitionWriter appends with acks=1 and, under KIP-966, keeps the high watermark
  still while the ISR is below min.insync.replicas, so its commit waits out offsets.commit.timeout.ms and
  is answered COORDINATOR_NOT_AVAILABLE; refusing up front gives the client the same answer at once and
  puts nothing in the log that a later leader might have to drop.
- `register_listener` hooks the partition's high watermark (replication/partition.py): every time it
  advances the coordinator hears `on_committed(partition, high_watermark)`, which releases the responses
  held for records now on every in-sync replica. The runtime registers on load and deregisters on unload.
- `read_all` reads the partition back, batch by batch, for a coordinator loading it: plain records as
  (key, value), records of transactional batches (TxnOffsetCommit) as `TransactionalRecord`s and the
  transaction markers as `TransactionMarker`s, in log order, each batch's records preceded by its
  `LogPosition` (the offset after it); with `high_watermark` the runtime tells which of them are not
  committed yet, which the group coordinator's OffsetFetch must not show (coordinator/group/offsets.py).

`ensure_internal_topic` creates the topic on first use, compacted, with its own segment size and its
full replication factor, never fewer replicas: while fewer brokers are alive than the factor asks for it
creates nothing (Kafka's getOrCreateInternalTopic, and its controller, refuse alike), the coordinator's
FindCoordinator answers COORDINATOR_NOT_AVAILABLE, and the next FindCoordinator tries again
(`ensure_coordinator_topic`), so a short-handed first use never fixes a smaller factor for good.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import structlog

from odradek.coordinator.partitioning import CONSUMER_OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.protocol.errors import ErrorCode, error_code_of
from odradek.coordinator.runtime import LogPosition, TransactionalRecord, TransactionMarker
from odradek.protocol.records import ABORT, COMMIT, build_batch, iter_batches, iter_records, parse_control_record
from odradek.replication.errors import NotEnoughReplicasError, NotLeaderOrFollowerError
from odradek.metadata.image import MetadataError
from odradek.replication.partition import Partition
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.names import TopicPartition

if TYPE_CHECKING:
    from odradek.metadata.publisher import MetadataPublisher

    from .config import BrokerConfig
    from .controller_channel import ControllerChannel

__all__ = ["InternalTopicSpec", "InternalTopicWriter", "ensure_coordinator_topic", "ensure_internal_topic",
           "offsets_topic_spec", "share_state_topic_spec", "transaction_state_topic_spec"]

log = structlog.get_logger("odradek.internal_topics")

_READ_CHUNK_BYTES = 1 << 20
_MAX_UNCOMPRESSED_BATCH_BYTES = 64 << 20


class InternalTopicWriter:
    """A coordinator's `PartitionWriter` over the partitions of internal topic `topic` hosted here."""

    def __init__(self, replicas: ReplicaManager, topic: str, *, enforce_min_isr: bool = False) -> None:
        self.replicas = replicas
        self.topic = topic
        self.enforce_min_isr = enforce_min_isr
        self._listeners: dict[int, tuple[Partition, Callable[[TopicPartition, int], None]]] = {}

    def _partition(self, index: int) -> Partition:
        partition = self.replicas.get_partition(TopicPartition(self.topic, index))
        if partition is None:
            raise RuntimeError(f"{self.topic}-{index} is not hosted here")
        return partition

    def append(self, partition: int, records: list[tuple[bytes | None, bytes | None]], now_ms: int,
               producer: tuple[int, int] | None = None) -> int | None:
        if not records:
            return None
        if producer is None:
            batch = bytearray(build_batch([(key, value, None, now_ms) for key, value in records]))
        else:  # a transactional batch of the producer (no sequence: Kafka's coordinators write none)
            batch = bytearray(build_batch([(key, value, None, now_ms) for key, value in records],
                                          producer_id=producer[0], producer_epoch=producer[1], transactional=True))
        if TopicPartition(self.topic, partition) in self.replicas.stranded:
            # This broker has not heard from a controller for a session and the partition's ISR needs a
            # shrink only a controller can make (replica_manager.set_lease_expired): the write could never
            # commit here, and if the cluster moved on another broker coordinates now. NOT_COORDINATOR at
            # once (nothing written) sends the client to find the coordinator again, instead of holding it
            # for request.timeout.ms per attempt (a transactional producer's init_transactions then timed
            # out for minutes against a coordinator cut off from the other brokers).
            raise NotLeaderOrFollowerError(f"{self.topic}-{partition} is stranded here: no controller answers "
                                           "and its ISR needs a change")
        if self.enforce_min_isr:
            # Kafka's acks=-1 check before the append (Partition.appendRecordsToLeader): nothing is written,
            # so the shard does not run ahead of a log that could not take the records.
            hosted = self._partition(partition)
            if len(hosted.isr) < _effective_min_isr(hosted):
                raise NotEnoughReplicasError(
                    f"{self.topic}-{partition}: ISR {sorted(hosted.isr)} is smaller than "
                    f"min.insync.replicas={_effective_min_isr(hosted)}")
        info = self.replicas.append_internal(TopicPartition(self.topic, partition), batch, now_ms=now_ms)
        end_offset = info.last_offset + 1
        # None: committed already (the high watermark moved with the append); otherwise the runtime holds
        # the response until the partition's listener reports a high watermark at or past this offset.
        return None if self._partition(partition).high_watermark >= end_offset else end_offset

    def is_under_min_isr(self, partition: int) -> bool:
        """Whether the partition's ISR is below its effective min.insync.replicas (always False without
        `enforce_min_isr`, or for a partition no longer hosted here)."""
        if not self.enforce_min_isr:
            return False
        hosted = self.replicas.get_partition(TopicPartition(self.topic, partition))
        return hosted is not None and len(hosted.isr) < _effective_min_isr(hosted)

    def read_all(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        log = self._partition(partition).log
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            data = log.read_bytes(offset, _READ_CHUNK_BYTES, max_offset=log.log_end_offset, min_one_message=True)
            advanced = False
            for pos, header in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                yield LogPosition(header.next_offset)
                batch = memoryview(data)[pos : pos + header.size]
                if header.is_control:
                    if header.producer_id >= 0:
                        for record in iter_records(batch, max_uncompressed_bytes=_MAX_UNCOMPRESSED_BATCH_BYTES):
                            kind, _ = parse_control_record(record)
                            if kind in (ABORT, COMMIT):
                                yield TransactionMarker(header.producer_id, header.producer_epoch, kind == COMMIT)
                elif header.is_transactional:
                    for record in iter_records(batch, max_uncompressed_bytes=_MAX_UNCOMPRESSED_BATCH_BYTES):
                        if record.offset >= offset:
                            yield TransactionalRecord(record.key, record.value, header.producer_id, header.producer_epoch)
                else:
                    for record in iter_records(batch, max_uncompressed_bytes=_MAX_UNCOMPRESSED_BATCH_BYTES):
                        if record.offset >= offset:
                            yield record.key, record.value
                offset = header.next_offset
                advanced = True
            if not advanced:
                break

    def high_watermark(self, partition: int) -> int:
        return self._partition(partition).high_watermark

    def register_listener(self, partition: int, on_committed: Callable[[int, int], None]) -> None:
        """Call `on_committed(partition, high_watermark)` whenever the partition's high watermark advances;
        replaces the listener registered for `partition` before."""
        self.deregister_listener(partition)
        hosted = self._partition(partition)

        def listener(_: TopicPartition, high_watermark: int) -> None:
            on_committed(partition, high_watermark)

        hosted.add_listener(listener)
        self._listeners[partition] = (hosted, listener)

    def deregister_listener(self, partition: int) -> None:
        registered = self._listeners.pop(partition, None)
        if registered is not None:
            hosted, listener = registered
            hosted.remove_listener(listener)


def _effective_min_isr(hosted: Partition) -> int:
    """Kafka's Partition.effectiveMinIsr: min.insync.replicas, but never more than the replicas there are."""
    return min(hosted.min_insync_replicas, max(len(hosted.replicas), 1))


@dataclass(frozen=True, slots=True)
class InternalTopicSpec:
    """How a coordinator's topic is created: Kafka's offsetsTopicConfigs / transactionTopicConfigs."""

    name: str
    num_partitions: int
    replication_factor: int
    segment_bytes: int
    extra_configs: tuple[tuple[str, str], ...] = ()


def offsets_topic_spec(cfg) -> InternalTopicSpec:
    return InternalTopicSpec(CONSUMER_OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
                             cfg.offsets_topic_replication_factor, cfg.offsets_topic_segment_bytes)


def transaction_state_topic_spec(cfg) -> InternalTopicSpec:
    # min.insync.replicas as configured, as Kafka's TransactionLog sets it: the single-node defaults are RF 1
    # and min.isr 1 (Kafka's own sample server.properties), a cluster sets 3 and 2 (`odradek cluster`).
    return InternalTopicSpec(TRANSACTION_STATE_TOPIC, cfg.transaction_state_log_num_partitions,
                             cfg.transaction_state_log_replication_factor, cfg.transaction_state_log_segment_bytes,
                             (("min.insync.replicas", str(cfg.transaction_state_log_min_isr)),))


def share_state_topic_spec(cfg) -> InternalTopicSpec:
    # Kafka's ShareCoordinatorService.shareGroupStateTopicConfigs: NOT compacted (KIP-932). A share-partition's
    # state is a snapshot plus the updates after it, under two different keys; compaction would keep only the
    # last update and lose the ones between. Records stay until the share coordinator prunes them (retention.ms
    # -1), and min.insync.replicas is share.coordinator.state.topic.min.isr.
    return InternalTopicSpec(SHARE_GROUP_STATE_TOPIC, cfg.share_coordinator_state_topic_num_partitions,
                             cfg.share_coordinator_state_topic_replication_factor,
                             cfg.share_coordinator_state_topic_segment_bytes,
                             (("cleanup.policy", "delete"), ("retention.ms", "-1"),
                              ("min.insync.replicas", str(cfg.share_coordinator_state_topic_min_isr))))


class CoordinatorTopicParts(Protocol):
    """What creating a coordinator's topic reads: the settings, the image, the controller (the services)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def metadata(self) -> MetadataPublisher: ...

    @property
    def controller(self) -> ControllerChannel: ...


def ensure_coordinator_topic(services: CoordinatorTopicParts, key_type: int) -> int | None:
    """FindCoordinator's part (key type 0 groups, 1 transactions, 2 share-group state): create the
    coordinator's topic while it is missing."""
    if key_type == 0:
        return ensure_internal_topic(services.metadata, services.controller, offsets_topic_spec(services.config))
    if key_type == 1:
        return ensure_internal_topic(services.metadata, services.controller,
                                     transaction_state_topic_spec(services.config))
    if key_type == 2:
        return ensure_internal_topic(services.metadata, services.controller, share_state_topic_spec(services.config))
    return None


_short_handed_logged: dict[str, int] = {}


def ensure_internal_topic(metadata: MetadataPublisher, controller: ControllerChannel, spec: InternalTopicSpec) -> int | None:
    """Create internal topic `spec.name` (compacted) through the controller if it does not exist; its number
    of partitions, or None while it cannot be created yet (fewer live brokers than its replication factor).
    A local controller creates it at once; in a cluster the creation goes to the active controller and this
    returns the number asked for: the coordinator's partitions load as their leadership reaches this broker,
    and FindCoordinator answers COORDINATOR_NOT_AVAILABLE until then."""
    from .controller_channel import NewTopic

    name = spec.name
    image = metadata.image
    existing = image.topics_by_name.get(name)
    if existing is not None:
        return len(existing.partitions)
    # The brokers the controller may place replicas on: unfenced and not shutting down.
    live = sum(1 for b in image.brokers.values() if not b.fenced and not b.in_controlled_shutdown)
    if live < spec.replication_factor:
        if _short_handed_logged.get(name) != live:  # once per count, not once per client retry
            _short_handed_logged[name] = live
            log.warning("internal topic not created yet: fewer live brokers than its replication factor "
                        "(clients are answered COORDINATOR_NOT_AVAILABLE until there are enough)", topic=name,
                        live_brokers=live, replication_factor=spec.replication_factor)
        return None
    config = {"cleanup.policy": "compact", "segment.bytes": str(spec.segment_bytes), **dict(spec.extra_configs)}
    created = controller.create_topics(
        [NewTopic(name, spec.num_partitions, spec.replication_factor, config)], internal=True)

    def check(d) -> None:
        error = d.failed_with
        if error is None:
            (outcome,) = d.result()
            error = outcome if isinstance(outcome, MetadataError) else None
        if error is not None and error_code_of(error) != ErrorCode.TOPIC_ALREADY_EXISTS:
            log.warning("internal topic not created", topic=name, error=str(error))

    created.add_callback(check)
    if created.done and created.failed_with is None:
        (outcome,) = created.result()
        if isinstance(outcome, MetadataError) and outcome.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            if outcome.error_code == ErrorCode.INVALID_REPLICATION_FACTOR:
                return None  # the controller counts the brokers too (fenced ones are no use): next time
            raise outcome
    existing = metadata.image.topics_by_name.get(name)
    return len(existing.partitions) if existing is not None else spec.num_partitions
