"""Build the node's parts in order and stop them in reverse, and run the broker's lifecycle.

`build_node` makes the typed `Node` (broker/node.py), each part from the parts before it: the timing wheel
-> log manager (directory lock, recovery) -> the replica manager and its follower fetchers -> the publisher
of committed metadata, with its listeners (the partitions and their logs follow the image, followed
partitions are fetched from their leaders) -> the metadata quorum (the Raft node over
`__cluster_metadata-0`, its loader, the controller channel) -> log directories -> the transaction markers'
channel, producer ids and the services handlers receive, with the coordinators' factories -> metrics ->
background schedules. Every wiring function takes the typed parts it uses, never the broker. Then the
broker binds its listeners, starts the quorum and the broker's lifecycle (`run_lifecycle`): registration
with the active controller, heartbeats, unfencing.

There is one metadata road. A lone node (no other voter in controller.quorum.voters) runs the same Raft node
with itself as the only voter, as Kafka's combined mode with one controller does: it elects itself as soon
as it starts (no other voter to wait for, so its election timeout is 1 ms), needs no socket for the quorum,
and what it appends is committed as soon as it is flushed. Its broker registers and is unfenced by its own
controller in process, through the same calls a cluster node sends over the network. A directory written
when a lone node kept a local metadata log (no Raft) upgrades in place: its batches are read as the
quorum's log from before any election, committed by the first LeaderChange after them.

`stop_node` runs the other way (the fetchers stop before the logs close) and ends with flushed logs,
checkpoints and the clean-shutdown marker.

The timing wheel is driven by one timer handle (node.TimerDriver): after every state change the broker calls
`after_state_change()`, which (re)arms a `loop.call_later` for the wheel's next deadline. Nothing polls.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, Protocol

import structlog

from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import Endpoint, new_cluster_id
from odradek.metadata.isr_history import IsrHistory
from odradek.metadata.isr_history import read_json as isr_events_json
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.log import metadata_log_config
from odradek.metadata.publisher import MetadataPublisher
from odradek.raft.storage_log import StorageRaftLog
from odradek.replication.hosting import PartitionHosting
from odradek.replication.replica_manager import ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage import faults as storage_faults
from odradek.storage.log_manager import LogManager
from odradek.storage.meta_properties import claim_for_cluster, read_meta_properties
from odradek.storage.names import LOCK_FILE, TopicPartition
from odradek.storage.segment import drop_cache

from .config import BrokerConfig
from .context import RequestContext, SecurityProtocol
from .controller_settings import new_controller
from .dynamic_config import DynamicBrokerConfig, DynamicConfigCollector
from .share.group_metrics import ShareGroupMembershipCollector
from .groups_wiring import start_group_coordinator
from .health_metrics import ClusterHealthCollector
from .heap import HeapFreezer
from .hosting_driver import SLICE_PARTITIONS, SLICE_RECORDS, HostingDriver, ReplayDriver
from .log_dirs import LogDirs
from .metrics import Metrics, MetricsServer, ShareGroupsCollector, ShareMembersCollector, TopicStatsCollector
from .node import Membership, Node, TimerDriver
from .quorum import ClusterControllerChannel, QuorumDriver
from .replica_fetcher import ReplicaFetcherManager
from .services import BrokerServices
from .share.dlq import share_dead_letter_queue
from .share.manager import SharePartitionManager, ShareSettings
from .share.persister import SharePersister
from .storage_tool import read_bootstrap_records
from .topics import topic_settings
from .share.network_persister import NetworkPersister
from .share.state_metrics import ShareCoordinatorCollector
from .share.state_wiring import StartShareCoordinatorWhenLeading, start_share_coordinator
from .txn_wiring import MarkerSender, StartWhenLeading, start_transaction_coordinator

log = structlog.get_logger("odradek.broker")

METADATA_PARTITION = TopicPartition("__cluster_metadata", 0)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def build_node(
    config: BrokerConfig, membership: Membership, *, spawn: Callable[[Coroutine[Any, Any, None]], object],
    after_state_change: Callable[[], None], dispatch: Callable[[RequestContext], Any],
    api_versions_response: Any, controller_api_versions_response: Any,
) -> Node:
    """The node's parts, each built from those before it (the order of node.py's docstring). `membership`
    is the broker's standing with the controller, `spawn` starts a background task the broker owns (and
    cancels first when it stops), `dispatch` answers a request in process (this broker's own transaction
    markers), `after_state_change` re-arms the timing wheel's wake-up."""
    cfg = config
    loop = asyncio.get_running_loop()
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=now_ms())

    # Every directory of log.dirs (JBOD), and metadata.log.dir when it is another. A directory formatted by
    # `odradek storage format` names the cluster this node belongs to; the others and the metadata log
    # must agree.
    data_dirs = [os.path.abspath(os.path.expanduser(d)) for d in cfg.data_dirs]
    formatted = next((p for p in map(read_meta_properties, data_dirs) if p and p.get("cluster.id")), None) or {}
    cluster_id: str | None = formatted.get("cluster.id")
    metadata_dir = os.path.abspath(os.path.expanduser(cfg.metadata_dir))
    if cluster_id is None and is_lone_node(cfg) and not any(map(read_meta_properties, {*data_dirs, metadata_dir})):
        # A lone node's first start on new directories: it formats them itself (see _format_lone_node), the
        # cluster id written with the rest of meta.properties as the log manager claims them.
        cluster_id = new_cluster_id()
    if os.environ.get("ODRADEK_TEST_FAIL_WRITES"):  # tests only: injected I/O errors (storage/faults.py)
        for path, after_bytes in storage_faults.parse(os.environ["ODRADEK_TEST_FAIL_WRITES"]).items():
            storage_faults.arm(path, after_bytes)
    log_manager = LogManager(
        data_dirs, now_ms=now_ms(), node_id=cfg.node_id, cluster_id=cluster_id,
        retention_check_interval_ms=cfg.log_retention_check_interval_ms,
        producer_id_expiration_check_interval_ms=cfg.producer_id_expiration_check_interval_ms,
        cache_window_bytes=cfg.log_cache_window_bytes, cache_release=_cache_releaser(loop),
        metadata_log_dir=metadata_dir,
    )
    try:
        return _build_on(cfg, log_manager, membership, loop, timer, cluster_id, spawn=spawn,
                         after_state_change=after_state_change, dispatch=dispatch,
                         api_versions_response=api_versions_response,
                         controller_api_versions_response=controller_api_versions_response)
    except BaseException:
        log_manager.close()  # releases the directories' locks: a failed start leaves them free
        raise


