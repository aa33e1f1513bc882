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
  transactions_epoch_bumps_total               Transactions V2 ends (EndTxn v5): each bumped the epoch
  transactions_producer_ids_rotated_total      of those, the ends that moved to a new producer id

(all with the `odradek_` prefix). The partition gauges Kafka's ReplicaManager and controller export
(UnderReplicatedPartitions, UnderMinIsrPartitionCount, OfflinePartitionsCount, FencedBrokerCount) are in
broker/metrics.py's `_REPLICATION_GAUGES` (odradek_partitions_under_replicated, ...).

Why at scrape time: every value here is the state the node holds anyway (the Raft node, the image, the log
manager, the coordinators' tables); counting it again on the data path would cost every request to save
one scrape every 15 s. A scrape copies what it needs on the event loop (`snapshot`, through
`Metrics.read_on_loop`), so what it reads is consistent, and builds the metric families on its own thread
(prometheus_client's samples cost ~10 us each, which the loop should not pay). The loop's share is bounded:
one pass over the partitions hosted here, the voters, and at most `MAX_GROUP_PARTITION_SERIES` group
partitions (a coordinator holding more exports the first ones in its own order, its __consumer_offsets
partitions then each group's offsets as written, and counts the rest in
`consumer_group_lag_series_dropped`).

Consumer lag where the coordinator hosts no replica of a partition: the coordinator knows the group's
committed offset but not the partition's high watermark, so it exports the committed offset and no lag
series; the partition's leader exports `partition_high_watermark`, and the lag is their difference in PromQL
(the dashboard's lag panel uses the coordinator's series). On a follower replica the lag is measured against
the follower's high watermark, which trails the leader's by at most one fetch round trip.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from odradek.raft.leader import LeaderState

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
    "odradek_transactions_epoch_bumps": ("Transactions V2 ends (EndTxn v5) that bumped the producer epoch here",
                                         (), "counter"),
    "odradek_transactions_producer_ids_rotated": (
        "Transactions V2 ends that moved to a new producer id, the epoch exhausted", (), "counter"),
}


def _family(name: str) -> Any:
    text, labels, kind = _FAMILIES[name]
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    return cls(name, text, labels=list(labels))


class _Snapshot(NamedTuple):
    """What a scrape reads on the event loop: plain numbers and tuples, copied (cheap); the metric families
    are built from it on the scraping thread, so the loop pays for reading its state and no more."""

    raft_leader: int
    raft_epoch: int
    raft_high_watermark: int
    raft_log_end_offset: int
    voter_lags: list[tuple[int, int]]  # on the quorum leader only
    metadata_applied: int
    active_controller: bool
    log_dirs: list[tuple[str, bool, int]]  # (path, online, bytes)
    high_watermarks: list[tuple[str, int, int]]  # partitions led here
    group_offsets: list[tuple[str, str, int, int, int | None]]  # group, topic, partition, committed, local HW
    group_offsets_dropped: int
    transactions_ongoing: int
    transactions_committed: int
    transactions_aborted: int
    transactions_timed_out: int
    transactions_epoch_bumps: int
    transactions_producer_ids_rotated: int


class ClusterHealthCollector(Collector):
    """The families of this module's docstring: the node's state read on its event loop at each scrape
    (`snapshot`), the families built from it where the scrape runs (`families`)."""

    def __init__(self, node: Node, metrics: Metrics, *,
                 max_group_partition_series: int = MAX_GROUP_PARTITION_SERIES) -> None:
        self.node = node
        self.metrics = metrics
        self.max_group_partition_series = max_group_partition_series

    def describe(self) -> list[Any]:
        # Declared up front so the registry checks names without reading the node.
        return [_family(name) for name in _FAMILIES]

    def collect(self) -> Iterable[Any]:
        snapshot = self.metrics.read_on_loop(self.snapshot, None)
        return self.families(snapshot) if snapshot is not None else []

    def read(self) -> list[Any]:
        """The families now (on the loop's thread)."""
        return self.families(self.snapshot())

    # -- on the event loop

    def snapshot(self) -> _Snapshot:
        node = self.node
        raft = node.quorum.raft
        end = raft.log.log_end_offset
        voter_lags = []
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
                voter_lags.append((voter, lag))
        groups, dropped = self._group_offsets()
        ongoing, counts = self._transactions()
        return _Snapshot(
            raft_leader=raft.leader_id, raft_epoch=raft.epoch, raft_high_watermark=raft.high_watermark,
            raft_log_end_offset=end, voter_lags=voter_lags,
            metadata_applied=node.metadata_loader.applied_end_offset, active_controller=node.controller.is_active,
            log_dirs=self._log_dirs(),
            high_watermarks=[(tp.topic, tp.partition, p.high_watermark)
                             for tp, p in node.data.partitions.items() if p.is_leader],
            group_offsets=groups, group_offsets_dropped=dropped, transactions_ongoing=ongoing,
            transactions_committed=counts[0], transactions_aborted=counts[1], transactions_timed_out=counts[2],
            transactions_epoch_bumps=counts[3], transactions_producer_ids_rotated=counts[4],
        )

    def _log_dirs(self) -> list[tuple[str, bool, int]]:
        manager = self.node.log_manager
        sizes = {d.path: 0 for d in manager.dirs}
        for log in list(manager.logs.values()):
            d = manager.dir_of_log(log)
            if d is not None:
                sizes[d.path] += log.size_bytes
        return [(d.path, d.online, sizes.get(d.path, 0)) for d in manager.dirs]

    def _group_offsets(self) -> tuple[list[tuple[str, str, int, int, int | None]], int]:
        """Up to `max_group_partition_series` committed offsets, each with the partition's high watermark when
        it has a replica here, in the coordinator's order (its partitions, then each group's offsets as they
        were written); how many more there are is counted, not read."""
        groups = self.node.services.groups_if_started
        if groups is None:
            return [], 0
        # The high watermark of every partition with a replica here, keyed as the offsets are: (topic, partition)
        # (a TopicPartition is that tuple).
        high_watermarks: dict[tuple[str, int], int] = {
            tp: p.high_watermark for tp, p in self.node.data.partitions.items()}
        runtime = groups.runtime
        room = self.max_group_partition_series
        rows: list[tuple[str, str, int, int, int | None]] = []
        dropped = 0
        for p in runtime.partitions:
            for group_id, offsets in runtime.shard(p).offsets.items():
                if room <= 0:
                    dropped += len(offsets)
                    continue
                if len(offsets) > room:
                    dropped += len(offsets) - room
                for key, committed in itertools.islice(offsets.items(), room):
                    rows.append((group_id, key[0], key[1], committed.committed_offset, high_watermarks.get(key)))
                room -= min(room, len(offsets))
        return rows, dropped

    def _transactions(self) -> tuple[int, tuple[int, int, int, int, int]]:
        from odradek.coordinator.transaction.metadata import TransactionState

        coordinator = self.node.services.transactions_if_started
        if coordinator is None:
            return 0, (0, 0, 0, 0, 0)
        runtime = coordinator.runtime
        ongoing = 0
        for p in runtime.partitions:
            ongoing += sum(1 for m in runtime.shard(p).transactions.values() if m.state is TransactionState.ONGOING)
        counts = coordinator.counts
        return ongoing, (counts.committed, counts.aborted, counts.timed_out, counts.epoch_bumps,
                         counts.producer_ids_rotated)

    # -- wherever the scrape runs

    @staticmethod
    def families(s: _Snapshot) -> list[Any]:
        f = {name: _family(name) for name in _FAMILIES}
        f["odradek_raft_current_leader"].add_metric([], s.raft_leader)
        f["odradek_raft_current_epoch"].add_metric([], s.raft_epoch)
        f["odradek_raft_high_watermark"].add_metric([], s.raft_high_watermark)
        f["odradek_raft_log_end_offset"].add_metric([], s.raft_log_end_offset)
        for voter, lag in s.voter_lags:
            f["odradek_raft_voter_lag_records"].add_metric([str(voter)], lag)
        f["odradek_metadata_last_applied_offset"].add_metric([], s.metadata_applied)
        f["odradek_metadata_lag_records"].add_metric([], max(0, s.raft_high_watermark - s.metadata_applied))
        f["odradek_active_controller_count"].add_metric([], 1 if s.active_controller else 0)
        for path, online, size in s.log_dirs:
            f["odradek_log_dir_online"].add_metric([path], 1 if online else 0)
            f["odradek_log_dir_size_bytes"].add_metric([path], size)
        for topic, index, mark in sorted(s.high_watermarks):
            f["odradek_partition_high_watermark"].add_metric([topic, str(index)], mark)
        for group_id, topic, index, offset, hw in sorted(s.group_offsets, key=lambda r: r[:3]):
            labels = [group_id, topic, str(index)]
            f["odradek_consumer_group_committed_offset"].add_metric(labels, offset)
            if hw is not None and offset >= 0:
                f["odradek_consumer_group_lag"].add_metric(labels, max(0, hw - offset))
        f["odradek_consumer_group_lag_series_dropped"].add_metric([], s.group_offsets_dropped)
        f["odradek_transactions_ongoing"].add_metric([], s.transactions_ongoing)
        f["odradek_transactions_completed"].add_metric(["committed"], s.transactions_committed)
        f["odradek_transactions_completed"].add_metric(["aborted"], s.transactions_aborted)
        f["odradek_transactions_timed_out"].add_metric([], s.transactions_timed_out)
        f["odradek_transactions_epoch_bumps"].add_metric([], s.transactions_epoch_bumps)
        f["odradek_transactions_producer_ids_rotated"].add_metric([], s.transactions_producer_ids_rotated)
        return list(f.values())
