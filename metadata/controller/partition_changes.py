"""The working set of one controller operation: its records so far, and what they change.

An operation can touch one partition twice (two items of an AlterPartition, a reassignment completed by the
ISR change that follows it) or fence a second broker after a first (expired sessions): a later step must
see an earlier one. Replaying whole images after each record would, but costs a copy of the image per
record; `PartitionChanges` instead keeps the partitions as those records leave them (merged with
`merge_partition_change`, as replay does) and the brokers whose activity they change, over the image the
operation started from. Every control manager that writes partition or broker records into one operation
appends them here, so the records come out in the order they were decided (Kafka passes one record list
through its managers the same way).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

from odradek.metadata.image import (
    MetadataImage,
    MetadataReplayError,
    PartitionImage,
    TopicImage,
    merge_partition_change,
)
from odradek.metadata.records import PartitionChangeRecord

from .brokers import is_active


def partitions_in_order(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionImage]]:
    """Every partition, in topic name then partition order (decisions walk them deterministically)."""
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        for partition_id in sorted(topic.partitions):
            yield topic, partition_id, topic.partitions[partition_id]


class PartitionChanges:
    """See the module doc. `records` is what the operation decided, in order."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.records: list = []
        self._partitions: dict[tuple[uuid.UUID, int], PartitionImage] = {}
        self._active: dict[int, bool] = {}  # brokers whose activity these records change

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionImage | None:
        changed = self._partitions.get((topic_id, partition_id))
        if changed is not None:
            return changed
        topic = self.image.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def active(self, broker_id: int) -> bool:
        """Whether the broker may lead or join an ISR once these records are replayed."""
        if broker_id in self._active:
            return self._active[broker_id]
        broker = self.image.brokers.get(broker_id)
        return broker is not None and is_active(broker)

    def set_active(self, broker_id: int, active: bool) -> None:
        """The records decided (or about to be) change the broker's activity: later steps see it so."""
        self._active[broker_id] = active

    def add_records(self, records: Iterable) -> None:
        for record in records:
            if isinstance(record, PartitionChangeRecord):
                key = (record.topic_id, record.partition_id)
                partition = self.partition(*key)
                if partition is None:
                    raise MetadataReplayError(f"A PartitionChangeRecord for an unknown partition {key}")
                self._partitions[key] = merge_partition_change(partition, record)
            self.records.append(record)

    def partitions(self) -> Iterator[tuple[uuid.UUID, int, PartitionImage]]:
        """Every partition as these records leave it, in `partitions_in_order`."""
        for topic, partition_id, partition in partitions_in_order(self.image):
            yield topic.topic_id, partition_id, self._partitions.get((topic.topic_id, partition_id), partition)
