"""A follower's fetching from one leader, without I/O: what to ask for, and what to do with the answer.

Theory of operation
-------------------
Kafka's AbstractFetcherThread, with the sockets left to broker/replica_fetcher.py. One `FollowerFetcher`
per source broker holds a `PartitionFetchState` for every partition this broker follows there: the next
offset to fetch (always this replica's log end offset), the leader epoch the metadata image gave the
partition (`current_leader_epoch`: the leader fences a fetch from an older epoch), the epoch of the last
batch this replica holds (`last_fetched_epoch`, KIP-320) and, after an error, when to try again.

`build_request(now_ms)` asks for every partition not backing off, in one Fetch (topic ids, v13+), and
returns the states it asked for; `handle_response(sent, response, now_ms)` applies the answer to the
partitions' logs, unless the partition was removed or re-added (a new leader or epoch) while the fetch
was out: a state is replaced, never mutated by the metadata, so identity tells an answer to an old
request. Per partition (Kafka's processFetchRequest):

  * data: the batches are appended as follower (`Log.append_as_follower`, offsets and leader epochs kept,
    producer state rebuilt from them), the fetch offset moves to the new log end, the follower's high
    watermark becomes min(the leader's, its own log end offset), and its log start offset follows the
    leader's up to that high watermark;
  * `diverging_epoch` (the leader's log ends `epoch` at `end_offset`, earlier than this replica's): the
    log is truncated to `truncation_offset(...)`, as Kafka's getOffsetTruncationState decides, and the next
    fetch carries the new last epoch; when this replica did not know the leader's epoch, the truncation
    is intermediate and the leader answers again, each round lowering the epoch, so it converges;
  * OFFSET_OUT_OF_RANGE: `out_of_range_reset(...)`: below the leader's log start the log starts over
    empty at the leader's log start offset, above the leader's end it is truncated down to what the
    leader has (known from the response's high watermark, a lower bound of the leader's end: what is
    truncated once too many is fetched again);
  * NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, FENCED_LEADER_EPOCH and
    UNKNOWN_LEADER_EPOCH (`LEADER_LAG_ERRORS`): this follower's image says the source leads the partition
    at `current_leader_epoch` (that is why the state is here), and the leader says it does not, or not at
    that epoch. Usually the two brokers are applying the same committed metadata a few milliseconds
    apart: a follower that learns of a new partition just before its leader does is refused once. Waiting
    replica.fetch.backoff.ms (1 s) for that would hold the first acks=all produce a whole second, so the
    partition is retried after `retry_delay_ms(n)`: `FIRST_RETRY_MS` (10 ms) for the first error in a row,
    doubling at each further one, never more than `backoff_ms` (10, 20, 40, ... 640, 1000 with the
    defaults: eight quick retries cover ~1.3 s of metadata lag, after that it is replica.fetch.backoff.ms as
    in Kafka). The count of errors in a row is reset by any other answer for the partition. A leader
    that really is not leading costs a few cheap retries, until the image moves the partition elsewhere;
  * any other error: the partition backs off `backoff_ms`.

A failed request (connection lost, timeout) backs off every partition it carried.

Everything here is synchronous and takes `now_ms`; the log and partition are the replica manager's.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_fetch import NO_HIGH_WATERMARK
from odradek.protocol.messages import FetchRequest
from odradek.storage.errors import StorageError
from odradek.storage.names import TopicPartition

from .partition import HostedPartition

log = structlog.get_logger("odradek.replica_fetcher")

__all__ = [
    "FollowerFetcher",
    "PartitionFetchState",
    "Reset",
    "out_of_range_reset",
    "retry_delay_ms",
    "truncation_offset",
]

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
FIRST_RETRY_MS = 10
# Errors meaning "the leader's metadata is not (yet) this follower's": retried soon (see the module doc).
LEADER_LAG_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
})
_LOG_OVERHEAD = 12  # base offset (8) + batch length (4)
_OFFSET_AND_LENGTH = struct.Struct(">qi")


@dataclass(slots=True)
class PartitionFetchState:
    topic_id: uuid.UUID
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int = UNDEFINED_EPOCH
    delayed_until_ms: int = 0
    lag_errors: int = 0  # LEADER_LAG_ERRORS answered in a row (the quick retries' count)

    def is_ready(self, now_ms: int) -> bool:
        return now_ms >= self.delayed_until_ms


def retry_delay_ms(errors_in_a_row: int, backoff_ms: int) -> int:
    """How long a partition waits after its `errors_in_a_row`-th LEADER_LAG_ERRORS answer in a row (1 for
    the first): FIRST_RETRY_MS doubled each time, capped at replica.fetch.backoff.ms."""
    if errors_in_a_row <= 0:
        return 0
    return min(backoff_ms, FIRST_RETRY_MS << min(errors_in_a_row - 1, 20))


def truncation_offset(
    leader_epoch: int, leader_end_offset: int, follower_epoch_end: tuple[int, int], log_end_offset: int
) -> tuple[int, bool]:
    """Where a follower truncates when the leader says its log ends epoch `leader_epoch` at
    `leader_end_offset` (Kafka's AbstractFetcherThread.getOffsetTruncationState): (offset, completed).

    `follower_epoch_end` is this replica's own `end_offset_for_epoch(leader_epoch)`: the largest epoch it
    knows at or below the leader's, and where that epoch ends here ((-1, -1) when it knows none).
    """
    if leader_end_offset == UNDEFINED_OFFSET:  # the leader knows nothing of the epoch: keep what we have
        return log_end_offset, True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end_offset, log_end_offset), True
    follower_epoch, follower_end_offset = follower_epoch_end
    if follower_end_offset == UNDEFINED_OFFSET:
        # This replica tracks no epoch at or below the leader's: the leader's end of it is safe to keep.
        return min(leader_end_offset, log_end_offset), True
    if follower_epoch != leader_epoch:
        # This replica never saw the leader's epoch: cut back to the end of its own largest smaller epoch,
        # and ask again with that epoch.
        return min(follower_end_offset, log_end_offset), False
    return min(follower_end_offset, leader_end_offset, log_end_offset), True


class ResetKind(IntEnum):
    START_AT = 0  # drop the whole log and start empty at the offset
    TRUNCATE_TO = 1  # remove everything from the offset on


@dataclass(frozen=True, slots=True)
class Reset:
    kind: ResetKind
    offset: int


def out_of_range_reset(
    fetch_offset: int, log_end_offset: int, leader_log_start_offset: int, leader_high_watermark: int
) -> Reset | None:
    """What a follower does on OFFSET_OUT_OF_RANGE (Kafka's fetchOffsetAndTruncate): behind the leader's
    log start, start over there; ahead of the leader, truncate to what the leader surely has. None when
    the answer tells nothing (the next fetch asks again, after the back-off)."""
    if leader_log_start_offset >= 0 and fetch_offset < leader_log_start_offset:
        return Reset(ResetKind.START_AT, leader_log_start_offset)
    if 0 <= leader_high_watermark < log_end_offset:
        return Reset(ResetKind.TRUNCATE_TO, leader_high_watermark)
    return None


def whole_batches(records) -> memoryview:
    """`records` without a partial batch at its end (a response cut at its size limit may carry one)."""
    buf = memoryview(records)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    pos, end = 0, len(buf)
    while end - pos >= _LOG_OVERHEAD:
        _, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
        if length <= 0 or pos + _LOG_OVERHEAD + length > end:
            break
        pos += _LOG_OVERHEAD + length
    return buf[:pos]


class FollowerFetcher:
    """The fetch state of the partitions this broker follows on one leader; see the module doc."""

    def __init__(
        self, source_id: int, *, node_id: int, get_partition: Callable[[TopicPartition], HostedPartition | None],
        max_bytes: int, min_bytes: int, max_wait_ms: int, response_max_bytes: int, backoff_ms: int,
    ) -> None:
        self.source_id = source_id
        self.node_id = node_id
        self.get_partition = get_partition
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.max_wait_ms = max_wait_ms
        self.response_max_bytes = response_max_bytes
        self.backoff_ms = backoff_ms
        self.states: dict[TopicPartition, PartitionFetchState] = {}
        # Told (log directory, error) of an I/O error appending here: the directory is failing (JBOD).
        self.storage_failed: Callable[[str, str], object] | None = None

    def __len__(self) -> int:
        return len(self.states)

    # -- membership (the metadata image's decisions)

    def add_partition(self, tp: TopicPartition, *, topic_id: uuid.UUID, leader_epoch: int) -> bool:
        """Follow `tp` here from its log end; False (nothing changes) when followed already at that epoch."""
        current = self.states.get(tp)
        if current is not None and current.current_leader_epoch == leader_epoch and current.topic_id == topic_id:
            return False
        partition = self.get_partition(tp)
        if partition is None:
            return False
        plog = partition.log
        self.states[tp] = PartitionFetchState(
            topic_id=topic_id, fetch_offset=plog.log_end_offset, current_leader_epoch=leader_epoch,
            last_fetched_epoch=_latest_epoch(plog),
        )
        return True

    def remove_partition(self, tp: TopicPartition) -> bool:
        return self.states.pop(tp, None) is not None

    def next_ready_ms(self) -> int | None:
        """When the earliest backing-off partition may be fetched again (None: no partitions)."""
        if not self.states:
            return None
        return min(s.delayed_until_ms for s in self.states.values())

    # -- the request

    def build_request(self, now_ms: int, *, version: int, broker_epoch: int = -1
                      ) -> tuple[FetchRequest, dict[TopicPartition, PartitionFetchState]] | None:
        """One Fetch for every partition ready now, and the states it asked for; None if none is ready.
        The same request as `build_fetch`, as a message for the codec."""
        built = self.build_fetch(now_ms)
        if built is None:
            return None
        topics, sent = built
        names = {s.topic_id: tp.topic for tp, s in sent.items()}
        request = FetchRequest(
            max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes, max_bytes=self.response_max_bytes,
            isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
            topics=[FetchRequest.FetchTopic(topic=names[topic_id], topic_id=topic_id, partitions=[
                FetchRequest.FetchTopic.FetchPartition(
                    partition=index, current_leader_epoch=epoch, fetch_offset=offset, last_fetched_epoch=last_epoch,
                    log_start_offset=log_start, partition_max_bytes=max_bytes,
                    **({"high_watermark": hw} if version >= 18 else {}))
                for index, epoch, offset, last_epoch, log_start, max_bytes, hw in parts])
                for topic_id, parts in topics],
        )
        if version >= 15:
            request.replica_state = FetchRequest.ReplicaState(replica_id=self.node_id, replica_epoch=broker_epoch)
        else:
            request.replica_id = self.node_id
        return request, sent

    def build_fetch(self, now_ms: int) -> tuple[list, dict[TopicPartition, PartitionFetchState]] | None:
        """What one Fetch asks for every partition ready now, in the shape of protocol.fast_fetch's packed
        follower request: ([(topic id, [(partition, current leader epoch, fetch offset, last fetched
        epoch, log start offset, max bytes, high watermark)])], the states asked for); None if none is
        ready. The high watermark is the one this replica knows (-1: none), which a leader of Fetch v18
        uses to answer as soon as its own is higher (KIP-1166)."""
        sent = {tp: s for tp, s in self.states.items() if s.is_ready(now_ms)}
        if not sent:
            return None
        by_topic: dict[uuid.UUID, list] = {}
        get_partition, max_bytes = self.get_partition, self.max_bytes
        for tp, s in sent.items():
            partition = get_partition(tp)
            if partition is None:  # (going away: not said, so that the leader does not answer at once)
                log_start, hw = -1, NO_HIGH_WATERMARK
            else:
                log_start, hw = partition.log_start_offset, partition.high_watermark
            by_topic.setdefault(s.topic_id, []).append((
                tp.partition, s.current_leader_epoch, s.fetch_offset, s.last_fetched_epoch, log_start, max_bytes,
                hw if hw >= 0 else -1,
            ))
        return list(by_topic.items()), sent

    # -- the answer

    def handle_failure(self, sent: dict[TopicPartition, PartitionFetchState], now_ms: int) -> None:
        """The request failed as a whole: every partition it carried backs off."""
        for tp, s in sent.items():
            if self.states.get(tp) is s:
                s.delayed_until_ms = now_ms + self.backoff_ms

    def handle_response(self, sent: dict[TopicPartition, PartitionFetchState], response, now_ms: int) -> int:
        """Apply a Fetch response; the number of bytes appended."""
        if getattr(response, "error_code", 0):
            log.debug("fetch refused", source=self.source_id, error_code=response.error_code)
            self.handle_failure(sent, now_ms)
            return 0
        appended = 0
        by_id = {(s.topic_id, tp.partition): tp for tp, s in sent.items()}
        for topic in response.responses:
            for p in topic.partitions:
                tp = by_id.get((topic.topic_id, p.partition_index))
                if tp is None:
                    continue  # not asked for: ignored
                state = sent[tp]
                if self.states.get(tp) is not state:
                    continue  # removed or re-added while the fetch was out: an answer to an old question
                appended += self._handle_partition(tp, state, p, now_ms)
        return appended

    def _handle_partition(self, tp: TopicPartition, state: PartitionFetchState, p, now_ms: int) -> int:
        partition = self.get_partition(tp)
        if partition is None or partition.is_leader:
            self.states.pop(tp, None)
            return 0
        plog = partition.log
        error = p.error_code
        if error != ErrorCode.NONE and error in LEADER_LAG_ERRORS:
            state.lag_errors += 1
            delay = retry_delay_ms(state.lag_errors, self.backoff_ms)
            log.debug("leader does not lead the partition here yet; retrying soon", partition=str(tp),
                      source=self.source_id, error_code=error, leader_epoch=state.current_leader_epoch,
                      retry_in_ms=delay, errors_in_a_row=state.lag_errors)
            state.delayed_until_ms = now_ms + delay
            return 0
        state.lag_errors = 0
        if error == ErrorCode.NONE:
            diverging = p.diverging_epoch
            if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
                self._truncate_on_divergence(tp, state, partition, diverging.epoch, diverging.end_offset, now_ms)
                return 0
            appended = 0
            records = p.records
            if records:
                batches = whole_batches(records)
                if len(batches):
                    try:
                        plog.append_as_follower(batches, now_ms=now_ms)
                    except StorageError as e:
                        log.warning("could not append replicated batches; backing off", partition=str(tp),
                                    fetch_offset=state.fetch_offset, error=str(e))
                        state.delayed_until_ms = now_ms + self.backoff_ms
                        return 0
                    except OSError as e:
                        state.delayed_until_ms = now_ms + self.backoff_ms
                        if self.storage_failed is not None:
                            self.storage_failed(plog.directory, str(e))
                        return 0
                    appended = len(batches)
                    state.last_fetched_epoch = _latest_epoch(plog)
            state.fetch_offset = plog.log_end_offset
            partition.update_follower_high_watermark(p.high_watermark)
            leader_log_start = p.log_start_offset
            if plog.log_start_offset < leader_log_start <= partition.high_watermark:
                # The leader's log start moved (retention, DeleteRecords): the follower's follows it, as
                # Kafka's maybeIncrementLogStartOffset does, never past what is committed here.
                plog.delete_records_before(leader_log_start, now_ms=now_ms)
            return appended
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            reset = out_of_range_reset(state.fetch_offset, plog.log_end_offset, p.log_start_offset, p.high_watermark)
            if reset is None:
                state.delayed_until_ms = now_ms + self.backoff_ms
                return 0
            log.info("fetch offset out of range at the leader; resetting", partition=str(tp), source=self.source_id,
                     fetch_offset=state.fetch_offset, reset=reset.kind.name, offset=reset.offset)
            if reset.kind is ResetKind.START_AT:
                plog.truncate_fully_and_start_at(reset.offset, now_ms=now_ms)
            else:
                plog.truncate_to(reset.offset)
            partition.after_follower_truncation()
            state.fetch_offset = plog.log_end_offset
            state.last_fetched_epoch = _latest_epoch(plog)
            return 0
        log.debug("partition fetch failed; backing off", partition=str(tp), source=self.source_id, error_code=error)
        state.delayed_until_ms = now_ms + self.backoff_ms
        return 0

    def _truncate_on_divergence(self, tp, state: PartitionFetchState, partition: HostedPartition, epoch: int, end_offset: int,
                                now_ms: int) -> None:
        plog = partition.log
        offset, completed = truncation_offset(
            epoch, end_offset, plog.end_offset_for_epoch(epoch) if epoch >= 0 else (-1, -1), plog.log_end_offset
        )
        log.info("log diverges from the leader's; truncating", partition=str(tp), source=self.source_id,
                 leader_epoch=epoch, leader_end_offset=end_offset, truncate_to=offset, completed=completed)
        offset = max(offset, 0)
        if offset < plog.log_start_offset:
            plog.truncate_fully_and_start_at(offset, now_ms=now_ms)
        else:
            plog.truncate_to(offset)
        partition.after_follower_truncation()
        state.fetch_offset = plog.log_end_offset
        state.last_fetched_epoch = _latest_epoch(plog)


def _latest_epoch(plog) -> int:
    """The epoch of this replica's last batch, as its next fetch says it (-1: an empty log, or no epochs)."""
    if plog.log_end_offset <= plog.log_start_offset:
        return UNDEFINED_EPOCH
    return plog.latest_epoch
