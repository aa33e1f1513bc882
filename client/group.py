"""Consumer group membership (the classic protocol) and committed offsets.

Theory of operation
-------------------
A subscribed consumer runs `GroupCoordinator`'s task. It finds the coordinator (FindCoordinator), then
joins: JoinGroup with the member id ("" the first time; a v4+ coordinator answers MEMBER_ID_REQUIRED with
an id to join again with), the session and rebalance timeouts, and one protocol per configured assignor
whose metadata is a `ConsumerProtocolSubscription` (topics, owned partitions, generation). The coordinator
picks the protocol and a leader; the leader refreshes metadata for every member's topics, runs the
assignor and sends the result in SyncGroup; every member gets its own assignment from SyncGroup.

Two rebalance protocols, as in Java (KIP-429). Eager (range, roundrobin, or any mix containing one of
them): before joining, every owned partition is revoked (`on_partitions_revoked`, after an auto-commit),
and the new assignment is then assigned whole. Cooperative (only when every configured assignor is
cooperative, i.e. cooperative-sticky): partitions are kept across the join; afterwards only those no longer
assigned are revoked and only the new ones assigned, and if any were revoked the member joins once more so
the leader can hand them to their new owner.

Between rebalances the task heartbeats every `heartbeat_interval_ms`. REBALANCE_IN_PROGRESS means join
again; UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or FENCED_INSTANCE_ID mean this member was expelled: its
partitions are lost (`on_partitions_lost`, no commit) and it joins afresh. NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE send it back to FindCoordinator. A pattern subscription is re-matched against
metadata on every tick, and the leader re-joins when a subscribed topic's partition count changes. A
consumer that does not call `getmany` within `max_poll_interval_ms` leaves the group, as in Java, and
rejoins on its next call.

`commit_offsets` and `fetch_committed_offsets` (OffsetCommit / OffsetFetch to the coordinator) are also
used by the admin client and by `assign()`ed consumers that have a group id (generation -1, no member).

The consumer owns the assignment and the fetch positions; the group reaches them only through the
`GroupMember` it was given (what it may read and change of its consumer), and the consumer only through
`GroupCoordinator`'s public methods.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import defaultdict
from typing import Any, Iterable, Protocol

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS

from .assignors import ASSIGNORS, COOPERATIVE, Subscription, decode_assignment, decode_subscription, \
    encode_assignment, encode_subscription
from .cluster import KafkaClient
from .common import ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition
from .config import ConsumerConfig
from .errors import KafkaError, OdradekError

log = logging.getLogger("odradek.client.group")

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14

_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
_MEMBER_ERRORS = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID}


class CommitFailedError(KafkaError):
    """The group rebalanced before the commit: the partitions may now belong to another member."""


class GroupMember(Protocol):
    """What the group needs of the consumer it manages membership for."""

    @property
    def subscribed(self) -> bool:
        """Member of the group (subscribe()), not reading assigned partitions (assign()) or nothing."""
        ...

    @property
    def rebalance_listener(self) -> ConsumerRebalanceListener | None: ...

    @property
    def read_committed(self) -> bool: ...

    def matching_topics(self) -> set[str]:
        """The subscribed topics that exist now (a pattern matched against metadata)."""
        ...

    def assignment(self) -> set[TopicPartition]: ...

    def set_assignment(self, partitions: set[TopicPartition]) -> None: ...

    async def commit_positions(self, partitions: set[TopicPartition]) -> None:
        """Commit the consumed positions of `partitions` (auto-commit before they are revoked)."""
        ...

    def report_error(self, error: BaseException) -> None:
        """An error for the application, raised by getmany() when it next looks (see `wake`)."""
        ...

    def wake(self) -> None:
        """Wake a getmany() waiting for records: the assignment changed, or an error is to be raised."""
        ...


async def _call_listener(fn: Any, partitions: set[TopicPartition]) -> None:
    result = fn(partitions)
    if inspect.isawaitable(result):
        await result


async def commit_offsets(
    client: KafkaClient,
    group_id: str,
    offsets: dict[TopicPartition, OffsetAndMetadata],
    *,
    generation_id: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> None:
    """OffsetCommit to the group's coordinator, retrying coordinator moves; raise on partition errors."""
    cls = REQUESTS[OFFSET_COMMIT]
    by_topic: dict[str, list] = defaultdict(list)
    for tp, om in sorted(offsets.items()):
        by_topic[tp.topic].append(cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=tp.partition, committed_offset=om.offset, committed_leader_epoch=om.leader_epoch,
            committed_metadata=om.metadata or ""))
    request = cls(group_id=group_id, generation_id_or_member_epoch=generation_id, member_id=member_id,
                  group_instance_id=group_instance_id,
                  topics=[cls.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in by_topic.items()])

    async def attempt() -> None:
        node = await client.coordinator(group_id)
        response = await client.send(node, request)
        first: KafkaError | None = None
        for t in response.topics:
            for p in t.partitions:
                if p.error_code and first is None:
                    code = ErrorCode.for_code(p.error_code)
                    context = f"commit {t.name}-{p.partition_index} for group {group_id!r}"
                    if code in _COORDINATOR_ERRORS:
                        client.invalidate_coordinator(group_id)
                    if code in _MEMBER_ERRORS or code == ErrorCode.REBALANCE_IN_PROGRESS:
                        first = CommitFailedError(code, "the group rebalanced; the commit was refused", context=context)
                    else:
                        first = KafkaError(code, context=context)
        if first is not None:
            raise first

    await client.call(attempt, what=f"OffsetCommit {group_id}")


