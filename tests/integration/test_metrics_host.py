"""/metrics binds no wider than the broker's listeners unless `metrics.host` says otherwise: a broker on
127.0.0.1 serves its metrics on 127.0.0.1 only (another loopback address, 127.0.0.2, is refused, which a
0.0.0.0 bind would accept)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from tests.brokerproc import BrokerProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serves(host: str, port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
        return True
    except (urllib.error.URLError, ConnectionError):
        return False


def test_metrics_bind_the_first_listeners_host_by_default(tmp_path):
    with socket.socket() as probe:  # 127.0.0.2 is loopback on Linux; skip where it is not
        try:
            probe.bind(("127.0.0.2", 0))
        except OSError:
            pytest.skip("127.0.0.2 is not a local address here")
    port = _free_port()
    proc = BrokerProcess(tmp_path / "data", f"metrics.port={port}").start()  # listeners on 127.0.0.1
    try:
        assert _serves("127.0.0.1", port)
        assert not _serves("127.0.0.2", port)
    finally:
        proc.stop()
    # metrics.host set: that address, whatever the listeners (the suite binds nothing beyond loopback).
    port = _free_port()
    proc = BrokerProcess(tmp_path / "data", f"metrics.port={port}", "metrics.host=127.0.0.2").start()
    try:
        assert _serves("127.0.0.2", port)
        assert not _serves("127.0.0.1", port)
    finally:
        proc.stop()
