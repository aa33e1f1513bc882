"""bench/report.py's replication and partition-curve sections, rendered from canned results (no cluster:
`python -m bench --only replication,partition-curve` starts them), and bench/harness.py's --update merge
of those sections."""

from __future__ import annotations

import json

from bench.harness import WORKLOADS, merge
from bench.report import markdown


def _row(records_s: float, leader: float, followers: list[float]) -> dict:
    return {"records_s": records_s, "records": int(records_s * 3), "leader_core_s_per_M": leader,
            "follower_core_s_per_M": followers, "client_core_s_per_M": 1.0, "records_per_request": 900.0,
            "errors": 0, "idle_cores": {"1": 0.01, "2": 0.01, "3": 0.01}}


def _replication(scale: float = 1.0) -> dict:
    return {
        "client": "librdkafka 2.16.0", "runs": 3, "duration_s": 3.0, "broker_session_timeout_ms": 9000, "cpus": 2,
        "target": "odradek",
        "throughput": {"rf1": [_row(1.5e6 * scale, 0.30, [0.0, 0.0]), _row(1.4e6 * scale, 0.32, [0.0, 0.0]),
                               _row(1.6e6 * scale, 0.28, [0.0, 0.0])],
                       "rf3": [_row(1.0e6 * scale, 0.50, [0.20, 0.25]), _row(1.1e6 * scale, 0.52, [0.21, 0.30]),
                               _row(0.9e6 * scale, 0.48, [0.22, 0.19])]},
        "latency": {"rf1": [{"p50_ms": 0.4, "p99_ms": 1.0}] * 3, "rf3": [{"p50_ms": 1.2, "p99_ms": 3.5}] * 3},
        "latency_by_rate": {"5000": {"rf1": [{"p50_ms": 0.3, "p99_ms": 0.9}] * 3,
                                     "rf3": [{"p50_ms": 0.9, "p99_ms": 4.0}] * 3}},
        "failover": {"partition_leader": [{"new_leader_s": 1.25, "client_resumed_s": 1.5}],
                     "active_controller": [{"new_controller_s": 0.75}]},
        "loadavg": [1.0, 1.5, 2.0],
    }


def _curve() -> dict:
    ok = {"partitions": 1000, "create_answered_s": 0.25, "all_in_sync_s": 1.5, "loop_stall_ms": {"1": 55.4, "2": 35.8,
          "3": 42.5}, "rss_kib_per_partition": {"1": 7.0, "2": 7.25, "3": 6.5}, "killed_node_led": 334,
          "election_s": 0.75, "quorum_leader_lost": {"1": 0, "2": 0, "3": 0}, "loadavg": [1.25, 1.0, 1.5]}
    stuck = {"partitions": 10000, "create_answered_s": 1.5, "error": "10000 partitions in sync on node 2: timed out",
             "loop_stall_ms": {"1": 900.0, "2": 1200.0, "3": 800.0}, "quorum_leader_lost": {"1": 1, "2": 2, "3": 0},
             "loadavg": [4.0, 3.0, 2.0]}
    return {"cpus": 2, "broker_session_timeout_ms": 9000, "sizes": [ok, stuck], "peer": "Apache Kafka: not measured"}


def _results(**sections) -> dict:
    # Through JSON, as `--render-only` reads latest.json: the per-node keys become strings.
    return json.loads(json.dumps({"meta": {"started": "now", "runs": 3}, "cells": [], "latency": [], "failures": [],
                                  **sections}))


def test_replication_section_has_rf1_beside_rf3_with_medians_and_the_peer_row():
    text = markdown(_results(replication={"targets": {
        "odradek": _replication(), "kafka": _replication(0.5) | {"target": "kafka"},
        "null": {"na": "one node, no replication"}}}))
    lines = text.splitlines()
    assert "## Replication: RF=1 vs RF=3 on 3 nodes (1 partition, acks=all, idempotent, 100 B records)" in lines
    assert "| Odradek | 1 | 1,500,000 | 0.30 | – | 0.40 / 1.00 | 0.30 / 0.90 |" in lines
    # The follower figure is the busier follower of each run, then the median over runs: 0.25, 0.30, 0.22.
    assert "| Odradek | 3 | 1,000,000 | 0.50 | 0.25 | 1.20 / 3.50 | 0.90 / 4.00 |" in lines
    assert "| Apache Kafka (reference) | 3 | 500,000 | 0.50 | 0.25 | 1.20 / 3.50 | 0.90 / 4.00 |" in lines
    assert "| null sink (ceiling) | one node, no replication | | | | | |" in lines
    assert "- Odradek: RF=3 / RF=1 records/s 0.67" in lines
    assert any(line.startswith("- Odradek failover (kill -9, broker.session.timeout.ms=9000): partition leader -> "
                               "new leader in metadata 1.25 s, producer acknowledged again 1.50 s; active controller "
                               "-> new controller 0.75 s") for line in lines)


def test_partition_curve_section_has_a_row_per_size_and_says_when_a_size_did_not_come_in_sync():
    lines = markdown(_results(partition_curve=_curve())).splitlines()
    assert "## Partition-count curve: one RF=3 topic of N partitions on 3 nodes" in lines
    assert "| 1,000 | 0.25 | 1.50 | 1.50 | 0.75 | 334 | 7.0, 7.2, 6.5 | 55, 36, 42 | 0 | 1.25 / 1.00 / 1.50 |" in lines
    assert ("| 10,000 | 1.50 | not in sync: 10000 partitions in sync on node 2: timed out | | | | | 900, 1,200, 800 | 3 "
            "| 4.00 / 3.00 / 2.00 |") in lines
    assert "- Apache Kafka: not measured" in lines


def test_sections_absent_from_a_run_are_not_rendered_and_update_replaces_only_what_ran():
    assert "Replication" not in markdown(_results()) and "Partition-count" not in markdown(_results())
    assert {"replication", "partition-curve"} <= set(WORKLOADS)
    old = _results(replication={"targets": {"odradek": _replication()}}, partition_curve=_curve())
    old["meta"]["updates"] = []
    new = _results(partition_curve={"cpus": 2, "broker_session_timeout_ms": 9000, "sizes": []})
    merged = merge(old, new, ["partition-curve"])
    assert merged["replication"] == old["replication"] and merged["partition_curve"]["sizes"] == []
    assert merged["meta"]["updates"][-1]["workloads"] == ["partition-curve"]
