"""The delivery checker: what producers were told against what consumers saw.

Fault tests (replication's kill -9 / SIGSTOP / cut-link loops, transactions' exactly-once loops) record
every acknowledged send and every consumed record, then ask `check(...)` whether the cluster kept its
promises:

  * lost:           acknowledged (value at topic-partition, offset) never consumed;
  * offset changed: an acknowledged value consumed at another offset than it was acknowledged at, or two
                    different values consumed at one offset (an offset reused for different records);
  * duplicated:     one value consumed at two offsets (with idempotence: never);
  * reordered:      within a partition, a producer's values consumed out of the order they were sent
                    (values must carry (producer, sequence) for this: see `Sent.producer`, `Sent.sequence`);
  * aborted read:   a value a transaction aborted was consumed by a read_committed consumer;

`check_transactions(...)` (below) is the transactional checker: aborted reads, partial transactions, lost
committed records, duplicates and missing inputs of an exactly-once loop, per-partition order; with
`hanging_partitions` and `stuck_transactions` for "no transaction is left hanging".

Values must be unique per run (a counter in each value is enough). It is pure: give it lists, get a report;
`Report.problems()` is what a test asserts empty, `Report.summary()` what it prints.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Sent:
    """An acknowledged send: the broker said `value` is at (`topic`, `partition`, `offset`)."""

    topic: str
    partition: int
    offset: int
    value: bytes
    producer: str = ""  # who sent it, for ordering checks
    sequence: int = -1  # the producer's send order (-1: not checked)


@dataclass(frozen=True, slots=True)
class Seen:
    """A consumed record."""

    topic: str
    partition: int
    offset: int
    value: bytes


@dataclass(slots=True)
class Report:
    acknowledged: int = 0
    consumed: int = 0
    lost: list[Sent] = field(default_factory=list)
    offset_changed: list[tuple[Sent, Seen]] = field(default_factory=list)
    offset_reused: list[tuple[Seen, Seen]] = field(default_factory=list)
    duplicated: list[tuple[Seen, Seen]] = field(default_factory=list)
    reordered: list[tuple[Sent, Sent]] = field(default_factory=list)
    aborted_read: list[Seen] = field(default_factory=list)

    def problems(self, *, allow_duplicates: bool = False) -> dict[str, list]:
        found = {
            "lost": self.lost, "offset_changed": self.offset_changed, "offset_reused": self.offset_reused,
            "reordered": self.reordered, "aborted_read": self.aborted_read,
        }
        if not allow_duplicates:
            found["duplicated"] = self.duplicated
        return {k: v[:10] for k, v in found.items() if v}

    def summary(self) -> str:
        return (f"{self.acknowledged} acknowledged, {self.consumed} consumed: {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated, {len(self.offset_changed)} moved, {len(self.offset_reused)} offsets "
                f"reused, {len(self.reordered)} reordered, {len(self.aborted_read)} aborted reads")


def check(sent: Iterable[Sent], seen: Iterable[Seen], *, aborted: Iterable[bytes] = ()) -> Report:
    sent = list(sent)
    seen = list(seen)
    report = Report(acknowledged=len(sent), consumed=len(seen))
    aborted_values = set(aborted)

    by_offset: dict[tuple[str, int, int], Seen] = {}
    by_value: dict[bytes, Seen] = {}
    for record in seen:
        key = (record.topic, record.partition, record.offset)
        first = by_offset.get(key)
        if first is None:
            by_offset[key] = record
        elif first.value != record.value:
            report.offset_reused.append((first, record))
        earlier = by_value.get(record.value)
        if earlier is None:
            by_value[record.value] = record
        elif (earlier.topic, earlier.partition, earlier.offset) != key:
            report.duplicated.append((earlier, record))
        if record.value in aborted_values:
            report.aborted_read.append(record)

    order: dict[tuple[str, int, str], list[Sent]] = defaultdict(list)
    for s in sent:
        got = by_value.get(s.value)
        if got is None:
            report.lost.append(s)
        elif (got.topic, got.partition, got.offset) != (s.topic, s.partition, s.offset):
            report.offset_changed.append((s, got))
        if s.sequence >= 0:
            order[(s.topic, s.partition, s.producer)].append(s)
    for sends in order.values():
        sends.sort(key=lambda s: s.sequence)
        for before, after in zip(sends, sends[1:]):
            if before.offset >= after.offset:
                report.reordered.append((before, after))
    return report


# -- transactions ------------------------------------------------------------------------------------
#
# A transactional output is read with read_committed and checked against what its producers say they did.
# Every output value carries a tag (`Tagged`): the transaction that wrote it (unique per run: producer
# instance and its transaction count), the stream it belongs to (`producer`: a transactional id, whose
# instances follow one another) and its place in it (`order`, increasing across the stream's transactions,
# e.g. (instance, transaction, index)), and for a consume-transform-produce loop the input record it was
# made from (`source`). The producers journal each transaction's outcome as they
# learn it: committed, aborted, or unknown (the producer was killed or gave up before hearing the answer).
#
#   * aborted read:  a record of an aborted transaction was returned (read_committed must hide it);
#   * stray:         a record of a transaction no journal knows of was returned (producers journal a
#                    transaction's records before they ask to commit it);
#   * partial:       a transaction some but not all of whose records were returned (atomicity), whatever
#                    its outcome is known to be;
#   * lost:          a committed transaction's record never returned;
#   * duplicated:    one input made into two returned records (exactly-once: never), at distinct offsets;
#   * missing input: an input with no returned record (only when the loop says it consumed every input);
#   * reordered:     within a partition, a producer's returned records not in its `order` (offsets rising).


@dataclass(frozen=True, slots=True)
class Tagged:
    """What a transactional output value says about itself."""

    txn: str
    producer: str  # whose output stream (a transactional id: its instances follow one another)
    order: tuple  # its place in that stream
    source: bytes | None = None


@dataclass(slots=True)
class TxnJournal:
    """What the producers know: each transaction's records (values) and its outcome."""

    written: dict[str, list[bytes]] = field(default_factory=dict)
    committed: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)

    @property
    def unknown(self) -> set[str]:
        return set(self.written) - self.committed - self.aborted

    def merge(self, other: TxnJournal) -> TxnJournal:
        for txn, values in other.written.items():
            self.written.setdefault(txn, []).extend(values)
        self.committed |= other.committed
        self.aborted |= other.aborted
        return self


