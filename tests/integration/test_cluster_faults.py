"""Faults under load on a cluster of real processes whose links pass through a proxy (tests/netproxy.py).

Three combined nodes (broker + controller) on loopback; every node advertises, and lists as voters, proxy
ports instead of its own, so that the test can cut any link between two nodes, or between clients and a
node, one way or both. Real clients (confluent-kafka, idempotent, acks=all) produce through the proxies
while the test

  * cuts a partition's leader off from the other nodes (it cannot shrink its ISR, the controller fences it
    and elects another leader), then heals: the deposed leader truncates and follows;
  * cuts a follower off: it leaves the ISR, and rejoins after the heal;
  * restarts nodes one at a time (SIGTERM: controlled shutdown moves leaderships away first), each back in
    every ISR before the next;
  * adds a fourth (broker-only) node and moves a partition onto it with AlterPartitionReassignments from
    kafka-python's admin client: the new replica catches up and joins the ISR, the removed one leaves.

At the end everything acknowledged is read back from offset 0 and tests/checker.py must find nothing lost,
duplicated, moved or reordered. The default run is one bounded scenario of these; ODRADEK_LONG=1 adds the
full rolling restart and a loop of random faults (also kill -9 and SIGSTOP of leaders, kill -9 of the active
controller) whose seed is printed: ODRADEK_FAULT_SEED=... replays the same sequence of faults and choices,
though which node a choice hits depends on where leaderships are at that moment.
Waits are bounded polls of the cluster's own answers (Metadata, DescribeQuorum), never timed assertions.
"""

from __future__ import annotations

import pytest

from tests.harness.faults import LONG, cuts_restart_and_a_move, random_faults, rolling_restart, running_cluster

pytestmark = pytest.mark.timeout(900 if LONG else 300)


@pytest.fixture
def fault_cluster(tmp_path):
    with running_cluster(tmp_path / "cluster") as cluster:
        yield cluster


# -- the tests (the faults and the scenarios: tests/harness/faults.py)


def test_cuts_restart_and_a_move_under_load(fault_cluster):
    cuts_restart_and_a_move(fault_cluster)


@pytest.mark.skipif(not LONG, reason="long fault loop: ODRADEK_LONG=1")
def test_rolling_restart_under_load(fault_cluster):
    rolling_restart(fault_cluster)


@pytest.mark.skipif(not LONG, reason="long fault loop: ODRADEK_LONG=1")
def test_random_faults_loop(fault_cluster):
    random_faults(fault_cluster)
