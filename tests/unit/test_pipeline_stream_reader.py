"""The streaming reader's offset logic (datasource.StreamReader) on a fake metadata client: initial
offsets, read limits, minOffsetsPerTrigger with maxTriggerDelay, Trigger.AvailableNow, partitions that
appear or disappear. Spark itself is not started."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from odradek.client.cluster import TopicPartition as TP  # noqa: E402
from odradek.pipeline import datasource  # noqa: E402
from odradek.pipeline._kafka import DataLossError  # noqa: E402
from odradek.pipeline.datasource import RangePartition, StreamReader  # noqa: E402
from odradek.pipeline.options import SourceOptions  # noqa: E402


class FakeMetadata:
    def __init__(self, topics: dict[str, list[tuple[int, int]]]):
        self.topics = topics  # topic -> [(log start, log end) per partition]

    def partitions(self, subscription):
        return sorted(TP(t, p) for t, parts in self.topics.items() if subscription.matches(t)
                      for p in range(len(parts)))

    def earliest(self, tps):
        return {tp: self.topics[tp.topic][tp.partition][0] for tp in tps}

    def latest(self, tps):
        return {tp: self.topics[tp.topic][tp.partition][1] for tp in tps}

    def list_offsets(self, wanted):
        out = {}
        for tp, ts in wanted.items():
            out[tp] = self.earliest([tp])[tp] if ts == -2 else self.latest([tp])[tp] if ts == -1 else 0
        return out

    def close(self):
        pass


class Clock:
    now = 1000.0


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch):
    Clock.now = 1000.0
    monkeypatch.setattr(datasource.time, "monotonic", lambda: Clock.now)


def reader(md: FakeMetadata, **options) -> StreamReader:
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", **options}
    if not {"subscribePattern", "assign"} & set(options):
        opts["subscribe"] = "t"
    r = StreamReader(SourceOptions.parse({k.lower(): v for k, v in opts.items()}, streaming=True))
    r._md = md
    return r


def roundtrip(offset: dict) -> dict:
    """What Spark does with an offset: store the JSON text, hand back json.loads of it."""
    return json.loads(json.dumps(offset))


def test_initial_offset_latest_by_default_and_memoised():
    md = FakeMetadata({"t": [(0, 10), (2, 5)]})
    r = reader(md)
    first = r.initialOffset()
    assert first == {"t": {"0": 10, "1": 5}}
    md.topics["t"] = [(0, 99), (0, 99)]
    assert r.initialOffset() == first  # Spark asks twice; the answer must not move
    assert reader(md, startingOffsets="earliest").initialOffset() == {"t": {"0": 0, "1": 0}}


def test_latest_offset_applies_max_rows_and_is_stable_json():
    md = FakeMetadata({"t": [(0, 100), (0, 50), (0, 50)]})
    r = reader(md, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows) and r.getDefaultReadLimit().max_rows == 20
    start = roundtrip(r.initialOffset())
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"t": {"0": 10, "1": 5, "2": 5}}
    assert json.dumps(end) == json.dumps(r.latestOffset(roundtrip(start), ReadMaxRows(20)))
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 50, "2": 50}}
    parts = r.partitions(start, end)
    assert [(p.range.partition, p.range.start, p.range.end) for p in parts] == [(0, 0, 10), (1, 0, 5), (2, 0, 5)]
    assert all(isinstance(p, RangePartition) for p in parts)
    assert r.reportLatestOffset() == {"t": {"0": 100, "1": 50, "2": 50}}


def test_min_offsets_waits_until_enough_or_max_trigger_delay():
    md = FakeMetadata({"t": [(0, 3)]})
    r = reader(md, startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    start = roundtrip(r.initialOffset())
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 3}}  # Trigger.Once takes everything
    assert r.latestOffset(start, ReadMaxRows(100)) == start  # 3 < 10: no batch yet
    Clock.now += 10
    assert r.latestOffset(start, ReadMaxRows(100)) == start
    md.topics["t"] = [(0, 12)]
    assert r.latestOffset(start, ReadMaxRows(100)) == {"t": {"0": 12}}  # enough now
    later = {"t": {"0": 12}}
    md.topics["t"] = [(0, 13)]
    Clock.now += 29
    assert r.latestOffset(later, ReadMaxRows(100)) == later  # 1 record, 29 s since the last batch
    Clock.now += 2
    assert r.latestOffset(later, ReadMaxRows(100)) == {"t": {"0": 13}}  # maxTriggerDelay passed


def test_available_now_stops_at_the_offsets_seen_when_it_started():
    md = FakeMetadata({"t": [(0, 25)]})
    r = reader(md, startingOffsets="earliest", maxOffsetsPerTrigger="10", minOffsetsPerTrigger="5")
    r.prepareForTriggerAvailableNow()
    md.topics["t"] = [(0, 1000)]  # more data arrives during the run
    offset = roundtrip(r.initialOffset())
    seen = []
    while True:
        end = r.latestOffset(offset, r.getDefaultReadLimit())
        if end == offset:
            break
        seen.append(end["t"]["0"])
        offset = roundtrip(end)
    assert seen == [10, 20, 25]  # the last, smaller than minOffsetsPerTrigger, is not held back


def test_new_partitions_enter_at_their_earliest_offset_without_data():
    md = FakeMetadata({"t": [(0, 10)]})
    r = reader(md, subscribePattern="t|u", startingOffsets="earliest")
    start = roundtrip(r.initialOffset())
    md.topics["u"] = [(4, 9)]  # a new topic with a log start of 4
    md.topics["t"].append((0, 6))  # and a new partition of t
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 10, "1": 0}, "u": {"0": 4}}
    assert [(p.range.topic, p.range.partition) for p in r.partitions(start, end)] == [("t", 0)]
    again = r.latestOffset(roundtrip(end), ReadAllAvailable())
    assert again == {"t": {"0": 10, "1": 6}, "u": {"0": 9}}
    ranges = [(p.range.topic, p.range.partition, p.range.start, p.range.end) for p in r.partitions(end, again)]
    assert ranges == [("t", 1, 0, 6), ("u", 0, 4, 9)]


def test_deleted_partitions_and_truncation_are_data_loss():
    md = FakeMetadata({"t": [(0, 10), (0, 10)]})
    r = reader(md, startingOffsets="earliest")
    start = roundtrip(r.initialOffset())
    md.topics["t"] = [(0, 10)]
    with pytest.raises(DataLossError, match="no longer exist"):
        r.latestOffset(start, ReadAllAvailable())
    md.topics["t"] = [(0, 4), (0, 10)]
    with pytest.raises(DataLossError, match="truncated"):
        r.latestOffset({"t": {"0": 8, "1": 0}}, ReadAllAvailable())
    lenient = reader(md, startingOffsets="earliest", failOnDataLoss="false")
    md.topics["t"] = [(0, 10)]
    assert lenient.latestOffset({"t": {"0": 5, "1": 3}}, ReadAllAvailable()) == {"t": {"0": 10}}
