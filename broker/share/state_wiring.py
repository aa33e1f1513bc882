"""Wire the share coordinator to this broker: `__share_group_state`, its leadership, and its start.

The coordinator (coordinator/share/) is deterministic and knows nothing of sockets: like the group and
transaction coordinators it writes through an `InternalTopicWriter` (acks=all: refused while the partition's
ISR is below `share.coordinator.state.topic.min.isr`), and `ShareCoordinatorLoader` (a metadata listener)
loads the `__share_group_state` partitions this broker leads and unloads those it no longer leads.

The topic is created on first use (FindCoordinator with key type 2, or the first call of the broker's
persister), as Kafka creates it, with `share.coordinator.state.topic.*` settings (internal_topics.py:
share_state_topic_spec); while fewer brokers are alive than its replication factor nothing is created and
the callers are answered COORDINATOR_NOT_AVAILABLE until there are enough. A broker that becomes leader of a
`__share_group_state` partition before any share request reached it starts the coordinator at once
(`StartShareCoordinatorWhenLeading`), so that the state is loaded when the first read arrives after a failover.
`StateTopicPruner` gives the coordinator's pruning the partitions' log end offsets and DeleteRecords.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from odradek.coordinator.partitioning import SHARE_GROUP_STATE_TOPIC
from odradek.coordinator.runtime import NotCoordinatorError
from odradek.coordinator.share.config import ShareCoordinatorConfig
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.purgatory.timing_wheel import Timer
from odradek.protocol.errors import ErrorCode
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.names import TopicPartition

from ..groups_wiring import EpochCoordinatorLoader, MetadataTopicsView
from ..internal_topics import InternalTopicWriter, ensure_internal_topic, share_state_topic_spec

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..controller_channel import ControllerChannel

__all__ = ["ShareCoordinatorLoader", "StartShareCoordinatorWhenLeading", "StateTopicPruner", "start_share_coordinator"]

log = structlog.get_logger("odradek.share")


class ShareCoordinatorLoader(EpochCoordinatorLoader):
    """Loads and unloads the share coordinator's `__share_group_state` partitions as their leadership moves
    (groups_wiring.EpochCoordinatorLoader: a changed leader epoch reloads, the log may have been truncated)."""

    topic = SHARE_GROUP_STATE_TOPIC

    def __init__(self, coordinator: ShareCoordinator, node_id: int, clock: Callable[[], int]) -> None:
        super().__init__(node_id, clock)
        self.coordinator = coordinator

    def elected(self, index: int, now: int, leader_epoch: int) -> None:
        self.coordinator.on_elected(index, now)

    def resigned(self, index: int) -> None:
        self.coordinator.on_resigned(index)


class StartShareCoordinatorWhenLeading:
    """Starts the share coordinator (`start()`) on a broker that becomes leader of a `__share_group_state`
    partition before any share request reached it. A metadata listener."""

    def __init__(self, started: Callable[[], bool], start: Callable[[], None], node_id: int) -> None:
        self.started = started
        self.start = start
        self.node_id = node_id
        self.done = False

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        if self.done or self.started():
            return
        topic = update.image.topics_by_name.get(SHARE_GROUP_STATE_TOPIC)
        if topic is not None and any(p.leader == self.node_id for p in topic.partitions.values()):
            self.done = True
            # Not from inside the publisher's loop over its listeners: starting registers one more.
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        if not self.started():
            self.start()


class StateTopicPruner:
    """What the share coordinator's pruning needs of this broker's `__share_group_state` partitions (it leads
    those it calls about): their log end offset, and DeleteRecords below an offset, as Kafka's coordinator
    prunes through the replica manager. The leader's log start moves at once; followers move theirs when
    they fetch, and the answer that waits for them is only logged when it fails."""

    def __init__(self, data: ReplicaManager, clock: Callable[[], int], *, timeout_ms: int) -> None:
        self.data = data
        self.clock = clock
        self.timeout_ms = timeout_ms

    def log_end_offset(self, partition: int) -> int:
        hosted = self.data.get_partition(TopicPartition(SHARE_GROUP_STATE_TOPIC, partition))
        if hosted is None:
            raise NotCoordinatorError(f"{SHARE_GROUP_STATE_TOPIC}-{partition} is not hosted here")
        return hosted.log.log_end_offset

    def delete_records_before(self, partition: int, offset: int) -> int:
        """Delete the partition's records below `offset`; returns how many the leader's log dropped."""
        tp = TopicPartition(SHARE_GROUP_STATE_TOPIC, partition)
        hosted = self.data.get_partition(tp)
        if hosted is None or offset <= hosted.log.log_start_offset:
            return 0
        before = hosted.log.log_start_offset

        def answered(results: list[tuple[int, int]]) -> None:
            code = results[0][0]
            if code != ErrorCode.NONE:
                log.warning("pruning the share state topic failed", state_partition=partition, offset=offset,
                            error=ErrorCode(code).name)

        self.data.delete_records([(tp, offset)], timeout_ms=self.timeout_ms, now_ms=self.clock(), respond=answered)
        return max(0, hosted.log.log_start_offset - before)


def start_share_coordinator(cfg: BrokerConfig, data: ReplicaManager, timer: Timer, publisher: MetadataPublisher,
                            controller: ControllerChannel, clock: Callable[[], int]) -> ShareCoordinator:
    # None: not created yet (fewer live brokers than its replication factor); the next caller asks again.
    num_partitions = (ensure_internal_topic(publisher, controller, share_state_topic_spec(cfg))
                      or cfg.share_coordinator_state_topic_num_partitions)
    config = ShareCoordinatorConfig.from_broker_config(cfg, state_topic_num_partitions=num_partitions)
    writer = InternalTopicWriter(data, SHARE_GROUP_STATE_TOPIC, enforce_min_isr=True)
    pruner = StateTopicPruner(data, clock, timeout_ms=config.write_timeout_ms)
    coordinator = ShareCoordinator(writer, timer, config, topics=MetadataTopicsView(publisher),
                                   under_min_isr=writer.is_under_min_isr, log_end_offset=pruner.log_end_offset,
                                   delete_records_before=pruner.delete_records_before)
    publisher.register(ShareCoordinatorLoader(coordinator, cfg.node_id, clock))
    return coordinator
