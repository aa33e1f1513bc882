"""The share coordinator's metrics, read from it at scrape time (Kafka's share-coordinator-metrics and the
coordinator runtime's partition counts):

  share_coordinator_partitions                  `__share_group_state` partitions loaded here (0 on a broker
                                                that coordinates none, or whose coordinator never started)
  share_coordinator_share_partitions            share-partitions whose state those partitions hold
  share_coordinator_writes_total                WriteShareGroupState operations made durable here
  share_coordinator_records_total{type}         ShareSnapshot / ShareUpdate records written here
  share_coordinator_fenced_total{error}         operations refused FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH
  share_coordinator_pruned_records_total        __share_group_state records deleted below the oldest offset
                                                still needed (cold-snapshot rounds, then DeleteRecords)

Counters are the coordinator's (not a partition's): they only grow while the broker runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from odradek.coordinator.share.coordinator import ShareCoordinator

    from ..metrics import Metrics

__all__ = ["ShareCoordinatorCollector"]


class _Snapshot(NamedTuple):
    partitions: int
    share_partitions: int
    writes: int
    snapshots: int
    updates: int
    fenced: tuple[tuple[str, int], ...]
    pruned: int = 0


class ShareCoordinatorCollector(Collector):
    def __init__(self, coordinator: Callable[[], ShareCoordinator | None], metrics: Metrics) -> None:
        self.coordinator = coordinator  # the share coordinator if it has started
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return self.families(_Snapshot(0, 0, 0, 0, 0, ()))

    def collect(self) -> Iterable[Any]:
        snapshot = self.metrics.read_on_loop(self.snapshot, None)
        return self.families(snapshot) if snapshot is not None else []

    def snapshot(self) -> _Snapshot:
        c = self.coordinator()
        if c is None:
            return _Snapshot(0, 0, 0, 0, 0, ())
        counts = c.counts
        return _Snapshot(len(c.loaded_partitions), c.share_partitions(), counts.writes, counts.snapshots,
                         counts.updates, tuple(sorted(counts.fenced.items())), counts.pruned)

    @staticmethod
    def families(s: _Snapshot) -> list[Any]:
        partitions = GaugeMetricFamily("odradek_share_coordinator_partitions",
                                       "__share_group_state partitions the share coordinator has loaded here")
        partitions.add_metric([], s.partitions)
        share_partitions = GaugeMetricFamily("odradek_share_coordinator_share_partitions",
                                             "Share-partitions whose state the loaded partitions hold")
        share_partitions.add_metric([], s.share_partitions)
        writes = CounterMetricFamily("odradek_share_coordinator_writes",
                                     "WriteShareGroupState operations made durable by this share coordinator")
        writes.add_metric([], s.writes)
        records = CounterMetricFamily("odradek_share_coordinator_records",
                                      "__share_group_state records written by this share coordinator, by type",
                                      labels=["type"])
        records.add_metric(["snapshot"], s.snapshots)
        records.add_metric(["update"], s.updates)
        fenced = CounterMetricFamily("odradek_share_coordinator_fenced",
                                     "Share-state operations refused because a newer writer exists", labels=["error"])
        for error, count in s.fenced:
            fenced.add_metric([error], count)
        pruned = CounterMetricFamily("odradek_share_coordinator_pruned_records",
                                     "__share_group_state records deleted below the oldest offset still needed")
        pruned.add_metric([], s.pruned)
        return [partitions, share_partitions, writes, records, fenced, pruned]
