"""Offset JSON, read limits and range planning of the data source (pipeline/offsets.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.cluster import TopicPartition as TP
from odradek.pipeline.offsets import (
    OffsetRange,
    count_between,
    offsets_from_json,
    offsets_to_json,
    parse_assign,
    parse_partition_values,
    plan_ranges,
    rate_limit,
)
from odradek.pipeline.options import OptionError


def test_offset_json_has_one_canonical_text_whatever_the_insertion_order():
    a = {TP("b", 10): 5, TP("a", 2): 1, TP("b", 2): 7, TP("a", 0): 0}
    b = dict(reversed(list(a.items())))
    text = json.dumps(offsets_to_json(a))
    assert text == json.dumps(offsets_to_json(b))
    assert text == '{"a": {"0": 0, "2": 1}, "b": {"2": 7, "10": 5}}'
    assert offsets_from_json(text) == a
    # what Spark hands back (json.loads of the stored text) serialises to the same text again
    assert json.dumps(offsets_to_json(offsets_from_json(json.loads(text)))) == text


def test_offsets_from_json_of_nothing():
    assert offsets_from_json(None) == {}
    assert offsets_from_json({}) == {}


def test_parse_partition_values_and_assign():
    assert parse_partition_values('{"t": {"0": 23, "1": -1}, "u": {"2": -2}}', "startingOffsets") == {
        TP("t", 0): 23, TP("t", 1): -1, TP("u", 2): -2}
    assert parse_assign('{"t": [1, 0], "u": [2]}') == [TP("t", 0), TP("t", 1), TP("u", 2)]
    for bad in ("nope", "[1]", '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": "1"}}', '{"t": {"-1": 0}}'):
        with pytest.raises(OptionError):
            parse_partition_values(bad, "startingOffsets")
    for bad in ("{", '{"t": [-1]}', '{"t": "0"}'):
        with pytest.raises(OptionError):
            parse_assign(bad)


def test_rate_limit_splits_in_proportion():
    start = {TP("t", 0): 0, TP("t", 1): 0, TP("t", 2): 0}
    end = {TP("t", 0): 100, TP("t", 1): 50, TP("t", 2): 50}
    assert rate_limit(start, end, 20) == {TP("t", 0): 10, TP("t", 1): 5, TP("t", 2): 5}
    assert rate_limit(start, end, 1000) == end


def test_rate_limit_does_not_starve_small_partitions():
    start = {TP("t", 0): 0, TP("t", 1): 0}
    end = {TP("t", 0): 10_000, TP("t", 1): 3}
    cut = rate_limit(start, end, 10)
    assert cut[TP("t", 1)] >= 1 and count_between(start, cut) == 10


def test_rate_limit_leaves_new_partitions_alone():
    start = {TP("t", 0): 0}
    end = {TP("t", 0): 100, TP("t", 1): 40}  # t-1 is not in start: nothing to read there yet
    cut = rate_limit(start, end, 10)
    assert cut == {TP("t", 0): 10, TP("t", 1): 40}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
       st.integers(1, 3000))
def test_rate_limit_properties(sizes, limit):
    start = {TP("t", i): a for i, (a, _) in enumerate(sizes)}
    end = {TP("t", i): a + b for i, (a, b) in enumerate(sizes)}
    cut = rate_limit(start, end, limit)
    total = count_between(start, end)
    assert set(cut) == set(end)
    assert all(start[tp] <= cut[tp] <= end[tp] for tp in end)
    assert count_between(start, cut) == min(limit, total)  # never above the limit, never wasteful
    nonempty = [tp for tp in end if end[tp] > start[tp]]
    if limit >= len(nonempty):
        assert all(cut[tp] > start[tp] for tp in nonempty)


def test_plan_ranges_skips_empty_and_unknown_partitions():
    start = {TP("a", 0): 5, TP("a", 1): 9, TP("b", 0): 0}
    end = {TP("a", 0): 8, TP("a", 1): 9, TP("b", 0): 4, TP("c", 0): 10}
    assert plan_ranges(start, end) == [OffsetRange("a", 0, 5, 8), OffsetRange("b", 0, 0, 4)]


def test_plan_ranges_max_records_and_min_partitions():
    start = {TP("a", 0): 0, TP("a", 1): 0}
    end = {TP("a", 0): 100, TP("a", 1): 10}
    ranges = plan_ranges(start, end, max_records=30)
    assert all(r.size <= 30 for r in ranges) and sum(r.size for r in ranges) == 110
    assert [r.start for r in ranges if r.partition == 0] == [0, 25, 50, 75]
    ranges = plan_ranges(start, end, min_partitions=6)
    assert len(ranges) >= 6 and sum(r.size for r in ranges) == 110
    by_partition: dict[int, list[OffsetRange]] = {}
    for r in ranges:
        by_partition.setdefault(r.partition, []).append(r)
    for p, rs in by_partition.items():  # contiguous, covering the whole range
        assert rs[0].start == start[TP("a", p)] and rs[-1].end == end[TP("a", p)]
        assert all(x.end == y.start for x, y in zip(rs, rs[1:]))


def test_offset_range_split():
    assert OffsetRange("t", 0, 0, 3).split(10) == [OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2),
                                                   OffsetRange("t", 0, 2, 3)]
    assert OffsetRange("t", 0, 4, 4).split(3) == []