@dataclass(slots=True)
class TxnReport:
    consumed: int = 0
    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    unknown_visible: int = 0  # of the unknown ones, those whose records were returned (they committed)
    aborted_read: list[Seen] = field(default_factory=list)
    stray: list[Seen] = field(default_factory=list)
    partial: list[tuple[str, int, int]] = field(default_factory=list)  # (txn, returned, written)
    lost: list[bytes] = field(default_factory=list)
    duplicated: list[tuple[Seen, Seen]] = field(default_factory=list)
    missing_input: list[bytes] = field(default_factory=list)
    reordered: list[tuple[Seen, Seen]] = field(default_factory=list)
    offset_reused: list[tuple[Seen, Seen]] = field(default_factory=list)

    def problems(self) -> dict[str, list]:
        found = {"aborted_read": self.aborted_read, "stray": self.stray, "partial": self.partial, "lost": self.lost,
                 "duplicated": self.duplicated, "missing_input": self.missing_input, "reordered": self.reordered,
                 "offset_reused": self.offset_reused}
        return {k: v[:10] for k, v in found.items() if v}

    def summary(self) -> str:
        return (f"{self.consumed} read_committed records, {self.transactions} transactions ({self.committed} committed, "
                f"{self.aborted} aborted, {self.unknown} unknown of which {self.unknown_visible} visible): "
                f"{len(self.aborted_read)} aborted reads, {len(self.stray)} stray, {len(self.partial)} partial, {len(self.lost)} lost, "
                f"{len(self.duplicated)} duplicated, {len(self.missing_input)} inputs missing, "
                f"{len(self.reordered)} reordered")