def _build_on(
    cfg: BrokerConfig, log_manager: LogManager, membership: Membership, loop: asyncio.AbstractEventLoop,
    timer: Timer, cluster_id: str | None, *, spawn: Callable[[Coroutine[Any, Any, None]], object],
    after_state_change: Callable[[], None], dispatch: Callable[[RequestContext], Any],
    api_versions_response: Any, controller_api_versions_response: Any,
) -> Node:
    """The parts built on the opened log manager (build_node's rest, which closes the manager if this fails)."""
    log_manager.update_topic_config(METADATA_PARTITION.topic, metadata_log_config())
    data = ReplicaManager(node_id=cfg.node_id, timer=timer, defer_fetch_completion=True,
                          replica_lag_time_max_ms=cfg.replica_lag_time_max_ms)
    publisher = MetadataPublisher()
    _wire_replica_selection(data, cfg, publisher)
    # A controller-only node hosts no partitions. A lone node follows no leader (it holds the only replica
    # of what it hosts), and its inter-broker listener need not have the login a follower fetches with.
    replica_fetchers: ReplicaFetcherManager | None = None
    if "broker" in cfg.process_roles and not is_lone_node(cfg):
        replica_fetchers = ReplicaFetcherManager(
            node_id=cfg.node_id, config=cfg, data=data, image=lambda: publisher.image,
            broker_epoch=lambda: membership.broker_epoch, clock=now_ms,
        )
    dynamic_config = DynamicBrokerConfig(cfg)  # dynamic broker configs over cfg, per image
    publisher.register(dynamic_config)
    known = log_manager.get_log(METADATA_PARTITION)  # what replaying it at start is not news of (log_dirs.py)
    data.metadata_known_through = known.log_end_offset if known is not None else -1
    # A large update's partitions are applied in slices between turns of the loop (broker/hosting_driver.py).
    hosting = PartitionHosting(data, log_manager, topic_settings(dynamic_config), now_ms, replica_fetchers,
                               budget=SLICE_PARTITIONS)
    heap = HeapFreezer()  # the made partitions kept out of the collector's full walks (broker/heap.py)
    hosting_driver = HostingDriver(hosting, after_slice=after_state_change, heap=heap)
    hosting.on_pending = hosting_driver.wake
    spawn(hosting_driver.run())
    publisher.register(hosting)
    publisher.register(heap)
    isr_history = IsrHistory(clock=now_ms, replayed_through=data.metadata_known_through)  # /odradek/isr-events
    publisher.register(isr_history)
    quorum = _start_quorum(cfg, cluster_id, log_manager, publisher, heap=heap)
    log_dirs = LogDirs(log_manager, data, replica_fetchers, publisher, quorum.controller, node_id=cfg.node_id,
                       broker_epoch=lambda: membership.broker_epoch, clock=now_ms)
    log_dirs.start()
    # A metadata log that cannot be written stops the node, as a failed metadata log directory does.
    quorum.driver.on_log_failure(lambda why: log_dirs.storage_failed(log_manager.metadata_log_dir, why))

    markers = MarkerSender(cfg, clock=now_ms, timers_changed=after_state_change, dispatch=dispatch,
                           endpoint=lambda node_id, listener: services.endpoint(node_id, listener))
    controller = quorum.controller
    share_persister = _share_persister(cfg, publisher, markers, lambda: services, after_state_change)
    share = _start_share_groups(cfg, data, publisher, share_persister, markers, quorum.controller)
    services = BrokerServices(
        config=cfg, now_ms=now_ms, metadata=publisher, controller=controller, data=data,
        log_manager=log_manager,
        producer_ids=ProducerIdManager(lambda: controller.allocate_producer_ids(cfg.node_id)),
        api_versions_response=api_versions_response,
        controller_api_versions_response=controller_api_versions_response,
        groups_factory=lambda: start_group_coordinator(cfg, data, timer, publisher, controller, now_ms,
                                                       services.share_persister),
        quorum=quorum.driver, log_dirs=log_dirs, dynamic_config=dynamic_config, share=share,
        transactions_factory=lambda: start_transaction_coordinator(cfg, data, timer, publisher, controller, services,
                                                                   markers, now_ms),
        share_coordinator_factory=lambda: start_share_coordinator(cfg, data, timer, publisher, controller, now_ms),
        share_persister=share_persister,
        node_request=lambda node_id, message, version: markers.request(node_id, message, version,
                                                                       purpose="share-lag", timeout_s=5.0),
    )
    publisher.register(StartWhenLeading(services, cfg.node_id, after_state_change))

    def start_share_coordinator_now() -> None:
        services.share_coordinator
        after_state_change()

    publisher.register(StartShareCoordinatorWhenLeading(
        lambda: services.share_coordinator_if_started is not None, start_share_coordinator_now, cfg.node_id))
    metrics, metrics_server = _start_metrics(cfg, data, publisher, loop, quorum.driver, membership, log_dirs,
                                             isr_history)
    metrics.registry.register(DynamicConfigCollector(dynamic_config, lambda: publisher.image))
    metrics.registry.register(ShareCoordinatorCollector(lambda: services.share_coordinator_if_started, metrics))
    if share is not None:
        metrics.registry.register(ShareGroupsCollector(share.figures, metrics))
        metrics.registry.register(ShareMembersCollector(share.member_figures, metrics))  # (labelled by member)
    metrics.registry.register(ShareGroupMembershipCollector(lambda: services.groups_if_started))
    housekeeping = Housekeeping(cfg, log_manager, log_dirs, data)
    spawn(housekeeping.run())
    node = Node(
        config=cfg, cluster_id=quorum.cluster_id, timer=timer, log_manager=log_manager, data=data,
        replica_fetchers=replica_fetchers, metadata=publisher, quorum=quorum.driver,
        metadata_loader=quorum.loader, controller=controller, log_dirs=log_dirs, txn_markers=markers,
        services=services, metrics=metrics, metrics_server=metrics_server, housekeeping=housekeeping,
        wake=TimerDriver(timer, now_ms),
    )
    metrics.registry.register(ClusterHealthCollector(node, metrics))  # quorum, log dirs, lag, transactions
    return node


