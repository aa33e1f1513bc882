"""Choosing a partition for a record, as the Java producer does.

A record with a key goes to `to_positive(murmur2(key)) % num_partitions`, exactly Java's
`BuiltInPartitioner.partitionForKey` (and kafka-python's and librdkafka's "murmur2_random"), so the same
key lands on the same partition whichever of these clients wrote it. `murmur2` returns Java's signed
32-bit result.

A record without a key is "sticky" (KIP-480, KIP-794): every keyless record of a topic goes to one
partition until about `batch_size` bytes have gone there, then a new partition is drawn at random among
those with a leader (never the same one twice in a row when there is a choice). Batches fill up, so
keyless traffic gets the latency and compression of full batches while still spreading evenly.
"""

from __future__ import annotations

import random

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    length4 = length & ~3
    for i in range(0, length4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[length4 + 2] << 16
    if extra >= 2:
        h ^= data[length4 + 1] << 8
    if extra >= 1:
        h ^= data[length4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class Partitioner:
    """The producer's partitioner: `default` (above), `round_robin` or `random` for keyless records.

    Keyed records always use murmur2; `partition()` is called with the topic's partitions (all, and those
    that currently have a leader), `on_append()` after each record with its serialized size.
    """

    def __init__(self, kind: str = "default", batch_size: int = 16_384, rng: random.Random | None = None):
        self.kind = kind
        self.batch_size = max(batch_size, 1)
        self._rng = rng or random.Random()
        self._sticky: dict[str, list[int]] = {}  # topic -> [partition, bytes produced to it]
        self._counters: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is not None:
            return all_partitions[partition_for_key(key, len(all_partitions))]
        candidates = available or all_partitions
        if self.kind == "round_robin":
            n = self._counters.get(topic, 0)
            self._counters[topic] = n + 1
            return candidates[n % len(candidates)]
        if self.kind == "random":
            return self._rng.choice(candidates)
        state = self._sticky.get(topic)
        if state is None or state[0] not in candidates:
            state = self._sticky[topic] = [self._pick(None if state is None else state[0], candidates), 0]
        return state[0]

    def on_append(self, topic: str, key: bytes | None, partition: int, size: int, available: list[int]) -> None:
        if key is not None or self.kind != "default":
            return
        state = self._sticky.get(topic)
        if state is None or state[0] != partition:
            return
        state[1] += size
        if state[1] >= self.batch_size:
            self._sticky[topic] = [self._pick(partition, available), 0]

    def _pick(self, previous: int | None, candidates: list[int]) -> int:
        if len(candidates) > 1 and previous in candidates:
            others = [p for p in candidates if p != previous]
            return self._rng.choice(others)
        return self._rng.choice(candidates)
