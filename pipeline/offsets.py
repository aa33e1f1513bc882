"""Offsets as Spark sees them, read limits, and the planning of offset ranges into input partitions.

A streaming offset is `{"topic": {"0": 23, "1": 45}}`: topics in sorted order, partitions in numeric
order, string keys and int values. Spark stores the JSON text in `<checkpoint>/offsets/<batch>` and
compares offsets *as strings*, so the order must not depend on how a dict happened to be built: an
unstable order makes Spark see "new data" forever and run empty micro-batches. `offsets_to_json` is the
only place that builds the JSON dict; it returns a dict whose insertion order is canonical, which
`json.dumps` keeps.

End offsets are exclusive throughout: the range (start=5, end=8) holds offsets 5, 6 and 7.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from odradek.client.common import TopicPartition

from .errors import OptionError

__all__ = [
    "Bounds", "EARLIEST", "LATEST", "OffsetRange", "offsets_from_json", "offsets_to_json", "parse_assign",
    "parse_partition_values", "plan_ranges", "rate_limit",
]

EARLIEST = -2  # Kafka's ListOffsets timestamp for the log start; also Spark's JSON convention
LATEST = -1  # the high watermark


def offsets_to_json(offsets: Mapping[TopicPartition, int] | Iterable[tuple[TopicPartition, int]]) -> dict:
    """{TopicPartition: offset} -> {"topic": {"partition": offset}} in canonical order."""
    items = offsets.items() if isinstance(offsets, Mapping) else offsets
    by_topic: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in items:
        by_topic.setdefault(topic, {})[int(partition)] = int(offset)
    return {topic: {str(p): by_topic[topic][p] for p in sorted(by_topic[topic])} for topic in sorted(by_topic)}


def offsets_from_json(data: Mapping[str, Any] | str | None) -> dict[TopicPartition, int]:
    """The inverse of offsets_to_json; accepts the JSON text too. None (no offset yet) gives {}."""
    if data is None:
        return {}
    if isinstance(data, str):
        data = json.loads(data)
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        for partition, offset in partitions.items():
            out[TopicPartition(topic, int(partition))] = int(offset)
    return dict(sorted(out.items()))


def parse_partition_values(text: str, name: str) -> dict[TopicPartition, int]:
    """Option JSON `{"topicA": {"0": 23, "1": -1}}` -> {TopicPartition: int}."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as e:
        raise OptionError(f"option {name!r} must be earliest, latest or JSON like "
                            f'{{"topic":{{"0":23,"1":-2}}}} (got {text!r}: {e})') from None
    if not isinstance(data, dict):
        raise OptionError(f"option {name!r} must be a JSON object of topics (got {text!r})")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise OptionError(f"option {name!r}: topic {topic!r} must map partitions to numbers")
        for partition, value in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise OptionError(f"option {name!r}: partition {partition!r} of {topic!r} is not a number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option {name!r}: value of {topic}-{partition} must be an integer")
            if p < 0:
                raise OptionError(f"option {name!r}: partition {p} of {topic!r} is negative")
            out[TopicPartition(topic, p)] = value
    return out