async def fetch_committed_offsets(
    client: KafkaClient,
    group_id: str,
    partitions: Iterable[TopicPartition] | None = None,
    *,
    require_stable: bool = False,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """Committed offsets of `group_id` (all of them when `partitions` is None); absent ones are left out."""
    cls = REQUESTS[OFFSET_FETCH]
    wanted: dict[str, list[int]] | None = None
    if partitions is not None:
        wanted = defaultdict(list)
        for tp in partitions:
            wanted[tp.topic].append(tp.partition)

    def build(version: int) -> Any:
        if version >= 8:
            topics = None if wanted is None else [
                cls.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=t, partition_indexes=sorted(p))
                for t, p in wanted.items()]
            return cls(groups=[cls.OffsetFetchRequestGroup(group_id=group_id, topics=topics)],
                       require_stable=require_stable)
        topics = None if wanted is None else [
            cls.OffsetFetchRequestTopic(name=t, partition_indexes=sorted(p)) for t, p in wanted.items()]
        return cls(group_id=group_id, topics=topics, require_stable=require_stable)

    async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
        node = await client.coordinator(group_id)
        response = await client.send(node, build, api_key=OFFSET_FETCH, min_version=2)
        if response.groups:
            group = response.groups[0]
            top_error, topics = group.error_code, group.topics
        else:
            top_error, topics = response.error_code, response.topics
        if top_error:
            if ErrorCode.for_code(top_error) in _COORDINATOR_ERRORS:
                client.invalidate_coordinator(group_id)
            raise KafkaError(top_error, context=f"committed offsets of group {group_id!r}")
        result = {}
        for t in topics:
            for p in t.partitions:
                if p.error_code:
                    code = ErrorCode.for_code(p.error_code)
                    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        continue
                    raise KafkaError(code, context=f"committed offset of {t.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    result[TopicPartition(t.name, p.partition_index)] = OffsetAndMetadata(
                        p.committed_offset, p.metadata or "", p.committed_leader_epoch)
        return result

    return await client.call(attempt, what=f"OffsetFetch {group_id}")


