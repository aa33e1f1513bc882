"""Smoke test of the benchmark harness: the null sink takes a tiny produce from the load generator.

No timing is asserted: this only proves that `python -m bench` has working parts (server launch, the
READY/GO/RESULT load generator protocol, /proc accounting, the report).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("confluent_kafka")

from bench import harness, null_sink, report  # noqa: E402
from bench.driver import measured_run  # noqa: E402
from bench.procs import Placement, Server, cpu_seconds, memory_kib  # noqa: E402


def test_count_records_reads_batch_headers_only():
    from odradek.protocol.records import build_batch

    batch = bytes(build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(7)]))
    assert null_sink.count_records(batch + batch) == 14


@pytest.mark.timeout(60)
def test_null_sink_takes_a_tiny_produce(tmp_path):
    placement = Placement.plan()
    server = Server("null", tmp_path, partitions=2, cpus=placement.server).start(timeout_s=20)
    try:
        spec = {"mode": "produce", "bootstrap": server.bootstrap, "topic": "smoke", "partitions": 2, "acks": "1",
                "compression": "lz4", "value_size": 100, "duration_s": 0.2}
        r = measured_run(server, spec, placement.client, timeout_s=30)
        assert r["errors"] == 0 and r["undelivered"] == 0
        assert r["records"] > 0
        assert r["server_cpu_s"] >= 0 and cpu_seconds(server.pid) >= 0
        assert memory_kib(server.pid).get("VmRSS", 0) > 0
    finally:
        server.stop()

    m = harness.throughput_metrics(r)
    cell = {"workload": "produce", "name": "smoke", "spec": spec}
    h = object.__new__(harness.Harness)
    h.targets = ["odradek", "null"]
    result = h.cell_result(cell, {"null": [m]}, {"null": [r]})
    md = report.markdown({"meta": {"runs": 1}, "cells": [result]})
    assert "null sink (ceiling)" in md and "smoke" in md
    json.dumps(result, default=str)
