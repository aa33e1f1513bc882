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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.coordinator.partitioning import SHARE_GROUP_STATE_TOPIC
from odradek.coordinator.share.config import ShareCoordinatorConfig
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager

from ..groups_wiring import EpochCoordinatorLoader, MetadataTopicsView
from ..internal_topics import InternalTopicWriter, ensure_internal_topic, share_state_topic_spec

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..controller_channel import ControllerChannel

__all__ = ["ShareCoordinatorLoader", "StartShareCoordinatorWhenLeading", "start_share_coordinator"]


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


def start_share_coordinator(cfg: BrokerConfig, data: ReplicaManager, timer: Timer, publisher: MetadataPublisher,
                            controller: ControllerChannel, clock: Callable[[], int]) -> ShareCoordinator:
    # None: not created yet (fewer live brokers than its replication factor); the next caller asks again.
    num_partitions = (ensure_internal_topic(publisher, controller, share_state_topic_spec(cfg))
                      or cfg.share_coordinator_state_topic_num_partitions)
    config = ShareCoordinatorConfig.from_broker_config(cfg, state_topic_num_partitions=num_partitions)
    writer = InternalTopicWriter(data, SHARE_GROUP_STATE_TOPIC, enforce_min_isr=True)
    coordinator = ShareCoordinator(writer, timer, config, topics=MetadataTopicsView(publisher),
                                   under_min_isr=writer.is_under_min_isr)
    publisher.register(ShareCoordinatorLoader(coordinator, cfg.node_id, clock))
    return coordinator
