"""The reference pipeline's pure parts: the event generator, the expected results, the command line, and
that readers and writers pickle without live clients."""

from __future__ import annotations

import pickle

import pytest

from odradek.pipeline.__main__ import build_parser, config_from
from odradek.pipeline.events import expected_aggregates, generate_events, parse_amount, parse_event


def test_generator_is_seeded_ordered_and_imperfect_on_purpose():
    a = list(generate_events(2000, seed=3, start_ms=1_000_000, span_ms=3 * 86_400_000))
    b = list(generate_events(2000, seed=3, start_ms=1_000_000, span_ms=3 * 86_400_000))
    assert a == b
    times = [e.timestamp_ms for e in a]
    assert times == sorted(times) and 1_000_000 <= times[0] and times[-1] < 1_000_000 + 3 * 86_400_000
    parsed = [parse_event(e.value) for e in a]
    bad = sum(p is None for p in parsed)
    assert 0 < bad < 60
    legacy = [p for p in parsed if p and isinstance(p.get("amount"), str)]
    assert legacy and all(p["amount"].endswith(" EUR") for p in legacy)
    assert all(e.key == p["user"].encode() for e, p in zip(a, parsed) if p)


def test_amount_logic_versions():
    assert parse_amount(19.5, 1) == parse_amount(19.5, 2) == 19.5
    assert parse_amount("19.99 EUR", 1) is None
    assert parse_amount("19.99 EUR", 2) == 19.99
    assert parse_amount(None, 2) is None and parse_amount("EUR", 2) is None


def test_expected_aggregates_count_valid_events_per_hour_and_type():
    events = list(generate_events(500, seed=1, start_ms=0, span_ms=5 * 3_600_000))
    v1, v2 = expected_aggregates(events, 1), expected_aggregates(events, 2)
    valid = sum(parse_event(e.value) is not None for e in events)
    assert sum(n for n, _ in v1.values()) == valid
    assert {w for w, _ in v1} <= {h * 3_600_000 for h in range(6)}
    assert sum(a for _, a in v2.values()) > sum(a for _, a in v1.values())  # v2 recovers legacy amounts


def test_command_line():
    args = build_parser().parse_args(["run", "replay", "--bootstrap", "h:1", "--workdir", "w", "--source", "archive",
                                      "-o", "linger.ms=3", "--target-topic", "fixed"])
    cfg = config_from(args)
    assert (cfg.bootstrap, str(cfg.workdir), cfg.replay_topic) == ("h:1", "w", "fixed")
    assert cfg.options(topic="x") == {"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "3", "topic": "x"}
    assert cfg.checkpoint("archive").endswith("checkpoints/archive")
    args = build_parser().parse_args(["run", "all", "--count", "10", "--available-now"])
    assert args.count == 10
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "nope"])


def test_readers_and_writers_pickle_without_clients():
    pytest.importorskip("pyspark")
    from odradek.pipeline import _kafka
    from odradek.pipeline.datasource import BatchReader, RangePartition, ReadSettings, StreamReader, StreamWriter
    from odradek.pipeline.offsets import OffsetRange
    from odradek.pipeline.options import SinkOptions, SourceOptions

    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
    stream = StreamReader(SourceOptions.parse(options, streaming=True))
    stream._md = _kafka.Metadata(stream.options.client)
    stream._md._admin = object()  # stands for a live client: must not be pickled
    copy = pickle.loads(pickle.dumps(stream))
    assert copy._md is None and copy.options == stream.options
    batch = BatchReader(SourceOptions.parse(options, streaming=False))
    assert pickle.loads(pickle.dumps(batch)).options == batch.options
    part = RangePartition(OffsetRange("t", 0, 1, 5), ReadSettings.of(batch.options))
    assert pickle.loads(pickle.dumps(part)).range == OffsetRange("t", 0, 1, 5)
    writer = StreamWriter(SinkOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "o"}, streaming=True))
    assert pickle.loads(pickle.dumps(writer)).options.topic == "o"


def test_workdir_may_be_a_uri():
    from odradek.pipeline.jobs import PipelineConfig

    cfg = PipelineConfig(bootstrap="h:1", workdir="s3a://bucket/pipelines//odradek/")
    assert cfg.archive_path == "s3a://bucket/pipelines//odradek/archive/raw-events"  # not mangled by pathlib
    assert cfg.checkpoint("transform") == "s3a://bucket/pipelines//odradek/checkpoints/transform"
    assert not cfg.is_local and PipelineConfig(bootstrap="h:1", workdir="work").is_local
