"""The share-partition manager: share groups' data path on the partition leader (Kafka's SharePartitionManager).

Theory of operation
-------------------
A partition leader keeps, per (share group, partition) it serves, one `SharePartition` (replication/share):
which records of the partition are in flight for the group, who holds them and until when. It is made
lazily, the first time a member fetches the partition here: the state is read from the share coordinator
through the `SharePersister` (`read`, with this leader's epoch, which fences older leaders' writes). A
partition never initialized (start offset -1) starts at the group's `share.auto.offset.reset`: `latest`
(Kafka's default: the high watermark, so only records produced from now on are delivered), `earliest`
(the log start offset) or `by_duration:<ISO-8601>` (the first record written since now minus the duration),
and that start is written back at once. The group's share.* GROUP configs over the broker's group.share.*
reach here through `settings_for` (broker/components.py).

Fetching (`fetch`) reads the log as the Fetch path does, through the partition's `Log.read` (whole
batches, as file regions sent by sendfile), from `SharePartition.next_fetch_offset()` (the first record
available again, else the share-partition end offset) up to the high watermark, or the last stable
offset for `share.isolation.level=read_committed`. Each batch's header is read (`iter_headers`: one
header, never the records) and the batch offered whole to `SharePartition.acquire` for the member, which
says which of its offsets the member gets: the response carries the batches from the first to the last one
with acquired offsets (the log's bytes, untouched) and the acquired ranges, and the client delivers only
the records inside those ranges. `max_records` counts over the whole request (what one partition took is
not offered to the next), batch-aligned: a batch is taken whole even past the limit, unless the
record-limit acquire mode asks for the exact count (KIP-1206) or the batch alone holds more records than the
request asked for (cut at the limit, so that one large producer batch is spread over members:
`SharePartition.acquire`). Batches that hold nothing to deliver are archived as gaps with delivery
count 0, as the client would acknowledge them: control batches (transaction markers) always, and under
read_committed the batches of aborted transactions (found as the Fetch path finds them, from the log's
aborted-transaction index, per batch by producer id and offset range).

A fetch that acquires nothing waits (long poll) up to its `max_wait_ms` for something to acquire: the
high watermark of one of its partitions moving (a listener on the leader's `Partition`), or records becoming
available again on one of them (a release, a lock expiring). Any acquisition completes it; `min_bytes`
is not waited for beyond the first record, as a share consumer that got something should process it.

Acknowledging (`acknowledge`, on ShareFetch piggy-backed or ShareAcknowledge) applies the member's ranges
to the SharePartition (all or nothing per partition: INVALID_RECORD_STATE for a record it does not hold,
INVALID_REQUEST for malformed ranges), then persists the new state (`SharePersister.write`) and only then
answers: an acknowledgement the client was told succeeded is never lost. Writes of one partition are
serialized and each writes the latest state, so a burst of acknowledgements costs at most one write in
flight plus one queued. A write that fails (the coordinator moved, a newer leader fenced this one) drops the
in-memory state of that partition and answers the error: the next fetch reads the persisted state again, in
which nothing unacknowledged is lost (it is delivered again) and nothing acknowledged comes back.

Locks expire on one timer for the whole manager, armed at the earliest `SharePartition.next_deadline()`;
when it fires each partition past its deadline is expired (records back to available, or archived at the
delivery-count limit), persisted, and its waiting fetches woken. Releases (RELEASE acknowledgements, a
member's session ending, its connection closing) do the same at once.

Dead letters (KIP-1191): when the group names a DLQ topic (`errors.deadletterqueue.topic.name`, served at
share.version 2), the SharePartition notes each range it archives for a REJECT or at the delivery-count limit,
and `_persist` hands them to the DLQ writer (broker/share/dlq.py) and waits for it BEFORE it writes the
state that archives them: the loop drains the dead letters until none is left and then takes the snapshot
with no await in between, so no persisted ARCHIVED record ever lacks its DLQ attempt. A crash between the
two writes delivers the record again (at least once into the DLQ, as Kafka promises). A failed DLQ write is
logged and counted there, and the records are archived anyway, as Kafka does.

Leadership: every request checks that this broker still leads the partition at the epoch the state was
read with; a metadata update that moves leadership away drops the state (the next leader reads what was
persisted: acquisitions not yet persisted are lost, which only means those records are delivered again).

Everything runs on the event loop, which is the lock: a SharePartition is changed only between awaits.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from odradek.metadata.group_config import by_duration_ms
from odradek.metadata.publisher import MetadataUpdate
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.replication.partition import HostedPartition
from odradek.replication.share import (
    AcknowledgeType,
    AcquiredRange,
    DeadLetter,
    RecordState,
    SharePartition,
    SharePartitionError,
    ShareSessionCache,
    ShareSnapshot,
)
from odradek.storage.errors import StorageError
from odradek.storage.names import TopicPartition
from odradek.storage.scan import iter_headers
from odradek.storage.segment import SegmentRegion

from .persister import UNINITIALIZED_START_OFFSET, SharePartitionKey, SharePersister

if TYPE_CHECKING:
    from odradek.replication.replica_manager import ReplicaManager

    from .dlq import DeadLetterQueue

log = structlog.get_logger("odradek.share")

AckBatches = Sequence[tuple[int, int, Sequence[int]]]  # (first offset, last offset, acknowledge types)
# Share-partitions a scrape of /metrics labels with group/topic/partition (broker/metrics.py): enough for the
# console's share-group page on any cluster an operator reads by eye, and a bound on the series a broker with
# many share groups exports (each share-partition is 5 series).
MAX_LABELLED_SHARE_PARTITIONS = 200
# (group, topic, partition, member) series of acquired records per member, over those share-partitions: members
# holding nothing are not listed (their 0 is implied), so the bound is met only by many members holding records.
MAX_LABELLED_SHARE_MEMBERS = 1000
# The delivery-count buckets of the records not yet done (available again, or acquired): 1, 2, 3 and 4 or more.
DELIVERY_COUNT_BUCKETS = ("1", "2", "3", "4+")


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """What a share group's partitions run with: the broker's group.share.* configs, or a group's share.*
    group configs over them (`SharePartitionManager(settings_for=...)`)."""

    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms / share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks
    auto_offset_reset: str = "latest"  # share.auto.offset.reset: latest | earliest
    read_committed: bool = False  # share.isolation.level=read_committed
    dlq_topic: str = ""  # errors.deadletterqueue.topic.name ("" : no DLQ; only at share.version 2)
    dlq_copy_record: bool = False  # errors.deadletterqueue.copy.record.enable


@dataclass(slots=True)
class PartitionFetch:
    """One partition's part of a ShareFetch answer."""

    error_code: int = 0
    error_message: str | None = None
    records: list = field(default_factory=list)  # file regions of whole batches
    acquired: list[AcquiredRange] = field(default_factory=list)
    leader: tuple[int, int] | None = None  # (leader id, epoch) for NOT_LEADER_OR_FOLLOWER


