"""Prometheus families of the share groups this node coordinates, read at scrape time:

  odradek_share_groups{state}                       share groups by state (Empty, Stable) on their coordinator
  odradek_share_group_members                       members of those groups
  odradek_share_partitions_initialized_total        share-partitions whose state this node's group coordinator
  odradek_share_partition_initializations_failed_total  initialized through the persister, and the failures
                                                    (each failure is asked again by a later heartbeat)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .group_state import ShareStateInitializer

if TYPE_CHECKING:
    from odradek.coordinator.group.group_coordinator import GroupCoordinator

__all__ = ["ShareGroupMembershipCollector"]


class ShareGroupMembershipCollector:
    """See the module doc; `groups()` is the group coordinator if it has started, else None."""

    def __init__(self, groups: Callable[[], GroupCoordinator | None]) -> None:
        self.groups = groups

    def collect(self) -> Iterator[Metric]:
        coordinator = self.groups()
        share_groups = coordinator.share_groups() if coordinator is not None else []
        by_state = GaugeMetricFamily("odradek_share_groups", "Share groups this node coordinates, by state",
                                     labels=["state"])
        counts = {"Empty": 0, "Stable": 0}
        for group in share_groups:
            counts[str(group.state)] = counts.get(str(group.state), 0) + 1
        for state, n in sorted(counts.items()):
            by_state.add_metric([state], n)
        yield by_state
        members = GaugeMetricFamily("odradek_share_group_members", "Members of the share groups this node coordinates")
        members.add_metric([], sum(len(g.members) for g in share_groups))
        yield members
        initializer = coordinator.share_state_initializer if coordinator is not None else None
        done = failed = 0
        if isinstance(initializer, ShareStateInitializer):
            done, failed = initializer.initialized, initializer.failed
        initialized = CounterMetricFamily("odradek_share_partitions_initialized",
                                          "Share-partitions initialized through the persister by this coordinator")
        initialized.add_metric([], done)
        yield initialized
        failures = CounterMetricFamily("odradek_share_partition_initializations_failed",
                                       "Share-partition initializations the persister refused (asked again later)")
        failures.add_metric([], failed)
        yield failures
