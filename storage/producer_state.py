"""Idempotent and transactional producer state of one partition, and its snapshots.

Theory of operation
-------------------
For every producer id the log keeps the producer epoch and the metadata (first/last sequence, first/last
offset, timestamp) of its last five batches, as Kafka does. An append from a client is checked batch by
batch against that state before anything is written (`ProducerStateManager.prepare` returns a
`ProducerAppendInfo` that collects the changes), and the changes are applied with `commit` only once the
write has succeeded:

- a batch whose epoch and sequence range match one of the five retained batches is a retry: the append
  is answered with the original offsets and nothing is written;
- an epoch below the producer's current one is fenced (INVALID_PRODUCER_EPOCH);
- within an epoch the first sequence must follow the last one (sequences wrap at INT32_MAX to 0), else
  OUT_OF_ORDER_SEQUENCE_NUMBER; a new epoch must start at sequence 0;
- a producer id the log has no record of must start at sequence 0, else UNKNOWN_PRODUCER_ID (the
  client then resets its sequence; Kafka since 2.5 instead accepts any sequence there).

Replicated batches and replay from the log (origin REPLICATION) update the state without checks.

Transactions: a producer's first transactional batch opens its transaction (`current_txn_first_offset`,
and an entry in `ongoing`, by first offset); its COMMIT or ABORT marker (a control batch the partition
leader writes for the transaction coordinator, WriteTxnMarkers) closes it. A marker is fenced when its
producer epoch is older than the producer's (INVALID_PRODUCER_EPOCH) or its coordinator epoch older than
the last one seen (TRANSACTION_COORDINATOR_FENCED); a non-transactional batch while a transaction is open
is INVALID_TXN_STATE. A closed transaction stays unstable (`unreplicated`) until the high watermark
passes its marker, so a read_committed reader never sees a decision that could still be lost:
`first_unstable_offset` is the smallest first offset of both kinds, and the last stable offset is the high
watermark lowered to it. `commit` answers the transactions an append completed, each with the LSO right
after it, which the log writes to the aborted-transaction index for aborts (Kafka's CompletedTxn and
ProducerStateManager.lastStableOffset).

Verification (KIP-890 part 1, Kafka's VerificationStateEntry): a producer's first transactional batch on a
partition must belong to a transaction its coordinator knows. Before the broker asks the coordinator it
takes a `VerificationGuard` here (`maybe_start_verification`: a fresh, unique object held in
`verification_states` for that producer), and it appends the verified batch presenting that guard. Any
transactional batch or marker of the producer written in between removes the entry, so a guard taken
before an ABORT marker no longer verifies anything after it: without this, a write verified just before
the coordinator aborted would open a new transaction on the partition that nobody would ever end (the
"hanging transaction"). Identity, not a value, matters: a later verification gets a new guard, so a
stale answer can never pass for it (the ABA case). A transactional batch with no open transaction of
its producer (and epoch) and no matching guard is INVALID_TXN_STATE; once the transaction is open, the
producer's later batches need no guard (the entry's open transaction is the proof). While a guard is out,
a batch with a sequence above the lowest one seen since it was taken is OUT_OF_ORDER_SEQUENCE_NUMBER, so a
retried lower sequence cannot be overtaken. Appends that pass `verification_guard=None` are not checked
(replication, replay, this layer's own tests and callers that do not verify: the broker passes a guard, or
the SENTINEL, for every client append while `transaction.partition.verification.enable` is on). Entries
are not snapshotted; one never followed by an append expires with `producer.id.expiration.ms`.

The state is snapshotted to `<offset>.snapshot` when a segment rolls and when the log closes; the
snapshot at offset N holds the state after every batch below N. Loading takes the latest snapshot at or
below the log end offset and replays batch headers from there (no record needs decoding), so producers
survive restarts, clean or not.

Snapshot layout (big-endian): version int16 = 1 | crc uint32 (CRC-32C of what follows) | count int32 |
count x [producerId int64, producerEpoch int16, coordinatorEpoch int32, currentTxnFirstOffset int64,
lastTimestamp int64, batchCount int8, batchCount x [firstSeq int32, lastSeq int32, firstOffset int64,
lastOffset int64, timestamp int64]].
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from crc32c import crc32c

from odradek.protocol.records import ABORT, ATTR_TRANSACTIONAL, NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

from .checkpoints import atomic_write, read_small_file
from .errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from .names import SNAPSHOT_SUFFIX, offset_file_name, parse_offset_file_name

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 0x7FFFFFFF
INT64_MAX = 0x7FFFFFFFFFFFFFFF
SNAPSHOT_VERSION = 1

_SNAPSHOT_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")


class VerificationGuard:
    """A token that one verification of one producer on one partition is still current (compared by identity)."""

    __slots__ = ("number",)
    _issued = 0

    def __init__(self) -> None:
        VerificationGuard._issued += 1
        self.number = VerificationGuard._issued  # (for logs and reprs only)

    def verifies(self, presented: VerificationGuard | None) -> bool:
        return presented is self and self is not SENTINEL

    def __repr__(self) -> str:
        return "VerificationGuard(SENTINEL)" if self is SENTINEL else f"VerificationGuard({self.number})"


SENTINEL = VerificationGuard()
"""The guard of an append that verified nothing: it verifies no transaction start."""


@dataclass(slots=True)
class VerificationStateEntry:
    """A verification under way for one producer: its guard, when it began (for expiry), and the lowest
    sequence seen in its epoch since (Kafka's VerificationStateEntry)."""

    timestamp_ms: int
    guard: VerificationGuard
    lowest_sequence: int
    epoch: int

    def update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        elif epoch > self.epoch:  # a new epoch restarts the sequences
            self.epoch = epoch
            self.lowest_sequence = sequence


class AppendOrigin(IntEnum):
    REPLICATION = 0
    COORDINATOR = 1
    CLIENT = 2


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class BatchMetadata(NamedTuple):  # (a tuple: one per appended batch, cheaper to build than a frozen dataclass)
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(self.producer_id, self.producer_epoch, deque(self.batches, NUM_BATCHES_TO_RETAIN),
                                  self.coordinator_epoch, self.last_timestamp, self.current_txn_first_offset)

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None

    def update_epoch(self, producer_epoch: int) -> None:
        if producer_epoch != self.producer_epoch:
            self.producer_epoch = producer_epoch
            self.batches.clear()

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        self.update_epoch(producer_epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


def _in_open_transaction(entry: ProducerStateEntry, epoch: int) -> bool:
    """Whether the producer (at this epoch) has a transaction open on the partition: its batches need no guard."""
    return entry.current_txn_first_offset >= 0 and entry.producer_epoch == epoch


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppendInfo:
    """The producer-state changes of one append, validated but not yet applied."""

    def __init__(self, manager: ProducerStateManager, origin: AppendOrigin,
                 verification_guard: VerificationGuard | None = None) -> None:
        self._manager = manager
        self.origin = origin
        self.verification_guard = verification_guard  # None: the append is not checked (see the module doc)
        self.updated: dict[int, ProducerStateEntry] = {}
        self.started: list[tuple[int, int]] = []  # (first offset, producer id) of transactions opened
        self.completed: list[CompletedTxn] = []
        self.transactional: set[int] = set()  # producers with a transactional batch or marker here

    def append(self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int,
               marker: tuple[int, int] | None = None) -> BatchMetadata | None:
        """Check one batch with a producer id. Returns the original batch if it is a retried duplicate.
        For a control batch, `marker` is its (control type, coordinator epoch), None for an emptied one."""
        pid = header.producer_id
        committed = self._manager.producers.get(pid)
        if self.origin == AppendOrigin.CLIENT and committed is not None:
            duplicate = committed.find_duplicate(header)
            if duplicate is not None:
                return duplicate
        entry = self.updated.get(pid)
        if entry is None:
            entry = committed.copy() if committed is not None else ProducerStateEntry(pid)
            self.updated[pid] = entry
        epoch = header.producer_epoch
        if self.origin != AppendOrigin.REPLICATION:
            self._check_epoch(entry, epoch)
        if header.is_control:
            if marker is None:
                return None  # emptied by the cleaner (or not a transaction marker): nothing to apply
            kind, coordinator_epoch = marker
            if self.origin != AppendOrigin.REPLICATION and coordinator_epoch < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"producer {pid}: marker from coordinator epoch {coordinator_epoch}, older than "
                    f"{entry.coordinator_epoch}")
            if entry.current_txn_first_offset >= 0:
                self.completed.append(CompletedTxn(pid, entry.current_txn_first_offset, first_offset, kind == ABORT))
            self.transactional.add(pid)
            entry.update_epoch(epoch)
            entry.coordinator_epoch = coordinator_epoch
            entry.current_txn_first_offset = -1
            entry.last_timestamp = timestamp
            return None
        if self.origin == AppendOrigin.CLIENT:
            if header.attributes & ATTR_TRANSACTIONAL and not _in_open_transaction(entry, epoch):
                self._manager.check_verified(header, self.verification_guard, first_offset)
            self._check_sequence(entry, committed, epoch, header.base_sequence, first_offset)
        if header.is_transactional:
            self.transactional.add(pid)
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = first_offset
                self.started.append((first_offset, pid))
        elif entry.current_txn_first_offset >= 0 and self.origin != AppendOrigin.REPLICATION:
            raise InvalidTxnStateError(f"producer {pid} wrote a non-transactional batch at offset {first_offset} "
                                       f"inside its open transaction")
        entry.add_batch(epoch, BatchMetadata(header.base_sequence, header.last_sequence, first_offset, last_offset, timestamp))
        return None

    @staticmethod
    def _check_epoch(entry: ProducerStateEntry, epoch: int) -> None:
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"producer {entry.producer_id} epoch {epoch} is older than the current epoch {entry.producer_epoch}")

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, committed: ProducerStateEntry | None, epoch: int, first_seq: int,
                        offset: int) -> None:
        pid = entry.producer_id
        if epoch != entry.producer_epoch:
            if first_seq != 0:
                if committed is None and entry.producer_epoch == NO_PRODUCER_EPOCH:
                    raise UnknownProducerIdError(
                        f"no record of producer {pid} at offset {offset}; its first batch has sequence {first_seq}")
                raise OutOfOrderSequenceError(
                    f"producer {pid}: a new epoch {epoch} must start at sequence 0, got {first_seq}")
        elif not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {entry.last_seq}")