@dataclass(slots=True)
class ShareStats:
    """Totals for the broker's metrics (broker/metrics.py)."""

    acknowledgements: dict[str, int] = field(default_factory=lambda: {t.name.lower(): 0 for t in AcknowledgeType})
    lock_expiries: int = 0
    redeliveries: int = 0
    archived_at_limit: int = 0
    persist_failures: int = 0
    partitions_loaded: int = 0
    dlq_records: int = 0  # records copied to a DLQ topic
    dlq_failures: int = 0  # DLQ writes that failed (their records archived without a copy)


def delivery_complete_count(snapshot: ShareSnapshot) -> int:
    """Records at or past the start offset whose delivery is over (ACKNOWLEDGED or ARCHIVED): what
    WriteShareGroupState v1 carries (KIP-1226) so DescribeShareGroupOffsets can answer a share group's lag,
    end offset - start offset - this count. Without it the lag is unknown, and Kafka's kafka-share-groups
    tool shows "-" for every partition."""
    return sum(b.last_offset - max(b.first_offset, snapshot.start_offset) + 1 for b in snapshot.state_batches
               if b.delivery_state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
               and b.last_offset >= snapshot.start_offset)


class _Held:
    """A SharePartition served here, with what ties it to its log and its persisted copy."""

    __slots__ = ("key", "tp", "sp", "leader_epoch", "write_lock", "version", "persisted_version", "dropped",
                 "counted", "dlq_records")

    def __init__(self, key: SharePartitionKey, tp: TopicPartition, sp: SharePartition, leader_epoch: int):
        self.key, self.tp, self.sp, self.leader_epoch = key, tp, sp, leader_epoch
        self.write_lock = asyncio.Lock()
        self.version = 0  # bumped by every change that must be persisted
        self.persisted_version = 0
        self.dropped = False
        self.counted = (0, 0, 0)  # the SharePartition's (lock expiries, redeliveries, archived) already counted
        self.dlq_records = 0  # records of this share-partition copied to the DLQ since this leader loaded it