async def stop_node(node: Node, broker_epoch: int = -1) -> None:
    """Stop the node's parts in the reverse of the order `build_node` made them: the schedules first (a
    flush or cleaning running in a worker thread finishes before the logs close under it), the logs last,
    flushed and checkpointed with the clean-shutdown marker, which names `broker_epoch` (this session's:
    the next registration proves the shutdown clean with it, KIP-966)."""
    node.wake.stop()
    if node.services.share is not None:
        await node.services.share.close()
    await node.housekeeping.settle()
    if node.metrics_server is not None:
        node.metrics_server.stop()
    if isinstance(node.services.share_persister, NetworkPersister):  # its requests use the markers' connections
        await node.services.share_persister.close()
    await node.txn_markers.close()
    await node.log_dirs.stop()
    await node.quorum.stop()
    await node.controller.close()
    await node.quorum.connections.close()
    if node.replica_fetchers is not None:  # before the logs they append to close
        await node.replica_fetchers.shutdown()
    node.log_manager.close(broker_epoch)


def _share_persister(cfg: BrokerConfig, publisher: MetadataPublisher, markers: MarkerSender,
                     services: Callable[[], BrokerServices], after_state_change: Callable[[], None]) -> NetworkPersister:
    """THE broker's SharePersister (broker/share/network_persister.py), used by the share-partition leaders
    and the group coordinator: this broker's share coordinator in process, another's over the inter-broker
    connections the transaction markers use."""
    from .internal_topics import ensure_coordinator_topic

    async def send(node_id: int, request, version: int):
        return await markers.request(node_id, request, version, purpose="share-state",
                                     timeout_s=cfg.request_timeout_ms / 1000)

    return NetworkPersister(node_id=cfg.node_id, image=lambda: publisher.image,
                            local=lambda: services().share_coordinator,
                            ensure_topic=lambda: ensure_coordinator_topic(services(), 2), send=send, clock=now_ms,
                            timers_changed=after_state_change, deadline_ms=cfg.request_timeout_ms)


def _start_share_groups(cfg: BrokerConfig, data: ReplicaManager, publisher: MetadataPublisher,
                        persister: SharePersister, markers: MarkerSender,
                        controller: ClusterControllerChannel) -> SharePartitionManager | None:
    """Share groups' data path on this broker's leaders (broker/share/manager.py), when odradek.share.enabled;
    registered after the partitions' own listener, so it sees leadership as the replica manager applied it."""
    if not cfg.share_enabled:
        return None

    def leader_of(tp: TopicPartition) -> tuple[int, int] | None:
        topic = publisher.image.topics_by_name.get(tp.topic)
        p = topic.partitions.get(tp.partition) if topic is not None else None
        return (p.leader, p.leader_epoch) if p is not None and p.leader >= 0 else None

    from .group_configs import share_defaults, share_settings_of

    defaults = share_defaults(cfg)  # the broker's group.share.* values, read once (asked on every fetch)

    base = ShareSettings(record_lock_duration_ms=cfg.share_group_record_lock_duration_ms,
                         delivery_count_limit=cfg.share_group_delivery_count_limit,
                         max_record_locks=cfg.share_group_partition_max_record_locks)
    manager = SharePartitionManager(
        data=data, persister=persister, clock=now_ms, leader_of=leader_of,
        max_sessions=cfg.share_group_max_share_sessions, settings=base,
        # a group's share.* GROUP configs over the broker's, as the image has them, asked on every fetch (so a
        # changed lock duration holds from the next acquisition, as in Kafka)
        settings_for=lambda group_id: share_settings_of(publisher.image, cfg, group_id, base, defaults),
        dead_letters=share_dead_letter_queue(cfg, publisher, markers, controller, now_ms),
    )
    publisher.register(manager)
    return manager


