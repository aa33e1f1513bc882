"""The reference pipeline (pipeline/jobs.py) end to end with real Spark and a real broker process, on a
few thousand events: generate -> transform (+ hourly aggregates) and archive -> replay with corrected
logic; then more events, and the streaming jobs resume from their checkpoints.

Checks: raw events are kept byte for byte; every valid event is transformed exactly once; the aggregates
topic holds what a plain-Python computation expects; the archive holds every raw record once,
partitioned by date; the replay recovers the amounts the first logic lost.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17+ (no java on PATH, no JAVA_HOME)", allow_module_level=True)

from odradek.client.blocking import BlockingAdmin, BlockingConsumer  # noqa: E402
from odradek.pipeline import _kafka, jobs  # noqa: E402
from odradek.pipeline.__main__ import main as cli  # noqa: E402
from odradek.pipeline.events import GeneratedEvent, expected_aggregates, parse_amount, parse_event  # noqa: E402

pytestmark = pytest.mark.timeout(300)

DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = jobs.spark_session("odradek-pipeline-tests", "local[2]", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    _kafka.close_all()


def read_topic(bootstrap: str, topic: str) -> list:
    admin = BlockingAdmin(bootstrap_servers=bootstrap)
    consumer = BlockingConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=5000,
                                isolation_level="read_committed")  # the sink's output is transactional
    try:
        tps = admin.topic_partitions(topic)
        ends = admin.end_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        out = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading back timed out"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        return out
    finally:
        consumer.close()
        admin.close()


def check_aggregates(bootstrap: str, cfg: jobs.PipelineConfig, events: list[GeneratedEvent]) -> None:
    latest = {}
    for r in read_topic(bootstrap, cfg.aggregates_topic):  # an upsert log: the last value per key wins
        latest[r.key.decode()] = json.loads(r.value)
    expected = expected_aggregates(events, logic_version=1)
    got = {(v["window_start_ms"], v["type"]): (v["events"], v["amount"]) for v in latest.values()}
    assert set(got) == set(expected)
    for key, (count, amount) in expected.items():
        assert got[key][0] == count, key
        assert abs(got[key][1] - amount) < 0.015, (key, got[key], amount)


def test_reference_pipeline_end_to_end(spark, broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg = jobs.PipelineConfig(
        bootstrap=broker.bootstrap, workdir=tmp_path / "work", raw_topic=f"raw-events-{tag}",
        transformed_topic=f"transformed-events-{tag}", aggregates_topic=f"event-aggregates-{tag}",
        replay_topic=f"transformed-events-v2-{tag}", max_offsets_per_trigger=1000,
    )
    now = int(time.time() * 1000)

    # Round 1: the whole pipeline, with events over two days ending a day ago.
    summary = jobs.run_all(spark, cfg, count=2500, seed=1, days=2, end_ms=now - DAY_MS)
    assert summary["generated"] == 2500

    # Round 2: more (and later) events from the command line; the streaming jobs resume.
    assert cli(["run", "generate", "--bootstrap", broker.bootstrap, "--raw-topic", cfg.raw_topic,
                "--count", "1000", "--seed", "2", "--days", "0.5"]) == 0
    jobs.wait(jobs.start_transform(spark, cfg, available_now=True))
    jobs.wait([jobs.start_archive(spark, cfg, available_now=True)])

    raw = read_topic(broker.bootstrap, cfg.raw_topic)
    assert len(raw) == 3500
    events = sorted((GeneratedEvent(r.key, r.value, r.timestamp) for r in raw), key=lambda e: e.timestamp_ms)
    valid = {e["event_id"]: e for e in (parse_event(x.value) for x in events) if e is not None}
    assert 3300 < len(valid) < 3500  # the generator's broken events are kept raw, dropped downstream

    # transformed-events: every valid event exactly once, with the (flawed) version-1 amounts
    transformed = [json.loads(r.value) for r in read_topic(broker.bootstrap, cfg.transformed_topic)]
    ids = Counter(t["event_id"] for t in transformed)
    assert set(ids) == set(valid) and max(ids.values()) == 1
    for t in transformed:
        source = valid[t["event_id"]]
        assert t["logic_version"] == 1 and t["user"] == source["user"]
        assert t.get("amount") == parse_amount(source.get("amount"), 1)
        assert t["event_date"] == time.strftime("%Y-%m-%d", time.gmtime(source["ts"] / 1000))
    check_aggregates(broker.bootstrap, cfg, events)

    # the archive: every raw record once, byte for byte, partitioned by the record's UTC date
    archive = spark.read.parquet(cfg.archive_path)
    rows = archive.select("partition", "offset", "value", "date").collect()
    assert len(rows) == 3500 and len({(r.partition, r.offset) for r in rows}) == 3500
    assert Counter(r.value for r in rows) == Counter(r.value for r in raw)
    dates = {time.strftime("%Y-%m-%d", time.gmtime(r.timestamp / 1000)) for r in raw}
    assert {str(r.date) for r in rows} == dates and len(dates) >= 3
    assert sorted(p.name for p in (tmp_path / "work" / "archive" / cfg.raw_topic).glob("date=*")) == sorted(
        f"date={d}" for d in dates)

    # replay with corrected logic from archive + topic (overlapping: deduplicated) into a fresh topic
    target = f"transformed-events-v2b-{tag}"
    assert jobs.replay(spark, cfg, source="both", logic_version=2, target_topic=target) == len(valid)
    replayed = {t["event_id"]: t for t in (json.loads(r.value) for r in read_topic(broker.bootstrap, target))}
    assert set(replayed) == set(valid)
    fixed = [i for i, e in valid.items() if isinstance(e.get("amount"), str)]
    assert fixed and all(replayed[i]["amount"] == parse_amount(valid[i]["amount"], 2) for i in fixed)
    assert all(replayed[i]["logic_version"] == 2 for i in fixed)
    # round 1's replay (inside run_all) saw the first 2500 events' valid ones
    assert summary["replayed"] == len(read_topic(broker.bootstrap, cfg.replay_topic)) < len(valid)

    # the archive alone, limited to the last day, replays only that day's events
    last = max(dates)
    count = jobs.replay(spark, cfg, source="archive", since_date=last, target_topic=f"last-day-{tag}")
    assert count == sum(1 for e in valid.values() if time.strftime("%Y-%m-%d", time.gmtime(e["ts"] / 1000)) == last)


def test_transform_resumes_exactly_once_after_kill_9(spark, broker, tmp_path):
    """A continuous transform driver (its own process, JVM and Python workers) is killed with SIGKILL
    in the middle of its micro-batches; the same job started again from the checkpoint leaves every
    valid event in transformed-events exactly once."""
    tag = uuid.uuid4().hex[:6]
    cfg = jobs.PipelineConfig(
        bootstrap=broker.bootstrap, workdir=tmp_path / "work", raw_topic=f"raw-kill-{tag}",
        transformed_topic=f"transformed-kill-{tag}", aggregates_topic=f"aggregates-kill-{tag}",
    )
    events = jobs.generate(cfg, 3000, seed=5, days=1, end_ms=int(time.time() * 1000))
    commits = tmp_path / "work" / "checkpoints" / "transform" / "commits"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    driver = subprocess.Popen(
        [sys.executable, "-m", "odradek.pipeline", "run", "transform", "--bootstrap", broker.bootstrap,
         "--workdir", cfg.workdir, "--raw-topic", cfg.raw_topic, "--transformed-topic", cfg.transformed_topic,
         "--aggregates-topic", cfg.aggregates_topic, "--master", "local[2]", "--trigger-interval", "1 second",
         "--max-offsets-per-trigger", "300", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while not (commits.exists() and len(list(commits.iterdir())) >= 3):  # waits for the driver's progress
            assert driver.poll() is None, driver.stderr.read().decode(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the transform driver made no progress"
            time.sleep(0.2)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        driver.wait()
        driver.stderr.close()
    done_before = len(list(commits.iterdir()))
    assert done_before < 10, "the whole input was processed before the kill"

    jobs.wait(jobs.start_transform(spark, cfg, available_now=True))
    valid = {e["event_id"] for e in (parse_event(x.value) for x in events) if e is not None}
    ids = Counter(json.loads(r.value)["event_id"] for r in read_topic(broker.bootstrap, cfg.transformed_topic))
    assert set(ids) == valid and max(ids.values()) == 1
    check_aggregates(broker.bootstrap, cfg, events)