def check_transactions(seen: Iterable[Seen], journal: TxnJournal, tag, *, inputs: Iterable[bytes] | None = None) -> TxnReport:
    """`seen`: the output read with read_committed (a record read twice at one offset counts once);
    `tag(value) -> Tagged`; `inputs`: every input of the consume-transform-produce loop, when it says it
    consumed them all (else None: no missing-input check)."""
    report = TxnReport(transactions=len(journal.written), committed=len(journal.committed),
                       aborted=len(journal.aborted), unknown=len(journal.unknown))
    by_offset: dict[tuple[str, int, int], Seen] = {}
    for record in seen:
        key = (record.topic, record.partition, record.offset)
        first = by_offset.get(key)
        if first is None:
            by_offset[key] = record
        elif first.value != record.value:
            report.offset_reused.append((first, record))
    records = sorted(by_offset.values(), key=lambda r: (r.topic, r.partition, r.offset))
    report.consumed = len(records)

    returned: dict[str, set[bytes]] = defaultdict(set)
    by_source: dict[bytes, Seen] = {}
    last: dict[tuple[str, int, tuple], tuple[tuple, Seen]] = {}
    for record in records:
        tagged = tag(record.value)
        returned[tagged.txn].add(record.value)
        if tagged.txn in journal.aborted:
            report.aborted_read.append(record)
        elif tagged.txn not in journal.written:
            report.stray.append(record)
        if tagged.source is not None:
            earlier = by_source.setdefault(tagged.source, record)
            if earlier is not record:
                report.duplicated.append((earlier, record))
        stream = (record.topic, record.partition, tagged.producer)
        before = last.get(stream)
        if before is not None and before[0] >= tagged.order:
            report.reordered.append((before[1], record))
        last[stream] = (tagged.order, record)

    for txn, values in journal.written.items():
        got = returned.get(txn, set())
        wanted = set(values)
        if got and got != wanted:
            report.partial.append((txn, len(got & wanted), len(wanted)))
        if txn in journal.committed:
            report.lost.extend(sorted(wanted - got))
        elif txn not in journal.aborted and got:
            report.unknown_visible += 1
    if inputs is not None:
        report.missing_input = sorted(set(inputs) - set(by_source))
    return report


def hanging_partitions(last_stable: dict, high_watermark: dict) -> dict:
    """Partitions whose last stable offset (ListOffsets read_committed) is behind their high watermark:
    {partition: (lso, hw)}. Once every transaction has ended none may be left."""
    return {p: (last_stable.get(p), hw) for p, hw in high_watermark.items() if last_stable.get(p) != hw}


def stuck_transactions(transactions: Iterable[tuple[str, str, int, int]], now_ms: int, slack_ms: int) -> list:
    """(transactional id, state, start time ms, timeout ms) as DescribeTransactions reports them: those
    Ongoing or Prepare* for longer than their timeout plus `slack_ms` (the coordinator should have aborted
    or completed them)."""
    return [t for t in transactions
            if t[1] in ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
            and t[2] >= 0 and now_ms - t[2] > t[3] + slack_ms]


class LsoWatch:
    """How long each partition's last stable offset stood still behind its high watermark, from samples
    (ListOffsets read_committed and latest, polled while the run goes on). A transaction holds the LSO
    back at most for its timeout plus the coordinator's abort; `longest_s()` is what a test bounds."""

    def __init__(self) -> None:
        self._stalled_since: dict = {}  # partition -> (lso, first time seen stalled there)
        self.longest: dict = {}  # partition -> longest stall seen (seconds)
        self.longest_at: dict = {}  # partition -> (lso, hw, first seen, last seen) of that stall, for a failure

    def observe(self, now_s: float, partition, lso: int, hw: int) -> None:
        if lso >= hw:
            self._stalled_since.pop(partition, None)
            return
        stalled = self._stalled_since.get(partition)
        if stalled is None or stalled[0] != lso:
            self._stalled_since[partition] = (lso, now_s)
            stalled = self._stalled_since[partition]
        if now_s - stalled[1] >= self.longest.get(partition, 0.0):
            self.longest[partition] = now_s - stalled[1]
            self.longest_at[partition] = (lso, hw, stalled[1], now_s)

    def longest_s(self) -> float:
        return max(self.longest.values(), default=0.0)
