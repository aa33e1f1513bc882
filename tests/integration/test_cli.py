"""The `odradek` command as a user runs it: a subprocess against a real broker, exit codes and output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest


def run(*args: str, bootstrap: str | None = None, stdin: str | None = None, timeout: float = 60,
        env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONUNBUFFERED="1")
    full_env.pop("ODRADEK_BOOTSTRAP_SERVERS", None)
    if bootstrap:
        full_env["ODRADEK_BOOTSTRAP_SERVERS"] = bootstrap
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "odradek", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def one_line_error(result: subprocess.CompletedProcess, code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("odradek: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.fixture(scope="module")
def bs(broker):
    return broker.bootstrap


def _name(prefix: str = "cli") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_topic_commands(bs):
    topic = _name()
    assert "created topic" in ok(run("topic", "create", topic, "--partitions", "3", "-c", "retention.ms=3600000",
                                     bootstrap=bs))
    error = one_line_error(run("topic", "create", topic, bootstrap=bs), 1)
    assert "TOPIC_ALREADY_EXISTS" in error
    ok(run("topic", "create", topic, "--if-not-exists", bootstrap=bs))
    listing = ok(run("topic", "list", bootstrap=bs))
    header, *rows = listing.splitlines()
    assert header.split() == ["TOPIC", "PARTITIONS", "REPLICATION"]
    assert [topic, "3", "1"] in [r.split() for r in rows]
    described = json.loads(ok(run("--output", "json", "topic", "describe", topic, bootstrap=bs)))
    assert described[0]["topic"] == topic and len(described[0]["partitions"]) == 3
    assert described[0]["configs"] == {"retention.ms": "3600000"}
    ok(run("topic", "alter", topic, "--partitions", "4", "-c", "cleanup.policy=compact", bootstrap=bs))
    text = ok(run("topic", "describe", topic, bootstrap=bs))
    assert "partitions 4" in text and "cleanup.policy=compact" in text
    assert text.splitlines()[1].split() == ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "START", "END"]
    assert "deleted topic" in ok(run("topic", "delete", topic, bootstrap=bs))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_line_error(run("topic", "delete", topic, bootstrap=bs), 1)
    ok(run("topic", "delete", topic, "--if-exists", bootstrap=bs))
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_line_error(run("topic", "describe", topic, bootstrap=bs), 1)


def test_produce_and_consume(bs, tmp_path):
    topic = _name()
    ok(run("topic", "create", topic, "-p", "2", bootstrap=bs))
    lines = "".join(f"user-{i}:event {i}\n" for i in range(10))
    result = run("--output", "json", "produce", topic, "-K", ":", "-H", "source=cli", "-H", "v=1", stdin=lines,
                 bootstrap=bs)
    summary = json.loads(ok(result))
    assert summary["records"] == 10 and sum(summary["partitions"].values()) == 10
    path = tmp_path / "more.txt"
    path.write_text("extra-1\nextra-2\n")
    ok(run("produce", topic, "--file", str(path), "--partition", "1", "--compression", "zstd", bootstrap=bs))

    out = ok(run("consume", topic, "--from-beginning", "-n", "12", "-F", "{key}|{value}|{headers}", bootstrap=bs))
    got = sorted(out.splitlines())
    assert got == sorted([f"user-{i}|event {i}|source=cli,v=1" for i in range(10)] + ["null|extra-1|", "null|extra-2|"])
    records = [json.loads(line) for line in ok(run("-o", "json", "consume", topic, "--partition", "1", "--offset", "0",
                                                   "--idle-timeout", "1", bootstrap=bs)).splitlines()]
    assert records[-2:] == [
        {**records[-2], "value": "extra-1", "key": None}, {**records[-1], "value": "extra-2", "key": None}]
    assert {r["partition"] for r in records} == {1}
    assert [r["offset"] for r in records] == list(range(len(records)))
    plain = ok(run("consume", topic, "--partition", "1", "--timestamp", "2000-01-01T00:00:00Z", "-n", "1",
                   "--print-key", bootstrap=bs))
    assert plain.count("\n") == 1 and "\t" in plain
    later = ok(run("consume", topic, "--from-end", "--idle-timeout", "1", bootstrap=bs))
    assert later == ""


def test_groups(bs):
    topic, group = _name(), _name("grp")
    ok(run("topic", "create", topic, "-p", "2", bootstrap=bs))
    ok(run("produce", topic, stdin="".join(f"m{i}\n" for i in range(8)), bootstrap=bs))
    consumed = ok(run("consume", topic, "--group", group, "--from-beginning", "-n", "8", bootstrap=bs))
    assert sorted(consumed.split()) == sorted(f"m{i}" for i in range(8))
    assert group in ok(run("group", "list", bootstrap=bs))
    described = json.loads(ok(run("-o", "json", "group", "describe", group, bootstrap=bs)))
    assert described["total_lag"] == 0 and len(described["offsets"]) == 2
    text = ok(run("group", "describe", group, bootstrap=bs))
    assert "COMMITTED" in text and "LAG" in text
    plan = ok(run("group", "reset-offsets", group, "--topic", topic, "--to-earliest", bootstrap=bs))
    assert "NEW" in plan
    described = json.loads(ok(run("-o", "json", "group", "describe", group, bootstrap=bs)))
    assert described["total_lag"] == 0  # a dry run changes nothing
    ok(run("group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", bootstrap=bs))
    described = json.loads(ok(run("-o", "json", "group", "describe", group, bootstrap=bs)))
    assert {o["committed"] for o in described["offsets"]} == {0}
    assert described["total_lag"] == 8
    ok(run("group", "reset-offsets", group, "--topic", f"{topic}:0,1", "--shift-by", "3", "--execute", bootstrap=bs))
    described = json.loads(ok(run("-o", "json", "group", "describe", group, bootstrap=bs)))
    assert described["total_lag"] == 8 - sum(min(3, o["end_offset"]) for o in described["offsets"])
    assert "deleted group" in ok(run("group", "delete", group, bootstrap=bs))
    assert "GROUP_ID_NOT_FOUND" in one_line_error(run("group", "delete", group, bootstrap=bs), 1)


def test_configs_and_cluster(bs):
    topic = _name()
    ok(run("topic", "create", topic, bootstrap=bs))
    ok(run("config", "set", "topic", topic, "retention.ms=7200000", "max.message.bytes=2000000", bootstrap=bs))
    configs = json.loads(ok(run("-o", "json", "config", "get", "topic", topic, bootstrap=bs)))
    assert configs["retention.ms"]["value"] == "7200000" and configs["max.message.bytes"]["value"] == "2000000"
    ok(run("config", "set", "topic", topic, "--delete", "retention.ms", bootstrap=bs))
    configs = json.loads(ok(run("-o", "json", "config", "get", "topic", topic, bootstrap=bs)))
    assert "retention.ms" not in configs
    assert "INVALID_CONFIG" in one_line_error(run("config", "set", "topic", topic, "cleanup.policy=nope",
                                                  bootstrap=bs), 1)
    cluster = json.loads(ok(run("-o", "json", "cluster", "describe", bootstrap=bs)))
    assert cluster["controller_id"] == 1 and cluster["brokers"][0]["port"] == int(bs.rsplit(":", 1)[1])
    assert topic in ok(run("cluster", "log-dirs", bootstrap=bs))


def test_perf(bs, tmp_path):
    topic = _name("perf")
    stats = json.loads(ok(run("-o", "json", "perf", "produce", topic, "-n", "3000", "-s", "64", bootstrap=bs)))
    assert stats["records"] == 3000 and stats["errors"] == 0
    assert stats["latency_ms"]["p50"] <= stats["latency_ms"]["p99"] <= stats["latency_ms"]["p99.9"]
    text = ok(run("perf", "consume", topic, "-n", "3000", bootstrap=bs))
    assert "consumed: 3000 records" in text and "P99.9" in text
    pytest.importorskip("matplotlib")
    plot = tmp_path / "perf.png"
    ok(run("perf", "produce", topic, "-n", "2000", "--throughput", "4000", "--plot", str(plot), bootstrap=bs))
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_usage_and_unreachable_brokers(bs):
    for args in (["topic", "frobnicate"], ["nonsense"], ["topic", "create", "x", "--partitions", "0"],
                 ["--bootstrap-server", "host:notaport", "topic", "list"], ["consume", "t", "--offset", "-1"],
                 ["consume", "t", "--timestamp", "yesterday-ish"]):
        result = run(*args, bootstrap=bs)
        one_line_error(result, 2)
    one_line_error(run("consume", "t", "--offset", "3", bootstrap=bs), 2)  # --offset needs --partition
    one_line_error(run("topic", "alter", "t", bootstrap=bs), 2)
    one_line_error(run("consume", "t", "-F", "{nope}", bootstrap=bs), 2)
    result = run("--timeout", "2", "topic", "list", bootstrap="127.0.0.1:1")
    error = one_line_error(result, 3)
    assert "127.0.0.1:1" in error and "Connection refused" in error
    result = run("--timeout", "2", "produce", "t", stdin="x\n", bootstrap="127.0.0.1:1")
    one_line_error(result, 3)
    result = run("--timeout", "2", "-b", bs, "topic", "list", env={"ODRADEK_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    ok(result)
    missing = run("--timeout", "3", "consume", _name("absent"), "-n", "1", bootstrap=bs)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_line_error(missing, 1)
    assert ok(run("--help")).startswith("usage: odradek")
