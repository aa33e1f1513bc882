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
    # every config not at its default, as kafka-topics lists them: the topic's override and the cluster-wide
    # min.insync.replicas the controller writes with ELR on (DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert described[0]["configs"] == {"retention.ms": "3600000", "min.insync.replicas": "1"}
    ok(run("topic", "alter", topic, "--partitions", "4", "-c", "cleanup.policy=compact", bootstrap=bs))
    text = ok(run("topic", "describe", topic, bootstrap=bs))
    assert "partitions 4" in text and "cleanup.policy=compact" in text
    assert text.splitlines()[1].split() == ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE", "STATE",
                                            "START", "END"]
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


def test_cluster_describe_shows_the_broker_and_a_quorum_of_one(bs):
    port = int(bs.rsplit(":", 1)[1])
    text = ok(run("cluster", "describe", bootstrap=bs))
    lines = text.splitlines()
    assert lines[1].split() == ["BROKER", "ADDRESS", "RACK", "FENCED"]
    assert lines[2].split() == ["1", f"127.0.0.1:{port}", "-", "no"]
    assert any(line.startswith("quorum leader 1  epoch ") for line in lines)
    header = lines.index("NODE  ROLE    LOG END OFFSET  LAG")
    node, role, end, lag = lines[header + 1].split()
    assert (node, role, lag) == ("1", "leader", "0") and int(end) > 0
    described = json.loads(ok(run("-o", "json", "cluster", "describe", bootstrap=bs)))
    assert described["brokers"] == [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": None,
                                     "is_fenced": False}]
    quorum = described["quorum"]
    assert quorum["leader_id"] == 1 and quorum["observers"] == [] and quorum["max_follower_lag"] == 0
    assert [(v["node_id"], v["lag"], v["status"]) for v in quorum["voters"]] == [(1, 0, "Leader")]
    assert quorum["voters"][0]["log_end_offset"] == quorum["high_watermark"]
    assert quorum["nodes"] == [{"node_id": 1, "endpoints": [{"listener": "PLAINTEXT", "host": "127.0.0.1",
                                                             "port": port}]}]


def test_cluster_quorum_as_kafka_metadata_quorum(bs):
    port = int(bs.rsplit(":", 1)[1])
    status = dict(line.split(":", 1) for line in ok(run("cluster", "quorum", bootstrap=bs)).splitlines())
    assert list(status) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                            "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
    assert status["LeaderId"].strip() == "1" and status["MaxFollowerLag"].strip() == "0"
    assert status["CurrentVoters"].strip() == f'[{{"id": 1, "endpoints": ["PLAINTEXT://127.0.0.1:{port}"]}}]'
    assert status["CurrentObservers"].strip() == "[]"
    header, row = ok(run("cluster", "quorum", "--replication", bootstrap=bs)).splitlines()
    assert header.split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                              "LastCaughtUpTimestamp", "Status"]
    assert row.split()[0] == "1" and row.split()[3] == "0" and row.split()[-1] == "Leader"
    assert json.loads(ok(run("-o", "json", "cluster", "quorum", bootstrap=bs)))["leader_id"] == 1
    assert run("cluster", "quorum", "--status", "--replication", bootstrap=bs).returncode == 2


def test_topic_describe_filters(bs):
    topic = _name()
    ok(run("topic", "create", topic, "-p", "2", bootstrap=bs))
    # One broker: every partition is fully replicated and led, so both filters show nothing.
    assert ok(run("topic", "describe", topic, "--under-replicated-partitions", bootstrap=bs)) == ""
    assert ok(run("topic", "describe", "--topic", topic, "--unavailable-partitions", bootstrap=bs)) == ""
    assert json.loads(ok(run("-o", "json", "topic", "describe", topic, "--under-replicated-partitions",
                             bootstrap=bs))) == []
    (described,) = json.loads(ok(run("-o", "json", "topic", "describe", topic, bootstrap=bs)))
    assert [(p["leader"], p["replicas"], p["isr"], p["offline_replicas"], p["under_replicated"], p["unavailable"])
            for p in described["partitions"]] == [(1, [1], [1], [], False, False)] * 2


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


# ---------------------------------------------------------------------------------------------- Kafka's habits

GLOBAL_PLACES = ("before", "after")


def _placed(where: str, global_args: list[str], *command: str) -> list[str]:
    """The same command with the global options before the command word or after everything."""
    return [*global_args, *command] if where == "before" else [*command, *global_args]


