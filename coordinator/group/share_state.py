"""Which share-partitions of a share group have state in `__share_group_state` (ShareGroupStatePartitionMetadata).

Theory of operation
-------------------
A share-partition's progress (its start offset and the delivery state of the records in flight) lives with
the share coordinator, not here. Before a share-partition leader can serve a group's partition, the share
coordinator must hold a state for it: the group coordinator asks for one with InitializeShareGroupState,
through the broker's `SharePersister`, as Kafka 4.4's GroupMetadataManager does. The group coordinator
remembers where each partition stands in one record per group (type 15), so a failover does not ask again
for what is done, and a lost answer is asked again:

    (nothing) --heartbeat subscribes to the topic--> initializing --persister answered NONE--> initialized
                                     ^                    |
                                     +--persister failed--+  (or still initializing after
                                                              group.share.initialize.retry.interval.ms)

The first heartbeat that subscribes the group to a topic writes the record with the topic's partitions in
`initializing_topics` (with the time), and once that record is durable the coordinator hands the broker an
`Initialization`: the state epoch (the group epoch) and a start offset of -1 (Kafka's
PartitionFactory.UNINITIALIZED_START_OFFSET). A start offset of -1 means "not started yet": the
share-partition leader, on its first read of the state, starts at the group's `share.auto.offset.reset`
(latest: its log end offset, earliest: its log start offset) against its own log, which the group
coordinator cannot see (the partition may be led by another broker). AlterShareGroupOffsets initializes
with the offset the operator gave instead, at a new state epoch.

The broker's answer comes back as a write that moves the partitions to `initialized_topics`, or, on an
error, out of `initializing_topics` so that the next heartbeat asks again. DeleteGroups and
DeleteShareGroupOffsets delete the state of the initialized and initializing partitions through the
persister before they drop them from the record.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .records import (
    CoordinatorRecord,
    RecordType,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
)

__all__ = ["Initialization", "StatePartitions", "UNINITIALIZED_START_OFFSET"]

UNINITIALIZED_START_OFFSET = -1

TopicPartitions = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class Initialization:
    """InitializeShareGroupState for some partitions of one group, for the broker to send through its
    persister. `start_offsets` holds the start offset of each (topic id, partition); absent: -1."""

    group_id: str
    state_epoch: int
    partitions: TopicPartitions
    start_offsets: Mapping[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    def start_offset(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.start_offsets.get((topic_id, partition), UNINITIALIZED_START_OFFSET)

    def keys(self) -> list[tuple[uuid.UUID, int]]:
        return [(t, p) for t, ps in sorted(self.partitions.items()) for p in sorted(ps)]


@dataclass(frozen=True, slots=True)
class StatePartitions:
    """The replicated ShareGroupStatePartitionMetadata of one group, as sets.

    initializing: topic id -> (name, partitions, asked at ms); initialized: topic id -> (name, partitions);
    deleting: topic id -> name (topics whose state is being deleted).
    """

    initializing: Mapping[uuid.UUID, tuple[str, frozenset[int], int]] = field(default_factory=dict)
    initialized: Mapping[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleting: Mapping[uuid.UUID, str] = field(default_factory=dict)

    @classmethod
    def from_value(cls, value) -> StatePartitions:
        if value is None:
            return cls()
        return cls(
            initializing={t.topic_id: (t.topic_name, frozenset(t.partitions), t.create_timestamp)
                          for t in value.initializing_topics},
            initialized={t.topic_id: (t.topic_name, frozenset(t.partitions)) for t in value.initialized_topics},
            deleting={t.topic_id: t.topic_name for t in value.deleting_topics},
        )

    def is_empty(self) -> bool:
        return not (self.initializing or self.initialized or self.deleting)

    def known(self, topic_id: uuid.UUID, partition: int, now_ms: int, retry_ms: int) -> bool:
        """Initialized, or being initialized and asked for less than `retry_ms` ago."""
        done = self.initialized.get(topic_id)
        if done is not None and partition in done[1]:
            return True
        pending = self.initializing.get(topic_id)
        return pending is not None and partition in pending[1] and now_ms - pending[2] < retry_ms

    def with_initializing(self, names: Mapping[uuid.UUID, str], partitions: TopicPartitions,
                          now_ms: int) -> StatePartitions:
        initializing = dict(self.initializing)
        for topic_id, ps in partitions.items():
            old = initializing.get(topic_id)
            initializing[topic_id] = (names[topic_id], (old[1] if old else frozenset()) | ps, now_ms)
        return StatePartitions(initializing, self.initialized, self.deleting)

    def with_initialized(self, partitions: TopicPartitions, names: Mapping[uuid.UUID, str]) -> StatePartitions:
        initializing = _minus(self.initializing, partitions)
        initialized = dict(self.initialized)
        for topic_id, ps in partitions.items():
            old = initialized.get(topic_id)
            name = old[0] if old else names.get(topic_id, "")
            initialized[topic_id] = (name, (old[1] if old else frozenset()) | ps)
        return StatePartitions(initializing, initialized, self.deleting)

    def without(self, partitions: TopicPartitions) -> StatePartitions:
        """The partitions forgotten: no longer initializing nor initialized (a failed initialization, or
        state deleted)."""
        initialized = {t: (name, ps - partitions.get(t, frozenset())) for t, (name, ps) in self.initialized.items()}
        return StatePartitions(_minus(self.initializing, partitions),
                               {t: v for t, v in initialized.items() if v[1]}, self.deleting)

    def all_partitions(self, topic_ids: Iterable[uuid.UUID] | None = None) -> TopicPartitions:
        """Initialized and initializing partitions (of `topic_ids`, or of every topic)."""
        out: dict[uuid.UUID, frozenset[int]] = {}
        for topic_id, (_, ps) in self.initialized.items():
            out[topic_id] = out.get(topic_id, frozenset()) | ps
        for topic_id, (_, ps, _) in self.initializing.items():
            out[topic_id] = out.get(topic_id, frozenset()) | ps
        if topic_ids is not None:
            wanted = set(topic_ids)
            out = {t: ps for t, ps in out.items() if t in wanted}
        return out

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        if topic_id in self.initialized:
            return self.initialized[topic_id][0]
        if topic_id in self.initializing:
            return self.initializing[topic_id][0]
        return self.deleting.get(topic_id)

    def record(self, group_id: str) -> CoordinatorRecord:
        value_cls = ShareGroupStatePartitionMetadataValue
        initializing_cls = value_cls.TopicPartitionsInfo
        return CoordinatorRecord(
            RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
            ShareGroupStatePartitionMetadataKey(group_id=group_id),
            value_cls(
                initializing_topics=[initializing_cls(topic_id=t, topic_name=name, partitions=sorted(ps),
                                                      create_timestamp=ts)
                                     for t, (name, ps, ts) in sorted(self.initializing.items())],
                initialized_topics=[initializing_cls(topic_id=t, topic_name=name, partitions=sorted(ps),
                                                     create_timestamp=-1)
                                    for t, (name, ps) in sorted(self.initialized.items())],
                deleting_topics=[value_cls.TopicInfo(topic_id=t, topic_name=name)
                                 for t, name in sorted(self.deleting.items())],
            ))


def _minus(initializing: Mapping[uuid.UUID, tuple[str, frozenset[int], int]],
           partitions: TopicPartitions) -> dict[uuid.UUID, tuple[str, frozenset[int], int]]:
    out = {}
    for topic_id, (name, ps, ts) in initializing.items():
        left = ps - partitions.get(topic_id, frozenset())
        if left:
            out[topic_id] = (name, left, ts)
    return out
