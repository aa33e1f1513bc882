"""Rack-aware replica placement: Kafka's StripedReplicaPlacer.

Theory of operation
-------------------
Brokers are grouped by rack (no rack is a rack of its own); racks are sorted by name, each rack's brokers
by id, and the rng draws where each list starts. Each partition takes its first replica (its preferred
leader) from the next rack in turn, then one replica from each following rack, round and round, so a
partition's replicas span as many racks as there are, and successive partitions start on successive racks
and brokers: leaders are striped over racks and then over the brokers of each rack. Within a rack, a
broker list's cursor moves on by one for every partition ("epoch"), so a broker is not picked again for
the same partition and consecutive partitions start on different brokers. After as many partitions as
there are brokers, racks and broker lists are shuffled with the rng, so that large topics do not repeat
the same few replica sets.

Only unfenced brokers that are not shutting down are placed on (Kafka may place followers on fenced
brokers; a new partition here starts with every replica in its ISR). Deterministic given the rng.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import MetadataError

__all__ = ["place_replicas"]


class _BrokerList:
    __slots__ = ("brokers", "index", "offset", "epoch")

    def __init__(self, brokers: list[int], rng: random.Random) -> None:
        self.brokers = sorted(brokers)
        self.index = 0
        self.offset = rng.randrange(len(self.brokers)) if self.brokers else 0
        self.epoch = 0

    def next(self, epoch: int) -> int:
        """The next broker for the partition of `epoch`, or -1 once each was given to it."""
        if not self.brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(self.brokers)
        if self.index >= len(self.brokers):
            return -1
        broker = self.brokers[(self.index + self.offset) % len(self.brokers)]
        self.index += 1
        return broker


class _RackList:
    def __init__(self, rng: random.Random, brokers: Iterable[tuple[int, str | None]]) -> None:
        self.rng = rng
        by_rack: dict[str | None, list[int]] = {}
        for broker_id, rack in brokers:
            by_rack.setdefault(rack, []).append(broker_id)
        # No rack sorts first, as Kafka's OptionalStringComparator has it.
        self.rack_names = sorted(by_rack, key=lambda r: (r is not None, r or ""))
        self.racks = {name: _BrokerList(by_rack[name], rng) for name in self.rack_names}
        self.num_brokers = sum(len(b) for b in by_rack.values())
        self.epoch = 0
        self.offset = rng.randrange(len(self.rack_names)) if self.rack_names else 0

    def place(self, replication_factor: int) -> list[int]:
        if self.epoch == self.num_brokers and self.num_brokers > 1:
            self._shuffle()
            self.epoch = 0
        if self.offset == len(self.rack_names):
            self.offset = 0
        names = self.rack_names
        first_rack = self.offset
        while True:
            broker = self.racks[names[first_rack]].next(self.epoch)
            if broker >= 0:
                break
            first_rack = (first_rack + 1) % len(names)
        chosen = [broker]
        rack_index = self.offset
        for _ in range(1, replication_factor):
            broker = -1
            while broker < 0:
                if rack_index == first_rack:
                    first_rack = -1  # the first replica's rack was served already this round
                else:
                    broker = self.racks[names[rack_index]].next(self.epoch)
                rack_index = (rack_index + 1) % len(names)
            chosen.append(broker)
        self.epoch += 1
        self.offset += 1
        return chosen

    def _shuffle(self) -> None:
        self.rng.shuffle(self.rack_names)
        for rack in self.racks.values():
            self.rng.shuffle(rack.brokers)


def place_replicas(
    brokers: Iterable[tuple[int, str | None]], num_partitions: int, replication_factor: int, rng: random.Random
) -> list[list[int]]:
    """Replica lists for `num_partitions` partitions over `brokers` ((broker id, rack) of each usable
    broker), the first replica of each its preferred leader. Raises MetadataError
    (INVALID_REPLICATION_FACTOR) as Kafka does when the factor cannot be met."""
    rack_list = _RackList(rng, brokers)
    if replication_factor <= 0:
        raise MetadataError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Invalid replication factor {replication_factor}: the replication factor must be positive.",
        )
    if rack_list.num_brokers == 0:
        raise MetadataError(ErrorCode.INVALID_REPLICATION_FACTOR, "All brokers are currently fenced.")
    if replication_factor > rack_list.num_brokers:
        raise MetadataError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
            f"of {replication_factor} cannot be reached because only {rack_list.num_brokers} broker(s) "
            "are registered.",
        )
    return [rack_list.place(replication_factor) for _ in range(num_partitions)]
