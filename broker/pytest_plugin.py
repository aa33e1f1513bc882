"""pytest plugin: `odradek_broker`, a real broker in the test process for the duration of one test.

Installed with the package (entry point `pytest11` = `odradek`), so a project that has odradek installed
needs no conftest:

    def test_roundtrip(odradek_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": odradek_broker.bootstrap})
        ...

    @pytest.mark.odradek_broker(num_partitions=3)        # broker properties for this test
    def test_partitions(odradek_broker): ...

The broker runs on its own event loop in a background thread (odradek.broker.testing.BrokerThread), so
synchronous clients can block on it; it listens on 127.0.0.1 on a free port and keeps its data in a fresh
temporary directory. Disable the plugin with `-p no:odradek`.
"""

from __future__ import annotations

import pytest


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "odradek_broker(**properties): broker properties for the odradek_broker fixture"
    )


@pytest.fixture
def odradek_broker(request, tmp_path_factory):
    """A started broker (`.bootstrap`, `.host`, `.port`, `.broker`), stopped after the test."""
    from .testing import BrokerThread

    marker = request.node.get_closest_marker("odradek_broker")
    overrides = dict(marker.kwargs) if marker is not None else {}
    with BrokerThread(tmp_path_factory.mktemp("odradek"), **overrides) as broker:
        yield broker
