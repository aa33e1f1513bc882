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


class _Transport:
    def __init__(self):
        self.out = bytearray()
        self.closed = False

    def write(self, data):
        self.out += data

    def writelines(self, chunks):
        for chunk in chunks:
            self.out += chunk

    def close(self):
        self.closed = True


def test_floor_repeats_the_first_produce_answer_with_each_correlation_id():
    from odradek.protocol.connection import ClientConnection
    from odradek.protocol.messages import MetadataRequest, ProduceRequest
    from odradek.protocol.records import build_batch

    sink = null_sink.CannedProtocol(null_sink.SinkState(1, "127.0.0.1"))
    transport = _Transport()
    sink.connection_made(transport)
    client = ClientConnection()
    T = ProduceRequest.TopicProduceData

    def produce(n: int) -> bytes:
        batch = build_batch([(None, b"v", [], 1000 + i) for i in range(n)])
        request = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[T(name="t", partition_data=[T.PartitionProduceData(index=0, records=batch)])])
        return client.send_request(request, 9)[1]

    stream = produce(3)
    stream += client.send_request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 9)[1]
    stream += produce(5) + produce(1)
    for i in range(len(stream)):  # one byte at a time: frames are cut across reads
        sink.data_received(stream[i : i + 1])
    got = client.receive_data(bytes(transport.out))
    assert [r.correlation_id for r in got] == [0, 1, 2, 3]
    assert got[1].response.topics[0].name == "t"
    first, *canned = [r.response.responses[0].partition_responses[0] for r in (got[0], got[2], got[3])]
    assert first.base_offset == 0 and all(p == first for p in canned)  # the first answer, not decoded again
    assert sink.state.records == 3

    sink.data_received(b"\x7f\xff\xff\xff" + b"\0" * 8)  # a size field over the limit closes the connection
    assert transport.closed


def test_storing_sink_appends_each_partitions_records_to_its_file(tmp_path, monkeypatch):
    from odradek.protocol.connection import ClientConnection
    from odradek.protocol.messages import ProduceRequest
    from odradek.protocol.records import build_batch

    monkeypatch.setattr(null_sink, "WINDOW_BYTES", 4096)  # the page-cache release runs too
    sink = null_sink.SinkProtocol(null_sink.SinkState(2, "127.0.0.1", store=str(tmp_path / "store")))
    transport = _Transport()
    sink.connection_made(transport)
    client = ClientConnection()
    T = ProduceRequest.TopicProduceData
    written: dict[int, bytes] = {0: b"", 1: b""}
    for i in range(6):
        batch = bytes(build_batch([(None, b"v" * 2000, [], 1000 + j) for j in range(i + 1)]))
        request = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[T(name="t", partition_data=[T.PartitionProduceData(index=i % 2, records=batch)])])
        sink.data_received(client.send_request(request, 9)[1])
        written[i % 2] += batch
    got = client.receive_data(bytes(transport.out))
    assert [r.response.responses[0].partition_responses[0].error_code for r in got] == [0] * 6
    for index in (0, 1):
        assert (tmp_path / "store" / f"t-{index}.log").read_bytes() == written[index]


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


def test_txn_bench_reports_idempotent_and_transactional_from_one_run(tmp_path):
    """`python -m bench.txn_bench` in small: one broker, both modes in the same run, their ratio."""
    from bench import txn_bench

    results = txn_bench.run(records=300, txn_size=100, workdir=tmp_path)
    idem, txn = results["idempotent"], results["transactional"]
    assert idem["records"] == txn["records"] == 300 and txn["transactions"] == 3
    assert idem["records_per_s"] > 0 and txn["records_per_s"] > 0
    assert results["ratio"] == round(txn["records_per_s"] / idem["records_per_s"], 3)
    assert 0 < txn["commit_ms_median"] <= txn["commit_ms_p99"]


def test_share_fetch_bench_acknowledges_every_record():
    from bench.share_fetch_bench import run

    figures = run(records=2000)
    assert set(figures) == {f"members_{n}_{what}" for n in (1, 4, 16)
                            for what in ("us_per_acked_record", "persister_us_per_record")}
