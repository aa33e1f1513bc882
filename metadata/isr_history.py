"""The exact ISR and leader history of every partition, as this node read it from the metadata log.

Why here
--------
Every change of a partition's ISR or leader is a PartitionChangeRecord (or a PartitionRecord) in
`__cluster_metadata`, and every node, broker or controller, replays every committed one into its image
(loader.py, publisher.py). So each node can keep the whole timeline without asking anyone and without
sampling: `IsrHistory` is a `MetadataListener` that compares, for each topic an update changed, each
partition before and after, and keeps one `IsrChange` per partition whose ISR, leader or ELR moved, in a ring
of the last `capacity` (1000 by default). A console that polls the ISR through Metadata sees only the states
it happened to sample; a shrink and expand between two samples is invisible to it, here it is two events.

When
----
`offset` is the metadata-log offset of the last record of the committed batch that carried the change (the
change's record is in that batch; a batch is what the controller wrote at once). It is the same on every node
(Raft replicates batches whole), so it orders the events exactly and merges the rings of several nodes
without duplicates. The metadata records carry no time of their own, so `applied_ms` is this node's clock
when it applied the batch: within a few milliseconds of the controller's commit on a node that follows the
quorum, and meaningless for batches replayed from the local log at start-up (`replayed`: the node applied it
again, not when it happened; a node catching up after an absence applies old batches late, and its time for
them is its catch-up time). A reader that has several nodes' rings takes, per event, the earliest time of a
node that saw it live. A snapshot loaded while running (the node had fallen behind the log start) collapses
what happened in between into one step, at the snapshot's offset (another node's ring has the steps); the
first image a node publishes (from nothing) is its starting point, not a change.

Cost: per update, one identity test per partition of each changed topic (the image keeps the same
`PartitionImage` object for a partition no record touched) and a tuple comparison for those that changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.metadata.image import PartitionImage
from odradek.metadata.publisher import MetadataUpdate

__all__ = ["IsrChange", "IsrHistory", "DEFAULT_CAPACITY", "read_json"]

DEFAULT_CAPACITY = 1000


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition's leader/ISR/ELR change, before and after."""

    offset: int
    applied_ms: int
    replayed: bool
    topic: str
    partition: int
    leader_before: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr_before: tuple[int, ...]
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    elr_before: tuple[int, ...]
    elr: tuple[int, ...]

    @property
    def kind(self) -> str:
        """shrink (replicas left the ISR), expand (replicas joined it), change (both), or leader (the ISR is
        the same: a new leader, or only the ELR moved)."""
        before, after = set(self.isr_before), set(self.isr)
        if before == after:
            return "leader" if self.leader != self.leader_before else "elr"
        if after < before:
            return "shrink"
        if after > before:
            return "expand"
        return "change"

    def as_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset, "applied_ms": self.applied_ms, "replayed": self.replayed,
            "topic": self.topic, "partition": self.partition,
            "kind": self.kind, "leader_before": self.leader_before, "leader": self.leader,
            "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
            "isr_before": list(self.isr_before), "isr": list(self.isr), "replicas": list(self.replicas),
            "elr_before": list(self.elr_before), "elr": list(self.elr),
        }


class IsrHistory:
    """The ring of the last `capacity` ISR/leader changes (see the module docstring). `clock()` is this
    node's wall clock in ms; updates at or below `replayed_through` (the metadata log end the node had when
    it started) are replays of the local log."""

    def __init__(self, *, clock: Callable[[], int], capacity: int = DEFAULT_CAPACITY, replayed_through: int = -1):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {capacity}")
        self.clock = clock
        self.capacity = capacity
        self.replayed_through = replayed_through
        self.events: deque[IsrChange] = deque(maxlen=capacity)
        self.recorded = 0  # every change seen since start; recorded - len(events) fell off the ring
        self.offset = -1  # the metadata end offset of the last update heard

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        self.offset = update.offset
        if update.is_snapshot:
            return  # the node's starting point, not a change
        previous = update.previous.topics_by_id
        now = -1
        for topic_id in update.changed_topic_ids:
            before_topic = previous.get(topic_id)
            after_topic = update.image.topics_by_id.get(topic_id)
            if before_topic is None or after_topic is None:
                continue  # created (its first ISR is no change) or deleted
            before_parts = before_topic.partitions
            for index, after in after_topic.partitions.items():
                before = before_parts.get(index)
                if before is None or before is after or not _moved(before, after):
                    continue
                if now < 0:
                    now = self.clock()
                self._add(update, now, after_topic.name, index, before, after)

    def _add(self, update: MetadataUpdate, now: int, topic: str, index: int, before: PartitionImage,
             after: PartitionImage) -> None:
        offset = update.offset - 1  # the last offset of the batch (update.offset is the end, exclusive)
        self.events.append(IsrChange(
            offset=offset, applied_ms=now, replayed=update.offset <= self.replayed_through,
            topic=topic, partition=index, leader_before=before.leader, leader=after.leader,
            leader_epoch=after.leader_epoch, partition_epoch=after.partition_epoch, isr_before=before.isr,
            isr=after.isr, replicas=after.replicas, elr_before=before.elr, elr=after.elr))
        self.recorded += 1

    def read(self, *, after: int = -1, limit: int | None = None) -> list[IsrChange]:
        """The events with an offset above `after`, oldest first; the newest `limit` of them if given."""
        found = [e for e in self.events if e.offset > after]
        if limit is not None and len(found) > limit:
            found = found[len(found) - limit:]
        return found


def _moved(before: PartitionImage, after: PartitionImage) -> bool:
    return before.isr != after.isr or before.leader != after.leader or before.elr != after.elr



def read_json(history: IsrHistory, query: Mapping[str, str], node_id: int) -> dict[str, Any]:
    """The answer of a node's `/odradek/isr-events?after=OFFSET&limit=N` (broker/metrics.py serves it): the
    events above `after` (default: all kept), the newest `limit` of them (1..capacity, default capacity),
    oldest first, with what a reader needs to know what it may have missed: `recorded` (changes seen since
    the node started; more than the ring holds means the oldest fell off) and `metadata_offset` (how far
    this node has applied the log). Bad parameters raise ValueError (a 400 naming the parameter)."""
    after = _whole(query, "after", -1)
    limit = _whole(query, "limit", history.capacity)
    if not 1 <= limit <= history.capacity:
        raise ValueError(f"limit must be between 1 and {history.capacity}, not {limit}")
    events = history.read(after=after, limit=limit)
    return {"node_id": node_id, "capacity": history.capacity, "recorded": history.recorded,
            "kept": len(history.events), "metadata_offset": history.offset,
            "events": [e.as_json() for e in events]}


def _whole(query: Mapping[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text[:40]!r}") from None