def _wire_replica_selection(data: ReplicaManager, cfg: BrokerConfig, publisher: MetadataPublisher) -> None:
    """KIP-392: the configured replica selector, and each broker's rack and reachability from the image; and
    which brokers are alive (DeleteRecords' low watermark counts the replicas on those only)."""
    from odradek.replication.replica_selector import replica_selector_for


    def replica_rack(broker_id: int, listener: str) -> tuple[bool, str | None]:
        registration = publisher.image.brokers.get(broker_id)
        if registration is None or registration.fenced:
            return False, None
        return any(e.name == listener for e in registration.endpoints), registration.rack


    def is_broker_alive(broker_id: int) -> bool:
        registration = publisher.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    data.know_brokers_by(replica_selector=replica_selector_for(cfg.replica_selector_class), replica_rack=replica_rack,
                         is_broker_alive=is_broker_alive)


def is_lone_node(cfg: BrokerConfig) -> bool:
    """A controller with no other voter (controller.quorum.voters empty, or naming only this node): the
    only voter of its quorum."""
    return "controller" in cfg.process_roles and not any(v.node_id != cfg.node_id for v in cfg.voters())


class QuorumParts(NamedTuple):
    driver: QuorumDriver
    loader: MetadataLoader
    controller: ClusterControllerChannel
    cluster_id: str