class ProducerStateManager:
    def __init__(self, directory: str, *, producer_id_expiration_ms: int) -> None:
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self.ongoing: dict[int, int] = {}  # first offset -> producer id of each open transaction
        self.unreplicated: dict[int, tuple[int, int]] = {}  # first offset -> (producer id, marker offset)
        self._snapshots: list[int] | None = None
        self.verification_states: dict[int, VerificationStateEntry] = {}  # producer id -> its verification
        # Whether any entry may hold an open transaction (set on a transactional batch or snapshot entry,
        # never cleared): `first_unstable_offset` walks the producers only then.
        self.transactions_seen = False

    def prepare(self, origin: AppendOrigin, verification_guard: VerificationGuard | None = None) -> ProducerAppendInfo:
        return ProducerAppendInfo(self, origin, verification_guard)

    # -- verification (see the module doc)

    def in_open_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether the producer (at this epoch) has a transaction open here: its transactional batches need
        no verification (the one rule; the broker's produce fast path asks it too, and declines otherwise)."""
        entry = self.producers.get(producer_id)
        return entry is not None and _in_open_transaction(entry, epoch)

    def maybe_start_verification(self, producer_id: int, sequence: int, epoch: int, now_ms: int) -> VerificationGuard:
        """The guard to present with the producer's next transactional append, or SENTINEL when its
        transaction is open here already (nothing to verify). A verification under way is joined (same
        guard), remembering the lowest sequence seen."""
        if self.in_open_transaction(producer_id, epoch):
            return SENTINEL
        state = self.verification_states.get(producer_id)
        if state is None:
            state = VerificationStateEntry(now_ms, VerificationGuard(), sequence, epoch)
            self.verification_states[producer_id] = state
        else:
            state.update_lowest_sequence_and_epoch(sequence, epoch)
        return state.guard

    def check_verified(self, header: BatchHeader, guard: VerificationGuard | None, first_offset: int) -> None:
        """A client's transactional batch that would open a transaction: it must present the current guard of
        its producer (unless the caller does not verify, `guard` None), and may not overtake a lower sequence
        still being verified."""
        pid = header.producer_id
        state = self.verification_states.get(pid)
        if guard is not None and (state is None or not state.guard.verifies(guard)):
            raise InvalidTxnStateError(
                f"producer {pid}: the transactional batch at offset {first_offset} is not part of a transaction "
                f"its coordinator verified (or the transaction ended since)")
        if state is not None and header.base_sequence > state.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"producer {pid}: sequence {header.base_sequence} while the lower sequence {state.lowest_sequence} "
                f"is still being verified")

    def commit(self, info: ProducerAppendInfo, end_offset: int) -> list[tuple[CompletedTxn, int]]:
        """Apply what an append changed. Returns the transactions it completed, each with the last stable
        offset right after it (what the aborted-transaction index records)."""
        self.producers.update(info.updated)
        self.map_end_offset = end_offset
        if self.verification_states and info.transactional:
            # A transaction began (its first offset now proves it) or ended (a guard taken before the marker
            # must not open a new one): either way, the verification is spent.
            for pid in info.transactional:
                self.verification_states.pop(pid, None)
        if not info.started and not info.completed:
            return []
        for first_offset, pid in info.started:
            self.ongoing[first_offset] = pid
        self.transactions_seen = True
        done = []
        for txn in info.completed:
            others = [first for first, pid in self.ongoing.items() if pid != txn.producer_id]
            done.append((txn, min(others) if others else txn.last_offset + 1))
            self.ongoing.pop(txn.first_offset, None)
            self.unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)
        return done

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark are stable now."""
        if self.unreplicated:
            for first_offset, (_, marker_offset) in list(self.unreplicated.items()):
                if marker_offset < high_watermark:
                    del self.unreplicated[first_offset]

    # One client batch (Log's single-batch append): `prepare`, `ProducerAppendInfo.append` and `commit` for
    # that case, the same checks without the per-append change set. tests/unit/test_log_single_batch.py
    # holds the two ways to the same state.

    def check_client_batch(self, header: BatchHeader, first_offset: int,
                           verification_guard: VerificationGuard | None = None) -> BatchMetadata | None:
        """Check one client batch with a producer id, changing nothing: the original batch when it is a
        retried duplicate, None when it may be appended (`record_client_batch` then applies it)."""
        committed = self.producers.get(header.producer_id)
        if committed is None:
            entry = ProducerStateEntry(header.producer_id)
        else:
            duplicate = committed.find_duplicate(header)
            if duplicate is not None:
                return duplicate
            entry = committed
        epoch = header.producer_epoch
        ProducerAppendInfo._check_epoch(entry, epoch)
        if header.attributes & ATTR_TRANSACTIONAL:
            if not _in_open_transaction(entry, epoch):
                self.check_verified(header, verification_guard, first_offset)
        ProducerAppendInfo._check_sequence(entry, committed, epoch, header.base_sequence, first_offset)
        if entry.current_txn_first_offset >= 0 and not header.attributes & ATTR_TRANSACTIONAL:
            raise InvalidTxnStateError(f"producer {entry.producer_id} wrote a non-transactional batch at offset "
                                       f"{first_offset} inside its open transaction")
        return None

    def record_client_batch(self, header: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> None:
        """Apply a batch `check_client_batch` let through and that is now written."""
        pid, epoch = header.producer_id, header.producer_epoch
        batch = BatchMetadata(header.base_sequence, header.last_sequence, first_offset, last_offset, timestamp)
        entry = self.producers.get(pid)
        if entry is not None and entry.producer_epoch == epoch:
            # In place: appending to the bounded deque is one atomic step for a reader in another thread
            # (the cleaner's last_offsets); a new epoch, which clears the batches, gets a new entry instead.
            entry.batches.append(batch)
            entry.last_timestamp = timestamp
        else:
            entry = entry.copy() if entry is not None else ProducerStateEntry(pid)
            entry.add_batch(epoch, batch)
            self.producers[pid] = entry
        if header.attributes & ATTR_TRANSACTIONAL:
            if entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = first_offset
                self.ongoing[first_offset] = pid
                self.transactions_seen = True
            if self.verification_states:
                self.verification_states.pop(pid, None)
        self.map_end_offset = last_offset + 1

    def replay(self, header: BatchHeader, marker: tuple[int, int] | None = None) -> list[tuple[CompletedTxn, int]]:
        """Apply a batch read back from the log, without checks (`marker`: see ProducerAppendInfo.append).
        Returns the transactions it completed, as `commit`."""
        if header.producer_id >= 0:
            info = ProducerAppendInfo(self, AppendOrigin.REPLICATION)
            info.append(header, header.base_offset, header.last_offset, header.max_timestamp, marker)
            return self.commit(info, header.next_offset)
        self.map_end_offset = header.next_offset
        return []

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction that is open or whose marker is not yet below the
        high watermark (what the last stable offset stops at), or None. Asked on every fetch: a log that
        never held a transactional batch answers without a look."""
        if not self.transactions_seen:
            return None
        if not self.ongoing and not self.unreplicated:
            return None
        # (copies: the cleaner asks from its thread while appends change both)
        return min(min(list(self.ongoing), default=INT64_MAX), min(list(self.unreplicated), default=INT64_MAX))

    def last_offsets(self) -> dict[int, int]:
        """Last offset of each producer's last batch (the cleaner keeps those batches, even emptied)."""
        entries = list(self.producers.values())
        return {e.producer_id: e.last_offset for e in entries}

    def marker_epochs(self) -> dict[int, int]:
        """Epoch of each producer whose last write was a marker that bumped its epoch (no data batch in the
        epoch): the cleaner keeps that marker, which holds the epoch that fences its zombies (Kafka's
        LastRecord without a data offset)."""
        entries = list(self.producers.values())
        return {e.producer_id: e.producer_epoch for e in entries if not e.batches}

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for `producer.id.expiration.ms` (by their last batch's timestamp), except
        those with a transaction open here, and verifications begun that long ago and never followed by an
        append (Kafka's removeExpiredProducers). Returns how many producers went."""
        expiration_ms = self.producer_id_expiration_ms
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        if self.verification_states:
            for pid in [p for p, v in self.verification_states.items() if now_ms - v.timestamp_ms >= expiration_ms]:
                del self.verification_states[pid]
        return len(expired)

    def clear(self, offset: int) -> None:
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = {}
        self.map_end_offset = offset

    # ------------------------------------------------------------------------------------------ snapshots

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, offset_file_name(offset, SNAPSHOT_SUFFIX))

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshots on disk, ascending (listed once, then kept up to date)."""
        if self._snapshots is None:
            offsets = []
            for name in os.listdir(self.directory):
                parsed = parse_offset_file_name(name)
                if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and not parsed[2]:
                    offsets.append(parsed[0])
            self._snapshots = sorted(offsets)
        return list(self._snapshots)

    def set_snapshot_offsets(self, offsets) -> None:
        """The snapshots found by a directory listing the caller already made."""
        self._snapshots = sorted(offsets)

    def take_snapshot(self) -> None:
        """Write the state as of `map_end_offset` (once per offset). Not fsynced: a snapshot lost or torn
        by a crash fails its CRC and loading falls back to an older one and a longer replay."""
        offset = self.map_end_offset
        if offset in self.snapshot_offsets():
            return
        atomic_write(self._snapshot_path(offset), encode_snapshot(self.producers.values()), fsync=False)
        self._snapshots = sorted(self.snapshot_offsets() + [offset])

    def _delete_snapshots(self, doomed) -> None:
        for offset in doomed:
            _unlink(self._snapshot_path(offset))
        self._snapshots = [o for o in self.snapshot_offsets() if o not in doomed]

    def delete_snapshots_before(self, offset: int) -> None:
        self._delete_snapshots({o for o in self.snapshot_offsets() if o < offset})

    def delete_snapshots_after(self, offset: int) -> None:
        self._delete_snapshots({o for o in self.snapshot_offsets() if o > offset})

    def load_latest_snapshot(self, log_end_offset: int) -> int | None:
        """Drop snapshots above `log_end_offset`, load the latest valid one. Returns its offset or None
        (state then starts empty)."""
        self.delete_snapshots_after(log_end_offset)
        for offset in reversed(self.snapshot_offsets()):
            data = read_small_file(self._snapshot_path(offset)) or b""
            try:
                producers = decode_snapshot(data)
            except ValueError:
                self._delete_snapshots({offset})
                continue
            self.producers = {e.producer_id: e for e in producers}
            self.map_end_offset = offset
            self.ongoing = {e.current_txn_first_offset: e.producer_id for e in producers
                            if e.current_txn_first_offset >= 0}
            self.unreplicated = {}
            if self.ongoing:
                self.transactions_seen = True
            return offset
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = {}
        return None


def encode_snapshot(entries) -> bytes:
    body = bytearray()
    entries = list(entries)
    body += _COUNT.pack(len(entries))
    for e in entries:
        body += _PRODUCER.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset,
                               e.last_timestamp, len(e.batches))
        for b in e.batches:
            body += _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
    return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Raises ValueError on any fault (version, CRC, length)."""
    try:
        version, crc = _SNAPSHOT_HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"unsupported producer snapshot version {version}")
        body = memoryview(data)[_SNAPSHOT_HEADER.size :]
        if crc32c(body) != crc:
            raise ValueError("producer snapshot CRC mismatch")
        (count,) = _COUNT.unpack_from(body, 0)
        pos = _COUNT.size
        entries = []
        for _ in range(count):
            pid, epoch, coordinator_epoch, txn_first, last_ts, n = _PRODUCER.unpack_from(body, pos)
            pos += _PRODUCER.size
            batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
            for _ in range(n):
                batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            entries.append(ProducerStateEntry(pid, epoch, batches, coordinator_epoch, last_ts, txn_first))
        if pos != len(body):
            raise ValueError("trailing bytes in producer snapshot")
        return entries
    except struct.error as e:
        raise ValueError(f"truncated producer snapshot: {e}") from e


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
