"""A start that fails (a port in use, a bad setting) leaves the data directories as they were (issue 27):
an absent directory stays absent, an empty one empty, a formatted one untouched; the lock is released and
no task is left running, so the next start, with the port free, works."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.broker import components
from odradek.broker.server import Broker

from ..brokerproc import BrokerProcess

pytestmark = pytest.mark.timeout(120)


def _taken_port() -> socket.socket:
    """A listening socket on 127.0.0.1 that the test holds: its port is in use."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _start(data_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "odradek", "broker", "start", "--override", f"log.dirs={data_dir}",
            "--override", "node.id=1"]
    for o in overrides:
        args += ["--override", o]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def _tree(path: Path) -> dict[str, bytes] | None:
    """Every file under `path` with its bytes (None when `path` is absent): "exactly as before"."""
    if not path.exists():
        return None
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("kind", ["absent", "absent-parent", "empty"])
def test_port_in_use_leaves_a_new_directory_as_it_was_then_a_start_works(tmp_path, kind):
    data = tmp_path / ("a/b/data" if kind == "absent-parent" else "data")
    if kind == "empty":
        data.mkdir()
    before = _tree(tmp_path)
    held = _taken_port()
    port = held.getsockname()[1]
    try:
        failed = _start(data, f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0")
    finally:
        held.close()
    assert failed.returncode != 0
    assert "Address already in use" in failed.stderr and f"127.0.0.1:{port}" in failed.stderr, failed.stderr
    assert "PLAINTEXT" in failed.stderr
    assert _tree(tmp_path) == before
    broker = BrokerProcess(data).start()  # the port free now (another one: the held one may linger)
    try:
        assert (data / "meta.properties").exists()
    finally:
        assert broker.stop() == 0


def test_port_in_use_leaves_a_formatted_directory_untouched(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    assert first.stop() == 0
    before = _tree(data)
    held = _taken_port()
    try:
        failed = _start(data, f"listeners=PLAINTEXT://127.0.0.1:{held.getsockname()[1]},CONTROLLER://127.0.0.1:0")
    finally:
        held.close()
    assert failed.returncode != 0 and "Address already in use" in failed.stderr, failed.stderr
    assert _tree(data) == before
    again = BrokerProcess(data).start()
    assert again.stop() == 0


def test_metrics_port_in_use_is_refused_before_anything_is_written(tmp_path):
    held = _taken_port()
    try:
        failed = _start(tmp_path / "data", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                        f"metrics.port={held.getsockname()[1]}", "metrics.host=127.0.0.1")
    finally:
        held.close()
    assert failed.returncode != 0 and "metrics" in failed.stderr and "Address already in use" in failed.stderr, failed.stderr
    assert not (tmp_path / "data").exists()


def test_bad_setting_exits_naming_it_and_writes_nothing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    failed = _start(data, "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                    "replica.selector.class=nope")
    assert failed.returncode != 0
    assert "replica.selector.class" in failed.stderr, failed.stderr
    assert os.listdir(data) == []


async def test_inprocess_broker_on_a_taken_port_leaves_nothing(tmp_path):
    held = _taken_port()
    data = tmp_path / "data"
    try:
        with pytest.raises(OSError, match="Address already in use"):
            async with Broker(listeners=f"PLAINTEXT://127.0.0.1:{held.getsockname()[1]}", log_dirs=str(data)):
                pass
    finally:
        held.close()
    assert not data.exists()


async def test_a_start_failing_after_the_node_wrote_undoes_it(tmp_path, monkeypatch):
    """A port taken between the check and the bind (a race), or anything failing once the node has written
    its directories: the start stops what it started, releases the lock and removes what it wrote."""
    data = tmp_path / "data"
    data.mkdir()
    held = _taken_port()
    monkeypatch.setattr("odradek.broker.server.check_ports_free", lambda config: None)
    tasks_before = asyncio.all_tasks()
    try:
        with pytest.raises(OSError):
            async with Broker(listeners=f"PLAINTEXT://127.0.0.1:{held.getsockname()[1]}", log_dirs=str(data)):
                pass
    finally:
        held.close()
    assert os.listdir(data) == []
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - tasks_before - {asyncio.current_task()} == set()
    # the lock released and the directory usable: a start now works, in this same process
    async with Broker(listeners="PLAINTEXT://127.0.0.1:0", log_dirs=str(data)) as broker:
        assert broker.bound
    assert (data / "meta.properties").exists()


async def test_a_start_failing_after_the_node_wrote_leaves_a_formatted_directory(tmp_path, monkeypatch):
    data = tmp_path / "data"
    async with Broker(listeners="PLAINTEXT://127.0.0.1:0", log_dirs=str(data)):
        pass
    before = _tree(data)
    held = _taken_port()
    monkeypatch.setattr("odradek.broker.server.check_ports_free", lambda config: None)
    try:
        with pytest.raises(OSError):
            async with Broker(listeners=f"PLAINTEXT://127.0.0.1:{held.getsockname()[1]}", log_dirs=str(data)):
                pass
    finally:
        held.close()
    assert set(_tree(data)) >= set(before)  # nothing removed (the failed start's own appends may stay)
    assert (data / "meta.properties").read_bytes() == before["meta.properties"]


def test_fresh_directories_remembers_only_what_was_absent_or_empty(tmp_path):
    from odradek.broker.config import BrokerConfig

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("x")
    (tmp_path / "empty").mkdir()
    cfg = BrokerConfig.from_properties({
        "log.dirs": f"{tmp_path / 'full'},{tmp_path / 'empty'},{tmp_path / 'new/deep'}", "node.id": "1",
    })
    fresh = components.FreshDirectories(cfg)
    assert fresh.absent == [str(tmp_path / "new")]
    assert fresh.empty == [str(tmp_path / "empty")]
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "empty" / "meta.properties").write_text("x")
    (tmp_path / "full" / "meta.properties").write_text("x")
    fresh.undo()
    assert not (tmp_path / "new").exists()
    assert os.listdir(tmp_path / "empty") == []
    assert sorted(os.listdir(tmp_path / "full")) == ["keep", "meta.properties"]


async def test_undo_spares_a_directory_another_broker_holds(tmp_path):
    """Two starts on one new directory at once: the one that lost the lock must not remove the winner's files."""
    from odradek.broker.config import BrokerConfig

    data = tmp_path / "data"
    fresh = components.FreshDirectories(BrokerConfig.from_properties({"log.dirs": str(data), "node.id": "1"}))
    assert fresh.absent == [str(data)]
    async with Broker(listeners="PLAINTEXT://127.0.0.1:0", log_dirs=str(data)):
        fresh.undo()  # as the loser's failed start would
        assert (data / "meta.properties").exists()
