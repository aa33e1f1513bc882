"""The share coordinator: share-group state (KIP-932) over the shards of `__share_group_state` this broker leads.

Theory of operation
-------------------
A share-partition (group, topic id, partition) lives in partition
`share_state_partition("group:topic_id:partition", n)` of `__share_group_state` (coordinator/partitioning.py:
Kafka's hash of the coordinator key, the topic id written as Kafka writes a Uuid). The broker leading that
partition is the share coordinator for the key: it loads the partition's records when it becomes leader
(`on_elected`) and drops them when it stops (`on_resigned`), exactly as the group and transaction
coordinators do with their topics, on the same runtime (coordinator/runtime.py). A request for a key whose
partition is not loaded here is answered NOT_COORDINATOR; the caller finds the coordinator again
(FindCoordinator key type 2) and retries.

Every operation, reads included, runs as a runtime write: an operation that writes nothing still waits for
the writes before it to be committed, so a read never reports state that a failover could take back (Kafka
reads the last committed state). Writes are acks=all appends bounded by
`share.coordinator.write.timeout.ms`; a refusal or a timeout is answered as Kafka's
CoordinatorOperationExceptionHelper maps it (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), per partition.

Two levels: `initialize` / `read` / `write` / `delete` / `read_summary` take one share-partition and answer a
`Deferred[ShareStateAnswer]` that never fails (the broker's persister calls these when this broker is the
coordinator, with no request to build); `initialize_state` / `read_state` / `write_state` / `delete_state` /
`read_state_summary` take the decoded request of APIs 83-87 and answer its response, one entry per partition
of the request (Kafka's ShareCoordinatorService splits a request the same way, one operation per key).

Pruning. `__share_group_state` is `cleanup.policy=delete` with `retention.ms=-1` (compaction would drop the
updates a snapshot does not cover), so, as in Kafka, the coordinator itself deletes what no load needs.
With `log_end_offset` and `delete_records_before` given (the broker's wiring gives both), each loaded
partition runs two timers on the runtime's timing wheel:

* every `share.coordinator.cold.partition.snapshot.interval.ms` (Kafka's default 5 min), a cold-snapshot
  round (`ShareCoordinatorShard.snapshot_cold`): a ShareSnapshot of each share-partition that had none
  since the previous round, after which the log below the previous round's mark is redundant;
* every `share.coordinator.state.topic.prune.interval.ms` (default 5 min), the records below the newest
  redundant offset whose round is durable are deleted (`delete_records_before`: DeleteRecords on the
  partition, replicated to followers as their log start offset).

So the log keeps at most about two rounds of history, plus each share-partition's last snapshot, and a
load replays exactly the state it replayed before the deletion. A new leader starts the rounds afresh.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateResponse,
)
from odradek.purgatory.deferred import Deferred
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.share import RecordState, StateBatch

from ..group.group_coordinator import error_code_of
from ..partitioning import share_coordinator_key, share_state_partition
from ..runtime import Batch, CoordinatorRuntime, PartitionWriter, Result
from ..topics import TopicsView
from .config import ShareCoordinatorConfig
from .records import ShareStateKey, deserialize, serialize
from .shard import ShareCoordinatorShard, ShareCounts, ShareStateAnswer

__all__ = ["ShareCoordinator"]

log = structlog.get_logger("odradek.coordinator.share")

_NOT_AVAILABLE_MESSAGE = "The share coordinator is not available."
# The runtime's timer keys of the pruning rounds, one of each per loaded partition.
_COLD_SNAPSHOT = "cold-partition-snapshot"
_PRUNE = "state-topic-prune"


class ShareCoordinator:
    def __init__(self, writer: PartitionWriter, timer: Timer, config: ShareCoordinatorConfig | None = None, *,
                 topics: TopicsView | None = None, under_min_isr: Callable[[int], bool] | None = None,
                 log_end_offset: Callable[[int], int] | None = None,
                 delete_records_before: Callable[[int, int], int] | None = None) -> None:
        """`log_end_offset(partition)` and `delete_records_before(partition, offset) -> records deleted` turn
        pruning on (module docstring); without them the log keeps every record."""
        self.config = config if config is not None else ShareCoordinatorConfig()
        self.topics = topics
        self.counts = ShareCounts()
        self._log_end_offset = log_end_offset
        self._delete_records_before = delete_records_before
        self._redundant_below: dict[int, int] = {}  # partition -> offset below which a durable round says go
        self.runtime: CoordinatorRuntime[ShareCoordinatorShard] = CoordinatorRuntime(
            writer, lambda p: ShareCoordinatorShard(p, self.config, topics=self.topics, counts=self.counts), timer,
            serialize=serialize, deserialize=deserialize, under_min_isr=under_min_isr)

    # ------------------------------------------------------------------------------------------------
    # Partitions

    def partition_for(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return share_state_partition(share_coordinator_key(group_id, topic_id, partition),
                                     self.config.state_topic_num_partitions)

    def on_elected(self, partition: int, now_ms: int) -> None:
        shard = self.runtime.load(partition, now_ms)
        self._redundant_below.pop(partition, None)
        if self._log_end_offset is not None and self._delete_records_before is not None:
            self._schedule_cold_snapshot(partition, now_ms)
            self._schedule_prune(partition, now_ms)
        log.info("share coordinator loaded partition", state_partition=partition, share_partitions=len(shard.offsets))

    def on_resigned(self, partition: int) -> None:
        self._redundant_below.pop(partition, None)
        if self.runtime.is_loaded(partition):
            self.runtime.unload(partition)  # (cancels its timers)
            log.info("share coordinator unloaded partition", state_partition=partition)

    # ------------------------------------------------------------------------------------------------
    # Pruning (module docstring)

    def _schedule_cold_snapshot(self, partition: int, now_ms: int) -> None:
        self.runtime.schedule(partition, _COLD_SNAPSHOT, now_ms + self.config.cold_partition_snapshot_interval_ms,
                              lambda shard, at: self._cold_snapshot(partition, shard, at))

    def _schedule_prune(self, partition: int, now_ms: int) -> None:
        self.runtime.schedule(partition, _PRUNE, now_ms + self.config.state_topic_prune_interval_ms,
                              lambda shard, at: self._prune(partition, at))

    def _cold_snapshot(self, partition: int, shard: ShareCoordinatorShard, now_ms: int) -> Result:
        self._schedule_cold_snapshot(partition, now_ms)
        assert self._log_end_offset is not None
        result = shard.snapshot_cold(self._log_end_offset(partition), now_ms)
        redundant_below = result.response

        def durable(error: BaseException | None) -> None:
            if error is None and redundant_below is not None:
                self._redundant_below[partition] = max(redundant_below, self._redundant_below.get(partition, 0))

        result.callbacks.append(durable)
        return result

    def _prune(self, partition: int, now_ms: int) -> Result:
        self._schedule_prune(partition, now_ms)
        offset = self._redundant_below.pop(partition, None)
        if offset is not None and self._delete_records_before is not None:
            deleted = self._delete_records_before(partition, offset)
            if deleted > 0:
                self.counts.pruned += deleted
                log.info("share state pruned", state_partition=partition, log_start_offset=offset, records=deleted)
        return Batch().result()

    def startup(self, now_ms: int, partitions: list[int] | None = None) -> None:
        for p in range(self.config.state_topic_num_partitions) if partitions is None else partitions:
            self.on_elected(p, now_ms)

    def shutdown(self) -> None:
        for p in self.runtime.partitions:
            self.on_resigned(p)

    @property
    def loaded_partitions(self) -> list[int]:
        return self.runtime.partitions

    def share_partitions(self) -> int:
        """Share-partitions whose state this broker coordinates now."""
        return sum(len(self.runtime.shard(p).offsets) for p in self.runtime.partitions)

    # ------------------------------------------------------------------------------------------------
    # One share-partition at a time

    def _run(self, key: ShareStateKey, op: Callable[[ShareCoordinatorShard], Result], now_ms: int) -> Deferred[ShareStateAnswer]:
        written = self.runtime.write(self.partition_for(key.group_id, key.topic_id, key.partition), op, now_ms,
                                     timeout_ms=self.config.write_timeout_ms)

        def failed(error: BaseException) -> ShareStateAnswer:
            code = error_code_of(error)
            message = _NOT_AVAILABLE_MESSAGE if code is ErrorCode.COORDINATOR_NOT_AVAILABLE else str(error) or None
            return ShareStateAnswer(code, message)

        return written.then(lambda answer: answer, failed)

    def initialize(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int,
                   now_ms: int) -> Deferred[ShareStateAnswer]:
        key = ShareStateKey(group_id, topic_id, partition)
        return self._run(key, lambda shard: shard.initialize(key, state_epoch, start_offset, now_ms), now_ms)

    def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
             now_ms: int) -> Deferred[ShareStateAnswer]:
        key = ShareStateKey(group_id, topic_id, partition)
        return self._run(key, lambda shard: shard.read(key, leader_epoch, now_ms), now_ms)

    def write(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, leader_epoch: int,
              start_offset: int, delivery_complete_count: int, batches: Sequence[StateBatch],
              now_ms: int) -> Deferred[ShareStateAnswer]:
        key = ShareStateKey(group_id, topic_id, partition)
        return self._run(key, lambda shard: shard.write(key, state_epoch, leader_epoch, start_offset,
                                                        delivery_complete_count, batches, now_ms), now_ms)

    def delete(self, group_id: str, topic_id: uuid.UUID, partition: int, now_ms: int) -> Deferred[ShareStateAnswer]:
        key = ShareStateKey(group_id, topic_id, partition)
        return self._run(key, lambda shard: shard.delete(key, now_ms), now_ms)

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                     now_ms: int) -> Deferred[ShareStateAnswer]:
        key = ShareStateKey(group_id, topic_id, partition)
        return self._run(key, lambda shard: shard.read_summary(key), now_ms)

    # ------------------------------------------------------------------------------------------------
    # APIs 83-87: one operation per partition of the request, one response

    def _each(self, request, one: Callable[[uuid.UUID, Any], Deferred[ShareStateAnswer]],
              entry: Callable[[int, ShareStateAnswer], Any], result: Callable[[uuid.UUID, list], Any],
              response: Callable[[list], Any]) -> Deferred[Any]:
        items = [(t.topic_id, p, one(t.topic_id, p)) for t in request.topics for p in t.partitions]
        out: Deferred[Any] = Deferred()
        remaining = [len(items)]

        def build() -> None:
            by_topic: dict[uuid.UUID, list] = {}
            for topic_id, p, answer in items:
                by_topic.setdefault(topic_id, []).append(entry(p.partition, answer.result()))
            out.complete(response([result(topic_id, entries) for topic_id, entries in by_topic.items()]))

        def one_done(_: Deferred) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                build()

        if not items:
            build()
        for _, _, d in items:
            d.add_callback(one_done)
        return out

    def initialize_state(self, request, version: int, now_ms: int) -> Deferred[Any]:
        R = InitializeShareGroupStateResponse
        return self._each(
            request, lambda topic_id, p: self.initialize(request.group_id, topic_id, p.partition, p.state_epoch,
                                                         p.start_offset, now_ms),
            lambda index, a: R.InitializeStateResult.PartitionResult(
                partition=index, error_code=int(a.error_code), error_message=a.error_message),
            lambda topic_id, entries: R.InitializeStateResult(topic_id=topic_id, partitions=entries),
            lambda results: R(results=results))

    def read_state(self, request, version: int, now_ms: int) -> Deferred[Any]:
        R = ReadShareGroupStateResponse
        Entry = R.ReadStateResult.PartitionResult

        def entry(index: int, a: ShareStateAnswer) -> Any:
            return Entry(partition=index, error_code=int(a.error_code), error_message=a.error_message,
                         state_epoch=a.state_epoch, start_offset=a.start_offset,
                         state_batches=[Entry.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                         delivery_state=int(b.delivery_state),
                                                         delivery_count=b.delivery_count) for b in a.batches])

        return self._each(
            request, lambda topic_id, p: self.read(request.group_id, topic_id, p.partition, p.leader_epoch, now_ms),
            entry, lambda topic_id, entries: R.ReadStateResult(topic_id=topic_id, partitions=entries),
            lambda results: R(results=results))

    def write_state(self, request, version: int, now_ms: int) -> Deferred[Any]:
        R = WriteShareGroupStateResponse

        def one(topic_id: uuid.UUID, p) -> Deferred[ShareStateAnswer]:
            try:
                batches = [StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                           for b in p.state_batches]
            except ValueError:
                return Deferred.completed(ShareStateAnswer(
                    ErrorCode.INVALID_REQUEST, "Invalid delivery state (0 available, 2 acknowledged, 4 archived)."))
            complete = p.delivery_complete_count if version >= 1 else -1
            return self.write(request.group_id, topic_id, p.partition, p.state_epoch, p.leader_epoch, p.start_offset,
                              complete, batches, now_ms)

        return self._each(
            request, one,
            lambda index, a: R.WriteStateResult.PartitionResult(
                partition=index, error_code=int(a.error_code), error_message=a.error_message),
            lambda topic_id, entries: R.WriteStateResult(topic_id=topic_id, partitions=entries),
            lambda results: R(results=results))

    def delete_state(self, request, version: int, now_ms: int) -> Deferred[Any]:
        R = DeleteShareGroupStateResponse
        return self._each(
            request, lambda topic_id, p: self.delete(request.group_id, topic_id, p.partition, now_ms),
            lambda index, a: R.DeleteStateResult.PartitionResult(
                partition=index, error_code=int(a.error_code), error_message=a.error_message),
            lambda topic_id, entries: R.DeleteStateResult(topic_id=topic_id, partitions=entries),
            lambda results: R(results=results))

    def read_state_summary(self, request, version: int, now_ms: int) -> Deferred[Any]:
        R = ReadShareGroupStateSummaryResponse
        return self._each(
            request, lambda topic_id, p: self.read_summary(request.group_id, topic_id, p.partition, p.leader_epoch,
                                                           now_ms),
            lambda index, a: R.ReadStateSummaryResult.PartitionResult(
                partition=index, error_code=int(a.error_code), error_message=a.error_message,
                state_epoch=a.state_epoch, leader_epoch=a.leader_epoch, start_offset=a.start_offset,
                delivery_complete_count=a.delivery_complete_count),
            lambda topic_id, entries: R.ReadStateSummaryResult(topic_id=topic_id, partitions=entries),
            lambda results: R(results=results))
