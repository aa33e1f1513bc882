"""Seeded deterministic simulations (run as modules, e.g. `python -m tests.sim.raft --seeds 5000`)."""
