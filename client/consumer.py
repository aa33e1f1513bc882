"""The asyncio consumer: `assign()` or `subscribe()`, then `getmany()` or `async for`.

Theory of operation
-------------------
Each assigned partition has a `_PartitionState`: the *position* (the next offset handed to the caller,
what gets committed), the *fetch offset* (the next offset to fetch; ahead of the position by whatever is
buffered), a buffer of decoded records, pause and reset flags, and an epoch bumped by every seek so that
a fetch answer that left before the seek is thrown away.

The fetcher task keeps one Fetch in flight per broker for the partitions it leads that are not paused,
have a position, and hold less than `prefetch_bytes` of buffered records. As soon as an answer arrives
it is decoded into the buffers and, if there is still room, the next Fetch goes out while the caller is
busy with the records: this pipelining is what lets one consumer keep up with a fast producer.
Positions are resolved before fetching: from the group's committed offset when there is one, else by
`auto_offset_reset` through ListOffsets (earliest: -2, latest: -1). OFFSET_OUT_OF_RANGE resets the same
way, or raises for "none". With `isolation_level="read_committed"` the broker stops at the last stable
offset and reports aborted transactions; their batches are skipped here, as are control batches.

`getmany()` takes records from the buffers, rotating over partitions so none starves, and advances the
positions; when a buffer empties the position jumps to its fetch offset (past control batches and
aborted data), so a committed position never points back into skipped records.

With a `group_id`, `subscribe()` joins the group through `group.GroupCoordinator` (JoinGroup/SyncGroup,
heartbeats, rebalance listeners); `commit()` and auto-commit (every `auto_commit_interval_ms`, and before
partitions are revoked or the consumer closes) send OffsetCommit to the group coordinator. `assign()`
needs no group; with a `group_id` it still commits and reads committed offsets (as a "simple" consumer,
generation -1).
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable

from odradek.protocol.errors import ErrorCode, ProtocolError
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import ABORT, iter_batches, iter_records, parse_control_record, validate_batch

from .cluster import KafkaClient
from .common import ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition
from .config import ConsumerConfig
from .errors import ClientClosedError, ConfigError, KafkaError, OdradekError
from .group import GroupCoordinator

FETCH = 1
LIST_OFFSETS = 2
EARLIEST = -2
LATEST = -1
_MAX_UNCOMPRESSED = 256 * 1024 * 1024


@dataclass(slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    serialized_key_size: int = -1
    serialized_value_size: int = -1
    leader_epoch: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True, frozen=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int


class _PartitionState:
    __slots__ = (
        "position", "fetch_offset", "buffer", "buffered_bytes", "paused", "reset", "epoch", "high_watermark",
        "last_stable_offset", "log_start_offset", "leader_epoch", "awaiting_committed",
    )

    def __init__(self) -> None:
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.buffer: collections.deque[ConsumerRecord] = collections.deque()
        self.buffered_bytes = 0
        self.paused = False
        self.reset: str | None = None
        self.epoch = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.leader_epoch = -1
        self.awaiting_committed = True

    def seek(self, offset: int | None, reset: str | None = None) -> None:
        self.position = offset
        self.fetch_offset = offset
        self.buffer.clear()
        self.buffered_bytes = 0
        self.reset = reset
        self.epoch += 1
        self.awaiting_committed = False


async def list_offsets(client: KafkaClient, timestamps: dict[TopicPartition, int], *,
                       isolation_level: int = 0) -> dict[TopicPartition, tuple[int, int]]:
    """ListOffsets (grouped by leader) for each partition: (offset, timestamp); offset -1 when no record matches."""
    result: dict[TopicPartition, tuple[int, int]] = {}
    remaining = dict(timestamps)
    cls = REQUESTS[LIST_OFFSETS]

    async def attempt() -> None:
        by_leader: dict[int, dict[TopicPartition, int]] = collections.defaultdict(dict)
        for tp, ts in remaining.items():
            by_leader[await client.leader_for(tp)][tp] = ts
        error: OdradekError | None = None
        for node, parts in by_leader.items():
            topics: dict[str, list] = collections.defaultdict(list)
            for tp, ts in parts.items():
                topics[tp.topic].append(cls.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp.partition, timestamp=ts))
            request = cls(replica_id=-1, isolation_level=isolation_level,
                          topics=[cls.ListOffsetsTopic(name=t, partitions=p) for t, p in topics.items()])
            try:
                response = await client.send(node, request)
            except OdradekError as e:
                error = e
                continue
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        refused = KafkaError(p.error_code, context=f"ListOffsets {tp}")
                        if not refused.retriable:
                            remaining.pop(tp, None)
                            raise refused
                        error = refused
                        continue
                    result[tp] = (p.offset, p.timestamp)
                    remaining.pop(tp, None)
        if remaining:
            raise error or KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "partitions missing from ListOffsets")

    await client.call(attempt, what="ListOffsets")
    return result


class Consumer:
    """An asyncio Kafka consumer. `Consumer("topic", group_id=...)` subscribes at start."""

    def __init__(self, *topics: str, config: ConsumerConfig | None = None,
                 key_deserializer: Callable[[bytes | None], Any] | None = None,
                 value_deserializer: Callable[[bytes | None], Any] | None = None,
                 **overrides: Any):
        if config is None:
            config = ConsumerConfig(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        self.config: ConsumerConfig = config
        self.client = KafkaClient(config, allow_auto_create_topics=config.allow_auto_create_topics)
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._assignment: dict[TopicPartition, _PartitionState] = {}
        self._subscription: set[str] = set()
        self._pattern: re.Pattern | None = None
        self._listener: ConsumerRebalanceListener | None = None
        self._mode: str | None = None  # "assign" or "subscribe"
        self._errors: collections.deque[BaseException] = collections.deque()
        self._data_ready: asyncio.Event | None = None
        self._fetch_wakeup: asyncio.Event | None = None
        self._fetch_nodes: set[int] = set()
        self._fetch_tasks: set[asyncio.Task] = set()
        self._fetcher: asyncio.Task | None = None
        self._committer: asyncio.Task | None = None
        self._rotation = 0
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        self._started = False
        self._closed = False
        self._last_committed: dict[TopicPartition, int] = {}
        self.group: GroupCoordinator | None = None
        self._initial_topics = list(topics)
        if topics and not config.group_id:
            raise ConfigError("subscribing needs a group_id; use assign() to read without a group")

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> "Consumer":
        if self._started:
            return self
        self._data_ready = asyncio.Event()
        self._fetch_wakeup = asyncio.Event()
        await self.client.start()
        loop = asyncio.get_running_loop()
        if self.config.group_id:
            self.group = GroupCoordinator(self.client, self.config, _Member(self))
        self._fetcher = loop.create_task(self._fetch_loop())
        if self.config.group_id and self.config.enable_auto_commit:
            self._committer = loop.create_task(self._auto_commit_loop())
        self._started = True
        if self._initial_topics:
            self.subscribe(self._initial_topics)
        return self

    async def __aenter__(self) -> "Consumer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, *, autocommit: bool = True) -> None:
        if self._closed:
            return
        if self._started and autocommit and self.config.group_id and self.config.enable_auto_commit:
            try:
                await self._commit_positions()
            except OdradekError:
                pass
        self._closed = True
        tasks = [t for t in (self._fetcher, self._committer) if t is not None] + list(self._fetch_tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except BaseException:
                pass
        if self.group is not None:
            try:
                await self.group.close()
            except OdradekError:
                pass
        await self.client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("consumer is closed")

    # ------------------------------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, without group membership."""
        self._check_open()
        if self._mode == "subscribe":
            raise ConfigError("assign() after subscribe(): call unsubscribe() first")
        wanted = {TopicPartition(*tp) for tp in partitions}
        self._mode = "assign" if wanted else None
        self._set_assignment(wanted)
        self.client.add_topics({tp.topic for tp in wanted})

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def subscribe(self, topics: Iterable[str] = (), *, pattern: str | re.Pattern | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the consumer group for `topics`, or for every topic matching `pattern`."""
        self._check_open()
        if not self.config.group_id:
            raise ConfigError("subscribe() needs a group_id; use assign() to read without a group")
        if self._mode == "assign":
            raise ConfigError("subscribe() after assign(): call unsubscribe() first")
        topics = [topics] if isinstance(topics, str) else list(topics)
        if bool(topics) == (pattern is not None):
            raise ConfigError("subscribe() takes topics or a pattern, not both and not neither")
        self._mode = "subscribe"
        self._listener = listener
        if pattern is not None:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._subscription = set()
            self.client.track_all_topics()
            self.client.request_update()
        else:
            self._pattern = None
            self._subscription = set(topics)
            self.client.add_topics(self._subscription)
        if self._started and self.group is not None:
            self.group.subscription_changed()

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def unsubscribe(self) -> None:
        if self.group is not None and self._mode == "subscribe":
            self.group.unsubscribe()
        self._mode = None
        self._subscription = set()
        self._pattern = None
        self._set_assignment(set())

    def _matching_topics(self) -> set[str]:
        """Topics of the current subscription that exist (a pattern is matched against metadata)."""
        if self._pattern is None:
            return set(self._subscription)
        cluster = self.client.cluster
        matched = {t for t, info in cluster.topics.items()
                   if self._pattern.fullmatch(t) and not (info.is_internal and self.config.exclude_internal_topics)}
        self._subscription = matched
        return matched

    def _set_assignment(self, partitions: set[TopicPartition]) -> None:
        for tp in list(self._assignment):
            if tp not in partitions:
                del self._assignment[tp]
        for tp in partitions:
            if tp not in self._assignment:
                self._assignment[tp] = _PartitionState()
        self._wake_fetcher()

    # ------------------------------------------------------------------------------------------ positions

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int) -> None:
        state = self._state(tp)
        if offset < 0:
            raise ValueError(f"offset must be >= 0 (got {offset})")
        state.seek(offset)
        self._wake_fetcher()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or list(self._assignment):
            self._state(tp).seek(None, "earliest")
        self._wake_fetcher()

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or list(self._assignment):
            self._state(tp).seek(None, "latest")
        self._wake_fetcher()

    async def seek_to_committed(self, *partitions: TopicPartition) -> None:
        for tp in partitions or list(self._assignment):
            committed = await self.committed(tp)
            state = self._state(tp)
            if committed is None:
                state.seek(None, self.config.auto_offset_reset)
            else:
                state.seek(committed)
        self._wake_fetcher()

    async def position(self, tp: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record `getmany` will return for `tp` (resolving it if needed)."""
        state = self._state(tp)
        if state.position is None:
            await self._resolve_positions([TopicPartition(*tp)])
        if state.position is None:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, "no position", context=str(TopicPartition(*tp)))
        return state.position

    def highwater(self, tp: TopicPartition | tuple[str, int]) -> int:
        return self._state(tp).high_watermark

    def last_stable_offset(self, tp: TopicPartition | tuple[str, int]) -> int:
        return self._state(tp).last_stable_offset

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._wake_fetcher()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    def _state(self, tp: TopicPartition | tuple[str, int]) -> _PartitionState:
        state = self._assignment.get(TopicPartition(*tp))
        if state is None:
            raise ConfigError(f"partition {TopicPartition(*tp)} is not assigned to this consumer")
        return state

    # ------------------------------------------------------------------------------------------ offsets

    async def _list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int]]:
        return await list_offsets(self.client, timestamps, isolation_level=self._isolation)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = await self._list_offsets({TopicPartition(*tp): EARLIEST for tp in partitions})
        return {tp: o for tp, (o, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = await self._list_offsets({TopicPartition(*tp): LATEST for tp in partitions})
        return {tp: o for tp, (o, _) in found.items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the given one, per partition (None: no such record)."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must be >= 0 (got {ts})")
        found = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {tp: (OffsetAndTimestamp(o, t) if o >= 0 else None) for tp, (o, t) in found.items()}

    async def committed(self, tp: TopicPartition | tuple[str, int]) -> int | None:
        if not self.config.group_id:
            raise ConfigError("committed offsets need a group_id")
        if not self._started:
            await self.start()
        assert self.group is not None  # start() made it, for the group_id
        found = await self.group.fetch_offsets([TopicPartition(*tp)])
        entry = found.get(TopicPartition(*tp))
        return None if entry is None else entry.offset

    async def commit(self, offsets: dict[TopicPartition, int | OffsetAndMetadata] | None = None) -> None:
        """Commit `offsets` (the next offsets to read), or the current positions of every assigned partition."""
        if not self.config.group_id:
            raise ConfigError("commit() needs a group_id")
        if offsets is None:
            await self._commit_positions(force=True)
            return
        normalized = {TopicPartition(*tp): (o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o))
                      for tp, o in offsets.items()}
        if self.group is None:  # start() makes it, for the group_id
            raise OdradekError("commit() of offsets needs a started consumer: await start() first")
        await self.group.commit(normalized)

    def _consumed_positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
                for tp, s in self._assignment.items() if s.position is not None}

    async def _commit_positions(self, partitions: Iterable[TopicPartition] | None = None, *, force: bool = False) -> None:
        if self.group is None:
            return
        positions = self._consumed_positions()
        if partitions is not None:
            wanted = set(partitions)
            positions = {tp: o for tp, o in positions.items() if tp in wanted}
        if not force:
            positions = {tp: o for tp, o in positions.items() if self._last_committed.get(tp) != o.offset}
        if positions:
            await self.group.commit(positions)
            for tp, o in positions.items():
                self._last_committed[tp] = o.offset

    async def _auto_commit_loop(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                await self._commit_positions()
            except asyncio.CancelledError:
                raise
            except OdradekError:
                pass

    async def _resolve_positions(self, partitions: list[TopicPartition]) -> None:
        """Give each partition without a position one: committed offset, else the reset policy."""
        need_committed = [tp for tp in partitions if tp in self._assignment
                          and self._assignment[tp].position is None and self._assignment[tp].reset is None
                          and self._assignment[tp].awaiting_committed]
        if need_committed and self.group is not None:
            committed = await self.group.fetch_offsets(need_committed)
            for tp in need_committed:
                state = self._assignment.get(tp)
                if state is None or state.position is not None:
                    continue
                entry = committed.get(tp)
                state.awaiting_committed = False
                if entry is not None and entry.offset >= 0:
                    state.position = state.fetch_offset = entry.offset
                    state.leader_epoch = entry.leader_epoch
        resets: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._assignment.get(tp)
            if state is None or state.position is not None:
                continue
            policy = state.reset or self.config.auto_offset_reset
            if policy == "none":
                self._errors.append(KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                               "no committed offset and auto_offset_reset is none", context=str(tp)))
                state.paused = True
                continue
            resets[tp] = EARLIEST if policy == "earliest" else LATEST
        if resets:
            epochs = {tp: self._assignment[tp].epoch for tp in resets}
            found = await self._list_offsets(resets)
            for tp, (offset, _) in found.items():
                state = self._assignment.get(tp)
                if state is not None and state.epoch == epochs[tp] and state.position is None:
                    state.position = state.fetch_offset = max(offset, 0)
                    state.reset = None

    # ------------------------------------------------------------------------------------------ fetching

    def _wake_fetcher(self) -> None:
        if self._fetch_wakeup is not None:
            self._fetch_wakeup.set()

    async def _fetch_loop(self) -> None:
        assert self._fetch_wakeup is not None
        backoff = 0
        while not self._closed:
            self._fetch_wakeup.clear()
            delay: float | None = None
            try:
                unresolved = [tp for tp, s in self._assignment.items() if s.position is None and not s.paused]
                if unresolved:
                    await self._resolve_positions(unresolved)
                delay = self._send_fetches()
                backoff = 0
            except asyncio.CancelledError:
                raise
            except OdradekError as e:
                if not e.retriable:
                    self._errors.append(e)
                    self._signal_data()
                delay = self.client.backoff_s(backoff)
                backoff += 1
            if delay is None:
                await self._fetch_wakeup.wait()
            else:
                try:
                    await asyncio.wait_for(self._fetch_wakeup.wait(), delay)
                except asyncio.TimeoutError:
                    pass

    def _send_fetches(self) -> float | None:
        cluster = self.client.cluster
        by_node: dict[int, list[TopicPartition]] = collections.defaultdict(list)
        delay = None
        for tp, state in self._assignment.items():
            if state.paused or state.position is None or state.buffered_bytes >= self.config.prefetch_bytes:
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                self.client.add_topics([tp.topic])
                self.client.request_update()
                delay = self.config.retry_backoff_ms / 1000
                continue
            if leader in self._fetch_nodes:
                continue
            by_node[leader].append(tp)
        for node, tps in by_node.items():
            self._fetch_nodes.add(node)
            task = asyncio.get_running_loop().create_task(self._fetch(node, tps))
            self._fetch_tasks.add(task)
            task.add_done_callback(self._fetch_tasks.discard)
        return delay

    async def _fetch(self, node: int, partitions: list[TopicPartition]) -> None:
        cls = REQUESTS[FETCH]
        epochs = {}
        topics: dict[str, list] = collections.defaultdict(list)
        for tp in partitions:
            asked = self._assignment[tp]
            epochs[tp] = (asked.epoch, asked.fetch_offset)
            topics[tp.topic].append(cls.FetchTopic.FetchPartition(
                partition=tp.partition, fetch_offset=asked.fetch_offset,
                partition_max_bytes=self.config.max_partition_fetch_bytes))
        request = cls(
            replica_id=-1, max_wait_ms=self.config.fetch_max_wait_ms, min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes, isolation_level=self._isolation, session_id=0,
            session_epoch=-1, topics=[cls.FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
        )
        retry_delay = 0.0
        try:
            response = await self.client.send(
                node, request, timeout_ms=self.config.request_timeout_ms + self.config.fetch_max_wait_ms)
            if response.error_code:
                raise KafkaError(response.error_code, context="Fetch")
            got_data = False
            for topic in response.responses:
                for p in topic.partitions:
                    tp = TopicPartition(topic.topic, p.partition_index)
                    state = self._assignment.get(tp)
                    if state is None or tp not in epochs or (state.epoch, state.fetch_offset) != epochs[tp]:
                        continue
                    if self._handle_partition(tp, state, p):
                        got_data = True
                        retry_delay = retry_delay or 0.0
                    elif p.error_code:
                        retry_delay = self.config.retry_backoff_ms / 1000
            if got_data:
                self._signal_data()
        except asyncio.CancelledError:
            raise
        except OdradekError as e:
            if not e.retriable:
                self._errors.append(e)
                self._signal_data()
            retry_delay = self.config.retry_backoff_ms / 1000
        finally:
            self._fetch_nodes.discard(node)
        if retry_delay and not self._closed:
            await asyncio.sleep(retry_delay)
        self._wake_fetcher()

    def _handle_partition(self, tp: TopicPartition, state: _PartitionState, p: Any) -> bool:
        code = ErrorCode.for_code(p.error_code)
        if code != ErrorCode.NONE:
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                if self.config.auto_offset_reset == "none":
                    self._errors.append(KafkaError(code, f"offset {state.fetch_offset}", context=str(tp)))
                    state.paused = True
                    self._signal_data()
                else:
                    state.seek(None, self.config.auto_offset_reset)
            elif code.invalid_metadata or code.retriable:
                self.client.request_update()
            else:
                self._errors.append(KafkaError(code, context=f"Fetch {tp}"))
                self._signal_data()
            return False
        state.high_watermark = p.high_watermark
        state.last_stable_offset = p.last_stable_offset
        state.log_start_offset = p.log_start_offset
        records = p.records
        if not records:
            return False
        return self._decode(tp, state, records, p.aborted_transactions)

    def _decode(self, tp: TopicPartition, state: _PartitionState, records: Any, aborted_list: Any) -> bool:
        fetch_offset = state.fetch_offset
        assert fetch_offset is not None
        read_committed = self._isolation == 1
        aborted = sorted(((a.first_offset, a.producer_id) for a in (aborted_list or ())), reverse=True)
        aborted_pids: set[int] = set()
        key_des, value_des = self._key_deserializer, self._value_deserializer
        buffer = state.buffer
        added = 0
        size = 0
        next_offset = fetch_offset
        check_crcs = self.config.check_crcs
        view = memoryview(records)
        batches = iter_batches(view)
        while True:
            try:
                pos, h = next(batches)
            except StopIteration:
                break
            except ProtocolError as e:
                self._corrupt(tp, state, e)
                break
            if check_crcs:
                try:
                    validate_batch(view, pos)
                except ProtocolError as e:
                    self._corrupt(tp, state, e)
                    break
            if h.next_offset <= fetch_offset:
                continue
            next_offset = h.next_offset
            if read_committed:
                while aborted and aborted[-1][0] <= h.last_offset:
                    aborted_pids.add(aborted.pop()[1])
                if h.is_control:
                    if h.is_transactional:
                        try:
                            for rec in iter_records(view[pos:pos + h.size], max_uncompressed_bytes=_MAX_UNCOMPRESSED):
                                if parse_control_record(rec)[0] == ABORT:
                                    aborted_pids.discard(h.producer_id)
                        except ProtocolError as e:
                            next_offset = max(h.base_offset, fetch_offset)
                            self._corrupt(tp, state, e)
                            break
                    continue
                if h.is_transactional and h.producer_id in aborted_pids:
                    continue
            elif h.is_control:
                continue
            timestamp_type = 1 if h.timestamp_type_log_append else 0
            epoch = h.partition_leader_epoch
            try:
                decoded = list(iter_records(view[pos:pos + h.size], max_uncompressed_bytes=_MAX_UNCOMPRESSED))
            except ProtocolError as e:
                next_offset = max(h.base_offset, fetch_offset)
                self._corrupt(tp, state, e)
                break
            for rec in decoded:
                if rec.offset < fetch_offset:
                    continue
                key, value = rec.key, rec.value
                ks = len(key) if key is not None else -1
                vs = len(value) if value is not None else -1
                if key_des is not None:
                    key = key_des(key)
                if value_des is not None:
                    value = value_des(value)
                buffer.append(ConsumerRecord(tp.topic, tp.partition, rec.offset, rec.timestamp, timestamp_type,
                                             key, value, rec.headers, ks, vs, epoch))
                added += 1
                size += max(ks, 0) + max(vs, 0) + 64
        state.fetch_offset = next_offset
        state.buffered_bytes += size
        if not buffer and state.position is not None and state.position < next_offset:
            state.position = next_offset
        return added > 0

    def _corrupt(self, tp: TopicPartition, state: _PartitionState, error: Exception) -> None:
        """A batch failed its checks: keep the records before it, pause the partition, raise from getmany."""
        self._errors.append(KafkaError(ErrorCode.CORRUPT_MESSAGE, str(error), context=f"Fetch {tp}"))
        state.paused = True
        self._signal_data()

    def _signal_data(self) -> None:
        if self._data_ready is not None:
            self._data_ready.set()

    # ------------------------------------------------------------------------------------------ reading

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records buffered for the given (default: all assigned) partitions, waiting up to `timeout_ms`."""
        if not self._started:
            await self.start()
        self._check_open()
        assert self._data_ready is not None
        limit = self.config.max_poll_records if max_records is None else max_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._errors:
                raise self._errors.popleft()
            if self.group is not None:
                self.group.poll_tick()
            result = self._take(partitions, limit)
            if result:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            self._data_ready.clear()
            try:
                await asyncio.wait_for(self._data_ready.wait(), remaining)
            except asyncio.TimeoutError:
                pass
            self._check_open()

    def _take(self, partitions: tuple[TopicPartition, ...], limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        candidates = [TopicPartition(*tp) for tp in partitions] if partitions else list(self._assignment)
        if not candidates:
            return {}
        self._rotation = (self._rotation + 1) % len(candidates)
        candidates = candidates[self._rotation:] + candidates[:self._rotation]
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        taken = 0
        wake = False
        for tp in candidates:
            state = self._assignment.get(tp)
            if state is None or state.paused or not state.buffer:
                continue
            out = result.setdefault(tp, [])
            buffer = state.buffer
            freed = 0
            while buffer and taken < limit:
                rec = buffer.popleft()
                out.append(rec)
                freed += max(rec.serialized_key_size, 0) + max(rec.serialized_value_size, 0) + 64
                taken += 1
            if out:
                state.position = out[-1].offset + 1
            if not buffer and state.fetch_offset is not None:
                state.position = max(state.position or 0, state.fetch_offset)
            before = state.buffered_bytes
            state.buffered_bytes = max(before - freed, 0)
            if before >= self.config.prefetch_bytes > state.buffered_bytes or not buffer:
                wake = True
            if not out:
                del result[tp]
            if taken >= limit:
                break
        if wake:
            self._wake_fetcher()
        return result

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        while True:
            batch = await self.getmany(*partitions, timeout_ms=1_000, max_records=1)
            for records in batch.values():
                return records[0]

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            batch = await self.getmany(timeout_ms=1_000)
            for records in batch.values():
                for record in records:
                    yield record

    # ------------------------------------------------------------------------------------------ metadata

    async def topics(self) -> set[str]:
        if not self._started:
            await self.start()
        self.client.track_all_topics()
        await self.client.refresh_metadata()
        return set(self.client.cluster.topics)

    async def partitions_for_topic(self, topic: str) -> list[int]:
        if not self._started:
            await self.start()
        return await self.client.partitions_for(topic)


class _Member:
    """The consumer as its group sees it (group.GroupMember): the consumer's state stays private to it."""

    __slots__ = ("_consumer",)

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    @property
    def subscribed(self) -> bool:
        return self._consumer._mode == "subscribe"

    @property
    def rebalance_listener(self) -> ConsumerRebalanceListener | None:
        return self._consumer._listener

    @property
    def read_committed(self) -> bool:
        return self._consumer._isolation == 1

    def matching_topics(self) -> set[str]:
        return self._consumer._matching_topics()

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def set_assignment(self, partitions: set[TopicPartition]) -> None:
        self._consumer._set_assignment(partitions)

    async def commit_positions(self, partitions: set[TopicPartition]) -> None:
        await self._consumer._commit_positions(partitions)

    def report_error(self, error: BaseException) -> None:
        self._consumer._errors.append(error)

    def wake(self) -> None:
        self._consumer._signal_data()
