"""The Grafana dashboard shipped in configs/grafana: loading it, the metric names its PromQL reads, and the names
a broker's /metrics exposition serves (histogram and counter suffixes included)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "configs" / "grafana" / "odradek-dashboard.json"

# A metric name in PromQL: an identifier that is not a function, keyword or label (ours all start odradek_).
_METRIC = re.compile(r"\b(odradek_[A-Za-z0-9_:]+)")


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those nested in collapsed rows too."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", []) if "expr" in t]


def metric_names(expr: str) -> set[str]:
    return set(_METRIC.findall(expr))


def served_names(exposition: str) -> set[str]:
    """The series names a scrape can select: each family's samples, and for a family with none yet, the
    names its type gives (counter `_total`, histogram `_bucket`/`_sum`/`_count`, summary `_sum`/`_count`)."""
    from prometheus_client.parser import text_string_to_metric_families

    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        elif family.type == "summary":
            names.update(family.name + suffix for suffix in ("_sum", "_count"))
        elif family.type in ("info",):
            names.add(family.name + "_info")
        else:
            names.add(family.name)
    return names