class GroupCoordinator:
    def __init__(self, client: KafkaClient, config: ConsumerConfig, member: GroupMember):
        assert config.group_id
        self.client = client
        self.config = config
        self.member = member
        self.group_id: str = config.group_id
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self._assignors = [ASSIGNORS[name]() for name in config.assignor_names]
        self.cooperative = all(a.protocol == COOPERATIVE for a in self._assignors)
        self._rebalance_timeout_ms = config.rebalance_timeout_ms or config.max_poll_interval_ms
        self._rejoin = True
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._joined_topics: set[str] = set()
        self._assigned_counts: dict[str, int] = {}
        self._last_poll = time.monotonic()
        self._left_for_poll_timeout = False
        self._closed = False
        self.stable = asyncio.Event()

    # ------------------------------------------------------------------------------------------ control

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def subscription_changed(self) -> None:
        self._rejoin = True
        self._wakeup.set()
        self._ensure_task()

    def unsubscribe(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.member_id:
            asyncio.get_running_loop().create_task(self._leave())

    def poll_tick(self) -> None:
        self._last_poll = time.monotonic()
        if self._left_for_poll_timeout:
            self._left_for_poll_timeout = False
            self.subscription_changed()
        elif self.member.subscribed:
            self._ensure_task()

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass
        if self.member_id and self.member.subscribed:
            owned = self.member.assignment()
            listener = self.member.rebalance_listener
            if owned and listener is not None:
                try:
                    await _call_listener(listener.on_partitions_revoked, owned)
                except Exception:
                    log.exception("on_partitions_revoked failed")
            await self._leave()

    async def _leave(self) -> None:
        if not self.member_id or self.config.group_instance_id:
            return
        cls = REQUESTS[LEAVE_GROUP]
        member_id = self.member_id
        self.member_id = ""
        self.generation_id = -1

        def build(version: int) -> Any:
            if version >= 3:
                return cls(group_id=self.group_id, members=[cls.MemberIdentity(
                    member_id=member_id, group_instance_id=self.config.group_instance_id,
                    reason="the consumer is closing")])
            return cls(group_id=self.group_id, member_id=member_id)

        try:
            node = await self.client.coordinator(self.group_id)
            await self.client.send(node, build, api_key=LEAVE_GROUP, timeout_ms=5_000)
        except OdradekError:
            pass

    # ------------------------------------------------------------------------------------------ offsets

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        member = self.member.subscribed
        try:
            await commit_offsets(
                self.client, self.group_id, offsets,
                generation_id=self.generation_id if member else -1,
                member_id=self.member_id if member else "",
                group_instance_id=self.config.group_instance_id if member else None,
            )
        except CommitFailedError:
            self._rejoin = True
            self._wakeup.set()
            raise

    async def fetch_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
        return await fetch_committed_offsets(self.client, self.group_id, partitions,
                                             require_stable=self.member.read_committed)

    # ------------------------------------------------------------------------------------------ main loop

    async def _run(self) -> None:
        attempt = 0
        next_heartbeat = 0.0
        interval = self.config.heartbeat_interval_ms / 1000
        while not self._closed:
            try:
                self._check_subscription()
                if self._rejoin:
                    self.stable.clear()
                    await self._rebalance()
                    attempt = 0
                    next_heartbeat = time.monotonic() + interval
                    if not self._rejoin:
                        self.stable.set()
                    continue
                if time.monotonic() - self._last_poll > self.config.max_poll_interval_ms / 1000:
                    log.warning("no getmany() within max_poll_interval_ms: leaving group %s", self.group_id)
                    await self._revoke(self.member.assignment(), lost=False)
                    await self._leave()
                    self._left_for_poll_timeout = True
                    return
                now = time.monotonic()
                if now >= next_heartbeat:
                    await self._heartbeat()
                    next_heartbeat = now + interval
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), max(next_heartbeat - time.monotonic(), 0.01))
                except asyncio.TimeoutError:
                    pass
            except asyncio.CancelledError:
                raise
            except OdradekError as e:
                benign = isinstance(e, KafkaError) and (
                    e.code in _MEMBER_ERRORS or e.code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.MEMBER_ID_REQUIRED))
                if not e.retriable and not benign:
                    self.member.report_error(e)
                    self.member.wake()
                self._rejoin = self._rejoin or benign
                await asyncio.sleep(self.client.backoff_s(attempt))
                attempt += 1

    def _check_subscription(self) -> None:
        topics = self.member.matching_topics()
        if topics != self._joined_topics and self.generation_id >= 0:
            self._rejoin = True
        if self.leader_id is not None and self.leader_id == self.member_id:
            cluster = self.client.cluster
            for topic, count in self._assigned_counts.items():
                parts = cluster.partitions_for(topic)
                if parts is not None and len(parts) != count:
                    self._rejoin = True
            for topic in self._joined_topics:
                if topic not in self._assigned_counts and cluster.partitions_for(topic):
                    self._rejoin = True

    async def _heartbeat(self) -> None:
        cls = REQUESTS[HEARTBEAT]
        request = cls(group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
                      group_instance_id=self.config.group_instance_id)
        node = await self.client.coordinator(self.group_id)
        response = await self.client.send(node, request)
        code = ErrorCode.for_code(response.error_code)
        if code == ErrorCode.NONE:
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._rejoin = True
        elif code in _MEMBER_ERRORS:
            await self._lose_membership()
        elif code in _COORDINATOR_ERRORS:
            self.client.invalidate_coordinator(self.group_id)
        else:
            raise KafkaError(code, context=f"Heartbeat for group {self.group_id!r}")

    async def _lose_membership(self) -> None:
        log.info("member %s lost its membership of group %s", self.member_id, self.group_id)
        self.member_id = ""
        self.generation_id = -1
        self._rejoin = True
        await self._revoke(self.member.assignment(), lost=True)

    async def _revoke(self, partitions: set[TopicPartition], *, lost: bool) -> None:
        if not partitions:
            return
        if not lost and self.config.enable_auto_commit:
            try:
                await self.member.commit_positions(partitions)
            except OdradekError as e:
                log.info("commit before revocation failed: %s", e)
        listener = self.member.rebalance_listener
        if listener is not None:
            try:
                fn = listener.on_partitions_lost if lost else listener.on_partitions_revoked
                await _call_listener(fn, set(partitions))
            except Exception as e:  # a listener's error reaches the caller through getmany()
                self.member.report_error(e)
        remaining = self.member.assignment() - set(partitions)
        self.member.set_assignment(remaining)

    async def _rebalance(self) -> None:
        if not self.cooperative:
            await self._revoke(self.member.assignment(), lost=False)
        topics = self.member.matching_topics()
        self._rejoin = False
        try:
            join = await self._join(topics)
            self._joined_topics = topics
            assignments: list = []
            if join.leader == join.member_id:
                assignments = await self._assign(join)
            else:
                self._assigned_counts = {}
            assignment = await self._sync(join, assignments)
        except BaseException:
            self._rejoin = True
            raise
        if self._rejoin:
            return
        new = set(assignment)
        owned = self.member.assignment()
        revoked = owned - new
        added = new - owned
        if revoked:
            await self._revoke(revoked, lost=False)
            if self.cooperative:
                self._rejoin = True
        self.member.set_assignment(new)
        self.client.add_topics({tp.topic for tp in new})
        listener = self.member.rebalance_listener
        if listener is not None:
            try:
                await _call_listener(listener.on_partitions_assigned, added if self.cooperative else new)
            except Exception as e:
                self.member.report_error(e)
        self.member.wake()

    async def _join(self, topics: set[str]) -> Any:
        cls = REQUESTS[JOIN_GROUP]
        owned = sorted(self.member.assignment()) if self.cooperative else []
        metadata = encode_subscription(Subscription(sorted(topics), owned, self.generation_id))
        protocols = [cls.JoinGroupRequestProtocol(name=a.name, metadata=metadata) for a in self._assignors]
        while True:
            member_id = self.member_id

            def build(version: int) -> Any:
                return cls(group_id=self.group_id, session_timeout_ms=self.config.session_timeout_ms,
                           rebalance_timeout_ms=self._rebalance_timeout_ms, member_id=member_id,
                           group_instance_id=self.config.group_instance_id, protocol_type="consumer",
                           protocols=protocols)

            node = await self.client.coordinator(self.group_id)
            response = await self.client.send(node, build, api_key=JOIN_GROUP,
                                              timeout_ms=self._rebalance_timeout_ms + 5_000)
            code = ErrorCode.for_code(response.error_code)
            if code == ErrorCode.NONE:
                self.member_id = response.member_id
                self.generation_id = response.generation_id
                self.protocol_name = response.protocol_name
                self.leader_id = response.leader
                return response
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            self._rejoin = True
            if code in _COORDINATOR_ERRORS:
                self.client.invalidate_coordinator(self.group_id)
            raise KafkaError(code, context=f"JoinGroup {self.group_id!r}")

    async def _assign(self, join: Any) -> list:
        cls = REQUESTS[SYNC_GROUP]
        assignor = next((a for a in self._assignors if a.name == join.protocol_name), None)
        if assignor is None:
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"the coordinator chose {join.protocol_name!r}, which this consumer lacks")
        subscriptions = {m.member_id: decode_subscription(m.metadata) for m in join.members}
        all_topics = {t for s in subscriptions.values() for t in s.topics}
        self.client.add_topics(all_topics)
        await self.client.refresh_metadata(sorted(all_topics))
        counts = {}
        for topic in all_topics:
            parts = self.client.cluster.partitions_for(topic)
            if parts:
                counts[topic] = len(parts)
        self._assigned_counts = counts
        result = assignor.assign(counts, subscriptions)
        log.debug("group %s generation %d: %s assigned %s", self.group_id, join.generation_id, assignor.name, result)
        return [cls.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(tps))
                for m, tps in result.items()]

    async def _sync(self, join: Any, assignments: list) -> list[TopicPartition]:
        cls = REQUESTS[SYNC_GROUP]
        request = cls(group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
                      group_instance_id=self.config.group_instance_id, protocol_type="consumer",
                      protocol_name=join.protocol_name, assignments=assignments)
        node = await self.client.coordinator(self.group_id)
        response = await self.client.send(node, request, timeout_ms=self._rebalance_timeout_ms + 5_000)
        code = ErrorCode.for_code(response.error_code)
        if code == ErrorCode.NONE:
            return decode_assignment(bytes(response.assignment))
        self._rejoin = True
        if code in _MEMBER_ERRORS:
            await self._lose_membership()
            return []
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return []
        if code in _COORDINATOR_ERRORS:
            self.client.invalidate_coordinator(self.group_id)
        raise KafkaError(code, context=f"SyncGroup {self.group_id!r}")
