"""Filter pushdown of batch reads (datasource.FilteringBatchReader, offsets.Bounds): which of Spark's
filters are taken, and how they cut the planned offset ranges. Spark itself is not started."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.datasource import (  # noqa: E402
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from odradek.client.cluster import TopicPartition as TP  # noqa: E402
from odradek.pipeline.datasource import BatchReader, FilteringBatchReader, OdradekDataSource  # noqa: E402
from odradek.pipeline.offsets import Bounds, plan_ranges  # noqa: E402
from odradek.pipeline.options import SourceOptions  # noqa: E402

OPTIONS = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b"}


def reader() -> FilteringBatchReader:
    return FilteringBatchReader(SourceOptions.parse(OPTIONS, streaming=False))


def test_the_option_chooses_the_reader_that_pushes():
    from pyspark.sql.types import StringType, StructField, StructType

    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    struct = StructType([StructField(n, StringType()) for n in names])  # the reader checks the names only
    assert type(OdradekDataSource(dict(OPTIONS)).reader(struct)) is BatchReader
    assert type(OdradekDataSource({**OPTIONS, "filterpushdown": "true"}).reader(struct)) is FilteringBatchReader


def test_exact_filters_are_taken_the_others_go_back_to_spark():
    r = reader()
    taken = [EqualTo(("topic",), "a"), In(("partition",), (0, 2)), GreaterThanOrEqual(("offset",), 10),
             LessThan(("offset",), 50), GreaterThan(("offset",), 11), LessThanOrEqual(("offset",), 48)]
    left = [EqualTo(("value",), b"x"), GreaterThan(("timestamp",), 5), Not(EqualTo(("partition",), 1)),
            In(("offset",), (1, 2)), IsNotNull(("key",)), EqualTo(("topic",), 3)]
    returned = list(r.pushFilters(taken + left))
    assert returned == left and all(a is b for a, b in zip(returned, left))
    assert r.bounds == Bounds(frozenset({"a"}), frozenset({0, 2}), 12, 49)


def test_bounds_cut_the_ranges_exactly():
    start = {TP("a", 0): 0, TP("a", 1): 0, TP("a", 2): 40, TP("b", 0): 0}
    end = {TP("a", 0): 100, TP("a", 1): 100, TP("a", 2): 45, TP("b", 0): 100}
    b = Bounds().with_values("topic", ["a"]).with_values("partition", [0, 2]).with_offsets(10, 50)
    s, e = b.narrow(start, end)
    assert [(r.topic, r.partition, r.start, r.end) for r in plan_ranges(s, e)] == [("a", 0, 10, 50), ("a", 2, 40, 45)]
    # ANDed filters that cannot both hold select nothing; an offset equal to one value reads one record
    s, e = Bounds().with_values("partition", [0]).with_values("partition", [1]).narrow(start, end)
    assert plan_ranges(s, e) == []
    s, e = Bounds().with_offsets(200).narrow(start, end)
    assert plan_ranges(s, e) == []
    s, e = Bounds().with_offsets(7, 8).narrow({TP("a", 0): 0}, {TP("a", 0): 100})
    assert [(r.start, r.end) for r in plan_ranges(s, e)] == [(7, 8)]


def test_an_unfiltered_reader_does_not_implement_push_filters():
    """Spark refuses a reader that overrides pushFilters while spark.sql.python.filterPushdown.enabled is
    off (its default): the default reader must not, so that reads work in any session."""
    from pyspark.sql.datasource import DataSourceReader

    assert BatchReader.pushFilters is DataSourceReader.pushFilters
    assert FilteringBatchReader.pushFilters is not DataSourceReader.pushFilters


def test_timestamp_lower_bounds_start_each_range_at_list_offsets_and_go_back_to_spark():
    from datetime import datetime, timedelta, timezone

    t = datetime(2023, 11, 14, 22, 13, 20, 500, tzinfo=timezone.utc)  # 1_700_000_000_000 ms + 500 us
    r = reader()
    at_least, after = GreaterThanOrEqual(("timestamp",), t), GreaterThan(("timestamp",), t - timedelta(seconds=1))
    naive = GreaterThanOrEqual(("timestamp",), datetime(2023, 1, 1))
    assert list(r.pushFilters([at_least, after, naive, LessThan(("timestamp",), t)]))[:3] == [at_least, after, naive]
    assert r.since_ms == 1_700_000_000_001  # ceil of t in ms, the larger of the two bounds

    class FakeMetadata:
        asked: dict = {}

        def list_offsets(self, timestamps):
            FakeMetadata.asked = dict(timestamps)
            return {tp: {0: 40, 1: -1}[tp.partition] for tp in timestamps}

    start = {TP("a", 0): 10, TP("a", 1): 0, TP("a", 2): 5}
    end = {TP("a", 0): 100, TP("a", 1): 100, TP("a", 2): 5}
    s, e = r._narrow(start, end, FakeMetadata())
    assert FakeMetadata.asked == {TP("a", 0): 1_700_000_000_001, TP("a", 1): 1_700_000_000_001}  # not the empty one
    assert [(x.partition, x.start, x.end) for x in plan_ranges(s, e)] == [(0, 40, 100)]  # -1: nothing that recent
