from __future__ import annotations

import pytest

# The shared helpers' asserts (assert_identical, the fault checker's verify) explain themselves as the tests' do.
pytest.register_assert_rewrite("tests.harness")

from tests.brokerproc import BrokerProcess  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker process per test module, on a random port with its own data directory."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-data")).start()
    yield proc
    proc.stop()


@pytest.fixture
def fresh_broker(tmp_path):
    """A broker for one test, which may stop, kill and restart it."""
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    proc.kill()