def _start_quorum(cfg: BrokerConfig, cluster_id: str | None, log_manager: LogManager,
                  publisher: MetadataPublisher, *, heap: HeapFreezer | None = None) -> QuorumParts:
    """The metadata log replicated by the Raft quorum (broker/quorum.py): this node a voter when it is in
    controller.quorum.voters (or alone), else an observer; the controller channel decides here while this
    node is the active controller and forwards otherwise."""
    import random

    from odradek.raft import FileQuorumStateStore, RaftConfig, RaftNode

    from .config import ConfigError
    from .node_client import NodeConnections
    from .security import node_security
    from .quorum import QuorumControllerChannel

    lone = is_lone_node(cfg)
    if cluster_id is None and not lone:
        raise ConfigError(
            "a node of a controller quorum needs formatted storage: run `odradek storage format --cluster-id ID "
            "-c <this server.properties>` on every node with the same id (`odradek storage random-uuid`)",
            key="log.dirs",
        )
    log_ = log_manager.get_or_create_log(METADATA_PARTITION, now_ms=now_ms(), log_dir=log_manager.metadata_log_dir)
    raft_log = StorageRaftLog(log_)
    if cluster_id is None:
        cluster_id = _format_lone_node(log_manager, raft_log)
    voters: dict[int, tuple[str, int] | None] = {v.node_id: (v.host, v.port) for v in cfg.voters()}
    if lone:
        voters = {cfg.node_id: voters.get(cfg.node_id)}  # no quorum connection is ever made to it
    loader = MetadataLoader(
        publisher, clock=now_ms, snapshot_max_bytes=cfg.metadata_log_max_record_bytes_between_snapshots,
        snapshot_max_interval_ms=cfg.metadata_log_max_snapshot_interval_ms,
    )
    raft = RaftNode(
        RaftConfig(
            node_id=cfg.node_id, voters=tuple(sorted(voters)), cluster_id=cluster_id,
            # A lone voter has nobody to hear from before it stands: it elects itself at once.
            election_timeout_ms=1 if lone else cfg.controller_quorum_election_timeout_ms,
            election_backoff_max_ms=cfg.controller_quorum_election_backoff_max_ms,
            fetch_timeout_ms=cfg.controller_quorum_fetch_timeout_ms,
            request_timeout_ms=cfg.controller_quorum_request_timeout_ms,
            leader_disconnect_grace_ms=cfg.controller_quorum_disconnect_grace_ms,
            # A parked fetch must be answered well within the fetcher's request timeout.
            fetch_max_wait_ms=min(500, cfg.controller_quorum_request_timeout_ms // 2),
        ),
        raft_log, FileQuorumStateStore(log_.directory), loader, random.Random(), now_ms(),
    )
    loader.attach(raft)
    if raft.leader_id >= 0 and raft.leader_id != cfg.node_id:
        # A voter restarting as a follower of the leader its quorum state names is not told of it by the
        # node (no change happens): without this it would know no active controller to register with
        # until the next election.
        loader.handle_leader_change(raft.leader_id, raft.epoch)
    connections = NodeConnections(voters.get, client_id=f"odradek-node-{cfg.node_id}", security=node_security(
        cfg, cfg.controller_listener_names[0], "sasl.mechanism.controller.protocol"))
    driver = QuorumDriver(raft, connections, now_ms, request_timeout_ms=cfg.controller_quorum_request_timeout_ms,
                          after_each_call=loader.maybe_snapshot)
    # A large committed batch is replayed in slices between turns of the loop (metadata/loader.py).
    loader.replay_budget, loader.on_pending = SLICE_RECORDS, ReplayDriver(loader, driver.call_in_node, heap=heap).wake
    local = None
    if raft.is_voter and "controller" in cfg.process_roles:
        controller = new_controller(cfg, bootstrap_extra=read_bootstrap_records(cfg.metadata_dir))
        local = QuorumControllerChannel(controller, cfg, now_ms, driver, loader, cluster_id=cluster_id)
    return QuorumParts(driver, loader, ClusterControllerChannel(local, loader, connections, node_id=cfg.node_id),
                       cluster_id)


def _format_lone_node(manager: LogManager, raft_log: StorageRaftLog) -> str:
    """A lone node's cluster id, written into the meta.properties of each of its directories: the one its
    metadata log names (a directory written before a lone node ran Raft), else a new random one.

    Why a lone node formats itself, where Kafka asks for `kafka-storage format` first: formatting is
    what keeps a node of a cluster from starting a new cluster of its own on an empty (lost, replaced)
    disk instead of joining the one it belongs to. A lone node belongs to no other cluster: its quorum is
    itself, so an empty directory can only mean a new cluster, and `odradek broker start` stays the one
    command the README promises. A node with other voters still refuses unformatted storage."""
    from odradek.metadata.loader import logged_cluster_id

    cluster_id = logged_cluster_id(raft_log) or new_cluster_id()
    paths = {d.path for d in manager.dirs} | {manager.metadata_log_dir}
    for path in sorted(paths):
        claim_for_cluster(path, cluster_id)
    log.info("formatted the storage of a lone node", cluster_id=cluster_id)
    return cluster_id


def _load_coordinators(node: Node) -> None:
    """Once this broker serves: start the group and transaction coordinators if their topics exist, so that
    the partitions led here are loaded (and ended transactions' markers resumed) before clients ask."""
    from odradek.coordinator.partitioning import SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC

    from .groups_wiring import OFFSETS_TOPIC

    image = node.metadata.image
    if image.topics_by_name.get(OFFSETS_TOPIC) is not None:
        node.services.groups
    if image.topics_by_name.get(TRANSACTION_STATE_TOPIC) is not None and node.services.transactions_if_started is None:
        node.services.transactions
    if image.topics_by_name.get(SHARE_GROUP_STATE_TOPIC) is not None and node.services.share_coordinator_if_started is None:
        node.services.share_coordinator
    node.wake.arm()
    log.info("components started", cluster_id=image.cluster_id, topics=len(image.topics_by_name))


async def run_lifecycle(node: Node, membership: Membership, endpoints: list[Endpoint]) -> None:
    """A node of a cluster (Kafka's BrokerLifecycleManager): register with the active controller (fenced,
    retrying until one answers), then heartbeat every broker.heartbeat.interval.ms with the offset of the
    last metadata record applied here; the controller unfences this broker once it has caught up, and
    fences it when its heartbeats stop for broker.session.timeout.ms.

    A lone node does the same with the controller in its own process: it waits for that controller to be
    active (its election is immediate), registers, and its first heartbeat unfences it; a registration
    its own controller refuses (another cluster's log) is final and stops the start."""
    import uuid

    from odradek.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
    from odradek.metadata.image import (ELR_VERSION, ELR_VERSION_FEATURE, METADATA_VERSION, METADATA_VERSION_FEATURE,
                                        SHARE_VERSION, SHARE_VERSION_FEATURE, TRANSACTION_VERSION,
                                        TRANSACTION_VERSION_FEATURE)

    cfg = node.config
    controller = node.controller
    # KIP-966: the epoch of the last clean shutdown proves it clean; -1 (a crash, a power loss) makes the
    # controller keep this broker out of every ISR and ELR until it has caught up again.
    previous_broker_epoch = node.log_manager.previous_broker_epoch()
    request = BrokerRegistrationRequest(
        broker_id=cfg.node_id, cluster_id=node.cluster_id, incarnation_id=uuid.uuid4(), rack=cfg.broker_rack,
        listeners=[BrokerRegistrationRequest.Listener(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                   for e in endpoints],
        features=[BrokerRegistrationRequest.Feature(name=METADATA_VERSION_FEATURE, min_supported_version=1,
                                                    max_supported_version=METADATA_VERSION),
                  BrokerRegistrationRequest.Feature(name=ELR_VERSION_FEATURE, min_supported_version=0,
                                                    max_supported_version=ELR_VERSION),
                  BrokerRegistrationRequest.Feature(name=TRANSACTION_VERSION_FEATURE, min_supported_version=0,
                                                    max_supported_version=TRANSACTION_VERSION),
                  BrokerRegistrationRequest.Feature(name=SHARE_VERSION_FEATURE, min_supported_version=0,
                                                    max_supported_version=SHARE_VERSION)],
        previous_broker_epoch=previous_broker_epoch,
    )
    if previous_broker_epoch < 0 and node.data.metadata_known_through <= 0:
        # Nothing to have shut down: a new node's metadata log starts empty (a restarted one holds records).
        log.info("first start of this broker: registering without a previous broker epoch")
    elif previous_broker_epoch < 0:
        log.warning("the last shutdown was not clean: registering without a previous broker epoch, so this "
                    "broker leads nothing until it is back in sync", previous_broker_epoch=previous_broker_epoch)
    else:
        log.info("the last shutdown was clean", previous_broker_epoch=previous_broker_epoch)
    interval_s = cfg.broker_heartbeat_interval_ms / 1000
    lone = node.quorum.is_lone_voter
    if membership.broker_epoch < 0:  # the first registration of this process (not a re-registration)
        node.metadata_loader.on_leader_change(membership.controller_changed)
    if lone:
        assert controller.local is not None  # a lone node is a voter: its controller is here
        await controller.local.activated.wait()
    while True:
        try:
            response = await node.services.future_from(controller.broker_registration(request))
            if response.error_code == 0:
                membership.registered(response.broker_epoch, now_ms())
                break
            log.debug("registration refused", error_code=response.error_code)
        except Exception as e:  # noqa: BLE001 - no controller yet, a controller change: try again
            if lone:
                raise
            log.debug("registration not done yet", error=str(e))
        await asyncio.sleep(min(interval_s, 0.2))
    log.info("registered", broker_epoch=membership.broker_epoch)
    while True:
        if membership.shutting_down:
            interval_s = min(interval_s, 0.2)  # controlled shutdown: ask often
        wait_s = interval_s
        heartbeat = BrokerHeartbeatRequest(
            broker_id=cfg.node_id, broker_epoch=membership.broker_epoch,
            current_metadata_offset=node.metadata_loader.applied_end_offset - 1, want_fence=False,
            want_shut_down=membership.shutting_down,
        )
        try:
            # A heartbeat that cannot be answered within half a session is given up for the next one.
            half_session_s = cfg.broker_session_timeout_ms / 2000
            answer = node.services.future_from(controller.heartbeat(heartbeat, timeout_s=half_session_s))
            await asyncio.wait({answer}, timeout=half_session_s)  # (not wait_for: see below)
            if not answer.done():
                answer.cancel()
                raise asyncio.TimeoutError("no heartbeat answer within half a session")
            response = answer.result()
        except Exception as e:  # noqa: BLE001 - the next heartbeat tries again
            log.debug("heartbeat failed", error=str(e))
            # Soon: a heartbeat given up closed its connection, and the controller fences a broker whose
            # heartbeat connection closed unless it heartbeats again within a short grace.
            wait_s = min(interval_s, 0.1)
            if heartbeat_outcome(membership, node.data, answered=False, now=now_ms(),
                                 session_timeout_ms=cfg.broker_session_timeout_ms) == "lost":
                log.warning("no controller has answered this broker for broker.session.timeout.ms: serving on the "
                            "last committed metadata; metadata changes and ISR changes wait for the controller",
                            session_timeout_ms=cfg.broker_session_timeout_ms, quorum_leader=node.metadata_loader.leader_id,
                            quorum_epoch=node.metadata_loader.epoch, metadata_offset=node.metadata_loader.applied_end_offset - 1,
                            stranded_partitions=len(node.data.stranded))
            if membership.shutting_down:  # no controller to move leaderships away (the quorum is going too)
                membership.shutdown_granted.set()
        else:
            if response.error_code == 0:
                lost_since = membership.answered_at_ms
                now = now_ms()
                if heartbeat_outcome(membership, node.data, answered=True, now=now,
                                     session_timeout_ms=cfg.broker_session_timeout_ms) == "regained":
                    log.info("the controller answers this broker again", quorum_leader=node.metadata_loader.leader_id,
                             quorum_epoch=node.metadata_loader.epoch, without_controller_ms=now - (lost_since or now))
                if membership.fenced and not response.is_fenced:
                    log.info("unfenced", broker_epoch=membership.broker_epoch)
                membership.heard(fenced=response.is_fenced)
                if response.is_caught_up:
                    if not membership.caught_up.is_set():
                        try:
                            _load_coordinators(node)
                        except Exception:  # noqa: BLE001 - they start on their first request instead
                            log.exception("starting the coordinators failed")
                    membership.caught_up.set()
                if response.should_shut_down:
                    membership.shutdown_granted.set()
            elif response.error_code in (int(ErrorCode.STALE_BROKER_EPOCH), int(ErrorCode.BROKER_ID_NOT_REGISTERED)):
                log.warning("the controller no longer knows this registration; registering again")
                return await run_lifecycle(node, membership, endpoints)
        # The next heartbeat, or at once when a controlled shutdown is asked for or the controller changed.
        # Not wait_for: on Python 3.11 it drops a cancellation that arrives as the event is set (the stop
        # of a node whose quorum leader just resigned), and this task would never end.
        woken = asyncio.ensure_future(membership.heartbeat_now.wait())
        try:
            await asyncio.wait({woken}, timeout=wait_s)
        finally:
            woken.cancel()
        membership.heartbeat_now.clear()


def heartbeat_outcome(membership: Membership, data: ReplicaManager, *, answered: bool, now: int,
                      session_timeout_ms: int) -> str | None:
    """What one heartbeat's outcome changes, at `now` (the lifecycle's rule, apart from its I/O so that a
    manual clock can drive it): an answer ends a lost lease ('regained'); a failure past a whole session
    without an answer loses it ('lost'), and while it stays lost, partitions whose followers fall out of sync
    become stranded. Nothing else: not hearing from the controller fences nothing and leaves the metadata
    image as it was (node.Membership, ReplicaManager.set_lease_expired)."""
    if answered:
        if membership.heartbeat_answered(now):
            data.set_lease_expired(False, now)
            return "regained"
        return None
    if membership.heartbeat_unanswered(now, session_timeout_ms):
        data.set_lease_expired(True, now)
        return "lost"
    if membership.lease_lost:
        stranded = data.refresh_stranded(now)
        if stranded:
            log.warning("partitions stranded: their ISR needs a shrink no controller can make now; acks=all to them "
                        "answers NOT_LEADER_OR_FOLLOWER until a controller answers",
                        partitions=sorted(f"{tp.topic}-{tp.partition}" for tp in stranded))
    return None


def registration_endpoints(cfg: BrokerConfig, bound_ports: dict[str, int]) -> list[Endpoint]:
    """Each advertised listener as clients should reach it: a meta-address or empty host becomes
    localhost, a port of 0 the port actually bound for that listener name."""
    endpoints = []
    for listener in cfg.advertised_listener_list():
        host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "localhost"
        port = listener.port or bound_ports.get(listener.name, 0)
        endpoints.append(Endpoint(listener.name, host, port, SecurityProtocol(listener.security_protocol).id))
    return endpoints


def _start_metrics(cfg: BrokerConfig, data: ReplicaManager, publisher: MetadataPublisher,
                   loop: asyncio.AbstractEventLoop, quorum: QuorumDriver,
                   membership: Membership, log_dirs: LogDirs,
                   isr_history: IsrHistory | None = None) -> tuple[Metrics, MetricsServer | None]:
    metrics = Metrics(node_id=cfg.node_id)
    if isr_history is not None:
        metrics.add_json_route("/odradek/isr-events", lambda query: isr_events_json(isr_history, query, cfg.node_id))
    metrics.bind_loop(loop)
    metrics.set_partition_count_source(lambda: len(data.partitions))
    metrics.track_purgatory("Produce", data.produce_purgatory.num_delayed)
    metrics.track_purgatory("Fetch", data.fetch_purgatory.num_delayed)
    metrics.set_log_size_source(
        lambda: [(tp.topic, tp.partition, p.log.size_bytes) for tp, p in data.partitions.items()]
    )
    metrics.registry.register(TopicStatsCollector(data.topic_stats))  # per-topic bytes/messages in and out
    metrics.set_replication_source(lambda: {
        **replication_counts(_Parts(data, publisher)), **quorum_figures(quorum, membership, now_ms()), **log_dirs.gauges()})
    port = cfg.metrics_port
    server = metrics.start_http_server(port, cfg.metrics_host) if port else None
    if server is not None:
        host = f"[{server.host}]" if ":" in server.host else server.host
        log.info("metrics served", host=server.host, port=server.port, url=f"http://{host}:{server.port}/metrics")
    return metrics, server


class HostedParts(Protocol):
    """What the replication gauges read: a node, or a broker (its properties)."""

    @property
    def data(self) -> ReplicaManager: ...

    @property
    def metadata(self) -> MetadataPublisher: ...


class _Parts(NamedTuple):
    data: ReplicaManager
    metadata: MetadataPublisher


def replication_counts(parts: HostedParts) -> dict[str, int]:
    """The replication gauges: partitions led here (and how many lack replicas in their ISR, or fall below
    min.insync.replicas), partitions of the cluster without a leader (and of those, with an empty ISR, how
    many wait for an eligible replica and how many have none left: KIP-966), fenced brokers."""
    data = parts.data
    leaders = under = under_min = 0
    for partition in data.partitions.values():
        if partition.is_leader:
            leaders += 1
            if len(partition.isr) < len(partition.replicas):
                under += 1
            if len(partition.isr) < partition.min_insync_replicas:
                under_min += 1
    image = parts.metadata.image
    offline = waiting = no_eligible = 0
    for t in image.topics_by_id.values():
        for p in t.partitions.values():
            if p.leader < 0:
                offline += 1
                if not p.isr:
                    if p.elr:
                        waiting += 1
                    else:
                        no_eligible += 1
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    return {"leaders": leaders, "under_replicated": under, "under_min_isr": under_min, "offline": offline,
            "waiting_for_eligible": waiting, "no_eligible_leader": no_eligible,
            "fenced_brokers": fenced, "follower_consumer_reads": data.follower_consumer_reads,
            "preferred_replica_answers": data.preferred_replica_answers,
            "follower_fetches_woken": data.follower_fetches_woken, "partitions_pending": data.pending_hosting,
            "gc_frozen_objects": gc.get_freeze_count()}


def quorum_figures(quorum: QuorumDriver, membership: Membership, now: int) -> dict[str, float]:
    """The `odradek_quorum_*` gauges: the quorum leader this node knows (or that it knows none, and for how
    long), its epoch, and how long ago the active controller last answered this broker (-1 before it ever
    did, and on a controller-only node, which sends no heartbeats)."""
    watch = quorum.leader_watch
    age = membership.contact_age_ms(now)
    return {"quorum_leader_known": int(watch.leader_known), "quorum_leader_id": watch.leader_id,
            "quorum_epoch": watch.epoch, "quorum_seconds_without_leader": watch.seconds_without_leader(now),
            "quorum_controller_contact_age_seconds": -1 if age is None else age / 1000}


def _cache_releaser(loop):
    """Page-cache releases (storage.segment.drop_cache) in worker threads: the call can wait on a busy disk.
    At most two at a time; a release skipped is harmless, the next one covers the segment from its start."""
    pending = 0

    def done(_future) -> None:
        nonlocal pending
        pending -= 1

    def release(file, end: int) -> None:
        nonlocal pending
        if pending >= 2 or loop.is_closed():
            return
        try:
            future = loop.run_in_executor(None, drop_cache, file, end)
        except RuntimeError:  # the executor is shutting down with the broker
            return
        pending += 1
        future.add_done_callback(done)

    return release


class Housekeeping:
    """Retention, flushes, checkpoints and cleaning on the log manager's schedule (each call may do nothing).

    Flushes and checkpoints fsync, and compaction reads and rewrites whole segments: they run in worker
    threads (one flush and one cleaning at a time), off the event loop, as Kafka runs them off its
    request threads. The cleaner works on a snapshot of the segment list and swaps under a short lock
    inside the log; a flush syncs rolled segments, which no longer change.
    """

    def __init__(self, config: BrokerConfig, log_manager: LogManager, log_dirs: LogDirs, data: ReplicaManager) -> None:
        self.config = config
        self.log_manager = log_manager
        self.log_dirs = log_dirs
        self.data = data
        self._running: list[asyncio.Future[Any]] = []  # the flush and the cleaning in worker threads, if any

    async def settle(self) -> None:
        """Let a flush or cleaning that is running in a worker thread finish (before the logs close)."""
        await asyncio.gather(*self._running, return_exceptions=True)

    def _high_watermark(self, tp: TopicPartition) -> int | None:
        partition = self.data.get_partition(tp)
        return partition.high_watermark if partition is not None else None

    async def run(self) -> None:
        interval_s = 1.0
        loop = asyncio.get_running_loop()
        flushing: asyncio.Future | None = None
        cleaning: asyncio.Future | None = None
        next_clean_ms = 0

        def flush_and_checkpoint(manager, now: int) -> None:
            manager.maybe_flush(now)
            manager.maybe_checkpoint(now)

        while True:
            await asyncio.sleep(interval_s)
            try:
                now = now_ms()
                manager = self.log_manager
                self.log_dirs.check_failed_paths()
                manager.maybe_delete_old_segments(now, upper_bound_offset=self._high_watermark)
                manager.maybe_remove_expired_producers(now)
                # Work goes to a thread only when there is some: a worker woken every second to find nothing
                # still competes with the requests being served for the GIL (and, on a broker pinned to one
                # core, for the core).
                if flushing is None or flushing.done():
                    if manager.flush_due(now) or manager.checkpoint_due(now):
                        flushing = _resubmit(loop, flushing, "flush", flush_and_checkpoint, manager, now)
                if self.config.log_cleaner_enable and now >= next_clean_ms and (cleaning is None or cleaning.done()):
                    if cleaning is not None and cleaning.exception() is None and cleaning.result() is None:
                        # The last pass found nothing to clean: back off, as Kafka's cleaner threads do.
                        next_clean_ms = now + self.config.log_cleaner_backoff_ms
                        cleaning = None
                    else:
                        cleaning = _resubmit(loop, cleaning, "log cleaning", manager.maybe_clean, now)
                self._running = [f for f in (flushing, cleaning) if f is not None]
            except Exception:
                log.exception("housekeeping failed")


def _resubmit(loop, running: asyncio.Future | None, what: str, fn, *args) -> asyncio.Future | None:
    """Start `fn` in a worker thread unless its previous run is still going; report how that run ended."""
    if running is not None:
        if not running.done():
            return running
        if running.exception() is not None:
            log.error(f"{what} failed", error=str(running.exception()))
    return loop.run_in_executor(None, fn, *args)


# -- a failed first start leaves nothing behind --
#
# Kafka formats storage in a separate step (`kafka-storage format`) and binds its SocketServer only after
# the logs are loaded: a failed start there leaves the directories as `format` made them. A lone odradek node
# formats itself as it starts (storage/meta_properties.py), so a start that fails (a port in use, a setting
# refused late) would leave a half-written directory behind it: meta.properties, `__cluster_metadata-0`, a
# lock file. Two defences, as the broker starts (server.py's Broker.start): the ports it will bind are tried
# before anything is written (`check_ports_free`: the common failure, refused with its cause and nothing on
# disk), and what a failed start created in directories that were absent or empty before it is removed
# (`FreshDirectories`): a race for a port, or any later failure, undoes the start too. A directory that held
# anything before the start is never touched: its data is an operator's, not this start's; nor is one that
# another broker, started on the same new directory at the same moment, holds locked (this start lost the
# lock to it: what is there is the other's).


class FreshDirectories:
    """The node's directories that did not exist, or were empty, before this start: what `undo` may remove.
    For an absent directory the topmost ancestor that was absent too is remembered (`os.makedirs` made the
    whole chain)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.absent: list[str] = []  # topmost absent ancestors, removed whole
        self.empty: list[str] = []  # empty before: emptied again
        dirs = (*config.data_dirs, config.metadata_dir)
        self.paths = sorted({os.path.abspath(os.path.expanduser(d)) for d in dirs})
        for path in self.paths:
            if os.path.isdir(path):
                if not os.listdir(path):
                    self.empty.append(path)
                continue
            if os.path.exists(path):
                continue  # a file where a directory belongs: the start refuses it, and it is not ours
            top = path
            while not os.path.exists(os.path.dirname(top)) and os.path.dirname(top) != top:
                top = os.path.dirname(top)
            if top not in self.absent:
                self.absent.append(top)

    def undo(self) -> None:
        """Remove what the failed start wrote into them. Best effort: a file that cannot be removed stays."""
        import shutil

        for path in self.absent:
            if not self._in_use(path):
                shutil.rmtree(path, ignore_errors=True)
        for path in self.empty:
            if self._in_use(path):
                continue
            try:
                names = os.listdir(path)
            except OSError:
                continue
            for name in names:
                child = os.path.join(path, name)
                if os.path.isdir(child) and not os.path.islink(child):
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    try:
                        os.unlink(child)
                    except OSError:
                        pass


    def _in_use(self, top: str) -> bool:
        """A log directory under `top` is locked by another broker: one that started on the same new
        directory at the same time and won its lock (this start failed on it). Its files are not ours."""
        import fcntl

        for path in self.paths:
            if path != top and not path.startswith(top + os.sep):
                continue
            try:
                fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                return True
            finally:
                os.close(fd)
        return False


def check_ports_free(config: BrokerConfig) -> None:
    """Bind, and release at once, every fixed port this node will listen on (its listeners and the metrics
    endpoint), as the listeners will (SO_REUSEADDR): a port in use is refused here, naming the listener,
    before the node writes anything. Port 0 (any free port) needs no check."""
    import socket

    listeners = config.client_listeners()
    if "controller" in config.process_roles:
        listeners += config.controller_listeners()
    wanted = [(listener.name, listener.host or "0.0.0.0", listener.port) for listener in listeners]
    if config.metrics_port:
        wanted.append(("metrics", config.metrics_host, config.metrics_port))
    for name, host, port in wanted:
        if not port:
            continue
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as e:
            raise OSError(f"listener {name}: cannot resolve {host}: {e}") from e
        for family, kind, proto, _canon, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
            except OSError as e:
                raise OSError(e.errno, f"listener {name} cannot bind {host}:{port}: {e.strerror or e}") from e
            finally:
                sock.close()
