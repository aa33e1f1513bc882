"""The seeded simulation of the KRaft quorum (tests/sim/raft.py) over a bounded set of seeds.

More seeds on demand: `python -m tests.sim.raft --seeds 5000` (or RAFT_SIM_SEEDS=2000 for pytest).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.sim.raft import Simulation, SimulationFailure, run_seed

SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "500"))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("block", range(0, SEEDS, 50))
def test_quorum_keeps_its_guarantees_under_faults(block):
    for seed in range(block, min(block + 50, SEEDS)):
        stats = run_seed(seed)
        assert stats.settle_ms <= 30_000


def test_a_seed_replays_exactly():
    first, second = Simulation(11), Simulation(11)
    assert first.run() == second.run()
    assert first.trace == second.trace
    assert first.committed == second.committed


def test_a_seed_does_not_depend_on_hash_randomisation():
    outputs = set()
    for hash_seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-m", "tests.sim.raft", "--seed", "3"], cwd=ROOT, capture_output=True, text=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed}, timeout=120,
        )
        assert result.returncode == 0, result.stderr
        outputs.add("\n".join(result.stdout.splitlines()[1:]))  # all but the line with the CPU time
    assert len(outputs) == 1


def test_a_failure_names_its_seed_and_how_to_replay_it(monkeypatch):
    original = Simulation._check

    def broken(self, node):
        original(self, node)
        if self.now > 5000 and node.raft.high_watermark > 10:
            self.fail("injected")

    monkeypatch.setattr(Simulation, "_check", broken)
    with pytest.raises(SimulationFailure) as failure:
        run_seed(5)
    text = str(failure.value)
    assert "seed 5 failed" in text and "injected" in text
    assert "python -m tests.sim.raft --seed 5" in text


def test_a_quiet_quorum_commits_a_record_everywhere_within_a_few_message_delays():
    """Liveness on the healed quorum: a record appended while every fetch is parked at the leader reaches
    every node's high watermark within the message delays of records out, fetch in, answer out (plus
    slack) and the leader's flush interval, never a fetch max wait (500 ms) later: the fetcher that
    arrives after the high watermark moved says it knows the old one (Fetch v18) and is answered at once."""
    for seed in range(100):
        sim = Simulation(seed)
        sim.run()
        flush_ms = max(n.config.leader_flush_interval_ms for n in sim.nodes.values())
        bound = 4 * sim.params.max_delay_ms + flush_ms + 10
        took = sim.propagation()
        assert max(took) <= bound, (seed, took, bound)
