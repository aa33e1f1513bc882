"""The asyncio share consumer (KIP-932, "queues for Kafka"): `subscribe()`, then `poll()` and acknowledge.

    async with ShareConsumer("jobs", group_id="workers") as consumer:
        for record in await consumer.poll(timeout_ms=1000):
            handle(record)          # implicit mode: accepted on the next poll, commit() or close()

A share group lets any number of members read the same partitions: the partition leader hands each record to
one member at a time under an acquisition lock, and the member acknowledges it record by record. This
module speaks that protocol with the client's own connection, metadata and retry pieces (cluster.py); it
has no second stack.

Theory of operation
-------------------
**Membership** (`_Membership`, ShareGroupHeartbeat to the group coordinator). The member id is made here,
a random UUID in Kafka's base64 form, as KIP-848 members make theirs. The first heartbeat (epoch 0) names
the subscribed topics; later ones carry them only when they changed, and come every
`heartbeat_interval_ms` the coordinator answered with. An answer with an assignment (topic ids and
partition numbers) replaces the member's partitions; there is nothing to revoke, since a share-partition
has many readers. FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID drop the assignment and join again at epoch 0
with the same id; NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE look the coordinator up again; an
authorization or request error reaches the caller through `poll()`. `close()` and `unsubscribe()` leave with
epoch -1, as does a member that did not poll for `max_poll_interval_ms` (it joins again on its next poll).

**Fetching** (ShareFetch to each partition leader). There is one share session per leader (`_Session`),
keyed on the broker by (group, member): epoch 0 opens it naming its partitions, each later request carries
the next epoch and only the partitions added (`topics`) or removed (`forgotten_topics_data`), and -1 closes
it. Exactly one request is in flight per session (the epoch orders them), as in Kafka's
ShareConsumeRequestManager. A leader is fetched from while fewer than `max_poll_records` of its records
wait in the buffer (none, in the record-limit acquire mode), so the next fetch is under way while the caller
works, and at most about two polls' worth of records sit acquired and unseen per leader (a lock that runs
while nobody looks at its record would only expire). The broker ends a session when the connection that opened it
closes, and so releases what the member held: a new connection here therefore opens a new session.
SHARE_SESSION_NOT_FOUND and INVALID_SHARE_SESSION_EPOCH reset the session to epoch 0; NOT_LEADER_OR_FOLLOWER
and the other stale-metadata errors refresh metadata, after which the partition moves to its new leader's
session.

Each answer's record batches are decoded only where an `acquired_records` range covers them, and only the
records inside those ranges are buffered, each with its `delivery_count`; acquired offsets that hold no
record (a control record, a compacted gap) are acknowledged at once with GAP, as Kafka's client does, so the
leader's window moves past them.

**Acknowledging**, as Kafka's KafkaShareConsumer (`share.acknowledgement.mode`):

* implicit (the default): every record a poll returned is accepted by the next `poll()`, by `commit()` or
  by `close()`. (Kafka's Java client releases the last poll's records on close; librdkafka's ShareConsumer,
  which Python users know, accepts them, and so does this one: a record the loop processed is not
  redelivered because the program then ended.)
* explicit: the caller acknowledges each record with `acknowledge(record, AcknowledgeType.X)`; a `poll()`
  while a record of the previous one is unacknowledged raises `ShareStateError` (Java's
  IllegalStateException). ACCEPT, RELEASE (delivered again, delivery count + 1), REJECT (never again) and
  RENEW (KIP-1222: the lock starts again; the record stays in hand and is acknowledged again later).

Acknowledgements ride on the next ShareFetch to the leader that handed the records out; when no fetch is
due (records are still buffered) they go in a ShareAcknowledge at once. RENEW always goes in a
ShareAcknowledge (v2, `is_renew_ack`), which also answers the lock duration, exposed as
`acquisition_lock_timeout_ms`. `commit()` sends everything pending in ShareAcknowledge and returns each
partition's outcome (None, or the `KafkaError`, e.g. INVALID_RECORD_STATE for a record whose lock expired).
The outcome of acknowledgements sent otherwise goes to the callback of
`set_acknowledgement_commit_callback`, called from the next `poll()`, `commit()` or `close()` as Kafka calls
it from the application thread.

`close()` sends what is pending and closes every session with epoch -1, which gives the records this member
still holds (buffered, or returned and not acknowledged) back to the group at once, then leaves the group.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import enum
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterable

from odradek.protocol.errors import ErrorCode, ProtocolError
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import iter_batches, iter_records, validate_batch

from .cluster import KafkaClient
from .common import TopicPartition
from .config import ClientConfig
from .consumer import ConsumerRecord
from .errors import (
    ClientClosedError, ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError, OdradekError,
    UnsupportedVersionError,
)

log = logging.getLogger("odradek.client.share")

SHARE_GROUP_HEARTBEAT = 76
SHARE_FETCH = 78
SHARE_ACKNOWLEDGE = 79
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_UNCOMPRESSED = 256 * 1024 * 1024
_INT32_MAX = 0x7FFFFFFF

_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
_REJOIN_ERRORS = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}
_SESSION_ERRORS = {ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH}
_GONE_ERRORS = {ErrorCode.INVALID_RECORD_STATE, *_SESSION_ERRORS}


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged (the wire's `acknowledge_types`; GAP is the client's own, for offsets
    that hold no record)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ShareStateError(OdradekError, RuntimeError):
    """The call does not fit the consumer's state (Java's IllegalStateException): acknowledge() in implicit
    mode or of a record not waiting for one, a poll() in explicit mode with records unacknowledged, a poll()
    before subscribe()."""


class RecordDeserializationError(OdradekError):
    """A key or value deserializer raised for a delivered record; the record was released (it comes back
    until the group's delivery limit archives it). `__cause__` is the deserializer's error."""

    def __init__(self, tp: TopicPartition, offset: int, cause: Exception) -> None:
        super().__init__(f"deserializing {tp} offset {offset} failed: {cause!r}")
        self.topic_partition, self.offset = tp, offset
        self.__cause__ = cause


@dataclass(slots=True)
class ShareConsumerRecord(ConsumerRecord):
    """A record delivered to a share group member: a ConsumerRecord plus how many times it has been
    delivered (1 the first time; RELEASE or an expired lock make it come back with one more)."""

    delivery_count: int = 1


@dataclass(kw_only=True)
class ShareConsumerConfig(ClientConfig):
    """A share consumer's settings, with Kafka's names (`share.acknowledgement.mode` -> the field
    share_acknowledgement_mode; `from_dict` takes the dotted names). The share group's own behaviour
    (start offset, isolation level, lock duration, delivery limit) is the group's configuration
    (`share.auto.offset.reset` and friends as GROUP configs), not the consumer's."""

    group_id: str | None = None
    share_acknowledgement_mode: str = "implicit"  # or "explicit"
    share_acquire_mode: str = "batch_optimized"  # or "record_limit" (KIP-1206: never more than max_poll_records)
    max_poll_records: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_poll_interval_ms: int = 300_000
    client_rack: str | None = None
    check_crcs: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.group_id:
            raise ConfigError("a share consumer needs a group_id (group.id)")
        if self.share_acknowledgement_mode not in ("implicit", "explicit"):
            raise ConfigError("share.acknowledgement.mode must be implicit or explicit "
                              f"(got {self.share_acknowledgement_mode!r})")
        if self.share_acquire_mode not in ("batch_optimized", "record_limit"):
            raise ConfigError(f"share.acquire.mode must be batch_optimized or record_limit (got {self.share_acquire_mode!r})")
        if self.max_poll_records < 1:
            raise ConfigError(f"max.poll.records must be at least 1 (got {self.max_poll_records})")

    @property
    def explicit(self) -> bool:
        return self.share_acknowledgement_mode == "explicit"


def new_member_id() -> str:
    """A member id as Kafka's clients make one (Uuid.randomUuid().toString(): 16 random bytes, URL-safe
    base64 without padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def ack_batches(acks: dict[int, AcknowledgeType]) -> list[tuple[int, int, list[int]]]:
    """Offset -> type as ShareFetch/ShareAcknowledge AcknowledgementBatches: runs of consecutive offsets,
    ascending and never overlapping (the leader refuses anything else), each with one type when the run
    has one, else a type per offset."""
    out: list[tuple[int, int, list[int]]] = []
    first = last = -2
    types: list[int] = []
    for offset in sorted(acks):
        if offset != last + 1 and types:
            out.append((first, last, types if len(set(types)) > 1 else types[:1]))
            types = []
        if not types:
            first = offset
        types.append(int(acks[offset]))
        last = offset
    if types:
        out.append((first, last, types if len(set(types)) > 1 else types[:1]))
    return out


def next_session_epoch(epoch: int) -> int:
    return 1 if epoch >= _INT32_MAX else epoch + 1


@dataclass(eq=False)
class _Session:
    """The share session with one leader: the epoch the next request carries and the partitions the broker
    has in it, on the connection that opened it."""

    node: int
    epoch: int = INITIAL_EPOCH
    partitions: set[TopicPartition] = field(default_factory=set)
    connection: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def reset(self) -> None:
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self.connection = None


# An acknowledgement outcome: the partition, the offsets acknowledged, and None or the error.
AckOutcome = tuple[TopicPartition, list[int], "KafkaError | None"]


class ShareConsumer:
    """An asyncio share-group consumer. `ShareConsumer("topic", group_id=...)` subscribes at start."""

    def __init__(self, *topics: str, config: ShareConsumerConfig | None = None,
                 key_deserializer: Callable[[bytes | None], Any] | None = None,
                 value_deserializer: Callable[[bytes | None], Any] | None = None,
                 **overrides: Any):
        if config is None:
            config = ShareConsumerConfig(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        self.config: ShareConsumerConfig = config
        assert config.group_id
        self.group_id: str = config.group_id
        self.client = KafkaClient(config, allow_auto_create_topics=False)
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._initial_topics = list(topics)
        self._subscription: list[str] = []
        self._assignment: set[TopicPartition] = set()
        self._sessions: dict[int, _Session] = {}
        self._busy: set[int] = set()  # nodes with a request in flight
        self._committing: collections.Counter[int] = collections.Counter()  # nodes a commit() is sending to
        self._tasks: set[asyncio.Task] = set()
        # Records fetched and not yet returned, per partition, with the node that handed them out.
        self._buffer: dict[TopicPartition, collections.deque[ShareConsumerRecord]] = {}
        self._source: dict[TopicPartition, int] = {}
        # Returned by poll() and not yet acknowledged (explicit mode: must be before the next poll).
        self._delivered: dict[TopicPartition, dict[int, int]] = {}  # offset -> node
        self._renewed: dict[TopicPartition, dict[int, int]] = {}  # RENEWed: still in hand, offset -> node
        # Acknowledgements waiting to be sent, per (node, partition).
        self._pending: dict[tuple[int, TopicPartition], dict[int, AcknowledgeType]] = {}
        self._completed: list[AckOutcome] = []
        self._callback: Callable[[dict[TopicPartition, set[int]], KafkaError | None], Any] | None = None
        self._errors: collections.deque[BaseException] = collections.deque()
        self._data_ready: asyncio.Event | None = None
        self._wakeup: asyncio.Event | None = None
        self._fetcher: asyncio.Task | None = None
        self._membership: _Membership | None = None
        self._rotation = 0
        self._lock_timeout_ms: int | None = None
        # A leader is fetched from while fewer of its records than this wait in the buffer: one poll's worth
        # (batch-optimized mode, so the next fetch is under way while the caller works), or none at all
        # (record-limit mode, which is about not acquiring what the caller has not asked for; Kafka's client
        # does not prefetch in that mode either).
        self._prefetch_limit = config.max_poll_records if config.share_acquire_mode == "batch_optimized" else 1
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> "ShareConsumer":
        if self._started:
            return self
        self._data_ready = asyncio.Event()
        self._wakeup = asyncio.Event()
        await self.client.start()
        self._membership = _Membership(self)
        self._fetcher = asyncio.get_running_loop().create_task(self._fetch_loop())
        self._started = True
        if self._initial_topics:
            self.subscribe(self._initial_topics)
        return self

    async def __aenter__(self) -> "ShareConsumer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, timeout_ms: int | None = None) -> None:
        """Accept the last poll's records (implicit mode), send every pending acknowledgement, close each
        share session (the leaders release whatever this member still holds, at once) and leave the group."""
        if self._closed:
            return
        if not self._started:
            self._closed = True
            await self.client.close()
            return
        timeout_s = (self.config.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        if not self.config.explicit:
            self._accept_delivered()
        self._closed = True
        tasks = [t for t in (self._fetcher,) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except BaseException:
                pass
        try:
            await asyncio.wait_for(self._close_sessions(), timeout_s)
        except (asyncio.TimeoutError, OdradekError) as e:
            log.info("share consumer %s: closing the share sessions failed: %s", self.group_id, e)
        for t in list(self._tasks):
            t.cancel()
        self._deliver_outcomes()
        if self._membership is not None:
            try:
                await asyncio.wait_for(self._membership.close(), timeout_s)
            except (asyncio.TimeoutError, OdradekError):
                pass
        await self.client.close()

    async def _close_sessions(self) -> None:
        await asyncio.gather(*(self._close_job(s) for s in list(self._sessions.values())), return_exceptions=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("share consumer is closed")

    # ------------------------------------------------------------------------------------------ subscription

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group for `topics` (replacing the previous subscription; an empty list
        unsubscribes). Partitions come from the group coordinator's assignment."""
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if any(not t or not t.strip() for t in topics):
            raise ConfigError("a subscribed topic name must not be empty")
        if not topics:
            self.unsubscribe()
            return
        self._subscription = sorted(set(topics))
        self.client.add_topics(self._subscription)
        if self._membership is not None:
            self._membership.subscription_changed()

    def subscription(self) -> set[str]:
        return set(self._subscription)

    def unsubscribe(self) -> None:
        """Leave the group; held records are given back when the sessions see their partitions go."""
        self._subscription = []
        if self._membership is not None:
            self._membership.unsubscribe()
        self._set_assignment(set())

    def assignment(self) -> set[TopicPartition]:
        """The partitions the group coordinator assigned to this member (others may read them too)."""
        return set(self._assignment)

    @property
    def member_id(self) -> str | None:
        return None if self._membership is None else self._membership.member_id

    @property
    def acquisition_lock_timeout_ms(self) -> int | None:
        """The lock duration the leaders last answered (ShareFetch, and ShareAcknowledge v2 after a RENEW):
        how long a record stays acquired after its delivery or renewal. None until a leader has said."""
        return self._lock_timeout_ms

    def set_acknowledgement_commit_callback(
            self, callback: Callable[[dict[TopicPartition, set[int]], KafkaError | None], Any] | None) -> None:
        """`callback(offsets, error)` for each acknowledgement the leaders answered outside commit() (on a
        ShareFetch, a ShareAcknowledge sent by poll(), on close): offsets by partition, and None or the
        error (INVALID_RECORD_STATE: the lock had expired, the record went to another member). Called
        from the next poll(), commit() or close()."""
        self._callback = callback

    def _set_assignment(self, partitions: set[TopicPartition]) -> None:
        if partitions == self._assignment:
            return
        log.info("share consumer %s: assignment %s", self.group_id, sorted(partitions))
        for tp in self._assignment - partitions:
            self._buffer.pop(tp, None)  # still acquired: released when the session forgets the partition
            self._source.pop(tp, None)
        self._assignment = set(partitions)
        self._wake()

    # ------------------------------------------------------------------------------------------ reading

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ShareConsumerRecord]:
        """The next records (at most `max_records`, default `max_poll_records`), waiting up to `timeout_ms`;
        records of one partition come in offset order."""
        batch = await self.getmany(timeout_ms=timeout_ms, max_records=max_records)
        return [r for records in batch.values() for r in records]

    async def getmany(self, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        """As `poll()`, by partition (the shape of Consumer.getmany)."""
        if not self._started:
            await self.start()
        self._check_open()
        if not self._subscription:
            raise ShareStateError("the share consumer is not subscribed to any topic: call subscribe() first")
        if self.config.explicit:
            waiting = sum(len(v) for v in self._delivered.values())
            if waiting:
                raise ShareStateError(f"{waiting} record(s) of the last poll are not acknowledged: in explicit "
                                      "mode every record must be acknowledged before the next poll")
        else:
            self._accept_delivered()
        assert self._data_ready is not None and self._membership is not None
        self._membership.poll_tick()
        self._deliver_outcomes()
        self._wake()
        limit = self.config.max_poll_records if max_records is None else max_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._errors:
                raise self._errors.popleft()
            result = self._take(limit)
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

    def __aiter__(self) -> AsyncIterator[ShareConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ShareConsumerRecord]:
        while not self._closed:
            for record in await self.poll(timeout_ms=1000):
                yield record

    def _take(self, limit: int) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        candidates = [tp for tp, buf in self._buffer.items() if buf]
        if not candidates:
            return {}
        self._rotation = (self._rotation + 1) % len(candidates)
        candidates = candidates[self._rotation:] + candidates[:self._rotation]
        result: dict[TopicPartition, list[ShareConsumerRecord]] = {}
        taken = 0
        for tp in candidates:
            buffer = self._buffer[tp]
            node = self._source[tp]
            out = result.setdefault(tp, [])
            delivered = self._delivered.setdefault(tp, {})
            while buffer and taken < limit:
                record = buffer.popleft()
                out.append(record)
                delivered[record.offset] = node
                taken += 1
            if not buffer:
                self._wake()  # that leader may be fetched from again
            if taken >= limit:
                break
        return {tp: records for tp, records in result.items() if records}

    # ------------------------------------------------------------------------------------------ acknowledging

    def acknowledge(self, record: ConsumerRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:
        """Explicit mode: acknowledge a record the last poll returned (or one renewed earlier). Sent with the
        next poll's fetch, or by commit()."""
        self.acknowledge_offset(record.topic, record.partition, record.offset, type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           type: AcknowledgeType | int = AcknowledgeType.ACCEPT) -> None:
        """`acknowledge()` by topic, partition and offset (Kafka's acknowledge(topic, partition, offset, type),
        for a record the caller could not deserialize)."""
        if not self.config.explicit:
            raise ShareStateError("acknowledge() needs share.acknowledgement.mode=explicit; in implicit mode "
                                  "the next poll, commit() or close() accepts the records")
        self._check_open()
        kind = AcknowledgeType(int(type))
        if kind == AcknowledgeType.GAP:
            raise ConfigError("GAP is not an acknowledgement a caller makes: ACCEPT, RELEASE, REJECT or RENEW")
        tp = TopicPartition(topic, partition)
        delivered, renewed = self._delivered.get(tp, {}), self._renewed.get(tp, {})
        if offset in delivered:
            node = delivered.pop(offset)
        elif offset in renewed:
            node = renewed.pop(offset)
        else:
            raise ShareStateError(f"{tp} offset {offset} is not waiting for an acknowledgement (not returned by "
                                  "the last poll, or already acknowledged)")
        if kind == AcknowledgeType.RENEW:
            self._renewed.setdefault(tp, {})[offset] = node
        self._pending.setdefault((node, tp), {})[offset] = kind
        self._wake()

    def _accept_delivered(self) -> None:
        """Implicit mode: everything the last poll returned is accepted."""
        for tp, offsets in self._delivered.items():
            for offset, node in offsets.items():
                self._pending.setdefault((node, tp), {})[offset] = AcknowledgeType.ACCEPT
        self._delivered = {}

    async def commit(self, timeout_ms: int | None = None) -> dict[TopicPartition, KafkaError | None]:
        """Send the pending acknowledgements (in implicit mode: accept the last poll's records first) with
        ShareAcknowledge and wait for the answers: per partition None, or the error (INVALID_RECORD_STATE
        when a record's lock had expired and it went back to the group)."""
        if not self._started:
            await self.start()
        self._check_open()
        if not self.config.explicit:
            self._accept_delivered()
        self._deliver_outcomes()
        by_node: dict[int, dict[TopicPartition, dict[int, AcknowledgeType]]] = collections.defaultdict(dict)
        for (node, tp) in list(self._pending):
            by_node[node][tp] = self._pending.pop((node, tp))
        if not by_node:
            return {}
        results: dict[TopicPartition, KafkaError | None] = {}

        async def send(node: int, acks: dict[TopicPartition, dict[int, AcknowledgeType]]) -> None:
            session = self._session(node)
            try:
                async with session.lock:
                    if session.epoch == INITIAL_EPOCH or not await self._same_connection(session):
                        session.reset()
                        outcomes = _failed(acks, _session_ended())
                    else:
                        outcomes = await self._acknowledge_request(session, acks, collect=True)
            finally:
                self._committing[node] -= 1
                self._wake()
            for tp, _, error in outcomes:
                if results.get(tp) is None:
                    results[tp] = error

        timeout_s = (self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        self._committing.update(by_node.keys())  # until sent, no session of theirs is closed under them
        await asyncio.wait_for(asyncio.gather(*(send(n, a) for n, a in by_node.items())), timeout_s)
        return results

    def _take_acks(self, node: int, *, renew: bool | None = None) -> dict[TopicPartition, dict[int, AcknowledgeType]]:
        """The pending acknowledgements for records `node` handed out (renew None: all; True: only a set
        holding a RENEW; False: only sets without one), removed from the pending set."""
        out = {}
        for key in [k for k in self._pending if k[0] == node]:
            has_renew = AcknowledgeType.RENEW in self._pending[key].values()
            if renew is None or renew == has_renew:
                out[key[1]] = self._pending.pop(key)
        return out

    def _fail_acks(self, acks: dict[TopicPartition, dict[int, AcknowledgeType]], error: KafkaError) -> None:
        self._completed.extend(self._settle(_failed(acks, error)))

    def _settle(self, outcomes: list[AckOutcome]) -> list[AckOutcome]:
        """Records whose acknowledgement failed because they are no longer this member's (their lock
        expired, their session ended) leave its hands: a RENEWed one cannot be acknowledged again."""
        for tp, offsets, error in outcomes:
            if error is not None and error.code in _GONE_ERRORS:
                self._forget_renewed(tp, offsets)
        return outcomes

    def _deliver_outcomes(self) -> None:
        """Hand the answered acknowledgements to the callback (or, without one, log the failures)."""
        completed, self._completed = self._completed, []
        for tp, offsets, error in completed:
            if self._callback is not None:
                self._callback({tp: set(offsets)}, error)
            elif error is not None:
                log.info("share consumer %s: acknowledgement of %d record(s) of %s failed: %s", self.group_id,
                         len(offsets), tp, error)

    def _forget_renewed(self, tp: TopicPartition, offsets: list[int]) -> None:
        renewed = self._renewed.get(tp)
        if renewed:
            for offset in offsets:
                renewed.pop(offset, None)

    # ------------------------------------------------------------------------------------------ fetching

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _signal(self) -> None:
        if self._data_ready is not None:
            self._data_ready.set()

    def _report(self, error: BaseException) -> None:
        self._errors.append(error)
        self._signal()

    def _session(self, node: int) -> _Session:
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = _Session(node)
        return session

    async def _same_connection(self, session: _Session) -> bool:
        """Whether the session's connection is still the client's connection to its node (the broker ended
        the session when the connection closed). Opens a connection if there is none."""
        conn = await self.client.connection(session.node)
        return session.connection is conn

    async def _fetch_loop(self) -> None:
        assert self._wakeup is not None
        while not self._closed:
            self._wakeup.clear()
            delay: float | None = None
            try:
                delay = self._dispatch()
            except asyncio.CancelledError:
                raise
            except OdradekError as e:
                self._report(e)
                delay = self.config.retry_backoff_ms / 1000
            if delay is None:
                await self._wakeup.wait()
            else:
                try:
                    await asyncio.wait_for(self._wakeup.wait(), delay)
                except asyncio.TimeoutError:
                    pass

    def _dispatch(self) -> float | None:
        """Start the requests that are due, at most one per leader (see the module docstring): acknowledgements
        that cannot ride on a fetch (RENEW, records still buffered, a partition no longer fetched there) in a
        ShareAcknowledge; else a ShareFetch when none of the leader's records is buffered; and a session
        whose leader has none of the member's partitions any more is closed, giving back what it held."""
        cluster = self.client.cluster
        wanted: dict[int, set[TopicPartition]] = collections.defaultdict(set)
        delay = None
        for tp in self._assignment:
            leader = cluster.leader_for(tp)
            if leader is None:
                self.client.request_update()
                delay = self.config.retry_backoff_ms / 1000
                continue
            wanted[leader].add(tp)
        open_sessions = {s.node for s in self._sessions.values() if s.epoch != INITIAL_EPOCH}
        for node in set(wanted) | open_sessions | {n for n, _ in self._pending}:
            if node in self._busy:
                continue
            parts = wanted.get(node, set())
            held = sum(len(self._buffer.get(tp, ())) for tp in parts)
            buffered = held >= self._prefetch_limit
            acks = [(tp, a) for (n, tp), a in self._pending.items() if n == node]
            separate = any(tp not in parts or AcknowledgeType.RENEW in a.values() for tp, a in acks)
            session = self._session(node)
            if not parts and session.epoch != INITIAL_EPOCH:
                if self._committing[node] > 0:
                    continue  # closed once the commit's acknowledgements are in
                job = self._close_job(session)
            elif acks and (separate or buffered or not parts):
                job = self._acknowledge_job(session)
            elif parts and not buffered:
                job = self._fetch_job(session, parts)
            else:
                continue
            self._busy.add(node)
            task = asyncio.get_running_loop().create_task(self._run_job(node, job))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return delay

    async def _run_job(self, node: int, job: Any) -> None:
        retry = 0.0
        try:
            retry = await job
        except asyncio.CancelledError:
            raise
        except OdradekError as e:
            if not e.retriable:
                self._report(e)
            retry = self.config.retry_backoff_ms / 1000
        finally:
            self._busy.discard(node)
        self._signal()
        if retry and not self._closed:
            await asyncio.sleep(retry)
        self._wake()

    async def _acknowledge_job(self, session: _Session) -> float:
        async with session.lock:
            acks = self._take_acks(session.node)
            if not acks:
                return 0.0
            if session.epoch == INITIAL_EPOCH or not await self._same_connection(session):
                session.reset()
                self._fail_acks(acks, _session_ended())
                return 0.0
            await self._acknowledge_request(session, acks)
        return 0.0

    async def _close_job(self, session: _Session) -> float:
        """Close the session (ShareAcknowledge with epoch -1, carrying what is pending): the leader releases
        every record this member still holds there."""
        async with session.lock:
            acks = self._take_acks(session.node)
            if session.epoch == INITIAL_EPOCH or not await self._same_connection(session):
                session.reset()
                self._fail_acks(acks, _session_ended())
                return 0.0
            session.epoch = FINAL_EPOCH
            try:
                await self._acknowledge_request(session, acks)
            finally:
                session.reset()
        return 0.0

    async def _acknowledge_request(self, session: _Session, acks: dict[TopicPartition, dict[int, AcknowledgeType]],
                                   *, collect: bool = False) -> list[AckOutcome]:
        """One ShareAcknowledge in `session` (its lock held). Outcomes go to the callback queue, or are
        returned with `collect`."""
        ids = self._topic_ids()
        renew = any(AcknowledgeType.RENEW in a.values() for a in acks.values())
        epoch = session.epoch

        def build(version: int) -> Any:
            cls = REQUESTS[SHARE_ACKNOWLEDGE]
            if renew and version < 2:
                raise UnsupportedVersionError("RENEW needs ShareAcknowledge v2 (KIP-1222), which this broker does not speak")
            part_cls = cls.AcknowledgeTopic.AcknowledgePartition
            by_topic: dict[Any, list] = collections.defaultdict(list)
            for tp, offsets in acks.items():
                by_topic[ids[tp.topic]].append(part_cls(partition_index=tp.partition, acknowledgement_batches=[
                    part_cls.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                    for f, last, t in ack_batches(offsets)]))
            request = cls(group_id=self.group_id, member_id=self._member_id(), share_session_epoch=epoch,
                          topics=[cls.AcknowledgeTopic(topic_id=t, partitions=p) for t, p in by_topic.items()])
            if version >= 2:
                request.is_renew_ack = renew
            return request

        missing = [tp for tp in acks if tp.topic not in ids]
        if missing:
            outcomes = _failed(acks, KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, context=str(missing[0])))
        else:
            try:
                response = await self.client.send(session.node, build, api_key=SHARE_ACKNOWLEDGE)
            except OdradekError as e:
                if isinstance(e, (KafkaConnectionError, KafkaTimeoutError)):
                    session.reset()  # the broker ends the session with the connection
                if isinstance(e, KafkaError):
                    error = e
                elif isinstance(e, UnsupportedVersionError):
                    error = KafkaError(ErrorCode.UNSUPPORTED_VERSION, str(e), context="ShareAcknowledge")
                else:
                    error = KafkaError(ErrorCode.NETWORK_EXCEPTION, str(e), context="ShareAcknowledge")
                outcomes = _failed(acks, error)
            else:
                outcomes = self._acknowledge_answer(session, acks, response)
        self._settle(outcomes)
        if not collect:
            self._completed.extend(outcomes)
        return outcomes

    def _acknowledge_answer(self, session: _Session, acks: dict[TopicPartition, dict[int, AcknowledgeType]],
                            response: Any) -> list[AckOutcome]:
        code = ErrorCode.for_code(response.error_code)
        if code != ErrorCode.NONE:  # refused before the session moved on (its epoch stays)
            if code in _SESSION_ERRORS:
                session.reset()
            return _failed(acks, KafkaError(code, response.error_message, context="ShareAcknowledge"))
        if session.epoch != FINAL_EPOCH:
            session.epoch = next_session_epoch(session.epoch)
        if getattr(response, "acquisition_lock_timeout_ms", 0) > 0:
            self._lock_timeout_ms = response.acquisition_lock_timeout_ms
        names = self._topic_names()
        answered: dict[TopicPartition, KafkaError | None] = {}
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(names.get(t.topic_id, str(t.topic_id)), p.partition_index)
                pcode = ErrorCode.for_code(p.error_code)
                answered[tp] = None if pcode == ErrorCode.NONE else KafkaError(
                    pcode, p.error_message, context=f"acknowledging records of {tp}")
                if pcode.invalid_metadata:
                    self.client.request_update()
        return [(tp, sorted(a), answered.get(tp)) for tp, a in acks.items()]

    async def _fetch_job(self, session: _Session, parts: set[TopicPartition]) -> float:
        async with session.lock:
            if session.epoch != INITIAL_EPOCH and not await self._same_connection(session):
                log.info("share consumer %s: the connection to broker %d changed; opening a new share session",
                         self.group_id, session.node)
                session.reset()
            ids = self._topic_ids()
            parts = {tp for tp in parts if tp.topic in ids}
            if not parts:
                self.client.request_update()
                return self.config.retry_backoff_ms / 1000
            opening = session.epoch == INITIAL_EPOCH
            if opening:
                # An opening fetch cannot carry acknowledgements; records acquired in an ended session were
                # released with it.
                self._fail_acks(self._take_acks(session.node), _session_ended())
                acks: dict[TopicPartition, dict[int, AcknowledgeType]] = {}
                added, forgotten = set(parts), set()
            else:
                acks = self._take_acks(session.node, renew=False)
                for tp in [tp for tp in acks if tp not in parts]:  # goes in a ShareAcknowledge instead
                    self._pending[(session.node, tp)] = acks.pop(tp)
                added, forgotten = parts - session.partitions, session.partitions - parts
            epoch = session.epoch
            conn = await self.client.connection(session.node)

            def build(version: int) -> Any:
                cls = REQUESTS[SHARE_FETCH]
                part_cls = cls.FetchTopic.FetchPartition
                by_topic: dict[Any, list] = collections.defaultdict(list)
                for tp in sorted(added | set(acks)):
                    batches = [part_cls.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=t)
                               for f, last, t in ack_batches(acks.get(tp, {}))]
                    by_topic[ids[tp.topic]].append(part_cls(partition_index=tp.partition, acknowledgement_batches=batches))
                gone: dict[Any, list[int]] = collections.defaultdict(list)
                for tp in sorted(forgotten):
                    gone[ids[tp.topic]].append(tp.partition)
                request = cls(group_id=self.group_id, member_id=self._member_id(), share_session_epoch=epoch,
                              max_wait_ms=self.config.fetch_max_wait_ms, min_bytes=self.config.fetch_min_bytes,
                              max_bytes=self.config.fetch_max_bytes, max_records=self.config.max_poll_records,
                              batch_size=self.config.max_poll_records,
                              topics=[cls.FetchTopic(topic_id=t, partitions=p) for t, p in by_topic.items()],
                              forgotten_topics_data=[cls.ForgottenTopic(topic_id=t, partitions=p) for t, p in gone.items()])
                if version >= 2:
                    request.share_acquire_mode = 1 if self.config.share_acquire_mode == "record_limit" else 0
                return request

            try:
                response = await self.client.send(
                    session.node, build, api_key=SHARE_FETCH,
                    timeout_ms=self.config.request_timeout_ms + self.config.fetch_max_wait_ms)
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                session.reset()
                self._fail_acks(acks, KafkaError(ErrorCode.NETWORK_EXCEPTION, str(e), context="ShareFetch"))
                raise
            code = ErrorCode.for_code(response.error_code)
            if code != ErrorCode.NONE:
                error = KafkaError(code, response.error_message, context=f"ShareFetch to broker {session.node}")
                self._fail_acks(acks, error)
                if code in _SESSION_ERRORS:
                    log.info("share consumer %s: %s; opening a new share session", self.group_id, error)
                    session.reset()
                    return 0.0
                if code == ErrorCode.SHARE_SESSION_LIMIT_REACHED or code.retriable:
                    return self.client.backoff_s(3)
                self._report(error)
                return self.client.backoff_s(5)
            if opening:
                session.connection = conn
            session.partitions = set(parts)
            session.epoch = next_session_epoch(epoch)
            if response.acquisition_lock_timeout_ms > 0:
                self._lock_timeout_ms = response.acquisition_lock_timeout_ms
            return self._fetch_answer(session, acks, response)

    def _fetch_answer(self, session: _Session, acks: dict[TopicPartition, dict[int, AcknowledgeType]],
                      response: Any) -> float:
        names = self._topic_names()
        ack_results: dict[TopicPartition, KafkaError | None] = {}
        retry = 0.0
        for t in response.responses:
            name = names.get(t.topic_id)
            if name is None:
                self.client.request_update()
                continue
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                if tp in acks:
                    ack_code = ErrorCode.for_code(p.acknowledge_error_code)
                    ack_results[tp] = None if ack_code == ErrorCode.NONE else KafkaError(
                        ack_code, p.acknowledge_error_message, context=f"acknowledging records of {tp}")
                code = ErrorCode.for_code(p.error_code)
                if code != ErrorCode.NONE:
                    if code.invalid_metadata or code.retriable:
                        self.client.request_update()
                        retry = self.config.retry_backoff_ms / 1000
                    else:
                        self._report(KafkaError(code, p.error_message, context=f"ShareFetch {tp}"))
                    continue
                if p.acquired_records:
                    if tp in self._assignment:
                        self._decode(session.node, tp, p.records, p.acquired_records)
                    else:
                        self._release(session.node, tp, p.acquired_records)
        self._completed.extend(self._settle([(tp, sorted(offsets), ack_results.get(tp)) for tp, offsets in acks.items()]))
        return retry

    def _decode(self, node: int, tp: TopicPartition, records: Any, acquired: Any) -> None:
        """Buffer the records inside the acquired ranges, with their delivery counts. An acquired offset
        without a record inside or between the batches read (a control record, a compacted-away offset) is
        acknowledged as GAP; one past the last whole batch read (a corrupt or cut batch) is released, so it is
        delivered again rather than lost. A record the deserializers refuse is released too (it comes back
        until the group's delivery limit archives it) and the error is raised by poll()."""
        ranges = sorted((a.first_offset, a.last_offset, a.delivery_count) for a in acquired)
        buffer = self._buffer.setdefault(tp, collections.deque())
        self._source[tp] = node
        key_des, value_des = self._key_deserializer, self._value_deserializer
        seen: set[int] = set()
        read_to = ranges[0][0] if ranges else 0  # every offset below it was inside or between whole batches
        view = memoryview(records or b"")
        try:
            for pos, h in iter_batches(view):
                if not any(first <= h.last_offset and h.base_offset <= last for first, last, _ in ranges):
                    read_to = max(read_to, h.next_offset)
                    continue  # a batch around the acquired ranges: not decoded
                if self.config.check_crcs:
                    validate_batch(view, pos)
                if h.is_control:
                    read_to = max(read_to, h.next_offset)
                    continue  # its offsets are gaps
                timestamp_type = 1 if h.timestamp_type_log_append else 0
                decoded = list(iter_records(view[pos:pos + h.size], max_uncompressed_bytes=_MAX_UNCOMPRESSED))
                read_to = max(read_to, h.next_offset)
                for rec in decoded:
                    count = _delivery_count(ranges, rec.offset)
                    if count is None:
                        continue
                    seen.add(rec.offset)
                    key, value = rec.key, rec.value
                    ks = len(key) if key is not None else -1
                    vs = len(value) if value is not None else -1
                    try:
                        if key_des is not None:
                            key = key_des(key)
                        if value_des is not None:
                            value = value_des(value)
                    except Exception as e:  # the caller's deserializer: its error is the caller's
                        self._pending.setdefault((node, tp), {})[rec.offset] = AcknowledgeType.RELEASE
                        self._report(RecordDeserializationError(tp, rec.offset, e))
                        continue
                    buffer.append(ShareConsumerRecord(tp.topic, tp.partition, rec.offset, rec.timestamp,
                                                      timestamp_type, key, value, rec.headers, ks, vs,
                                                      h.partition_leader_epoch, count))
        except ProtocolError as e:
            self._report(KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e), context=f"ShareFetch {tp}"))
        acks = self._pending.setdefault((node, tp), {})
        for first, last, _ in ranges:
            for offset in range(first, last + 1):
                if offset not in seen:
                    acks[offset] = AcknowledgeType.GAP if offset < read_to else AcknowledgeType.RELEASE
        if not acks:
            del self._pending[(node, tp)]

    def _release(self, node: int, tp: TopicPartition, acquired: Any) -> None:
        """Acquired records of a partition no longer assigned here: given back at once."""
        acks = self._pending.setdefault((node, tp), {})
        for a in acquired:
            for offset in range(a.first_offset, a.last_offset + 1):
                acks[offset] = AcknowledgeType.RELEASE

    # ------------------------------------------------------------------------------------------ names

    def _member_id(self) -> str:
        assert self._membership is not None
        return self._membership.member_id

    def _topic_ids(self) -> dict[str, Any]:
        return {name: info.topic_id for name, info in self.client.cluster.topics.items() if info.topic_id is not None}

    def _topic_names(self) -> dict[Any, str]:
        return {info.topic_id: name for name, info in self.client.cluster.topics.items() if info.topic_id is not None}

    def _resolve_assignment(self, assigned: dict[Any, list[int]]) -> bool:
        """The coordinator's assignment (topic ids) as partitions; False while some topic id is not in the
        metadata yet (a refresh is asked for)."""
        names = self._topic_names()
        partitions: set[TopicPartition] = set()
        complete = True
        for topic_id, indexes in assigned.items():
            name = names.get(topic_id)
            if name is None:
                complete = False
                continue
            partitions.update(TopicPartition(name, i) for i in indexes)
        self._set_assignment(partitions)
        if not complete:
            self.client.request_update()
        return complete


