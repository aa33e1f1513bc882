"""configs/grafana/odradek-dashboard.json is a dashboard Grafana imports: valid JSON with the fields Grafana
requires, a Prometheus datasource variable every query uses, panels laid out on the 24-column grid, and
PromQL that names only odradek metrics (which metrics a real broker serves is checked against one in
tests/integration/test_health_metrics.py)."""

from __future__ import annotations

from tests.harness.grafana import load_dashboard, metric_names, panels, queries


def test_the_dashboard_has_grafanas_required_fields():
    d = load_dashboard()
    assert isinstance(d["title"], str) and d["title"]
    assert isinstance(d["uid"], str) and 0 < len(d["uid"]) <= 40
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36  # Grafana 9+; 39 is 10.4 / 11.0
    assert d["id"] is None  # an import assigns it
    assert isinstance(d["panels"], list) and d["panels"]
    (variable,) = [v for v in d["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"


def test_every_panel_is_placed_and_queries_the_datasource_variable():
    d = load_dashboard()
    ids = set()
    for panel in panels(d):
        assert panel["type"] and panel["title"]
        assert panel["id"] not in ids
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["expr"].strip()


def test_the_queries_cover_cluster_health():
    wanted = {
        "odradek_active_controller_count", "odradek_raft_current_leader", "odradek_raft_current_epoch",
        "odradek_raft_voter_lag_records", "odradek_brokers_fenced", "odradek_partitions_offline",
        "odradek_partitions_under_replicated", "odradek_partitions_under_min_isr", "odradek_log_dir_online",
        "odradek_log_dir_size_bytes", "odradek_consumer_group_lag", "odradek_transactions_ongoing",
        "odradek_transactions_completed_total", "odradek_transactions_timed_out_total",
        "odradek_request_latency_seconds_bucket", "odradek_request_errors_total",
    }
    used = set().union(*map(metric_names, queries(load_dashboard())))
    assert wanted <= used, wanted - used


def test_every_query_balances_its_brackets():
    # (No PromQL parser is a dependency; an unbalanced bracket is the typo a hand edit makes.)
    pairs = {")": "(", "]": "[", "}": "{"}
    for expr in queries(load_dashboard()):
        stack: list[str] = []
        quoted = False
        for ch in expr:
            if ch == '"':
                quoted = not quoted
            elif quoted:
                continue
            elif ch in "([{":
                stack.append(ch)
            elif ch in pairs:
                assert stack and stack.pop() == pairs[ch], expr
        assert not stack and not quoted, expr
