"""Odradek's benchmarks: `python -m bench` (bench/README.md). Results land in bench/results/."""
