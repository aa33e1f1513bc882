"""The share-partition state machine: which records of one partition a share group has in flight.

A share group (KIP-932) lets many consumers read one partition; each record is acquired by one consumer at
a time under a time-limited lock, and acknowledged on its own. The partition leader keeps, per share group
and partition, Kafka's SharePartition state (kafka.server.share.SharePartition):

* the share-partition start offset (SPSO): every record before it is done with (acknowledged or archived);
* the share-partition end offset (SPEO, here exclusive: the next offset never yet fetched for the group);
* the in-flight records in [SPSO, SPEO), each in one state:

      AVAILABLE --acquire--> ACQUIRED --accept--> ACKNOWLEDGED
          ^                   |  |  \\--reject / gap--> ARCHIVED
          \\--release, lock----/  \\--renew (KIP-1222): same state, new deadline
              expiry (or ARCHIVED once the delivery count has reached the limit)

* per record a delivery count: how many times it was acquired. Acquiring increments it; a record released
  or whose lock expires with a count at `group.share.delivery.count.limit` (Kafka's default 5, 2..10) is
  archived instead of made available again, so a poison record stops coming back.

SPSO advances past every leading record that is acknowledged or archived; the state behind it is dropped.
`group.share.partition.max.record.locks` caps SPEO - SPSO: once that many records are in flight, no new
records are acquired until the start moves (re-delivery of available ones still goes on).

Batch-level, as Kafka's InFlightBatch: the state is a sorted list of offset RANGES with one state, count,
holder and deadline each. A fetched log batch becomes one range; a range is split only where an operation
covers part of it (an acknowledgement of some offsets, an acquisition cut at max_records), and neighbours that end up
alike are merged again. Kafka keeps a per-offset map inside a split batch; ranges carry the same facts with
no object per record, and a record nobody acquired has no object at all.

Offsets the log does not hold (compacted away, or a transaction's control records) are not records: a
fetched batch that starts past SPEO leaves a gap, which is archived at once with delivery count 0, as a
client acknowledges such offsets with the GAP type. So every offset in [SPSO, SPEO) has exactly one state.

Time is an argument (milliseconds). A lock expires when `now >= deadline`; `expire(now)` puts expired
records back and `next_deadline()` tells the broker's timer when to call it. `acquire` and `acknowledge`
expire first, so an acknowledgement racing its lock's expiry is judged on the expired state, as in Kafka.

Dead letters (KIP-1191, Kafka 4.4): with `collect_dead_letters` on, every range archived because a member
REJECTed it or because its delivery count reached the limit (released, lock expired, member gone, or found
so on `restore`) is also noted as a `DeadLetter`, and `take_dead_letters()` hands them to the broker, which
copies those records to the group's dead-letter topic BEFORE it persists the state that archives them (see
broker/share/dlq.py for why that order). Gaps (GAP acknowledgements, control batches, aborted transactions)
are archived without a dead letter: they are not records anybody failed to process, and Kafka copies only
the two causes above. Only the offset ranges are kept here (batch level); the record bodies are read by the
broker for those offsets only, and only when the group asks for a copy.

What the share coordinator persists (`snapshot()`, WriteShareGroupState's StateBatches) is SPSO, the state
epoch and every in-flight range with its state and count, an ACQUIRED range written as AVAILABLE: a lock
does not survive its leader, but its delivery does. `SharePartition.restore()` is what a new leader loads:
the unacknowledged records are delivered again with their counts, the acknowledged ones never.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from odradek.protocol.errors import ErrorCode

from ..errors import ReplicationError

# Kafka 4.x defaults (ShareGroupConfig): group.share.delivery.count.limit 5 (2..10),
# group.share.record.lock.duration.ms 30000, group.share.partition.max.record.locks (100..10000): 200 in
# Kafka 4.0's early access, 2000 since; the broker passes its configured values (KIP-1240 makes the limit
# and the lock cap group configs too, which is why they are plain attributes here).
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_RECORD_LOCK_DURATION_MS = 30_000
DEFAULT_MAX_RECORD_LOCKS = 2000


class RecordState(IntEnum):
    """A record's delivery state; the numbers are those of the share coordinator's DeliveryState."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge `acknowledge_types`."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class DeadLetterCause(IntEnum):
    """Why a range went to the dead-letter queue; the text is the `__dlq.errors.message` header Kafka 4.4
    writes for it (ShareGroupDLQManager.CLIENT_REJECT / DELIVERY_COUNT_EXCEEDED)."""

    REJECTED = 1
    DELIVERY_LIMIT = 2

    @property
    def message(self) -> str:
        return "Offset rejected by client." if self is DeadLetterCause.REJECTED \
            else "Offset delivery count exceeded the threshold."


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Offsets [first_offset, last_offset], archived with `delivery_count` deliveries for `cause`: what the
    broker copies to the group's dead-letter topic (one DLQ record per offset, as Kafka writes them)."""

    first_offset: int
    last_offset: int
    delivery_count: int
    cause: DeadLetterCause


