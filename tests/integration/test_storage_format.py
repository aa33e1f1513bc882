"""`odradek storage random-uuid / format / info`, and a node that refuses a cluster other than its own.

Real commands and real broker processes: a formatted node starts with the formatted cluster id (Metadata
answers it); the same data directory formatted for another cluster, or a metadata log that names another
cluster than meta.properties does, refuses to start with a message that says why.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from odradek.broker.testing import RawClient
from odradek.protocol.messages import MetadataRequest
from odradek.storage.meta_properties import read_meta_properties

from ..brokerproc import BrokerProcess

pytestmark = pytest.mark.timeout(120)


def odradek(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60)


def test_format_then_start_with_that_cluster_id(tmp_path):
    cluster_id = odradek("storage", "random-uuid").stdout.strip()
    assert len(cluster_id) == 22
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\nnode.id=1\n")
    formatted = odradek("storage", "format", "--cluster-id", cluster_id, "-c", str(config))
    assert formatted.returncode == 0, formatted.stderr
    props = read_meta_properties(str(tmp_path / "data"))
    assert (props["cluster.id"], props["node.id"], props["version"]) == (cluster_id, "1", "1") and props["directory.id"]
    again = odradek("storage", "format", "--cluster-id", cluster_id, "-c", str(config))
    assert again.returncode == 1 and "already formatted" in again.stderr
    assert odradek("storage", "format", "--cluster-id", cluster_id, "-c", str(config), "--ignore-formatted").returncode == 0
    assert odradek("storage", "format", "--cluster-id", "not-an-id", "-c", str(config)).returncode == 2
    info = odradek("storage", "info", "-c", str(config))
    assert f"cluster.id={cluster_id}" in info.stdout

    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with RawClient(broker.bootstrap) as client:
            assert client.request(MetadataRequest(topics=[]), 12).cluster_id == cluster_id
    finally:
        assert broker.stop() == 0


def test_a_node_refuses_a_cluster_other_than_its_own(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()  # a lone node formats itself: a new cluster id in its metadata log
    broker.stop()
    # meta.properties now claims another cluster than the metadata log holds.
    meta = data / "meta.properties"
    meta.write_text(meta.read_text() + "cluster.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
    with pytest.raises(RuntimeError, match="(?s)did not start.*AAAAAAAAAAAAAAAAAAAAAQ"):
        BrokerProcess(data).start(timeout_s=20)
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={data}\nnode.id=1\n")
    other = odradek("storage", "format", "--cluster-id", "AAAAAAAAAAAAAAAAAAAAAg", "-c", str(config))
    assert other.returncode == 1 and "another identity" in other.stderr
