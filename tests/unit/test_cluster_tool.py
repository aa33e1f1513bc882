"""The local cluster's node settings (broker/cluster_tool.py): valid, servable, and the one source of the
checked-in docker-compose.yml."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import time

import pytest

from odradek.broker import cluster_tool
from odradek.broker.cluster_tool import compose, node_ports, node_properties
from odradek.broker.config import BrokerConfig
from odradek.broker.server import refuse_unserved_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("nodes", [1, 3, 5])
def test_every_nodes_settings_load_and_name_the_same_quorum(nodes):
    voters = set()
    for node_id in range(1, nodes + 1):
        config = BrokerConfig.from_properties(node_properties(node_id, nodes, port=9092))
        refuse_unserved_settings(config)
        assert config.node_id == node_id and "controller" in config.process_roles
        voters.add(config.controller_quorum_voters)
        client, controller = node_ports(node_id, 9092)
        assert [listener.port for listener in config.listener_list()] == [client, controller]
    assert len(voters) == 1


def test_compose_nodes_load_with_their_environment():
    hosts = ["odradek1", "odradek2", "odradek3"]
    for node_id in (1, 2, 3):
        config = BrokerConfig.from_properties(node_properties(node_id, 3, hosts=hosts, bind="0.0.0.0"))
        refuse_unserved_settings(config)
        assert config.voters()[node_id - 1].host == f"odradek{node_id}"


def test_the_checked_in_compose_file_is_the_generated_one():
    assert (ROOT / "docker-compose.yml").read_text() == compose(3), (
        "docker-compose.yml differs from `odradek cluster compose --nodes 3`: regenerate it")


def test_a_killed_node_not_yet_reaped_counts_as_gone(tmp_path):
    """`cluster up` after a kill -9 must restart the node even while the dead process is a zombie (its parent,
    here this test, has not reaped it yet): signal 0 still reaches a zombie."""
    node = tmp_path / "node-1"
    node.mkdir()
    proc = subprocess.Popen(["sleep", "60"])
    try:
        (node / "node.pid").write_text(f"{proc.pid}\n")
        assert cluster_tool._pid(tmp_path, 1) == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        for _ in range(1000):  # a SIGKILLed child turns zombie at once; the bound only guards a stuck kernel
            if pathlib.Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                break
            time.sleep(0.01)
        assert cluster_tool._pid(tmp_path, 1) is None
    finally:
        proc.kill()
        proc.wait()
