"""What replication costs each node, per record and per produce request: one RF=3 cell, counted from /proc.

    python -m bench.replication_cost [--duration 6] [--topic rf3]

The cluster and the load are bench.replication_bench's (three combined nodes, `rf3` led by node 1, the
loadgen's acks=all idempotent producer of 100 B records in ~1 MiB batches), after a 3 s warm-up cell. Per
node it prints CPU core-s per million records (utime + stime, idle not subtracted) and minor page faults
per produce request (field 10 of /proc/<pid>/stat). Page faults are counts, not times: unlike records/s
they hardly move with other work on the machine, so an A/B of a change to how a node gets its memory
(a follower's response buffers, for one) reads them rather than throughput. For where the time goes,
run `perf record -g -p PID` or `py-spy record --nonblocking --gil -p PID` on a node during the cell
(bench/PROFILE.md: on a loaded machine py-spy's samples of a process waiting for a core count as held
GIL time, so shares of syscalls come out inflated; perf samples CPU time only).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from .driver import Loadgen
from .procs import cpu_seconds, page_faults
from .replication_bench import NODES, Cluster, _create_topics, _measure


def run(duration_s: float = 6.0, topic: str = "rf3") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp) / "cluster")
        try:
            cluster.up()
            _create_topics(cluster)
            spec = {"mode": "produce", "bootstrap": cluster.bootstrap(), "topic": topic, "partitions": 1,
                    "acks": "all", "idempotence": True, "duration_s": 3.0, "linger_ms": 5}
            _measure(cluster, spec, 120)  # warm-up: first segment pages, first buffers, the JIT-less interpreter's caches
            gen = Loadgen({**spec, "duration_s": duration_s}, None)
            try:
                gen.wait_ready(60)
                cpu0 = {n: cpu_seconds(cluster.pid(n)) for n in NODES}
                faults0 = {n: page_faults(cluster.pid(n))[0] for n in NODES}
                gen.send("GO")
                result = gen.wait_result(duration_s + 120)
                cpu1 = {n: cpu_seconds(cluster.pid(n)) for n in NODES}
                faults1 = {n: page_faults(cluster.pid(n))[0] for n in NODES}
            finally:
                gen.kill()
        finally:
            cluster.down()
    records, requests = max(1, result["records"]), max(1, result["requests"])
    return {
        "records_s": records / result["elapsed_s"], "records": records, "requests": requests,
        "core_s_per_M": {n: (cpu1[n] - cpu0[n]) / records * 1e6 for n in NODES},
        "minor_faults_per_request": {n: (faults1[n] - faults0[n]) / requests for n in NODES},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Per-node CPU and page faults of one RF=3 produce cell.")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of producing")
    parser.add_argument("--topic", default="rf3", choices=("rf1", "rf3"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    res = run(args.duration, args.topic)
    if args.json:
        print(json.dumps(res))
        return
    print(f"{args.topic}: {res['records_s']:,.0f} records/s, {res['records'] / res['requests']:,.0f} records/request")
    for n in NODES:
        role = "leader" if n == 1 else "follower"
        print(f"  node {n} ({role}): {res['core_s_per_M'][n]:.3f} core-s/M records, "
              f"{res['minor_faults_per_request'][n]:.1f} minor faults/request")


if __name__ == "__main__":
    main()
