"""The broker's Prometheus endpoint reports requests, connections and partitions of a live broker."""

from __future__ import annotations

import socket
import urllib.request

from confluent_kafka import Producer

from tests.brokerproc import BrokerProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_endpoint_reports_live_broker(tmp_path):
    port = _free_port()
    proc = BrokerProcess(tmp_path / "data", f"metrics.port={port}", "metrics.host=127.0.0.1").start()
    try:
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        producer.produce("metered", b"x" * 100)
        assert producer.flush(15) == 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        proc.stop()
    assert 'odradek_requests_total{api="Produce"' in text
    assert 'odradek_requests_total{api="ApiVersions"' in text
    assert "odradek_connections_active" in text
    assert "odradek_partitions" in text
    assert 'odradek_log_size_bytes{partition="0",topic="metered"}' in text
