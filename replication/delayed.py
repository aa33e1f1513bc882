"""DelayedProduce (acks=all) and DelayedFetch (fetch.min.bytes): the two operations of the purgatory.

Theory of operation
-------------------
Both are watched under the TopicPartitions they wait for and look partitions up afresh at every attempt
(`get_partition`, None when the partition is no longer hosted here), because leadership can move while
they wait.

DelayedProduce is created after the local append, with, per partition, the offset the HW must reach
(`required_offset`, the last appended offset + 1) and the append's error. A partition that failed the
append is settled at once; the others wait until `Partition.check_enough_replicas_reach_offset` is done
or reports an error. When every partition is settled the callback receives one error per partition;
partitions still waiting at expiration get REQUEST_TIMED_OUT. With a single replica the HW equals the
LEO after the append, so the first attempt in `try_complete_else_watch` completes it.
Retry it (`check_and_complete`) when a partition's HW advances or its leadership changes.

DelayedFetch completes when the bytes available across its partitions reach `min_bytes`, or at once when
a partition cannot be waited on: it is gone or not led here, the fetch's leader epoch is stale or
unknown, or the fetch offset is past the partition's end (the log was truncated, and the read will say
so); a follower's fetch also completes when the leader's high watermark is above the one the follower
said it knows (Fetch v18's high_watermark, KIP-1166: the follower, and consumers reading from it, learn
a new high watermark at once instead of with the next append or after replica.fetch.wait.max.ms). Bytes are counted only between the fetch offset and the end offset its isolation allows (LEO for
followers, HW or last stable offset for consumers), by a function the broker passes in, capped per
partition at `max_bytes`; a partition with data is counted as one byte without asking when one byte is
all the fetch still needs, as for the usual `min_bytes` of 1. `respond()` then reads and answers, whether
the fetch completed or expired.
Retry it when a partition's HW advances (consumer fetches) or its log grows (follower fetches).

A `ReplicationError` or `StorageError` raised by `bytes_available` also completes the fetch (the read
that follows reports it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_fetch import NO_HIGH_WATERMARK
from odradek.replication.errors import ReplicationError
from odradek.replication.partition import NO_LEADER_EPOCH, FetchIsolation, Partition
from odradek.purgatory.delayed_operation import DelayedOperation
from odradek.storage.errors import StorageError
from odradek.storage.names import TopicPartition

__all__ = [
    "BytesAvailable",
    "DelayedDeleteRecords",
    "DelayedFetch",
    "DelayedProduce",
    "FetchPartitionStatus",
    "GetPartition",
    "ProducePartitionStatus",
]

GetPartition = Callable[[TopicPartition], Partition | None]


@dataclass(slots=True)
class ProducePartitionStatus:
    """acks=all progress of one partition: the HW to reach and the error so far."""

    required_offset: int
    error_code: ErrorCode = ErrorCode.NONE
    acks_pending: bool = field(init=False)

    def __post_init__(self) -> None:
        self.acks_pending = self.error_code == ErrorCode.NONE


class DelayedProduce(DelayedOperation):
    """An acks=all produce waiting for the HW of each partition it appended to."""

    __slots__ = ("produce_status", "_get_partition", "_response_callback")

    def __init__(
        self,
        delay_ms: int,
        *,
        now_ms: int,
        produce_status: Mapping[TopicPartition, ProducePartitionStatus],
        get_partition: GetPartition,
        response_callback: Callable[[dict[TopicPartition, ErrorCode]], object],
    ) -> None:
        super().__init__(delay_ms, now_ms=now_ms)
        self.produce_status = dict(produce_status)
        self._get_partition = get_partition
        self._response_callback = response_callback

    @property
    def watch_keys(self) -> list[TopicPartition]:
        return [tp for tp, status in self.produce_status.items() if status.acks_pending]

    def try_complete(self) -> bool:
        for topic_partition, status in self.produce_status.items():
            if not status.acks_pending:
                continue
            partition = self._get_partition(topic_partition)
            if partition is None:
                done, error_code = False, ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                done, error_code = partition.check_enough_replicas_reach_offset(status.required_offset)
            if done or error_code != ErrorCode.NONE:
                status.acks_pending = False
                status.error_code = error_code
        if any(status.acks_pending for status in self.produce_status.values()):
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        self._response_callback(
            {
                topic_partition: ErrorCode.REQUEST_TIMED_OUT if status.acks_pending else status.error_code
                for topic_partition, status in self.produce_status.items()
            }
        )


@dataclass(frozen=True, slots=True)
class FetchPartitionStatus:
    """One partition of a fetch: where it reads from and how much it may take."""

    topic_partition: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_LEADER_EPOCH
    # A follower's known high watermark (KIP-1166): the fetch completes once the leader's is above it.
    # The default (never below) is a consumer's, or a follower's that does not say it.
    replica_high_watermark: int = NO_HIGH_WATERMARK


BytesAvailable = Callable[[Partition, int, int], int]
"""`bytes_available(partition, fetch_offset, end_offset)`: bytes of whole batches in that range."""


class DelayedFetch(DelayedOperation):
    """A fetch waiting until `min_bytes` are readable across its partitions."""

    __slots__ = (
        "fetch_partitions",
        "min_bytes",
        "isolation",
        "fetch_only_from_leader",
        "_get_partition",
        "_bytes_available",
        "_respond",
    )

    def __init__(
        self,
        delay_ms: int,
        *,
        now_ms: int,
        fetch_partitions: Sequence[FetchPartitionStatus],
        min_bytes: int,
        get_partition: GetPartition,
        bytes_available: BytesAvailable,
        respond: Callable[[], object],
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        fetch_only_from_leader: bool = True,
    ) -> None:
        super().__init__(delay_ms, now_ms=now_ms)
        self.fetch_partitions = tuple(fetch_partitions)
        self.min_bytes = min_bytes
        self.isolation = isolation
        self.fetch_only_from_leader = fetch_only_from_leader
        self._get_partition = get_partition
        self._bytes_available = bytes_available
        self._respond = respond

    @property
    def watch_keys(self) -> list[TopicPartition]:
        return [status.topic_partition for status in self.fetch_partitions]

    def try_complete(self) -> bool:
        accumulated_bytes = 0
        for status in self.fetch_partitions:
            partition = self._get_partition(status.topic_partition)
            if partition is None:
                return self.force_complete()
            try:
                snapshot = partition.fetch_offset_snapshot(
                    status.current_leader_epoch, fetch_only_from_leader=self.fetch_only_from_leader
                )
                end_offset = snapshot.end_offset(self.isolation)
                if status.fetch_offset > end_offset or status.replica_high_watermark < snapshot.high_watermark:
                    return self.force_complete()
                if status.fetch_offset < end_offset:
                    # At least one byte is there; count the rest only when one byte is not enough (the
                    # usual fetch.min.bytes is 1: a tailing consumer's wake-up then reads the log once).
                    if self.min_bytes - accumulated_bytes <= 1:
                        available = 1
                    else:
                        available = self._bytes_available(partition, status.fetch_offset, end_offset)
                    accumulated_bytes += min(available, status.max_bytes)
            except (ReplicationError, StorageError):
                return self.force_complete()
        if accumulated_bytes >= self.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self._respond()


class DelayedDeleteRecords(DelayedOperation):
    """DeleteRecords waiting until every live replica's log start offset has reached the deleted offset
    (Kafka's DelayedDeleteRecords). `required` maps an entry of the request to (partition, offset);
    `low_watermark(tp)` is the leader's low watermark, None once the partition is not led here
    (NOT_LEADER_OR_FOLLOWER); entries still short at expiry get REQUEST_TIMED_OUT. Retry it when a
    follower's log start offset moves or leadership changes."""

    __slots__ = ("required", "results", "_low_watermark", "_respond")

    def __init__(self, delay_ms: int, *, now_ms: int, required: Mapping[int, tuple[TopicPartition, int]],
                 results: list[tuple[int, int]], low_watermark: Callable[[TopicPartition], int | None],
                 respond: Callable[[list[tuple[int, int]]], object]) -> None:
        super().__init__(delay_ms, now_ms=now_ms)
        self.required = dict(required)
        self.results = results
        self._low_watermark = low_watermark
        self._respond = respond

    def try_complete(self) -> bool:
        for index, (tp, offset) in list(self.required.items()):
            low = self._low_watermark(tp)
            if low is None:
                self.results[index] = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1)
            elif low >= offset:
                self.results[index] = (0, low)
            else:
                continue
            del self.required[index]
        if self.required:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        for index in self.required:
            self.results[index] = (int(ErrorCode.REQUEST_TIMED_OUT), -1)
        self._respond(self.results)