def _failed(acks: dict[TopicPartition, dict[int, AcknowledgeType]], error: KafkaError) -> list[AckOutcome]:
    return [(tp, sorted(offsets), error) for tp, offsets in acks.items()]


def _session_ended() -> KafkaError:
    return KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                      "the share session that acquired these records ended, and released them")


def _delivery_count(ranges: list[tuple[int, int, int]], offset: int) -> int | None:
    for first, last, count in ranges:
        if first <= offset <= last:
            return count
    return None


class _Membership:
    """The member's side of ShareGroupHeartbeat (see the module docstring)."""

    def __init__(self, consumer: ShareConsumer) -> None:
        self.consumer = consumer
        self.client = consumer.client
        self.group_id = consumer.group_id
        self.member_id = new_member_id()
        self.epoch = INITIAL_EPOCH
        self.interval_s = 5.0
        self.assigned: dict[Any, list[int]] = {}
        self._sent_subscription: list[str] | None = None
        self._resolved = True
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._last_poll = time.monotonic()
        self._left_for_poll_timeout = False
        self._closed = False

    def _ensure_task(self) -> None:
        if (self._task is None or self._task.done()) and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def subscription_changed(self) -> None:
        self._wakeup.set()
        self._ensure_task()

    def poll_tick(self) -> None:
        self._last_poll = time.monotonic()
        if self._left_for_poll_timeout:
            self._left_for_poll_timeout = False
            self.subscription_changed()
        else:
            self._ensure_task()

    def unsubscribe(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.epoch != INITIAL_EPOCH:
            asyncio.get_running_loop().create_task(self._leave())

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass
        if self.epoch != INITIAL_EPOCH:
            await self._leave()

    async def _leave(self) -> None:
        """Epoch -1: the member leaves and its partitions go to the others at once."""
        self.epoch = INITIAL_EPOCH
        self._sent_subscription = None
        try:
            node = await self.client.coordinator(self.group_id)
            await self.client.send(node, self._request(FINAL_EPOCH, None), timeout_ms=5_000)
            log.info("share consumer %s: member %s left the group", self.group_id, self.member_id)
        except OdradekError as e:
            log.info("share consumer %s: leaving the group failed: %s", self.group_id, e)

    def _request(self, epoch: int, topics: list[str] | None) -> Any:
        cls = REQUESTS[SHARE_GROUP_HEARTBEAT]
        return cls(group_id=self.group_id, member_id=self.member_id, member_epoch=epoch,
                   rack_id=self.consumer.config.client_rack if epoch == INITIAL_EPOCH else None,
                   subscribed_topic_names=topics)

    async def _run(self) -> None:
        attempt = 0
        next_heartbeat = 0.0
        while not self._closed:
            try:
                subscription = self.consumer._subscription
                if not subscription:
                    return
                if time.monotonic() - self._last_poll > self.consumer.config.max_poll_interval_ms / 1000:
                    log.warning("share consumer %s: no poll() within max_poll_interval_ms: leaving the group",
                                self.group_id)
                    await self._leave()
                    self.assigned = {}
                    self.consumer._set_assignment(set())
                    self._left_for_poll_timeout = True
                    return
                if not self._resolved:
                    self._resolved = self.consumer._resolve_assignment(self.assigned)
                changed = subscription != self._sent_subscription
                if changed or time.monotonic() >= next_heartbeat:
                    await self._heartbeat(subscription if changed or self.epoch == INITIAL_EPOCH else None)
                    attempt = 0
                    next_heartbeat = time.monotonic() + self.interval_s
                self._wakeup.clear()
                wait = next_heartbeat - time.monotonic()
                if not self._resolved:
                    wait = min(wait, self.consumer.config.retry_backoff_ms / 1000)
                try:
                    await asyncio.wait_for(self._wakeup.wait(), max(wait, 0.01))
                except asyncio.TimeoutError:
                    pass
            except asyncio.CancelledError:
                raise
            except OdradekError as e:
                if not e.retriable:
                    self.consumer._report(e)
                if isinstance(e, KafkaConnectionError):
                    self.client.invalidate_coordinator(self.group_id)
                await asyncio.sleep(self.client.backoff_s(attempt))
                attempt += 1
                next_heartbeat = 0.0

    async def _heartbeat(self, topics: list[str] | None) -> None:
        node = await self.client.coordinator(self.group_id)
        response = await self.client.send(node, self._request(self.epoch, topics))
        code = ErrorCode.for_code(response.error_code)
        if code == ErrorCode.NONE:
            if topics is not None:
                self._sent_subscription = list(topics)
            if self.epoch != response.member_epoch:
                log.info("share consumer %s: member %s at epoch %d", self.group_id, self.member_id,
                         response.member_epoch)
            self.epoch = response.member_epoch
            if response.heartbeat_interval_ms > 0:
                self.interval_s = response.heartbeat_interval_ms / 1000
            if response.assignment is not None:
                self.assigned = {tp.topic_id: list(tp.partitions) for tp in response.assignment.topic_partitions}
                self._resolved = self.consumer._resolve_assignment(self.assigned)
            return
        if code in _REJOIN_ERRORS:
            # Kafka's rule (KIP-848): a fenced or forgotten member abandons its partitions and joins again at
            # epoch 0, keeping its id.
            log.info("share consumer %s: member %s got %s; joining again", self.group_id, self.member_id, code.name)
            self.epoch = INITIAL_EPOCH
            self._sent_subscription = None
            self.assigned = {}
            self.consumer._set_assignment(set())
            self._wakeup.set()
            return
        if code in _COORDINATOR_ERRORS:
            self.client.invalidate_coordinator(self.group_id)
        raise KafkaError(code, response.error_message, context=f"ShareGroupHeartbeat for group {self.group_id!r}")