class SharePartitionManager:
    """See the module docstring. `data` is the replica manager (partitions, logs), `persister` the share
    coordinator's seam, `clock` the broker's now_ms; `leader_of(tp)` names the current leader for hints."""

    def __init__(
        self,
        *,
        data: ReplicaManager,
        persister: SharePersister,
        clock: Callable[[], int],
        settings: ShareSettings = ShareSettings(),
        max_sessions: int = 2000,
        settings_for: Callable[[str], ShareSettings] | None = None,
        leader_of: Callable[[TopicPartition], tuple[int, int] | None] | None = None,
        dead_letters: DeadLetterQueue | None = None,
    ) -> None:
        self.data = data
        self.persister = persister
        self.clock = clock
        self.settings = settings
        self._settings_for = settings_for
        self._leader_of = leader_of
        self.dead_letters = dead_letters
        self.sessions = ShareSessionCache(max_sessions)
        self.stats = ShareStats()
        self._held: dict[tuple[str, TopicPartition], _Held] = {}
        self._loading: dict[tuple[str, TopicPartition], asyncio.Future[_Held]] = {}
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._hw_listened: dict[TopicPartition, HostedPartition] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._watched: set[str] = set()  # connections whose closing ends their sessions
        self._closed = False

    # ---- figures --------------------------------------------------------------------------------------

    def in_flight(self) -> int:
        """Records in flight over every share-partition served here (acquired, available again, or done but
        not yet behind the start offset)."""
        return sum(h.sp.in_flight for h in self._held.values())

    def acquired(self) -> int:
        return sum(h.sp.count(RecordState.ACQUIRED) for h in self._held.values())

    def share_partitions(self) -> int:
        return len(self._held)

    def figures(self) -> dict[str, object]:
        """What the metrics show (broker/metrics.py's ShareGroupsCollector), read on the event loop."""
        self._count_all()
        stats = self.stats
        return {
            "share_partitions": len(self._held), "in_flight": self.in_flight(), "acquired": self.acquired(),
            "sessions": len(self.sessions), "session_partitions": self.sessions.partition_count,
            "session_evictions": self.sessions.evictions, "lock_expiries": stats.lock_expiries,
            "redeliveries": stats.redeliveries, "archived_at_limit": stats.archived_at_limit,
            "write_failures": stats.persist_failures, "acknowledgements": dict(stats.acknowledgements),
            "dlq_records": stats.dlq_records, "dlq_failures": stats.dlq_failures,
            "per_partition": self.per_partition_figures(),
        }

    def per_partition_figures(self, limit: int = MAX_LABELLED_SHARE_PARTITIONS) -> list[tuple[str, str, int, dict[str, int]]]:
        """(group, topic, partition, figures) of the first `limit` share-partitions served here, in that order:
        records in flight and acquired now, and the lock expiries, redeliveries and records archived at the
        delivery-count limit since this leader loaded the share-partition (they start again from 0 on a new
        leader; the broker-wide counters never go back). The limit bounds the labelled series a scrape carries;
        `share_partitions` says how many there are in all, so a reader knows when it sees only some."""
        out = []
        for (group_id, tp) in sorted(self._held, key=lambda k: (k[0], k[1].topic, k[1].partition))[:limit]:
            held = self._held[(group_id, tp)]
            sp = held.sp
            out.append((group_id, tp.topic, tp.partition, {
                "in_flight": sp.in_flight, "acquired": sp.count(RecordState.ACQUIRED),
                "lock_expiries": sp.lock_expiries, "redeliveries": sp.redeliveries,
                "archived_at_limit": sp.archived_at_limit, "dlq_records": held.dlq_records}))
        return out

    def describe(self, group_id: str, tp: TopicPartition) -> SharePartition | None:
        held = self._held.get((group_id, tp))
        return held.sp if held is not None else None

    def member_figures(self, limit: int = MAX_LABELLED_SHARE_PARTITIONS,
                       member_limit: int = MAX_LABELLED_SHARE_MEMBERS) -> dict[str, object]:
        """Per member and per delivery count, for the share-partitions `per_partition_figures` labels (the first
        `limit`, in the same order), read from each one's in-flight ranges (`SharePartition.states()`, one
        pass over its ranges, never its records), on the event loop at each scrape:

        - `per_member`: (group, topic, partition, member, records it has acquired now), for the members that
          hold records, at most `member_limit` rows in all (`members_dropped` says how many were left out);
        - `delivery_counts`: (group, topic, partition, {bucket: records}) of the records not yet done
          (available again or acquired) by how often they were delivered: 1, 2, 3 or 4+. A record past 1 was
          released, timed out or belonged to a member that left; one near `group.share.delivery.count.limit`
          is about to be archived. Records never delivered yet (past the end of the in-flight window, or
          restored at count 0) are in no bucket."""
        per_member: list[tuple[str, str, int, str, int]] = []
        delivery: list[tuple[str, str, int, dict[str, int]]] = []
        dropped = 0
        for (group_id, tp) in sorted(self._held, key=lambda k: (k[0], k[1].topic, k[1].partition))[:limit]:
            acquired_by: dict[str, int] = {}
            buckets = [0, 0, 0, 0]
            for first, last, state, count, member in self._held[(group_id, tp)].sp.states():
                if state == RecordState.ACQUIRED:
                    if member is not None:
                        acquired_by[member] = acquired_by.get(member, 0) + last - first + 1
                elif state != RecordState.AVAILABLE:
                    continue
                if count >= 1:
                    buckets[min(count, 4) - 1] += last - first + 1
            for member, n in sorted(acquired_by.items()):
                if len(per_member) < member_limit:
                    per_member.append((group_id, tp.topic, tp.partition, member, n))
                else:
                    dropped += 1
            delivery.append((group_id, tp.topic, tp.partition, dict(zip(DELIVERY_COUNT_BUCKETS, buckets))))
        return {"per_member": per_member, "delivery_counts": delivery, "members_dropped": dropped}

    # ---- fetching ---------------------------------------------------------------------------------------

    async def fetch(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[tuple[uuid.UUID, TopicPartition]],
        *,
        max_records: int,
        max_bytes: int,
        max_wait_ms: int,
        record_limit: bool = False,
    ) -> dict[TopicPartition, PartitionFetch]:
        """Acquire records of `partitions` for the member, waiting up to `max_wait_ms` when there are none."""
        deadline = self.clock() + max(0, max_wait_ms)
        while True:
            results = await self._fetch_once(group_id, member_id, partitions, max_records, max_bytes, record_limit)
            remaining = deadline - self.clock()
            done = any(r.acquired or r.error_code for r in results.values())
            if done or remaining <= 0 or not partitions or self._closed:
                return results
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            tps = [tp for _, tp in partitions]
            for tp in tps:
                self._waiters.setdefault(tp, set()).add(waiter)
            try:
                await asyncio.wait_for(waiter, remaining / 1000)
            except asyncio.TimeoutError:
                pass
            finally:
                for tp in tps:
                    waiting = self._waiters.get(tp)
                    if waiting is not None:
                        waiting.discard(waiter)
                        if not waiting:
                            del self._waiters[tp]

    async def _fetch_once(self, group_id: str, member_id: str, partitions: Sequence[tuple[uuid.UUID, TopicPartition]],
                          max_records: int, max_bytes: int, record_limit: bool) -> dict[TopicPartition, PartitionFetch]:
        results: dict[TopicPartition, PartitionFetch] = {}
        remaining_bytes = max_bytes
        remaining_records = max_records  # over the whole request, as Kafka's ShareFetchUtils counts them
        for topic_id, tp in partitions:
            held = await self._held_for(group_id, topic_id, tp, results)
            if held is None:
                continue
            out = PartitionFetch()
            results[tp] = out
            if remaining_bytes <= 0 or remaining_records <= 0:
                continue
            try:
                self._acquire(held, member_id, out, remaining_records, remaining_bytes, record_limit, max_records)
            except StorageError as e:
                out.error_code, out.error_message = int(e.error_code), str(e)
            except OSError as e:
                out.error_code, out.error_message = int(ErrorCode.KAFKA_STORAGE_ERROR), str(e)
            remaining_bytes -= sum(r.length for r in out.records)
            remaining_records -= sum(r.last_offset - r.first_offset + 1 for r in out.acquired)
        self._count_all()
        self._arm()
        return results

    def _acquire(self, held: _Held, member_id: str, out: PartitionFetch, max_records: int, max_bytes: int,
                 record_limit: bool, request_max_records: int) -> None:
        partition = self.data.get_partition(held.tp)
        if partition is None or not partition.is_leader or partition.leader_epoch != held.leader_epoch or held.dropped:
            # (leadership moved while this request awaited the state's load)
            out.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            out.leader = self._leader_of(held.tp) if self._leader_of is not None else None
            return
        sp, plog = held.sp, partition.log
        now = self.clock()
        # Locks past their deadline before the timer fired, and records the log no longer holds (retention,
        # DeleteRecords: the start moves up, as Kafka's OFFSET_OUT_OF_RANGE handling does): both persisted.
        changed = bool(sp.expire(now))
        sp.note_fetch(member_id, now)  # (a member held off by the in-flight cap counts: acquire spreads batches)
        if plog.log_start_offset > sp.start_offset:
            changed |= sp.move_start(plog.log_start_offset)
        settings = self._settings(held.key.group_id)
        # A group's share.record.lock.duration.ms changed since the load holds from the next acquisition on,
        # as Kafka's share-partition reads it when it acquires.
        sp.record_lock_duration_ms = settings.record_lock_duration_ms
        sp.collect_dead_letters = self._dlq_on(settings)
        read_committed = settings.read_committed
        end = partition.last_stable_offset if read_committed else partition.high_watermark
        budget = max_records
        first_pos = last_end = -1
        region_file = None
        offset = sp.next_fetch_offset()
        while budget > 0 and offset < end:
            info = plog.read(offset, max_bytes, max_offset=end, min_one_message=True)
            if not info.regions:
                break
            region = info.regions[0]
            aborted = []
            if read_committed and plog.has_aborted_txns:
                aborted = plog.collect_aborted_transactions(offset, end)
            next_offset = offset
            stop = False
            for pos, header in iter_headers(region.fd, region.position, region.position + region.length):
                next_offset = header.next_offset
                if header.is_control or (aborted and header.is_transactional and _aborted(header, aborted)):
                    changed |= sp.mark_gap(header.base_offset, header.last_offset)
                    continue
                if header.base_offset >= sp.end_offset and sp.at_lock_cap():
                    stop = True
                    break
                got = sp.acquire(member_id, header.base_offset, header.last_offset, budget, now,
                                 record_limit=record_limit, request_max_records=request_max_records,
                                 acquired_before=bool(out.acquired))
                if got:
                    if first_pos < 0:
                        first_pos, region_file = pos, region.file
                    last_end = pos + header.size
                    for r in got:  # contiguous ranges of one count are one AcquiredRecords entry
                        last = out.acquired[-1] if out.acquired else None
                        if last is not None and last.last_offset + 1 == r.first_offset \
                                and last.delivery_count == r.delivery_count:
                            out.acquired[-1] = AcquiredRange(last.first_offset, r.last_offset, r.delivery_count)
                        else:
                            out.acquired.append(r)
                    budget -= sum(r.last_offset - r.first_offset + 1 for r in got)
                    if budget <= 0:
                        break
                if sp.isolating:  # records near the delivery limit go out on their own: nothing more
                    break
            if out.acquired or stop or next_offset <= offset:
                break  # one read's batches (one segment) per fetch once something is acquired
            offset = max(next_offset, sp.next_fetch_offset())
        if region_file is not None:
            out.records = [SegmentRegion(region_file, first_pos, last_end - first_pos)]
        if changed:
            held.version += 1
            self._persist_later(held)

    async def _held_for(self, group_id: str, topic_id: uuid.UUID, tp: TopicPartition,
                        results: dict[TopicPartition, PartitionFetch]) -> _Held | None:
        """The share-partition, loaded if need be; None with the partition's error put in `results`."""
        partition = self.data.get_partition(tp)
        if partition is None or not partition.is_leader:
            leader = self._leader_of(tp) if self._leader_of is not None else None
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER if partition is not None or leader is not None \
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results[tp] = PartitionFetch(int(code), f"this broker does not lead {tp}", leader=leader)
            self._drop_partition(tp, "no longer leader")
            return None
        held = self._held.get((group_id, tp))
        if held is not None and held.leader_epoch != partition.leader_epoch:
            self._drop(held, "new leader epoch")
            held = None
        if held is not None:
            return held
        try:
            return await self._load(group_id, topic_id, tp, partition)
        except _LoadError as e:
            results[tp] = PartitionFetch(int(e.error_code), str(e))
            return None

    async def _load(self, group_id: str, topic_id: uuid.UUID, tp: TopicPartition, partition: HostedPartition) -> _Held:
        pending = self._loading.get((group_id, tp))
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[_Held] = asyncio.get_running_loop().create_future()
        self._loading[(group_id, tp)] = future
        try:
            held = await self._read_state(group_id, topic_id, tp, partition)
            future.set_result(held)
            return held
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # (retrieved: a load nobody else waited for must not warn)
            raise
        finally:
            del self._loading[(group_id, tp)]

    async def _read_state(self, group_id: str, topic_id: uuid.UUID, tp: TopicPartition,
                          partition: HostedPartition) -> _Held:
        key = SharePartitionKey(group_id, topic_id, tp.partition)
        leader_epoch = partition.leader_epoch
        result = await self.persister.read(key, leader_epoch)
        if result.error_code != ErrorCode.NONE or result.snapshot is None:
            code = _error_code(result.error_code)
            raise _LoadError(client_code(code), f"reading the share state of {tp} for {group_id} failed: {code.name}"
                             + (f" ({result.error_message})" if result.error_message else ""))
        if not partition.is_leader or partition.leader_epoch != leader_epoch:
            raise _LoadError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"leadership of {tp} moved while its share state was read")
        settings = self._settings(group_id)
        snapshot = result.snapshot
        initialized = snapshot.start_offset == UNINITIALIZED_START_OFFSET
        if initialized:
            start = self._reset_offset(partition, settings.auto_offset_reset)
            sp = SharePartition(start, state_epoch=snapshot.state_epoch, delivery_count_limit=settings.delivery_count_limit,
                                record_lock_duration_ms=settings.record_lock_duration_ms,
                                max_record_locks=settings.max_record_locks,
                                collect_dead_letters=self._dlq_on(settings))
        else:
            sp = SharePartition.restore(snapshot, delivery_count_limit=settings.delivery_count_limit,
                                        record_lock_duration_ms=settings.record_lock_duration_ms,
                                        max_record_locks=settings.max_record_locks,
                                        collect_dead_letters=self._dlq_on(settings))
        held = _Held(key, tp, sp, leader_epoch)
        self._held[(group_id, tp)] = held
        self.stats.partitions_loaded += 1
        if tp not in self._hw_listened:
            partition.add_listener(self._high_watermark_moved)
            self._hw_listened[tp] = partition
        log.info("share partition loaded", group_id=group_id, topic=tp.topic, partition=tp.partition,
                 leader_epoch=leader_epoch, start_offset=sp.start_offset, in_flight=sp.in_flight,
                 initialized_at=settings.auto_offset_reset if initialized else None)
        if initialized:
            held.version += 1
            code = await self._persist(held)
            if code != ErrorCode.NONE:
                raise _LoadError(client_code(code), f"writing the initial share state of {tp} for {group_id} failed: {code.name}")
        elif sp.has_dead_letters:  # records whose last delivery ended with the old leader: archived, copied
            held.version += 1
            self._persist_later(held)
        return held

    def _reset_offset(self, partition: HostedPartition, reset: str) -> int:
        """Where a share-partition never initialized starts (share.auto.offset.reset): the log start
        (`earliest`), the high watermark (`latest`), or for `by_duration:<ISO-8601>` the first record written
        at or after now minus the duration, the high watermark when there is none (KIP-1106's rule, which
        Kafka's share-partition follows)."""
        if reset == "earliest":
            return partition.log.log_start_offset
        duration_ms = by_duration_ms(reset)
        if duration_ms is None:
            return partition.high_watermark
        found = partition.log.fetch_offset_by_timestamp(self.clock() - duration_ms)
        return min(found.offset, partition.high_watermark) if found is not None else partition.high_watermark

    # ---- acknowledging ----------------------------------------------------------------------------------

    async def acknowledge(self, group_id: str, member_id: str,
                          acks: Sequence[tuple[uuid.UUID, TopicPartition, AckBatches]]) -> dict[TopicPartition, tuple[int, str | None]]:
        """Apply the member's acknowledgements, persist them, then answer per partition (code, message)."""
        answers: dict[TopicPartition, tuple[int, str | None]] = {}
        changed: list[tuple[TopicPartition, _Held]] = []
        for topic_id, tp, batches in acks:
            results: dict[TopicPartition, PartitionFetch] = {}
            held = await self._held_for(group_id, topic_id, tp, results)
            if held is None:
                failed = results[tp]
                answers[tp] = (failed.error_code, failed.error_message)
                continue
            held.sp.collect_dead_letters = self._dlq_on(self._settings(group_id))
            try:
                held.sp.acknowledge(member_id, batches, self.clock())
            except SharePartitionError as e:
                answers[tp] = (int(e.error_code), str(e))
                continue
            self._count_acks(batches)
            held.version += 1
            changed.append((tp, held))
            answers[tp] = (0, None)
        self._count_all()
        if changed:
            codes = await asyncio.gather(*(self._persist(held) for _, held in changed))
            for (tp, held), code in zip(changed, codes):
                if code != ErrorCode.NONE:
                    answers[tp] = (int(client_code(code)), f"persisting the acknowledgement failed: {code.name}")
                self._wake(tp)
        self._arm()
        return answers

    def _count_acks(self, batches: AckBatches) -> None:
        counts = self.stats.acknowledgements
        for first, last, types in batches:
            if len(types) == 1:
                name = _ack_name(types[0])
                counts[name] = counts.get(name, 0) + last - first + 1
            else:
                for t in types:
                    name = _ack_name(t)
                    counts[name] = counts.get(name, 0) + 1

    # ---- releasing -------------------------------------------------------------------------------------

    async def release_member(self, group_id: str, member_id: str,
                             partitions: Sequence[TopicPartition] | None = None) -> None:
        """The member's session ended (closed, its connection gone, or it left the group): what it holds on
        `partitions` (all of the group's here when None) goes back at once, persisted."""
        touched = []
        for (group, tp), held in list(self._held.items()):
            if group != group_id or (partitions is not None and tp not in partitions):
                continue
            if held.sp.release_member(member_id):
                held.version += 1
                touched.append(held)
        self._count_all()
        if touched:
            log.info("share member released", group_id=group_id, member_id=member_id,
                     partitions=[f"{h.tp.topic}-{h.tp.partition}" for h in touched])
            await asyncio.gather(*(self._persist(h) for h in touched))
            for h in touched:
                self._wake(h.tp)
        self._arm()

    async def member_left(self, group_id: str, member_id: str) -> None:
        """The group coordinator fenced the member or it left the group (ShareGroupHeartbeat epoch -1): its
        session here ends and its records go back (the hook for the group coordinator's wiring)."""
        self.sessions.close(group_id, member_id)
        await self.release_member(group_id, member_id)

    def release_member_later(self, group_id: str, member_id: str) -> None:
        """`release_member` from a synchronous callback (a connection closing)."""
        self._spawn(self.release_member(group_id, member_id))

    # ---- sessions and connections --------------------------------------------------------------------

    def watch_connection(self, connection_id: str) -> bool:
        """True the first time a connection opens a session here: the caller then registers
        `connection_closed` for when it closes (once per connection)."""
        if connection_id in self._watched:
            return False
        self._watched.add(connection_id)
        return True

    def connection_closed(self, connection_id: str) -> None:
        """The sessions the connection opened end; their members' records go back (Kafka 4.1's
        ShareSessionCache disconnect listener)."""
        self._watched.discard(connection_id)
        for session in self.sessions.disconnected(connection_id):
            log.info("share session ended with its connection", group_id=session.group_id,
                     member_id=session.member_id, connection=connection_id)
            if not self._closed:
                self.release_member_later(session.group_id, session.member_id)

    def lock_duration_ms(self, group_id: str) -> int:
        return self._settings(group_id).record_lock_duration_ms

    # ---- the lock timer ----------------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._closed:
            return
        deadlines = [d for h in self._held.values() if (d := h.sp.next_deadline()) is not None]
        at = min(deadlines) if deadlines else None
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(0.0, (at - self.clock()) / 1000), self._expire_due)

    def _expire_due(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self.clock()
        for held in list(self._held.values()):
            deadline = held.sp.next_deadline()
            if deadline is not None and deadline <= now and (expired := held.sp.expire(now)):
                log.debug("share locks expired", group_id=held.key.group_id, topic=held.tp.topic,
                          partition=held.tp.partition, records=sum(r.last_offset - r.first_offset + 1 for r in expired))
                held.version += 1
                self._persist_later(held)
                self._wake(held.tp)
        self._count_all()
        self._arm()

    # ---- persisting ---------------------------------------------------------------------------------------

    async def _persist(self, held: _Held) -> ErrorCode:
        """Write the share-partition's latest state unless a write already carried it (see the module doc)."""
        async with held.write_lock:
            if held.dropped:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            # Dead letters first (see the module doc): until none is left, then the snapshot, no await between.
            while held.sp.has_dead_letters:
                if self._closed:  # stopping: the DLQ's leader may be gone; leave them for the next leader
                    self._drop(held, "broker stopping with dead letters to copy")
                    return ErrorCode.NOT_LEADER_OR_FOLLOWER
                await self._write_dead_letters(held, held.sp.take_dead_letters())
                if held.dropped:  # (the state is read again; what was not persisted is delivered again)
                    return ErrorCode.NOT_LEADER_OR_FOLLOWER
            version = held.version
            if held.persisted_version >= version:
                return ErrorCode.NONE
            snapshot = held.sp.snapshot()
            code = await self.persister.write(held.key, held.leader_epoch, snapshot,
                                              delivery_complete_count(snapshot))
            if code != ErrorCode.NONE:
                self.stats.persist_failures += 1
                log.warning("share state write failed; the partition's state is read again on its next fetch",
                            group_id=held.key.group_id, topic=held.tp.topic, partition=held.tp.partition,
                            error=code.name)
                self._drop(held, f"write failed: {code.name}")
                return code
            held.persisted_version = max(held.persisted_version, version)
            return ErrorCode.NONE

    async def _write_dead_letters(self, held: _Held, letters: list[DeadLetter]) -> None:
        settings = self._settings(held.key.group_id)
        if self.dead_letters is None or not settings.dlq_topic:  # the DLQ was turned off since: archived only
            return
        result = await self.dead_letters.write(held.key.group_id, held.tp, letters, settings.dlq_topic,
                                               copy_record=settings.dlq_copy_record,
                                               log_reader=lambda: self._log_of(held.tp))
        held.dlq_records += result.written
        self.stats.dlq_records += result.written
        if result.error is not None:
            self.stats.dlq_failures += 1

    def _log_of(self, tp: TopicPartition) -> tuple[object, int] | None:
        partition = self.data.get_partition(tp)
        return (partition.log, partition.high_watermark) if partition is not None else None

    def _dlq_on(self, settings: ShareSettings) -> bool:
        return self.dead_letters is not None and bool(settings.dlq_topic)

    def _persist_later(self, held: _Held) -> None:
        self._spawn(self._persist(held))

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("share state task failed", error=repr(task.exception()))

    # ---- leadership -----------------------------------------------------------------------------------------

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        """The become-follower hook: share-partitions this broker no longer leads (at the epoch their state
        was read with) are dropped, so the new leader serves what was persisted."""
        for held in list(self._held.values()):
            partition = self.data.get_partition(held.tp)
            if partition is None or not partition.is_leader or partition.leader_epoch != held.leader_epoch:
                self._drop(held, "leadership moved")
                self._wake(held.tp)

    def _drop_partition(self, tp: TopicPartition, reason: str) -> None:
        for held in [h for h in self._held.values() if h.tp == tp]:
            self._drop(held, reason)

    def _drop(self, held: _Held, reason: str) -> None:
        if held.dropped:
            return
        held.dropped = True
        if self._held.get((held.key.group_id, held.tp)) is held:
            del self._held[(held.key.group_id, held.tp)]
        log.info("share partition dropped", group_id=held.key.group_id, topic=held.tp.topic,
                 partition=held.tp.partition, reason=reason)
        if not any(h.tp == held.tp for h in self._held.values()):
            partition = self._hw_listened.pop(held.tp, None)
            if partition is not None:
                partition.remove_listener(self._high_watermark_moved)

    def _high_watermark_moved(self, tp: TopicPartition, high_watermark: int) -> None:
        self._wake(tp)

    def _wake(self, tp: TopicPartition) -> None:
        for waiter in self._waiters.pop(tp, ()):
            if not waiter.done():
                waiter.set_result(None)

    # ---- helpers ------------------------------------------------------------------------------------------

    def _settings(self, group_id: str) -> ShareSettings:
        return self._settings_for(group_id) if self._settings_for is not None else self.settings

    def _count_all(self) -> None:
        """Move the SharePartitions' own totals into the broker-wide ones (each counted once)."""
        stats = self.stats
        for held in self._held.values():
            sp = held.sp
            now = (sp.lock_expiries, sp.redeliveries, sp.archived_at_limit)
            before = held.counted
            if now != before:
                stats.lock_expiries += now[0] - before[0]
                stats.redeliveries += now[1] - before[1]
                stats.archived_at_limit += now[2] - before[2]
                held.counted = now

    async def close(self) -> None:
        """Stop the timer and finish the writes in flight (the broker is stopping)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for tp in list(self._waiters):
            self._wake(tp)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def client_code(persister_code: ErrorCode) -> ErrorCode:
    """What a client is answered when the persister refused (Kafka's SharePartition maps them so): the
    coordinator unreachable is retriable as COORDINATOR_NOT_AVAILABLE, a newer leader's epoch means this
    broker no longer leads (NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata), a newer state epoch
    (the group's offsets were reset) is FENCED_STATE_EPOCH, an uninitialized partition
    UNKNOWN_TOPIC_OR_PARTITION; anything else UNKNOWN_SERVER_ERROR. The message keeps the persister's code."""
    if persister_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if persister_code == ErrorCode.FENCED_LEADER_EPOCH:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if persister_code in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.NOT_LEADER_OR_FOLLOWER):
        return persister_code
    return ErrorCode.UNKNOWN_SERVER_ERROR


class _LoadError(KafkaApiError):
    """The share state could not be read (or its first write failed): the partition answers this code."""

    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code


def _aborted(header, aborted) -> bool:
    """Whether a transactional batch belongs to one of the aborted transactions (producer id, and its
    offsets within the transaction's [first, last] range)."""
    for txn in aborted:
        if txn.producer_id == header.producer_id and txn.first_offset <= header.base_offset <= txn.last_offset:
            return True
    return False


def _ack_name(kind: int) -> str:
    try:
        return AcknowledgeType(kind).name.lower()
    except ValueError:
        return "unknown"
