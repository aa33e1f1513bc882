"""bench/metadata_propagation.py's figures from its rows (no cluster: the bench itself starts one)."""

from __future__ import annotations

from bench.metadata_propagation import _percentile, report, summary


def _row(i: int, nodes: dict[int, float], produce_ms: float) -> dict:
    return {"topic": f"t-{i}", "via": 1 + i % 3, "create_ms": 5.0, "node_ms": nodes, "all_ms": max(nodes.values()),
            "metadata_requests": 3, "produce_ms": produce_ms, "produce_errors": 0}


def test_percentiles_are_nearest_rank():
    values = list(range(1, 101))
    assert (_percentile(values, 50), _percentile(values, 99), _percentile(values, 100)) == (50, 99, 100)
    assert _percentile([7.0], 99) == 7.0


def test_the_slowest_node_makes_a_topics_figure_and_the_controller_is_left_out_of_the_per_node_one():
    rows = [_row(i, {1: 1.0, 2: 2.0, 3: 500.0 if i == 0 else 3.0}, 20.0) for i in range(10)]
    results = {"topics": 10, "partitions": 1, "cpus": 2, "controller": 3, "rows": rows}
    s = summary(results)
    assert s["all_nodes_p50_ms"] == 3.0 and s["all_nodes_max_ms"] == 500.0
    assert s["follower_node_p99_ms"] == 2.0  # nodes 1 and 2 only
    text = report(results)
    assert "p50 3.0 ms" in text and "active controller: node 3" in text