def parse_assign(text: str) -> list[TopicPartition]:
    """Option JSON `{"topicA": [0, 1], "topicB": [2]}` -> [TopicPartition, ...]."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError) as e:
        raise OptionError(f'option \'assign\' must be JSON like {{"topicA":[0,1]}} (got {text!r}: {e})') from None
    if not isinstance(data, dict):
        raise OptionError(f"option 'assign' must be a JSON object of topics (got {text!r})")
    out = []
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(isinstance(p, int) and p >= 0 for p in partitions):
            raise OptionError(f"option 'assign': topic {topic!r} must map to a list of partition numbers")
        out.extend(TopicPartition(topic, p) for p in partitions)
    return sorted(set(out))


# ---------------------------------------------------------------------------------------- read limits


def rate_limit(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               limit: int) -> dict[TopicPartition, int]:
    """Cut the range start..end to at most `limit` records in total, split in proportion to what each
    partition has available (as Spark's maxOffsetsPerTrigger does).

    Unlike Spark, which rounds small shares *up* and may so exceed the limit by a few records, the total
    here is exactly min(limit, available): every partition with data first gets one record while the
    budget allows (so a small partition is not starved by a big one), the rest is shared in proportion
    and rounded down, and what rounding leaves goes to the largest remainders. Partitions missing from
    `start` stay at their end offset (they have nothing to read yet).
    """
    sizes = {tp: end[tp] - start.get(tp, end[tp]) for tp in end}
    sizes = {tp: s for tp, s in sizes.items() if s > 0}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    by_size = sorted(sizes, key=lambda t: (-sizes[t], t))
    take = {tp: 0 for tp in sizes}
    for tp in by_size[:limit]:
        take[tp] = 1
    budget = limit - sum(take.values())
    if budget > 0:
        rest = {tp: sizes[tp] - 1 for tp in sizes}
        rest_total = sum(rest.values())
        shares = {tp: budget * r / rest_total for tp, r in rest.items()}
        for tp, x in shares.items():
            take[tp] += math.floor(x)
        budget = limit - sum(take.values())
        for tp in sorted(sizes, key=lambda t: (-(shares[t] - math.floor(shares[t])), -sizes[t], t)):
            if budget <= 0:
                break
            if take[tp] < sizes[tp]:
                take[tp] += 1
                budget -= 1
    return {tp: (start[tp] + take[tp] if tp in take else o) for tp, o in end.items()}


def count_between(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    return sum(max(o - start.get(tp, o), 0) for tp, o in end.items())


# ---------------------------------------------------------------------------------------- planning


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def split(self, pieces: int) -> list["OffsetRange"]:
        """`pieces` contiguous ranges of near-equal size (fewer when the range is smaller)."""
        pieces = max(1, min(pieces, self.size))
        bounds = [self.start + (self.size * i) // pieces for i in range(pieces + 1)]
        return [OffsetRange(self.topic, self.partition, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], *,
                min_partitions: int | None = None, max_records: int | None = None) -> list[OffsetRange]:
    """One range per topic-partition with data, split so that each holds at most `max_records` and,
    when there are fewer than `min_partitions`, big ranges split further in proportion to their size
    (as Spark's KafkaOffsetRangeCalculator). Empty ranges are left out; the order is deterministic."""
    ranges = [OffsetRange(tp.topic, tp.partition, start[tp], o) for tp, o in sorted(end.items())
              if tp in start and o > start[tp]]
    if max_records:
        ranges = [piece for r in ranges for piece in r.split(math.ceil(r.size / max_records))]
    if min_partitions and len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        out = []
        for r in ranges:
            pieces = max(1, math.ceil(r.size / total * min_partitions)) if total else 1
            out.extend(r.split(pieces))
        ranges = out
    return ranges


@dataclass(frozen=True)
class Bounds:
    """What a batch read's pushed filters allow: topics, partitions, and the offsets [low, high).

    Every bound is exact: a range cut by it loses no record the filter would keep, which is why Spark
    need not evaluate those filters again. None means "no bound"; an empty set selects nothing.
    """

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    low: int = 0  # inclusive
    high: int | None = None  # exclusive

    def allows(self, tp: TopicPartition) -> bool:
        return ((self.topics is None or tp.topic in self.topics)
                and (self.partitions is None or tp.partition in self.partitions))

    def with_values(self, column: str, values: Iterable[Any]) -> "Bounds":
        """AND a `column = v` / `column IN (...)` filter on topic or partition into the bounds."""
        chosen = frozenset(values)
        if column == "topic":
            return Bounds(chosen if self.topics is None else self.topics & chosen, self.partitions, self.low, self.high)
        return Bounds(self.topics, chosen if self.partitions is None else self.partitions & chosen, self.low, self.high)

    def with_offsets(self, low: int = 0, high: int | None = None) -> "Bounds":
        """AND offsets in [low, high) into the bounds."""
        new_high = high if self.high is None else self.high if high is None else min(self.high, high)
        return Bounds(self.topics, self.partitions, max(self.low, low), new_high)

    def narrow(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
               ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """The resolved [start, end) per partition, cut to the bounds; partitions left out are dropped and
        a range cut to nothing becomes empty (start == end), so plan_ranges leaves it out."""
        new_start, new_end = {}, {}
        for tp, e in end.items():
            if tp not in start or not self.allows(tp):
                continue
            s = max(start[tp], self.low)
            e = e if self.high is None else min(e, self.high)
            new_start[tp], new_end[tp] = s, max(s, e)
        return new_start, new_end
