"""Medians, spreads and the machine-wide CPU counter used to flag background load."""

from __future__ import annotations

import os
import statistics

CLK_TCK = os.sysconf("SC_CLK_TCK")


def spread(values: list[float]) -> dict | None:
    """median, min and max of the values that are not None (None when there are none)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def machine_busy_s() -> float:
    """CPU seconds spent busy by the whole machine, all cores (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b
