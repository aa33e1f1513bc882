"""The simulations run thousands of elections: the nodes' INFO and DEBUG logs (raft/core.py) are quieted
while a simulation test runs, as `python -m tests.sim.raft` does, and structlog's configuration is put
back after it."""

from __future__ import annotations

import pytest
import structlog

from .raft import quiet_node_logs


@pytest.fixture(autouse=True)
def _quiet_node_logs():
    saved = structlog.get_config()
    quiet_node_logs()
    yield
    structlog.configure(**saved)
