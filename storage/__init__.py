"""The segmented partition log: synchronous and deterministic (time is passed in as now_ms)."""
