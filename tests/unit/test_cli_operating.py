"""Unit checks behind the CLI's operating fixes (issue 27): the GROUP config resource type, global options
before `cluster up|down|status`, node ports read from a node's own config, and the client passing over a
broker it just failed to reach."""

from __future__ import annotations

import time

from odradek.broker.cluster_tool import configured_ports, node_properties, write_properties
from odradek.cli import _local_cluster_command
from odradek.client.admin import Admin
from odradek.client.cluster import UNREACHABLE_BACKOFF_S, BrokerInfo, KafkaClient


def test_group_configs_use_kafkas_group_resource_type():
    assert Admin._resource("group") == 32  # ConfigResource.Type.GROUP; 3 is an ACL resource type
    assert Admin._resource("topic") == 2 and Admin._resource("broker") == 4 and Admin._resource("broker_logger") == 8


def test_global_options_before_a_local_cluster_command():
    assert _local_cluster_command(["cluster", "status"]) == ["status"]
    assert _local_cluster_command(["-b", "h:1", "cluster", "status", "--dir", "d"]) == ["status", "-b", "h:1", "--dir", "d"]
    assert _local_cluster_command(["--bootstrap-server=h:1", "--timeout", "3", "cluster", "up"]) == [
        "up", "--bootstrap-server=h:1", "--timeout", "3"]
    assert _local_cluster_command(["-b", "h:1", "cluster", "describe"]) is None  # the client's own
    assert _local_cluster_command(["-b", "h:1", "topic", "list"]) is None
    assert _local_cluster_command(["--unknown", "cluster", "status"]) is None


def test_configured_ports_come_from_the_nodes_own_properties(tmp_path):
    for node_id in (1, 2):
        (tmp_path / f"node-{node_id}").mkdir()
        write_properties(tmp_path / f"node-{node_id}" / "server.properties",
                         node_properties(node_id, 2, port=20000))
    assert configured_ports(tmp_path, 1) == ("127.0.0.1", 20000, 20001)
    assert configured_ports(tmp_path, 2) == ("127.0.0.1", 20002, 20003)
    assert configured_ports(tmp_path, 3) is None


def test_least_loaded_node_passes_over_a_broker_that_just_failed_to_connect():
    client = KafkaClient(bootstrap_servers="127.0.0.1:1")
    client.cluster.brokers = {n: BrokerInfo(n, "127.0.0.1", 1000 + n, None) for n in (1, 2, 3)}
    now = time.monotonic()
    client._connect_failed_at = {1: now, 3: now}
    assert {client.least_loaded_node() for _ in range(50)} == {2}
    client._connect_failed_at = {n: now for n in (1, 2, 3)}  # all failing: any of them, rather than none
    assert client.least_loaded_node() in (1, 2, 3)
    client._connect_failed_at = {1: now - UNREACHABLE_BACKOFF_S - 1, 2: now, 3: now}
    assert {client.least_loaded_node() for _ in range(50)} == {1}
