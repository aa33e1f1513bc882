"""Cluster health at a glance: the gauges an operator's dashboard opens on, read from the node at scrape time.

Kafka spreads these over several MBeans; the names here say which one each stands for:

  raft_current_leader / raft_current_epoch     kafka.server:type=raft-metrics current-leader, current-epoch
  raft_high_watermark / raft_log_end_offset    raft-metrics high-watermark, log-end-offset
  raft_voter_lag_records{voter}                on the quorum's leader only: its log end offset minus what each
                                               voter has fetched (DescribeQuorum's log_end_offset); the leader
                                               itself is 0. A voter that stopped fetching grows here.
  metadata_last_applied_offset                 broker-metadata-metrics last-applied-record-offset (end offset)
  metadata_lag_records                         committed metadata not yet applied to this node's image
  active_controller_count                      KafkaController ActiveControllerCount: 1 on the active
                                               controller, 0 on every other node (sum over the cluster = 1)
  log_dir_online{dir} / log_dir_size_bytes{dir}  LogManager OfflineLogDirectoryCount, per directory, and
                                               kafka.log:type=Log Size summed per directory
  partition_high_watermark{topic,partition}    partitions led here (what consumer lag is measured against)
  consumer_group_committed_offset{group,topic,partition}
  consumer_group_lag{group,topic,partition}    on the group's coordinator: the partition's high watermark
                                               minus the group's committed offset (never below 0)
  transactions_ongoing                         transactional ids in Ongoing on this coordinator
  transactions_completed_total{result}         committed / aborted transactions this coordinator ended
  transactions_timed_out_total                 transactions this coordinator aborted on
                                               transaction.timeout.ms

(all with the `odradek_` prefix). The partition gauges Kafka's ReplicaManager and controller export
(UnderReplicatedPartitions, UnderMinIsrPartitionCount, OfflinePartitionsCount, FencedBrokerCount) are in
broker/metrics.py's `_REPLICATION_GAUGES` (odradek_partitions_under_replicated, ...).

Why at scrape time: every value here is the state the node holds anyway (the Raft node, the image, the log
manager, the coordinators' tables); counting it again on the data path would cost every request to save
one scrape every 15 s. A scrape runs `read()` on the event loop (`Metrics.read_on_loop`), so what it reads is
consistent, and its work is bounded: one pass over the partitions hosted here, the voters, and at most
`MAX_GROUP_PARTITION_SERIES` group partitions (a coordinator holding more exports the first ones in
(group, topic, partition) order and says how many it left out in `consumer_group_lag_series_dropped`).

Consumer lag where the coordinator hosts no replica of a partition: the coordinator knows the group's
committed offset but not the partition's high watermark, so it exports the committed offset and no lag
series; the partition's leader exports `partition_high_watermark`, and the lag is their difference in PromQL
(the dashboard's lag panel uses the coordinator's series). On a follower replica the lag is measured against
the follower's high watermark, which trails the leader's by at most one fetch round trip.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from odradek.raft.leader import LeaderState
from odradek.storage.names import TopicPartition

if TYPE_CHECKING:
    from .metrics import Metrics
    from .node import Node

__all__ = ["ClusterHealthCollector", "MAX_GROUP_PARTITION_SERIES"]

MAX_GROUP_PARTITION_SERIES = 10_000

# name -> (help, labels, kind): the families this collector serves, in the order they are served.
_FAMILIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    "odradek_raft_current_leader": ("The metadata quorum's leader as this node knows it (-1: none)", (), "gauge"),
    "odradek_raft_current_epoch": ("The metadata quorum's epoch as this node knows it", (), "gauge"),
    "odradek_raft_high_watermark": ("Committed end offset of the metadata log known here", (), "gauge"),
    "odradek_raft_log_end_offset": ("End offset of this node's copy of the metadata log", (), "gauge"),
    "odradek_raft_voter_lag_records": (
        "On the quorum leader: metadata records each voter has yet to fetch", ("voter",), "gauge"),
    "odradek_metadata_last_applied_offset": ("End offset of the metadata applied to this node's image", (), "gauge"),
    "odradek_metadata_lag_records": ("Committed metadata records not yet applied to this node's image", (), "gauge"),
    "odradek_active_controller_count": ("1 on the active controller, 0 elsewhere", (), "gauge"),
    "odradek_log_dir_online": ("1 while a log directory is online, 0 once it has failed", ("dir",), "gauge"),
    "odradek_log_dir_size_bytes": ("Bytes of the partitions' logs in a log directory", ("dir",), "gauge"),
    "odradek_partition_high_watermark": ("High watermark of each partition led here", ("topic", "partition"),
                                         "gauge"),
    "odradek_consumer_group_committed_offset": (
        "On the group's coordinator: the group's committed offset", ("group", "topic", "partition"), "gauge"),
    "odradek_consumer_group_lag": (
        "On the group's coordinator: high watermark minus committed offset (partitions with a replica here)",
        ("group", "topic", "partition"), "gauge"),
    "odradek_consumer_group_lag_series_dropped": (
        "Group partitions left out of this scrape (more than the bounded number)", (), "gauge"),
    "odradek_transactions_ongoing": ("Transactions in Ongoing on this coordinator", (), "gauge"),
    "odradek_transactions_completed": ("Transactions this coordinator completed, by result",
                                       ("result",), "counter"),
    "odradek_transactions_timed_out": ("Transactions this coordinator aborted on transaction.timeout.ms",
                                       (), "counter"),
}


def _family(name: str) -> Any:
    text, labels, kind = _FAMILIES[name]
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(name, text, labels=list(labels))


class ClusterHealthCollector(Collector):
    """The families of this module's docstring, built on the node's event loop at each scrape."""

    def __init__(self, node: Node, metrics: Metrics, *,
                 max_group_partition_series: int = MAX_GROUP_PARTITION_SERIES) -> None:
        self.node = node
        self.metrics = metrics
        self.max_group_partition_series = max_group_partition_series

    def describe(self) -> list[Any]:
        # Declared up front so the registry checks names without reading the node.
        return [_family(name) for name in _FAMILIES]

    def collect(self) -> Iterable[Any]:
        return self.metrics.read_on_loop(self.read, [])

    def read(self) -> list[Any]:
        f = {name: _family(name) for name in _FAMILIES}
        self._quorum(f)
        self._log_dirs(f)
        self._groups(f)
        self._transactions(f)
        return list(f.values())

    # -- the metadata quorum and the controller

    def _quorum(self, f: dict[str, Any]) -> None:
        node = self.node
        raft = node.quorum.raft
        f["odradek_raft_current_leader"].add_metric([], raft.leader_id)
        f["odradek_raft_current_epoch"].add_metric([], raft.epoch)
        f["odradek_raft_high_watermark"].add_metric([], raft.high_watermark)
        end = raft.log.log_end_offset
        f["odradek_raft_log_end_offset"].add_metric([], end)
        state = raft.state
        if isinstance(state, LeaderState):
            for voter in raft.config.voters:
                replica = state.replicas.get(voter)
                if voter == raft.node_id:
                    lag = 0
                elif replica is None or replica.end_offset < 0:
                    lag = end  # has fetched nothing in this epoch yet
                else:
                    lag = max(0, end - replica.end_offset)
                f["odradek_raft_voter_lag_records"].add_metric([str(voter)], lag)
        applied = node.metadata_loader.applied_end_offset
        f["odradek_metadata_last_applied_offset"].add_metric([], applied)
        f["odradek_metadata_lag_records"].add_metric([], max(0, raft.high_watermark - applied))
        f["odradek_active_controller_count"].add_metric([], 1 if node.controller.is_active else 0)

    # -- log directories

    def _log_dirs(self, f: dict[str, Any]) -> None:
        manager = self.node.log_manager
        sizes = {d.path: 0 for d in manager.dirs}
        for log in list(manager.logs.values()):
            d = manager.dir_of_log(log)
            if d is not None:
                sizes[d.path] += log.size_bytes
        for d in manager.dirs:
            f["odradek_log_dir_online"].add_metric([d.path], 1 if d.online else 0)
            f["odradek_log_dir_size_bytes"].add_metric([d.path], sizes.get(d.path, 0))

    # -- consumer groups

    def _groups(self, f: dict[str, Any]) -> None:
        partitions = self.node.data.partitions
        for tp, partition in sorted(partitions.items()):
            if partition.is_leader:
                f["odradek_partition_high_watermark"].add_metric([tp.topic, str(tp.partition)],
                                                                 partition.high_watermark)
        groups = self.node.services.groups_if_started
        dropped = 0
        if groups is not None:
            runtime = groups.runtime
            rows: list[tuple[str, str, int, int]] = []
            for p in runtime.partitions:
                for group_id, offsets in runtime.shard(p).offsets.items():
                    for (topic, index), committed in offsets.items():
                        rows.append((group_id, topic, index, committed.committed_offset))
            rows.sort()
            limit = self.max_group_partition_series
            dropped = max(0, len(rows) - limit)
            for group_id, topic, index, offset in rows[:limit]:
                labels = [group_id, topic, str(index)]
                f["odradek_consumer_group_committed_offset"].add_metric(labels, offset)
                hosted = partitions.get(TopicPartition(topic, index))
                if hosted is not None and offset >= 0:
                    f["odradek_consumer_group_lag"].add_metric(labels, max(0, hosted.high_watermark - offset))
        f["odradek_consumer_group_lag_series_dropped"].add_metric([], dropped)

    # -- transactions

    def _transactions(self, f: dict[str, Any]) -> None:
        from odradek.coordinator.transaction.metadata import TransactionState

        coordinator = self.node.services.transactions_if_started
        ongoing = committed = aborted = timed_out = 0
        if coordinator is not None:
            runtime = coordinator.runtime
            for p in runtime.partitions:
                ongoing += sum(1 for m in runtime.shard(p).transactions.values()
                               if m.state is TransactionState.ONGOING)
            counts = coordinator.counts
            committed, aborted, timed_out = counts.committed, counts.aborted, counts.timed_out
        f["odradek_transactions_ongoing"].add_metric([], ongoing)
        f["odradek_transactions_completed"].add_metric(["committed"], committed)
        f["odradek_transactions_completed"].add_metric(["aborted"], aborted)
        f["odradek_transactions_timed_out"].add_metric([], timed_out)
