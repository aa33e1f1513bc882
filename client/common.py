"""Names every client module shares, kept in a module that imports none of them.

`TopicPartition` (cluster, assignors, producer, consumer, admin and the pipeline all speak it),
`OffsetAndMetadata` (the consumer's positions, the group's commits, the admin's offsets) and
`ConsumerRebalanceListener` (what the consumer is told when the group moves its partitions). They lived
beside their first user, which made the modules import each other: assignors -> cluster -> config ->
assignors, and consumer <-> group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["ConsumerRebalanceListener", "OffsetAndMetadata", "TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(slots=True, frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerRebalanceListener:
    """Override what you need; methods may be plain functions or coroutines."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)
