"""The metadata log on a full disk, on a real process: the node stops with the cause logged, and starts
cleanly once space is back, with every committed metadata record kept.

A lone node (a quorum of one, so every metadata change is a Raft append and flush on this node) with
metadata.log.dir on a small tmpfs the test mounts (root) and its data elsewhere. Topics are created, then
the tmpfs is filled to the last block and more topics are asked for, one at a time, until a Raft append
needs a block (the log's last page takes a few first): it meets ENOSPC.
Kafka treats a failed metadata log directory as fatal (the process exits): so does Odradek, with the cause
logged once (`the metadata log cannot be written ...`, errno 28) and exit status 1, never a process that
carries on with a broken log or dies without saying why. Restarted with the disk still full it refuses
to start with the cause; with space back it starts, the topics created before are there with their ids,
every creation that was acknowledged, and metadata changes work again. Waits are bounded polls, never timed assertions.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.brokerproc import BrokerProcess

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)"),
]


@pytest.fixture
def small_meta(tmp_path):
    meta = tmp_path / "meta"
    meta.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(meta)], check=True)
    try:
        yield meta
    finally:
        subprocess.run(["umount", "-l", str(meta)], check=False)


def fill(directory: Path) -> Path:
    """Fill the filesystem of `directory` to its last block."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * 4096
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
    return filler


def topic_ids(bootstrap: str) -> dict[str, str]:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [n for n in admin.list_topics(timeout=30).topics if not n.startswith("__")]
    if not names:
        return {}
    described = admin.describe_topics(TopicCollection(names), request_timeout=30)
    return {name: str(future.result(timeout=40).topic_id) for name, future in described.items()}


def create(bootstrap: str, *names: str, timeout_s: float = 30) -> dict[str, Exception | None]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    out: dict[str, Exception | None] = {}
    for name, future in admin.create_topics([NewTopic(n, 1, 1) for n in names], request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s + 10)
            out[name] = None
        except Exception as e:  # noqa: BLE001 - whatever the client reports, the test looks at the node
            out[name] = e
    return out


def wait_exit(broker: BrokerProcess, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while broker.proc.poll() is None:
        assert time.monotonic() < deadline, "the node did not stop after its metadata log failed:\n" + broker.log_text()
        time.sleep(0.2)  # a poll interval
    return broker.proc.returncode


def test_a_full_metadata_log_directory_stops_the_node_and_it_restarts_cleanly_with_space_back(tmp_path, small_meta):
    broker = BrokerProcess(tmp_path / "data", f"metadata.log.dir={small_meta}").start()
    try:
        assert create(broker.bootstrap, "before-1", "before-2") == {"before-1": None, "before-2": None}
        before = topic_ids(broker.bootstrap)
        assert set(before) == {"before-1", "before-2"}

        # Filled to the last block, the log still takes what fits in its last page; topics are created one
        # at a time until an append needs a new block. Each acknowledged creation must survive.
        filler = fill(small_meta)
        acknowledged = []
        for i in range(200):
            if broker.proc.poll() is not None:
                break
            name = f"while-full-{i}"
            if create(broker.bootstrap, name, timeout_s=5)[name] is None:
                acknowledged.append(name)
        code = wait_exit(broker)
        text = broker.log_text()
        assert code == 1, text[-3000:]
        assert "the metadata log cannot be written" in text and "No space left on device" in text, text[-3000:]
        assert text.count("the metadata log cannot be written") == 1, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        broker.proc = None

        # Still full: the node refuses to start, and says why.
        with pytest.raises(RuntimeError, match="cannot start: the metadata log directory .* No space left on device"):
            broker.start(timeout_s=60)

        # Space back: it starts, nothing committed is lost, every creation that was acknowledged, and metadata changes work again.
        filler.unlink()
        broker.start(timeout_s=60)
        after = topic_ids(broker.bootstrap)
        assert {k: after[k] for k in before} == before, after
        assert set(acknowledged) <= set(after), (acknowledged, after)
        assert create(broker.bootstrap, "after") == {"after": None}
        assert "after" in topic_ids(broker.bootstrap)
    finally:
        if broker.proc is not None:
            broker.stop()