@pytest.mark.parametrize("where", GLOBAL_PLACES)
def test_every_command_takes_the_global_options_before_and_after(bs, tmp_path, where):
    """Kafka's tutorials write `kafka-topics.sh --create --topic t --bootstrap-server h:9092`; kcat users
    write `-b` first. Every command accepts -b/--bootstrap-server, --output, --timeout, -X and
    --command-config in both places (no ODRADEK_BOOTSTRAP_SERVERS here: -b must be what reaches the broker)."""
    topic, group = _name(), _name("grp")
    props = tmp_path / "client.properties"
    props.write_text("# Kafka's properties format\nclient.id=habits-cli\nsecurity.protocol=PLAINTEXT\n")
    g = ["--bootstrap-server", bs, "--timeout", "20", "--command-config", str(props), "-X", "retry.backoff.ms=50"]
    j = [*g, "--output", "json"]
    ok(run(*_placed(where, g, "topic", "create", topic, "--partitions", "2")))
    assert topic in [t["topic"] for t in json.loads(ok(run(*_placed(where, j, "topic", "list"))))]
    assert json.loads(ok(run(*_placed(where, j, "topic", "describe", topic))))[0]["topic"] == topic
    ok(run(*_placed(where, g, "topic", "alter", topic, "-c", "retention.ms=3600000")))
    summary = json.loads(ok(run(*_placed(where, j, "produce", topic), stdin="a\nb\nc\n")))
    assert summary["records"] == 3
    records = ok(run(*_placed(where, j, "consume", topic, "--from-beginning", "-n", "3", "--group", group)))
    assert sorted(json.loads(line)["value"] for line in records.splitlines()) == ["a", "b", "c"]
    assert group in [x["group"] for x in json.loads(ok(run(*_placed(where, j, "group", "list"))))]
    assert json.loads(ok(run(*_placed(where, j, "group", "describe", group))))["total_lag"] == 0
    ok(run(*_placed(where, g, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")))
    ok(run(*_placed(where, g, "config", "set", "topic", topic, "segment.ms=600000")))
    configs = json.loads(ok(run(*_placed(where, j, "config", "get", "topic", topic))))
    assert configs["segment.ms"]["value"] == "600000"
    assert json.loads(ok(run(*_placed(where, j, "cluster", "describe"))))["controller_id"] == 1
    assert topic in ok(run(*_placed(where, g, "cluster", "log-dirs")))
    stats = json.loads(ok(run(*_placed(where, j, "perf", "produce", topic, "-n", "200", "--no-progress"))))
    assert stats["records"] == 200
    ok(run(*_placed(where, j, "perf", "consume", topic, "-n", "203", "--no-progress")))
    ok(run(*_placed(where, g, "group", "delete", group)))
    ok(run(*_placed(where, g, "topic", "delete", topic)))


def test_after_the_command_wins_and_x_properties_add_up(bs):
    """A value after the command overrides one before it (argparse's last-wins), -X lists from both places
    add up, and an unreachable -b before the command is replaced by a good one after it."""
    ok(run("-b", "127.0.0.1:1", "--timeout", "2", "topic", "list", "-b", bs))
    ok(run("-X", "client.id=first", "topic", "list", "-X", "retry.backoff.ms=20", "-b", bs))
    assert "nope" in one_line_error(run("-X", "nope=1", "topic", "list", "-X", "client.id=x", "-b", bs), 2)
    ok(run("topic", "list", "-X", "sasl.mechanism=PLAIN", "-b", bs))  # unused on PLAINTEXT, as librdkafka ignores it
    assert "sasl.mechanism" in one_line_error(run("topic", "list", "-X", "security.protocol=SASL_PLAINTEXT", "-X",
                                                  "sasl.mechanism=GSSAPI", "-b", bs), 2)
    assert "SASL_SSL" in one_line_error(run("topic", "list", "-X", "security.protocol=SASL_SSL", "-b", bs), 2)
    assert "retry.backoff.ms" in one_line_error(run("topic", "list", "-X", "retry.backoff.ms=soon", "-b", bs), 2)
    one_line_error(run("topic", "list", "--command-config", "/nonexistent/client.properties", "-b", bs), 2)
    # One properties file for every command: a producer's setting is ignored by the admin commands, with a note.
    listed = run("topic", "list", "-X", "acks=all", "-X", "linger.ms=5", "-b", bs)
    assert ok(listed) and "ignoring client property 'acks'" in listed.stderr


def test_kafka_tool_spellings(bs):
    """The lines of Kafka's quickstart and tool docs, with `odradek` and a command word in front.

    Expected output follows Kafka's DefaultMessageFormatter (tools/.../consumer/DefaultMessageFormatter.java):
    columns CreateTime:TS, Partition:P, Offset:O, headers (k:v joined by ',' or NO_HEADERS), key, value,
    joined by key.separator (tab by default) and ended by line.separator; null as null.literal. The console
    producer's LineMessageReader splits on key.separator when parse.key=true and reads null.marker as null.
    """
    topic, group = _name(), _name("grp")
    ok(run("topic", "create", "--topic", topic, "--partitions", "1", "--replication-factor", "1",
           "--config", "cleanup.policy=delete", "--bootstrap-server", bs))
    assert "TOPIC_ALREADY_EXISTS" in one_line_error(run("topic", "create", "--topic", topic, "-b", bs), 1)
    assert json.loads(ok(run("topic", "describe", "--topic", topic, "-b", bs, "-o", "json")))[0]["topic"] == topic
    ok(run("topic", "alter", "--topic", topic, "--partitions", "2", "--bootstrap-server", bs))
    ok(run("produce", "--topic", topic, "--partition", "0", "--property", "parse.key=true",
           "--property", "key.separator=:", "--property", "null.marker=NULL", "--bootstrap-server", bs,
           stdin="k1:v1\nk2:v2\nNULL:v3\nk4:NULL\n"))
    out = ok(run("consume", "--topic", topic, "--partition", "0", "--offset", "earliest", "--max-messages", "4",
                 "--property", "print.key=true", "--property", "print.offset=true",
                 "--property", "print.partition=true", "--property", "key.separator=|", "--bootstrap-server", bs))
    assert out.splitlines() == ["Partition:0|Offset:0|k1|v1", "Partition:0|Offset:1|k2|v2",
                                "Partition:0|Offset:2|null|v3", "Partition:0|Offset:3|k4|null"]
    stamped = ok(run("consume", "--topic", topic, "--partition", "0", "--offset", "1", "--max-messages", "1",
                     "--property", "print.timestamp=true", "--property", "print.headers=true",
                     "--property", "print.value=false", "--property", "print.key=true", "-b", bs))
    kind, rest = stamped.split(":", 1)
    assert kind == "CreateTime" and rest.split("\t")[1:] == ["NO_HEADERS", "k2\n"]
    assert "print.nonsense" in one_line_error(run("consume", "-t", topic, "--property", "print.nonsense=true",
                                                  "-b", bs), 2)
    # --timeout-ms: the console consumer's idle exit; --offset latest: nothing new arrives, exit 0 with no output
    assert ok(run("consume", "--topic", topic, "--partition", "0", "--offset", "latest", "--timeout-ms", "1000",
                  "-b", bs)) == ""
    # rpk's and kcat's short forms
    ok(run("produce", topic, "-k", "fixed", "-p", "1", "-z", "lz4", "-b", bs, stdin="x\ny\n"))
    assert ok(run("consume", topic, "-p", "1", "--from-beginning", "-c", "2", "--print-key", "-b", bs)).splitlines() \
        == ["fixed\tx", "fixed\ty"]
    ok(run("consume", "--topic", topic, "--group", group, "--from-beginning", "--max-messages", "6", "-b", bs))
    plan = json.loads(ok(run("group", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                             "--dry-run", "--bootstrap-server", bs, "--output", "json")))
    assert plan["executed"] is False and {o["new"] for o in plan["offsets"]} == {0}
    assert json.loads(ok(run("group", "describe", "--group", group, "-b", bs, "-o", "json")))["total_lag"] == 0
    ok(run("config", "set", "topics", topic, "--add-config", "retention.ms=7200000,segment.ms=600000",
           "--bootstrap-server", bs))
    configs = json.loads(ok(run("config", "get", "topics", topic, "-b", bs, "-o", "json")))
    assert configs["retention.ms"]["value"] == "7200000" and configs["segment.ms"]["value"] == "600000"
    ok(run("config", "set", "topic", topic, "--delete-config", "segment.ms", "-b", bs))
    assert "segment.ms" not in json.loads(ok(run("config", "get", "topic", topic, "-b", bs, "-o", "json")))
    ok(run("group", "delete", "--group", group, "-b", bs))
    ok(run("topic", "delete", "--topic", topic, "--bootstrap-server", bs))
    assert "two topics" in one_line_error(run("topic", "create", "a", "--topic", "b", "-b", bs), 2)
    assert "no topic" in one_line_error(run("produce", "-b", bs, stdin="x\n"), 2)


def test_help_lists_every_command_and_o_means_output():
    """`odradek --help` lists the commands odradek/cli.py runs itself (broker) beside the client's; -o is
    --output in every client command, and `broker start` spells Kafka's --override long-only."""
    text = ok(run("--help"))
    for command in ("broker", "topic", "produce", "consume", "group", "config", "cluster", "perf"):
        assert f"    {command} " in text, command
    assert "up|down|status" in text  # odradek/cli.py runs those; the client's `cluster` help names them
    assert "cluster up|down|status" in ok(run("cluster", "--help"))
    assert "--output {text,json}, -o {text,json}" in text
    assert "--override KEY=VALUE" in ok(run("broker", "start", "--help"))
    assert run("broker", "start", "-o", "log.dirs=/nonexistent").returncode == 2  # -o is not --override
    assert "-o {text,json}" in ok(run("consume", "--help"))
    assert "put 'broker' first" in one_line_error(run("-b", "127.0.0.1:1", "broker", "start"), 2)
