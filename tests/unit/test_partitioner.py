"""The default partitioner sends a key where Java's and kafka-python's do; keyless records are sticky."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.client.partitioner import Partitioner, murmur2, partition_for_key

# From Kafka's own org.apache.kafka.common.utils.UtilsTest#testMurmur2 (signed Java ints).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# key -> partition for 1, 3, 6, 12 and 100 partitions (toPositive(murmur2(key)) % n).
EXPECTED_PARTITIONS = {
    b"": [0, 0, 3, 9, 81],
    b"a": [0, 1, 4, 4, 24],
    b"ab": [0, 2, 2, 2, 34],
    b"abc": [0, 0, 3, 3, 7],
    b"abcd": [0, 2, 2, 8, 0],
    b"hello": [0, 0, 3, 9, 29],
    b"key-0": [0, 1, 1, 1, 41],
    b"key-1": [0, 0, 0, 0, 40],
    b"user-42": [0, 1, 4, 4, 60],
    b"\x00\xff\x10": [0, 0, 3, 3, 75],
    "ключ".encode(): [0, 2, 2, 8, 24],
    b"x" * 100: [0, 1, 4, 4, 68],
}
COUNTS = [1, 3, 6, 12, 100]


@pytest.mark.parametrize("key,expected", sorted(JAVA_MURMUR2.items()))
def test_murmur2_matches_java(key, expected):
    assert murmur2(key) == expected


@pytest.mark.parametrize("key", sorted(EXPECTED_PARTITIONS))
def test_partition_table(key):
    assert [partition_for_key(key, n) for n in COUNTS] == EXPECTED_PARTITIONS[key]


def _kafka_python_partition(key: bytes, n: int) -> int:
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % n


@pytest.mark.parametrize("key", sorted(EXPECTED_PARTITIONS) + sorted(JAVA_MURMUR2))
def test_table_agrees_with_kafka_python(key):
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF
    for n in COUNTS:
        assert partition_for_key(key, n) == _kafka_python_partition(key, n)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=1, max_value=500))
def test_any_key_agrees_with_kafka_python(key, n):
    assert partition_for_key(key, n) == _kafka_python_partition(key, n)


def test_keyed_records_ignore_availability():
    p = Partitioner()
    parts = list(range(6))
    assert p.partition("t", b"hello", parts, [0]) == 3


def test_keyless_records_stick_until_a_batch_is_full():
    p = Partitioner(batch_size=1000, rng=random.Random(7))
    parts = list(range(4))
    first = p.partition("t", None, parts, parts)
    for _ in range(9):
        assert p.partition("t", None, parts, parts) == first
        p.on_append("t", None, first, 100, parts)
    assert p.partition("t", None, parts, parts) == first
    p.on_append("t", None, first, 100, parts)  # 1000 bytes: switch
    second = p.partition("t", None, parts, parts)
    assert second != first


def test_keyless_records_spread_over_time():
    p = Partitioner(batch_size=100, rng=random.Random(1))
    parts = list(range(5))
    seen = set()
    for _ in range(200):
        chosen = p.partition("t", None, parts, parts)
        p.on_append("t", None, chosen, 100, parts)
        seen.add(chosen)
    assert seen == set(parts)


def test_sticky_partition_avoids_partitions_without_leader():
    p = Partitioner(rng=random.Random(3))
    for _ in range(20):
        assert p.partition("t", None, [0, 1, 2], [2]) == 2


def test_round_robin_and_random_kinds():
    rr = Partitioner("round_robin")
    assert [rr.partition("t", None, [0, 1, 2], [0, 1, 2]) for _ in range(4)] == [0, 1, 2, 0]
    rnd = Partitioner("random", rng=random.Random(0))
    assert {rnd.partition("t", None, [0, 1, 2], [0, 1, 2]) for _ in range(50)} == {0, 1, 2}