class SharePartitionError(ReplicationError):
    """An acknowledgement refused with the Kafka code to answer (INVALID_REQUEST, INVALID_RECORD_STATE).
    Nothing of a refused acknowledgement is applied: a partition's acknowledgements are all or nothing."""

    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets [first_offset, last_offset] handed to (or taken back from) a member, all with one count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """One persisted range, as in Read/WriteShareGroupState's StateBatches."""

    first_offset: int
    last_offset: int
    delivery_state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """What the share coordinator keeps for one share partition."""

    state_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]


@dataclass(slots=True)
class _Range:
    first: int
    last: int
    state: RecordState
    count: int
    member: str | None = None
    deadline: int | None = None

    def alike(self, other: _Range) -> bool:
        return (self.state, self.count, self.member, self.deadline) == (
            other.state, other.count, other.member, other.deadline)


def _first(r: _Range) -> int:
    return r.first


class SharePartition:
    """One share group's view of one partition, on the partition's leader. See the module docstring."""

    def __init__(
        self,
        start_offset: int = 0,
        *,
        state_epoch: int = 0,
        delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
        record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS,
        max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS,
        collect_dead_letters: bool = False,
    ):
        if start_offset < 0:
            raise ValueError(f"start offset must be >= 0, not {start_offset}")
        if delivery_count_limit < 1 or record_lock_duration_ms < 1 or max_record_locks < 1:
            raise ValueError("delivery_count_limit, record_lock_duration_ms and max_record_locks must be >= 1")
        self._start = start_offset
        self.state_epoch = state_epoch
        self.delivery_count_limit = delivery_count_limit
        self.record_lock_duration_ms = record_lock_duration_ms
        self.max_record_locks = max_record_locks
        self._ranges: list[_Range] = []
        # Ranges archived for a dead-letter cause since the last take_dead_letters(), when the group has a
        # dead-letter topic (the broker turns this on and off as the group's config says).
        self.collect_dead_letters = collect_dead_letters
        self._dead_letters: list[DeadLetter] = []
        # Totals since this object was made, for the broker's metrics.
        self.lock_expiries = 0  # records whose lock ran out
        self.redeliveries = 0  # acquisitions of a record delivered before
        self.archived_at_limit = 0  # records archived because their delivery count reached the limit
        # Kafka 4.4's throttleRecordsDeliveryLimit: from this delivery count on, records are isolated
        # (`acquire`); and whether the last acquisition stopped to isolate some.
        self.throttle_delivery_count = max(2, -(-delivery_count_limit // 2))
        self.isolating = False
        # Members that asked to acquire, with when they last did (`acquire`): whether this share-partition
        # is shared right now. Not persisted, not replicated: it only shapes how records are handed out.
        self._fetched_at: dict[str, int] = {}

    # ---- reading -----------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        """The next offset never fetched for this group (exclusive end of the in-flight window)."""
        return self._ranges[-1].last + 1 if self._ranges else self._start

    @property
    def in_flight(self) -> int:
        return self.end_offset - self._start

    def count(self, state: RecordState) -> int:
        return sum(r.last - r.first + 1 for r in self._ranges if r.state == state)

    def states(self) -> list[tuple[int, int, RecordState, int, str | None]]:
        """(first, last, state, delivery count, holder) of every in-flight range, in offset order."""
        return [(r.first, r.last, r.state, r.count, r.member) for r in self._ranges]

    def next_fetch_offset(self) -> int:
        """Where the leader reads the log for this group next: the first in-flight record that is available
        again (released, or its lock expired), else SPEO, the first offset never fetched."""
        for r in self._ranges:
            if r.state == RecordState.AVAILABLE:
                return r.first
        return self.end_offset

    def at_lock_cap(self) -> bool:
        """True when no record past SPEO may be acquired until the start moves (max_record_locks)."""
        return self.end_offset - self._start >= self.max_record_locks

    def mark_gap(self, first_offset: int, last_offset: int) -> bool:
        """Offsets [first_offset, last_offset] hold nothing to deliver (a control batch, an aborted
        transaction's batch under read_committed): the part past SPEO is archived with delivery count 0,
        as the client would acknowledge it with GAP, so SPEO moves past it. Offsets already in flight are
        left as they are. Returns whether anything changed."""
        end = self.end_offset
        if last_offset < end:
            return False
        if first_offset > end:  # offsets the log does not hold before it: a gap as well
            first_offset = end
        self._ranges.append(_Range(max(first_offset, end), last_offset, RecordState.ARCHIVED, 0))
        self._merge()
        self._advance_start()
        return True

    def move_start(self, offset: int) -> bool:
        """The log no longer holds records before `offset` (retention, DeleteRecords): the start moves up to
        it and the state before it is dropped, locks and all; nothing before it can be delivered again.
        Returns whether the start moved."""
        if offset <= self._start:
            return False
        self._cut(offset)
        i = self._index_of(offset)
        del self._ranges[:i]
        self._start = offset
        self._advance_start()
        return True

    def take_dead_letters(self) -> list[DeadLetter]:
        """The ranges archived for a dead-letter cause since the last call, in the order they were archived;
        the list is emptied. The broker writes them to the DLQ before it persists the state that holds them."""
        letters, self._dead_letters = self._dead_letters, []
        return letters

    @property
    def has_dead_letters(self) -> bool:
        return bool(self._dead_letters)

    def next_deadline(self) -> int | None:
        """The earliest lock deadline, for the broker's timer; None when nothing is acquired."""
        deadlines = [r.deadline for r in self._ranges if r.deadline is not None]
        return min(deadlines) if deadlines else None

    # ---- acquiring ---------------------------------------------------------------------------------

    def acquire(
        self,
        member: str,
        first_offset: int,
        last_offset: int,
        max_records: int,
        now: int,
        *,
        record_limit: bool = False,
        request_max_records: int | None = None,
        acquired_before: bool = False,
    ) -> list[AcquiredRange]:
        """Acquire for `member` what it may have of the fetched log batch [first_offset, last_offset].

        Available records already in flight are acquired again (their count goes up); offsets past SPEO
        become new in-flight records with count 1, as long as `max_record_locks` leaves room. The lock
        lasts `record_lock_duration_ms` from `now`. Returns the acquired ranges in offset order.

        How many: `max_records` is what the member may still take in this request, `request_max_records`
        what it asked for in all (ShareFetch's MaxRecords; default `max_records`).

        * Record-limit mode (`record_limit`, KIP-1206): exactly at most `max_records`.
        * Batch-optimized mode (the default, and all that ShareFetch v1 clients such as librdkafka get), as
          Kafka's SharePartition: the fetched log batch is taken whole, even past `max_records` ("the limit
          can be exceeded for alignment of batch boundaries": the batch that holds the max_records-th
          record is taken whole). Only `max_record_locks` cuts it.
        * Batch-optimized mode while the share-partition is SHARED, i.e. another member fetched from it
          within the last `record_lock_duration_ms` (`note_fetch`; `acquire` notes it too): a log batch
          that holds more records than the whole request asked for is cut at `max_records`, as in
          record-limit mode; the rest of it stays
          available for the next member, who is sent the same batch bytes with its own acquired range
          (clients deliver only the records inside the ranges). Batches no larger than the request are
          still taken whole.

        That last rule is where Odradek departs from Kafka 4.4, whose SharePartition takes such a batch
        whole too. A producer's batches are routinely far larger than a consumer's max_records: librdkafka
        builds batches of up to 1 MB / 10,000 records, where librdkafka and the Java client ask for 500.
        Taken whole, one such batch goes to whoever fetches first, and since a member's acknowledgement
        and its next fetch travel in one ShareFetch, the room its acknowledgement frees under
        `max_record_locks` is taken again by the same member before a waiting one is woken: with 16
        consumers on one partition, 2 got nothing and the others 0.4k to 45k of 200k records
        (bench/share_bench.py). Cut, each fetch takes one member's worth, and every member gets a share.
        The price is that each member that takes part of a batch is sent (and decodes) the whole batch,
        which is why a member alone on the partition still takes whole batches: there is nobody to share
        with, and cutting would multiply its round trips and the bytes its client decodes.

        Records delivered many times are isolated, as Kafka 4.4's SharePartition throttles them, so that
        one bad record does not drag a whole batch to the delivery limit with it: once an available
        record's delivery count has reached half the limit (rounded up, at least 2), it is acquired only
        by a request that has acquired nothing else of this partition yet (`acquired_before`: earlier log
        batches of the same request), at most `batch >> (count - half + 1)` records of its batch at a time
        (half, then a quarter, ... of the fetched log batch, at least 1), and a record on its last delivery
        (count = limit - 1, for a limit above 2) alone. The request then takes nothing more from this
        partition: `isolating` tells the caller to stop."""
        if first_offset > last_offset:
            raise ValueError(f"empty fetched range [{first_offset}, {last_offset}]")
        self.expire(now)
        self.isolating = False
        batch_records = last_offset - first_offset + 1
        asked = max_records if request_max_records is None else request_max_records
        # Cut at max_records (exact), or take the fetched batch whole (batch-aligned): see the docstring.
        self.note_fetch(member, now)
        exact = record_limit or (batch_records > asked and self.shared)
        first_offset = max(first_offset, self._start)
        if first_offset > last_offset:  # all of it is before the start: done with already
            return []
        budget = max_records if exact else last_offset - first_offset + 1
        deadline = now + self.record_lock_duration_ms
        taken: list[tuple[int, int]] = []
        # 1. Records already in flight that are available again.
        end = self.end_offset
        if first_offset < end:
            hi = min(last_offset, end - 1)
            for r in self._ranges[self._index_of(first_offset):]:
                if r.first > hi or budget <= 0:
                    break
                if r.state != RecordState.AVAILABLE:
                    continue
                a, b = max(r.first, first_offset), min(r.last, hi)
                if r.count >= self.throttle_delivery_count:
                    self.isolating = True
                    if taken or acquired_before:
                        break  # delivered by a later request, without the records before it
                    limit = self.delivery_count_limit
                    cap = 1 if limit > 2 and r.count == limit - 1 else max(
                        1, batch_records >> (r.count - self.throttle_delivery_count + 1))
                    b = min(b, a + min(cap, budget) - 1)
                    taken.append((a, b))
                    break
                if exact:
                    b = min(b, a + budget - 1)
                taken.append((a, b))
                budget -= b - a + 1
        for a, b in taken:
            i, j = self._split(a, b)
            for r in self._ranges[i:j]:
                r.state, r.count, r.member, r.deadline = RecordState.ACQUIRED, r.count + 1, member, deadline
                self.redeliveries += r.last - r.first + 1
        # 2. Records never fetched before, within the cap on records in flight.
        new_first = max(first_offset, end)
        room = self.max_record_locks - (end - self._start)
        # A gap before the batch counts as in flight (until the start passes it): the batch is taken only
        # if the gap and at least one record fit, else both wait for the start to move.
        room -= new_first - end
        if budget > 0 and new_first <= last_offset and room > 0 and not self.isolating:
            if new_first > end:  # offsets the log does not hold: nothing to deliver
                self._ranges.append(_Range(end, new_first - 1, RecordState.ARCHIVED, 0))
            take = min(last_offset - new_first + 1, room)
            if exact:
                take = min(take, budget)
            self._ranges.append(_Range(new_first, new_first + take - 1, RecordState.ACQUIRED, 1, member, deadline))
            taken.append((new_first, new_first + take - 1))
        self._merge()
        self._advance_start()
        return self._describe(taken)

    def note_fetch(self, member: str, now: int) -> None:
        """`member` fetches from this share-partition now (whether or not anything can be acquired: a member
        held off by `max_record_locks` counts, it is the one to share with). Members that have not fetched
        within the last lock duration are forgotten. See `acquire` for what this changes."""
        fetched_at = self._fetched_at
        fetched_at[member] = now
        since = now - self.record_lock_duration_ms
        if len(fetched_at) > 1 and min(fetched_at.values()) <= since:
            for m in [m for m, at in fetched_at.items() if at <= since]:
                del fetched_at[m]

    @property
    def shared(self) -> bool:
        """Whether more than one member fetched from this share-partition within the last lock duration."""
        return len(self._fetched_at) > 1

    # ---- acknowledging -----------------------------------------------------------------------------

    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]], now: int) -> None:
        """Apply `member`'s acknowledgements: (first, last, types) with one type for the whole range or one
        per offset (AcknowledgeType). All or nothing: raises SharePartitionError, applying nothing, for
        ranges that are empty, unordered or overlapping or whose types do not fit (INVALID_REQUEST), and
        for any offset this member does not hold acquired now: never acquired, acquired by another member,
        already acknowledged, or whose lock has expired (INVALID_RECORD_STATE)."""
        shaped = [(first, last, self._runs(first, last, types)) for first, last, types in self._validate_shape(batches)]
        self.expire(now)
        for first, last, _ in shaped:
            self._check_held(member, first, last)
        deadline = now + self.record_lock_duration_ms
        for first, last, runs in shaped:
            # One splice per acknowledged range: a range with one type per offset costs one pass over
            # its ranges, not a list insertion per offset.
            i, j = self._split(first, last)
            held, pieces, k = self._ranges[i:j], [], 0
            for a, b, kind in runs:
                while held[k].last < a:
                    k += 1
                m = k
                while m < len(held) and held[m].first <= b:
                    r = held[m]
                    piece = _Range(max(r.first, a), min(r.last, b), r.state, r.count, r.member, r.deadline)
                    self._apply(piece, kind, deadline)
                    pieces.append(piece)
                    m += 1
            self._ranges[i:j] = pieces
        self._merge()
        self._advance_start()

    def _apply(self, r: _Range, kind: AcknowledgeType, deadline: int) -> None:
        if kind == AcknowledgeType.RENEW:
            r.deadline = deadline
        elif kind == AcknowledgeType.ACCEPT:
            r.state, r.member, r.deadline = RecordState.ACKNOWLEDGED, None, None
        elif kind == AcknowledgeType.RELEASE:
            self._release(r)
        else:  # REJECT, GAP
            if kind == AcknowledgeType.REJECT and self.collect_dead_letters:
                self._dead_letters.append(DeadLetter(r.first, r.last, r.count, DeadLetterCause.REJECTED))
            r.state, r.member, r.deadline = RecordState.ARCHIVED, None, None

    @staticmethod
    def _runs(first: int, last: int, kinds: list[AcknowledgeType]) -> list[tuple[int, int, AcknowledgeType]]:
        """Offsets [first, last] as runs of one acknowledge type."""
        if len(kinds) == 1:
            return [(first, last, kinds[0])]
        runs: list[tuple[int, int, AcknowledgeType]] = []
        run_start = first
        for k in range(1, len(kinds) + 1):
            if k == len(kinds) or kinds[k] != kinds[k - 1]:
                runs.append((run_start, first + k - 1, kinds[k - 1]))
                run_start = first + k
        return runs

    @staticmethod
    def _validate_shape(
        batches: Sequence[tuple[int, int, Sequence[int]]],
    ) -> list[tuple[int, int, list[AcknowledgeType]]]:
        """The acknowledgement's ranges with their types, or INVALID_REQUEST for a malformed one."""
        out: list[tuple[int, int, list[AcknowledgeType]]] = []
        previous_last = -1
        for first, last, types in batches:
            if first < 0 or last < first:
                raise SharePartitionError(ErrorCode.INVALID_REQUEST, f"invalid acknowledgement range [{first}, {last}]")
            if first <= previous_last:
                raise SharePartitionError(
                    ErrorCode.INVALID_REQUEST,
                    f"acknowledgement range [{first}, {last}] overlaps or precedes the one ending at {previous_last}")
            previous_last = last
            if len(types) not in (1, last - first + 1):
                raise SharePartitionError(
                    ErrorCode.INVALID_REQUEST,
                    f"{len(types)} acknowledge types for range [{first}, {last}]: give 1 or {last - first + 1}")
            try:
                kinds = [AcknowledgeType(t) for t in types]
            except ValueError:
                raise SharePartitionError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type in {list(types)}") from None
            out.append((first, last, kinds))
        return out

    def _check_held(self, member: str, first: int, last: int) -> None:
        if first < self._start or last >= self.end_offset:
            raise SharePartitionError(
                ErrorCode.INVALID_RECORD_STATE,
                f"offsets [{first}, {last}] are not in flight (in flight: [{self._start}, {self.end_offset}))")
        ranges = self._ranges
        for k in range(self._index_of(first), len(ranges)):
            r = ranges[k]
            if r.first > last:
                break
            if r.state != RecordState.ACQUIRED or r.member != member:
                holder = f"acquired by {r.member}" if r.state == RecordState.ACQUIRED else r.state.name.lower()
                raise SharePartitionError(
                    ErrorCode.INVALID_RECORD_STATE,
                    f"offsets [{max(r.first, first)}, {min(r.last, last)}] are {holder}, not acquired by {member}")

    # ---- locks -------------------------------------------------------------------------------------

    def expire(self, now: int) -> list[AcquiredRange]:
        """Release every range whose lock deadline is at or before `now`; returns what was released."""
        expired: list[AcquiredRange] = []
        for r in self._ranges:
            if r.deadline is not None and r.deadline <= now:
                expired.append(AcquiredRange(r.first, r.last, r.count))
                self.lock_expiries += r.last - r.first + 1
                self._release(r)
        if expired:
            self._merge()
            self._advance_start()
        return expired

    def release_member(self, member: str) -> list[AcquiredRange]:
        """Release everything `member` holds (it left the group or closed its share session)."""
        released: list[AcquiredRange] = []
        for r in self._ranges:
            if r.state == RecordState.ACQUIRED and r.member == member:
                released.append(AcquiredRange(r.first, r.last, r.count))
                self._release(r)
        if released:
            self._merge()
            self._advance_start()
        return released

    def _release(self, r: _Range) -> None:
        if r.count >= self.delivery_count_limit:
            r.state = RecordState.ARCHIVED
            self.archived_at_limit += r.last - r.first + 1
            if self.collect_dead_letters:
                self._dead_letters.append(DeadLetter(r.first, r.last, r.count, DeadLetterCause.DELIVERY_LIMIT))
        else:
            r.state = RecordState.AVAILABLE
        r.member = r.deadline = None

    # ---- persistence -------------------------------------------------------------------------------

    def snapshot(self) -> ShareSnapshot:
        """The state to persist: SPSO, the state epoch and each in-flight range with its count (ACQUIRED
        written as AVAILABLE; neighbours alike once locks are dropped are one batch)."""
        batches: list[StateBatch] = []
        for r in self._ranges:
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            if batches and batches[-1].delivery_state == state and batches[-1].delivery_count == r.count:
                batches[-1] = StateBatch(batches[-1].first_offset, r.last, state, r.count)
            else:
                batches.append(StateBatch(r.first, r.last, state, r.count))
        return ShareSnapshot(self.state_epoch, self._start, tuple(batches))

    @classmethod
    def restore(
        cls,
        snapshot: ShareSnapshot,
        *,
        delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT,
        record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS,
        max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS,
        collect_dead_letters: bool = False,
    ) -> SharePartition:
        """What a new leader loads from the share coordinator. Batches must be ordered and disjoint, with
        states AVAILABLE, ACKNOWLEDGED or ARCHIVED; parts before the start offset are dropped, offsets
        between batches were never delivered (available, count 0), and an available batch whose count
        has reached the limit is archived (it may not be delivered again), which is a dead letter too: such
        a batch was acquired for its last delivery when its leader stopped, and that delivery is over."""
        sp = cls(
            snapshot.start_offset,
            state_epoch=snapshot.state_epoch,
            delivery_count_limit=delivery_count_limit,
            record_lock_duration_ms=record_lock_duration_ms,
            max_record_locks=max_record_locks,
            collect_dead_letters=collect_dead_letters,
        )
        cursor = snapshot.start_offset
        for b in snapshot.state_batches:
            if b.last_offset < b.first_offset or b.delivery_count < 0:
                raise ValueError(f"invalid state batch {b}")
            if b.delivery_state not in (RecordState.AVAILABLE, *_DONE):
                raise ValueError(f"state batch {b} has a state the coordinator never persists")
            if b.last_offset < cursor:
                if b.first_offset >= snapshot.start_offset:
                    raise ValueError(f"state batch {b} overlaps or precedes the one before it")
                continue
            first = max(b.first_offset, snapshot.start_offset)
            if first < cursor:
                raise ValueError(f"state batch {b} overlaps the one before it")
            if first > cursor:
                sp._ranges.append(_Range(cursor, first - 1, RecordState.AVAILABLE, 0))
            state = RecordState(b.delivery_state)
            if state == RecordState.AVAILABLE and b.delivery_count >= delivery_count_limit:
                state = RecordState.ARCHIVED
                sp.archived_at_limit += b.last_offset - first + 1
                if collect_dead_letters:
                    sp._dead_letters.append(
                        DeadLetter(first, b.last_offset, b.delivery_count, DeadLetterCause.DELIVERY_LIMIT))
            sp._ranges.append(_Range(first, b.last_offset, state, b.delivery_count))
            cursor = b.last_offset + 1
        sp._merge()
        sp._advance_start()
        return sp

    # ---- the range list ----------------------------------------------------------------------------

    def _index_of(self, offset: int) -> int:
        """Index of the range holding `offset`, or of the first range after it."""
        i = bisect.bisect_right(self._ranges, offset, key=_first) - 1
        return i if i >= 0 and self._ranges[i].last >= offset else i + 1

    def _split(self, first: int, last: int) -> tuple[int, int]:
        """Split ranges so that [first, last] (in flight) is exactly ranges[i:j]; returns (i, j)."""
        self._cut(first)
        self._cut(last + 1)
        i = self._index_of(first)
        j = self._index_of(last + 1)
        return i, j

    def _cut(self, offset: int) -> None:
        i = self._index_of(offset)
        if i < len(self._ranges):
            r = self._ranges[i]
            if r.first < offset <= r.last:
                self._ranges.insert(i + 1, _Range(offset, r.last, r.state, r.count, r.member, r.deadline))
                r.last = offset - 1

    def _merge(self) -> None:
        merged: list[_Range] = []
        for r in self._ranges:
            if merged and merged[-1].alike(r) and merged[-1].last + 1 == r.first:
                merged[-1].last = r.last
            else:
                merged.append(r)
        self._ranges = merged

    def _advance_start(self) -> None:
        k = 0
        while k < len(self._ranges) and self._ranges[k].state in _DONE:
            self._start = self._ranges[k].last + 1
            k += 1
        if k:
            del self._ranges[:k]

    def _describe(self, spans: Iterable[tuple[int, int]]) -> list[AcquiredRange]:
        """The acquired ranges with their counts, contiguous ones of one count joined."""
        out: list[AcquiredRange] = []
        for a, b in sorted(spans):
            i, j = self._index_of(a), self._index_of(b + 1)
            for r in self._ranges[i:j]:
                lo, hi = max(r.first, a), min(r.last, b)
                if out and out[-1].last_offset + 1 == lo and out[-1].delivery_count == r.count:
                    out[-1] = AcquiredRange(out[-1].first_offset, hi, r.count)
                else:
                    out.append(AcquiredRange(lo, hi, r.count))
        return out
