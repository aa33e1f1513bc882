"""The broker's SharePersister: share-partition state carried to the share coordinator, wherever it is.

Kafka's DefaultStatePersister / PersisterStateManager, in the shape of this broker:

* **Which coordinator.** A share-partition's state lives in partition
  `share_state_partition("group:topic_id:partition", n)` of `__share_group_state`, and its coordinator is
  that partition's leader. The broker knows every partition's leader from its metadata image, so it looks
  the coordinator up there, as Kafka's persister does with its ShareCoordinatorMetadataCacheHelper (a
  FindCoordinator round trip would ask another broker the same image). The image is the cache: it changes
  exactly when leadership moves, and a NOT_COORDINATOR answer (the image here is behind the one of the
  broker asked) is retried after a backoff, by which time the image has caught up. A missing topic is
  created (first use, as FindCoordinator key type 2 would), and the call answered COORDINATOR_NOT_AVAILABLE
  until it has a leader.
* **This broker's own coordinator** is called in process (`local()`), with no request built: a partition
  leader that is also its share-partitions' coordinator (one broker always is) pays no network hop.
* **Batching.** Calls made in the same event-loop turn for the same coordinator, API and group become one
  request (the APIs take many topics and partitions per group), as Kafka's persister coalesces the
  requests of one coordinator node. Two calls for the same share-partition never share a request: the
  later goes in a following request, so writes of one share-partition reach the coordinator in order.
* **Retries.** NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and a node that
  cannot be reached are retried with a doubling backoff (`retry_backoff_ms` to `retry_backoff_max_ms`)
  until `deadline_ms` after the call; then the last code is answered (and logged: the caller tells its own
  client). Any other code is the coordinator's answer and is returned at once (FENCED_* to a replaced
  leader, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION).

Requests go over the inter-broker listener through `send(node_id, request, version)` (the broker lends
the connections its transaction markers use, with the inter-broker TLS/SASL settings). Versions: Write and
ReadSummary v1 (they carry DeliveryCompleteCount, KIP-1226), the others v0.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from odradek.coordinator.partitioning import SHARE_GROUP_STATE_TOPIC, share_state_partition
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.coordinator.share.shard import ShareStateAnswer
from odradek.metadata.image import MetadataImage, uuid_string
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from odradek.purgatory.deferred import Deferred
from odradek.replication.share import RecordState, ShareSnapshot, StateBatch

from .persister import ReadResult, SharePartitionKey, SummaryResult

__all__ = ["NetworkPersister"]

log = structlog.get_logger("odradek.share.persister")

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
_VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0, SUMMARY: 1}
RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})

Send = Callable[[int, Any, int], Awaitable[Any]]


@dataclass(slots=True)
class _Call:
    key: SharePartitionKey
    args: tuple
    future: asyncio.Future


class NetworkPersister:
    """A `SharePersister` (persister.py) over the share coordinator: this broker's own, or another's."""

    def __init__(self, *, node_id: int, image: Callable[[], MetadataImage], local: Callable[[], ShareCoordinator],
                 ensure_topic: Callable[[], object], send: Send, clock: Callable[[], int],
                 timers_changed: Callable[[], None] = lambda: None, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1000, deadline_ms: int = 30_000) -> None:
        self.node_id = node_id
        self._image = image
        self._local = local
        self._ensure_topic = ensure_topic
        self._send = send
        self._clock = clock
        self._timers_changed = timers_changed
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.deadline_ms = deadline_ms
        self._pending: dict[tuple[int, int, str], list[_Call]] = {}
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.requests_sent = 0  # requests sent to other brokers (each may carry many calls)
        self.local_calls = 0

    # ------------------------------------------------------------------------------------------------
    # SharePersister

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ErrorCode:
        return (await self._call(key, INITIALIZE, (state_epoch, start_offset))).error_code

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadResult:
        a = await self._call(key, READ, (leader_epoch,))
        if a.error_code is not ErrorCode.NONE:
            return ReadResult(a.error_code, error_message=a.error_message)
        return ReadResult(ErrorCode.NONE, ShareSnapshot(a.state_epoch, a.start_offset, a.batches))

    async def write(self, key: SharePartitionKey, leader_epoch: int, snapshot: ShareSnapshot,
                    delivery_complete_count: int = -1) -> ErrorCode:
        args = (snapshot.state_epoch, leader_epoch, snapshot.start_offset, delivery_complete_count,
                tuple(snapshot.state_batches))
        return (await self._call(key, WRITE, args)).error_code

    async def delete(self, group_id: str, partitions: Sequence[tuple[uuid.UUID, int]]) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        keys = [SharePartitionKey(group_id, topic_id, partition) for topic_id, partition in partitions]
        answers = await asyncio.gather(*(self._call(key, DELETE, ()) for key in keys))
        return {(key.topic_id, key.partition): a.error_code for key, a in zip(keys, answers)}

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> SummaryResult:
        a = await self._call(key, SUMMARY, (leader_epoch,))
        if a.error_code is not ErrorCode.NONE:
            return SummaryResult(a.error_code, error_message=a.error_message)
        return SummaryResult(ErrorCode.NONE, a.state_epoch, a.leader_epoch, a.start_offset, a.delivery_complete_count)

    async def close(self) -> None:
        """Stop: calls still waiting are answered COORDINATOR_NOT_AVAILABLE (the broker is going away)."""
        self._closed = True
        pending, self._pending = self._pending, {}
        for calls in pending.values():
            for call in calls:
                if not call.future.done():
                    call.future.set_result(ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "broker stopping"))
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------------------------------------
    # One call, retried

    async def _call(self, key: SharePartitionKey, api: int, args: tuple) -> ShareStateAnswer:
        deadline = self._clock() + self.deadline_ms
        backoff = self.retry_backoff_ms
        attempts = 0
        while True:
            attempts += 1
            answer = await self._attempt(key, api, args)
            if answer.error_code not in RETRIABLE or self._closed:
                return answer
            if self._clock() + backoff > deadline:
                log.warning("share coordinator not reached; giving up", api_key=api, group_id=key.group_id,
                            topic_id=uuid_string(key.topic_id), partition=key.partition, attempts=attempts,
                            error=answer.error_code.name, cause=answer.error_message)
                return answer
            await asyncio.sleep(backoff / 1000)
            backoff = min(backoff * 2, self.retry_backoff_max_ms)

    def coordinator_of(self, key: SharePartitionKey) -> int | None:
        """The broker coordinating `key` now (the leader of its `__share_group_state` partition), or None."""
        topic = self._image().topics_by_name.get(SHARE_GROUP_STATE_TOPIC)
        if topic is None:
            self._ensure_topic()
            return None
        index = share_state_partition(key.coordinator_key(), len(topic.partitions))
        partition = topic.partitions.get(index)
        return partition.leader if partition is not None and partition.leader >= 0 else None

    async def _attempt(self, key: SharePartitionKey, api: int, args: tuple) -> ShareStateAnswer:
        if self._closed:
            return ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "broker stopping")
        try:
            node = self.coordinator_of(key)
        except Exception as e:  # noqa: BLE001 - creating the topic failed (the controller's answer): retried
            log.warning("share state topic not created", error=repr(e))
            return ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_GROUP_STATE_TOPIC} not created: {e}")
        if node is None:
            return ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                    f"{SHARE_GROUP_STATE_TOPIC} has no leader for this share-partition yet")
        if node == self.node_id:
            return await self._call_local(key, api, args)
        future = asyncio.get_running_loop().create_future()
        self._pending.setdefault((node, api, key.group_id), []).append(_Call(key, args, future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return await future

    async def _call_local(self, key: SharePartitionKey, api: int, args: tuple) -> ShareStateAnswer:
        self.local_calls += 1
        try:
            coordinator = self._local()
        except Exception as e:  # noqa: BLE001 - the coordinator could not start (its topic): retried
            log.warning("share coordinator not started", error=repr(e))
            return ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"share coordinator not started: {e}")
        now = self._clock()
        g, t, p = key.group_id, key.topic_id, key.partition
        deferred: Deferred[ShareStateAnswer]
        if api == INITIALIZE:
            deferred = coordinator.initialize(g, t, p, args[0], args[1], now)
        elif api == READ:
            deferred = coordinator.read(g, t, p, args[0], now)
        elif api == WRITE:
            deferred = coordinator.write(g, t, p, args[0], args[1], args[2], args[3], args[4], now)
        elif api == DELETE:
            deferred = coordinator.delete(g, t, p, now)
        else:
            deferred = coordinator.read_summary(g, t, p, args[0], now)
        self._timers_changed()  # a write may have armed its timeout on the wheel
        if deferred.done:
            return deferred.result()
        future: asyncio.Future = asyncio.get_running_loop().create_future()

        def settle(d: Deferred) -> None:
            if not future.done():
                future.set_result(d.result())

        deferred.add_callback(settle)
        return await future

    # ------------------------------------------------------------------------------------------------
    # Batching and the network

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending, self._pending = self._pending, {}
        for (node, api, group_id), calls in pending.items():
            task = asyncio.get_running_loop().create_task(self._send_rounds(node, api, group_id, calls))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_rounds(self, node: int, api: int, group_id: str, calls: list[_Call]) -> None:
        """The calls in requests where no share-partition appears twice, sent one after the other."""
        while calls:
            seen: set[SharePartitionKey] = set()
            this_round: list[_Call] = []
            later: list[_Call] = []
            for call in calls:
                (later if call.key in seen else this_round).append(call)
                seen.add(call.key)
            await self._send_one(node, api, group_id, this_round)
            calls = later

    async def _send_one(self, node: int, api: int, group_id: str, calls: list[_Call]) -> None:
        version = _VERSIONS[api]
        try:
            self.requests_sent += 1
            response = await self._send(node, _request(api, group_id, calls), version)
            answers = _answers(api, response)
        except asyncio.CancelledError:
            for call in calls:
                if not call.future.done():
                    call.future.set_result(ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE, "broker stopping"))
            raise
        except Exception as e:  # noqa: BLE001 - a node down, a connection lost, a timeout: retried by the caller
            log.debug("share state request failed", node=node, api_key=api, error=repr(e))
            for call in calls:
                if not call.future.done():
                    call.future.set_result(ShareStateAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                                            f"node {node} not reached: {e}"))
            return
        for call in calls:
            if not call.future.done():
                answer = answers.get((call.key.topic_id, call.key.partition))
                call.future.set_result(answer if answer is not None else ShareStateAnswer(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"node {node} did not answer for partition {call.key.partition}"))


def _request(api: int, group_id: str, calls: list[_Call]) -> Any:
    by_topic: dict[uuid.UUID, list[_Call]] = {}
    for call in calls:
        by_topic.setdefault(call.key.topic_id, []).append(call)
    if api == INITIALIZE:
        I = InitializeShareGroupStateRequest.InitializeStateData
        return InitializeShareGroupStateRequest(group_id=group_id, topics=[I(topic_id=t, partitions=[
            I.PartitionData(partition=c.key.partition, state_epoch=c.args[0], start_offset=c.args[1]) for c in cs])
            for t, cs in by_topic.items()])
    if api == READ:
        R = ReadShareGroupStateRequest.ReadStateData
        return ReadShareGroupStateRequest(group_id=group_id, topics=[R(topic_id=t, partitions=[
            R.PartitionData(partition=c.key.partition, leader_epoch=c.args[0]) for c in cs])
            for t, cs in by_topic.items()])
    if api == WRITE:
        W = WriteShareGroupStateRequest.WriteStateData
        B = W.PartitionData.StateBatch
        return WriteShareGroupStateRequest(group_id=group_id, topics=[W(topic_id=t, partitions=[
            W.PartitionData(partition=c.key.partition, state_epoch=c.args[0], leader_epoch=c.args[1],
                            start_offset=c.args[2], delivery_complete_count=c.args[3], state_batches=[
                                B(first_offset=b.first_offset, last_offset=b.last_offset,
                                  delivery_state=int(b.delivery_state), delivery_count=b.delivery_count)
                                for b in c.args[4]]) for c in cs])
            for t, cs in by_topic.items()])
    if api == DELETE:
        D = DeleteShareGroupStateRequest.DeleteStateData
        return DeleteShareGroupStateRequest(group_id=group_id, topics=[D(topic_id=t, partitions=[
            D.PartitionData(partition=c.key.partition) for c in cs]) for t, cs in by_topic.items()])
    S = ReadShareGroupStateSummaryRequest.ReadStateSummaryData
    return ReadShareGroupStateSummaryRequest(group_id=group_id, topics=[S(topic_id=t, partitions=[
        S.PartitionData(partition=c.key.partition, leader_epoch=c.args[0]) for c in cs]) for t, cs in by_topic.items()])


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _answers(api: int, response) -> dict[tuple[uuid.UUID, int], ShareStateAnswer]:
    out: dict[tuple[uuid.UUID, int], ShareStateAnswer] = {}
    for result in response.results:
        for p in result.partitions:
            code = _code(p.error_code)
            if api == READ and code is ErrorCode.NONE:
                try:
                    batches = tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state),
                                               b.delivery_count) for b in p.state_batches)
                except ValueError:
                    answer = ShareStateAnswer(ErrorCode.UNKNOWN_SERVER_ERROR, "unknown delivery state in the answer")
                else:
                    answer = ShareStateAnswer(code, p.error_message, state_epoch=p.state_epoch,
                                              start_offset=p.start_offset, batches=batches)
            elif api == SUMMARY and code is ErrorCode.NONE:
                answer = ShareStateAnswer(code, p.error_message, state_epoch=p.state_epoch,
                                          leader_epoch=p.leader_epoch, start_offset=p.start_offset,
                                          delivery_complete_count=p.delivery_complete_count)
            else:
                answer = ShareStateAnswer(code, p.error_message)
            out[(result.topic_id, p.partition)] = answer
    return out
