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
  * uncommitted:    a committed transaction's value missing (only when the run says all were consumed).

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
