"""Start and stop the broker's components in order, and drive their clocks.

Start: log manager (directory lock, recovery) -> the replica fetcher manager -> the publisher of committed
metadata, with its listeners (the partitions and their logs follow the image, followed partitions are
fetched from their leaders) -> the metadata quorum (the Raft node over `__cluster_metadata-0`, its loader,
the controller channel) -> producer ids -> the services handlers receive -> metrics -> background
schedules. Then the broker binds its listeners, and `register_broker` starts the quorum and the broker's
lifecycle: registration with the active controller, heartbeats, unfencing.

There is one metadata road. A lone node (no other voter in controller.quorum.voters) runs the same Raft node
with itself as the only voter, as Kafka's combined mode with one controller does: it elects itself as soon
as it starts (no other voter to wait for, so its election timeout is 1 ms), needs no socket for the quorum,
and what it appends is committed as soon as it is flushed. Its broker registers and is unfenced by its own
controller in process, through the same calls a cluster node sends over the network. A directory written
when a lone node kept a local metadata log (no Raft) upgrades in place: its batches are read as the
quorum's log from before any election, committed by the first LeaderChange after them.

Stop runs the other way (the fetchers stop before the logs close) and ends with flushed logs, checkpoints
and the clean-shutdown marker.

The timing wheel is driven by one timer handle: after every state change the broker calls
`after_state_change()`, which (re)arms a `loop.call_at` for the wheel's next deadline. Nothing polls.
"""

from __future__ import annotations

import asyncio
import os
import time

import structlog

from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import Endpoint, new_cluster_id
from odradek.metadata.log import metadata_log_config
from odradek.metadata.publisher import MetadataPublisher
from odradek.replication.hosting import PartitionHosting
from odradek.replication.replica_manager import ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.log_manager import LogManager
from odradek.storage.meta_properties import claim_for_cluster, read_meta_properties
from odradek.storage.names import TopicPartition
from odradek.storage.segment import drop_cache

from .storage_tool import read_bootstrap_records
from .context import SecurityProtocol
from .controller_settings import new_controller
from .services import BrokerServices
from .topics import topic_settings

log = structlog.get_logger("odradek.broker")

METADATA_PARTITION = TopicPartition("__cluster_metadata", 0)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def start_components(broker) -> None:
    cfg = broker.config
    loop = asyncio.get_running_loop()
    broker.timer = Timer(tick_ms=1, wheel_size=20, start_ms=now_ms())

    # Every directory of log.dirs (JBOD), and metadata.log.dir when it is another. A directory formatted by
    # `odradek storage format` names the cluster this node belongs to; the others and the metadata log
    # must agree.
    data_dirs = [os.path.abspath(os.path.expanduser(d)) for d in cfg.data_dirs]
    formatted = next((p for p in map(read_meta_properties, data_dirs) if p and p.get("cluster.id")), None) or {}
    broker.cluster_id = formatted.get("cluster.id")
    metadata_dir = os.path.abspath(os.path.expanduser(cfg.metadata_dir))
    if broker.cluster_id is None and is_lone_node(cfg) and not any(map(read_meta_properties, {*data_dirs, metadata_dir})):
        # A lone node's first start on new directories: it formats them itself (see _format_lone_node), the
        # cluster id written with the rest of meta.properties as the log manager claims them.
        broker.cluster_id = new_cluster_id()
    broker.log_manager = LogManager(
        data_dirs, now_ms=now_ms(), node_id=cfg.node_id, cluster_id=broker.cluster_id,
        retention_check_interval_ms=cfg.log_retention_check_interval_ms,
        producer_id_expiration_check_interval_ms=cfg.producer_id_expiration_check_interval_ms,
        cache_window_bytes=cfg.log_cache_window_bytes, cache_release=_cache_releaser(loop),
        metadata_log_dir=metadata_dir,
    )
    broker.log_manager.update_topic_config(METADATA_PARTITION.topic, metadata_log_config())
    broker.data = ReplicaManager(node_id=cfg.node_id, timer=broker.timer, defer_fetch_completion=True,
                                 replica_lag_time_max_ms=cfg.replica_lag_time_max_ms)
    publisher = broker.metadata = MetadataPublisher()
    _wire_replica_selection(broker.data, cfg, publisher)
    # A controller-only node hosts no partitions. A lone node follows no leader (it holds the only replica
    # of what it hosts), and its inter-broker listener need not have the login a follower fetches with.
    if "broker" in cfg.process_roles and not is_lone_node(cfg):
        from .replica_fetcher import ReplicaFetcherManager

        broker.replica_fetchers = ReplicaFetcherManager(
            node_id=cfg.node_id, config=cfg, data=broker.data, image=lambda: publisher.image,
            broker_epoch=lambda: broker.broker_epoch, clock=now_ms,
        )
    publisher.register(PartitionHosting(broker.data, broker.log_manager, topic_settings(cfg), now_ms, broker.replica_fetchers))
    from .log_dirs import LogDirs

    broker.log_dirs = LogDirs(broker)
    _start_quorum(broker, publisher)

    from .groups_wiring import start_group_coordinator
    from .txn_wiring import start_transaction_coordinator

    broker.services = BrokerServices(
        config=cfg, now_ms=now_ms, metadata=publisher, controller=broker.controller, data=broker.data,
        log_manager=broker.log_manager,
        producer_ids=ProducerIdManager(lambda: broker.controller.allocate_producer_ids(cfg.node_id)),
        api_versions_response=broker.api_versions_response,
        controller_api_versions_response=broker.controller_api_versions_response,
        groups_factory=lambda: start_group_coordinator(broker), quorum=broker.quorum, log_dirs=broker.log_dirs,
        transactions_factory=lambda: start_transaction_coordinator(broker),
    )
    broker.log_dirs.start()
    from .txn_wiring import StartWhenLeading

    publisher.register(StartWhenLeading(broker))
    _start_metrics(broker, loop)
    broker.spawn(_housekeeping(broker))


def _wire_replica_selection(data: ReplicaManager, cfg, publisher: MetadataPublisher) -> None:
    """KIP-392: the configured replica selector, and each broker's rack and reachability from the image; and
    which brokers are alive (DeleteRecords' low watermark counts the replicas on those only)."""
    from odradek.replication.replica_selector import replica_selector_for

    data.replica_selector = replica_selector_for(cfg.replica_selector_class)

    def replica_rack(broker_id: int, listener: str) -> tuple[bool, str | None]:
        registration = publisher.image.brokers.get(broker_id)
        if registration is None or registration.fenced:
            return False, None
        return any(e.name == listener for e in registration.endpoints), registration.rack

    data.replica_rack = replica_rack

    def is_broker_alive(broker_id: int) -> bool:
        registration = publisher.image.brokers.get(broker_id)
        return registration is not None and not registration.fenced

    data.is_broker_alive = is_broker_alive


def is_lone_node(cfg) -> bool:
    """A controller with no other voter (controller.quorum.voters empty, or naming only this node): the
    only voter of its quorum."""
    return "controller" in cfg.process_roles and not any(v.node_id != cfg.node_id for v in cfg.voters())


def _start_quorum(broker, publisher: MetadataPublisher) -> None:
    """The metadata log replicated by the Raft quorum (broker/quorum.py): this node a voter when it is in
    controller.quorum.voters (or alone), else an observer; the controller channel decides here while this
    node is the active controller and forwards otherwise."""
    import random

    from odradek.raft import FileQuorumStateStore, RaftConfig, RaftNode
    from odradek.raft.storage_log import StorageRaftLog

    from .config import ConfigError
    from .node_client import NodeConnections
    from .security import node_security
    from .quorum import ClusterControllerChannel, MetadataLoader, QuorumControllerChannel, QuorumDriver

    cfg = broker.config
    lone = is_lone_node(cfg)
    if broker.cluster_id is None and not lone:
        raise ConfigError(
            "a node of a controller quorum needs formatted storage: run `odradek storage format --cluster-id ID "
            "-c <this server.properties>` on every node with the same id (`odradek storage random-uuid`)",
            key="log.dirs",
        )
    log_ = broker.log_manager.get_or_create_log(METADATA_PARTITION, now_ms=now_ms(),
                                                log_dir=broker.log_manager.metadata_log_dir)
    raft_log = StorageRaftLog(log_)
    if broker.cluster_id is None:
        broker.cluster_id = _format_lone_node(broker, raft_log)
    voters = {v.node_id: (v.host, v.port) for v in cfg.voters()}
    if lone:
        voters = {cfg.node_id: voters.get(cfg.node_id)}  # no quorum connection is ever made to it
    loader = MetadataLoader(
        publisher, clock=now_ms, snapshot_max_bytes=cfg.metadata_log_max_record_bytes_between_snapshots,
        snapshot_max_interval_ms=cfg.metadata_log_max_snapshot_interval_ms,
    )
    raft = RaftNode(
        RaftConfig(
            node_id=cfg.node_id, voters=tuple(sorted(voters)), cluster_id=broker.cluster_id,
            # A lone voter has nobody to hear from before it stands: it elects itself at once.
            election_timeout_ms=1 if lone else cfg.controller_quorum_election_timeout_ms,
            election_backoff_max_ms=cfg.controller_quorum_election_backoff_max_ms,
            fetch_timeout_ms=cfg.controller_quorum_fetch_timeout_ms,
            request_timeout_ms=cfg.controller_quorum_request_timeout_ms,
            # A parked fetch must be answered well within the fetcher's request timeout.
            fetch_max_wait_ms=min(500, cfg.controller_quorum_request_timeout_ms // 2),
        ),
        raft_log, FileQuorumStateStore(log_.directory), loader, random.Random(), now_ms(),
    )
    loader.raft = raft
    if raft.leader_id >= 0 and raft.leader_id != cfg.node_id:
        # A voter restarting as a follower of the leader its quorum state names is not told of it by the
        # node (no change happens): without this it would know no active controller to register with
        # until the next election.
        loader.handle_leader_change(raft.leader_id, raft.epoch)
    connections = NodeConnections(voters.get, client_id=f"odradek-node-{cfg.node_id}", security=node_security(
        cfg, cfg.controller_listener_names[0], "sasl.mechanism.controller.protocol"))
    driver = QuorumDriver(raft, connections, now_ms, request_timeout_ms=cfg.controller_quorum_request_timeout_ms)
    driver.after_each_call = loader.maybe_snapshot
    local = None
    if raft.is_voter and "controller" in cfg.process_roles:
        controller = new_controller(cfg)
        controller.bootstrap_extra = read_bootstrap_records(cfg.metadata_dir)
        local = QuorumControllerChannel(controller, cfg, now_ms, driver, loader)
        local.cluster_id = broker.cluster_id
    broker.quorum = driver
    broker.metadata_loader = loader
    broker.controller = ClusterControllerChannel(local, loader, connections, node_id=cfg.node_id)


def _format_lone_node(broker, raft_log) -> str:
    """A lone node's cluster id, written into the meta.properties of each of its directories: the one its
    metadata log names (a directory written before a lone node ran Raft), else a new random one.

    Why a lone node formats itself, where Kafka asks for `kafka-storage format` first: formatting is
    what keeps a node of a cluster from starting a new cluster of its own on an empty (lost, replaced)
    disk instead of joining the one it belongs to. A lone node belongs to no other cluster: its quorum is
    itself, so an empty directory can only mean a new cluster, and `odradek broker start` stays the one
    command the README promises. A node with other voters still refuses unformatted storage."""
    from odradek.metadata.loader import logged_cluster_id

    cluster_id = logged_cluster_id(raft_log) or new_cluster_id()
    manager = broker.log_manager
    paths = {d.path for d in manager.dirs} | {manager.metadata_log_dir}
    for path in sorted(paths):
        claim_for_cluster(path, cluster_id)
    log.info("formatted the storage of a lone node", cluster_id=cluster_id)
    return cluster_id


def register_broker(broker) -> None:
    """Start the quorum (a lone node elects itself at once) and, on a node with the broker role, the broker's
    lifecycle (registration with the active controller, heartbeats, unfencing) and its ISR upkeep. Every
    node goes this way; a lone node's controller is in this process, and is called without a socket."""
    from .replica_fetcher import maintain_isr

    cfg = broker.config
    endpoints = registration_endpoints(cfg, {name: port for name, _host, port in broker.bound})
    broker.quorum.start()
    if "broker" in cfg.process_roles:  # a controller-only node is no broker: it does not register
        broker.lifecycle = broker.spawn(_lifecycle(broker, endpoints))
        broker.spawn(maintain_isr(broker))


def _load_coordinators(broker) -> None:
    """Once this broker serves: start the group and transaction coordinators if their topics exist, so that
    the partitions led here are loaded (and ended transactions' markers resumed) before clients ask."""
    from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC

    from .groups_wiring import OFFSETS_TOPIC

    image = broker.metadata.image
    if image.topics_by_name.get(OFFSETS_TOPIC) is not None:
        broker.services.groups
    if image.topics_by_name.get(TRANSACTION_STATE_TOPIC) is not None and broker.services.transactions_if_started is None:
        broker.services.transactions
    broker.after_state_change()
    log.info("components started", cluster_id=image.cluster_id, topics=len(image.topics_by_name))


async def _lifecycle(broker, endpoints: list[Endpoint]) -> None:
    """A node of a cluster (Kafka's BrokerLifecycleManager): register with the active controller (fenced,
    retrying until one answers), then heartbeat every broker.heartbeat.interval.ms with the offset of the
    last metadata record applied here; the controller unfences this broker once it has caught up, and
    fences it when its heartbeats stop for broker.session.timeout.ms.

    A lone node does the same with the controller in its own process: it waits for that controller to be
    active (its election is immediate), registers, and its first heartbeat unfences it; a registration
    its own controller refuses (another cluster's log) is final and stops the start."""
    import uuid

    from odradek.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
    from odradek.metadata.image import METADATA_VERSION, METADATA_VERSION_FEATURE

    cfg = broker.config
    controller = broker.controller
    request = BrokerRegistrationRequest(
        broker_id=cfg.node_id, cluster_id=broker.cluster_id, incarnation_id=uuid.uuid4(), rack=cfg.broker_rack,
        listeners=[BrokerRegistrationRequest.Listener(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                   for e in endpoints],
        features=[BrokerRegistrationRequest.Feature(name=METADATA_VERSION_FEATURE, min_supported_version=1,
                                                    max_supported_version=METADATA_VERSION)],
    )
    interval_s = cfg.broker_heartbeat_interval_ms / 1000
    lone = broker.quorum.is_lone_voter
    if lone:
        await controller.local.activated.wait()
    while True:
        try:
            response = await broker.services.future_from(controller.broker_registration(request))
            if response.error_code == 0:
                broker.broker_epoch = response.broker_epoch
                break
            log.debug("registration refused", error_code=response.error_code)
        except Exception as e:  # noqa: BLE001 - no controller yet, a controller change: try again
            if lone:
                raise
            log.debug("registration not done yet", error=str(e))
        await asyncio.sleep(min(interval_s, 0.2))
    log.info("registered", broker_epoch=broker.broker_epoch)
    session_s = cfg.broker_session_timeout_ms / 1000
    answered_at = time.monotonic()
    while True:
        if broker.shutting_down:
            interval_s = min(interval_s, 0.2)  # controlled shutdown: ask often
        heartbeat = BrokerHeartbeatRequest(
            broker_id=cfg.node_id, broker_epoch=broker.broker_epoch,
            current_metadata_offset=broker.metadata_loader.applied_end_offset - 1, want_fence=False,
            want_shut_down=broker.shutting_down,
        )
        try:
            # A heartbeat that cannot be answered within half a session is given up for the next one.
            half_session_s = cfg.broker_session_timeout_ms / 2000
            response = await asyncio.wait_for(
                broker.services.future_from(controller.heartbeat(heartbeat, timeout_s=half_session_s)), half_session_s
            )
        except Exception as e:  # noqa: BLE001 - the next heartbeat tries again
            log.debug("heartbeat failed", error=str(e))
            if not broker.data.lease_expired and time.monotonic() - answered_at > session_s:
                log.warning("no heartbeat answered within broker.session.timeout.ms: this broker is fenced and "
                            "what it leads has moved; it hides its leaderships until it hears from the controller")
                broker.data.set_lease_expired(True)
            if broker.shutting_down:  # no controller to move leaderships away (the quorum is going too)
                broker.shutdown_granted.set()
        else:
            if response.error_code == 0:
                answered_at = time.monotonic()
                if broker.data.lease_expired:
                    log.info("heartbeat answered again")
                    broker.data.set_lease_expired(False)
                if broker.fenced and not response.is_fenced:
                    log.info("unfenced", broker_epoch=broker.broker_epoch)
                broker.fenced = response.is_fenced
                if response.is_caught_up:
                    if not broker.caught_up.is_set():
                        try:
                            _load_coordinators(broker)
                        except Exception:  # noqa: BLE001 - they start on their first request instead
                            log.exception("starting the coordinators failed")
                    broker.caught_up.set()
                if response.should_shut_down:
                    broker.shutdown_granted.set()
            elif response.error_code in (int(ErrorCode.STALE_BROKER_EPOCH), int(ErrorCode.BROKER_ID_NOT_REGISTERED)):
                log.warning("the controller no longer knows this registration; registering again")
                return await _lifecycle(broker, endpoints)
        try:  # the next heartbeat, or at once when a controlled shutdown is asked for
            await asyncio.wait_for(broker.heartbeat_now.wait(), interval_s)
        except asyncio.TimeoutError:
            pass
        broker.heartbeat_now.clear()


def registration_endpoints(cfg, bound_ports: dict[str, int]) -> list[Endpoint]:
    """Each advertised listener as clients should reach it: a meta-address or empty host becomes
    localhost, a port of 0 the port actually bound for that listener name."""
    endpoints = []
    for listener in cfg.advertised_listener_list():
        host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "localhost"
        port = listener.port or bound_ports.get(listener.name, 0)
        endpoints.append(Endpoint(listener.name, host, port, SecurityProtocol(listener.security_protocol).id))
    return endpoints


def _start_metrics(broker, loop) -> None:
    from .metrics import Metrics

    metrics = Metrics(node_id=broker.node_id)
    metrics.bind_loop(loop)
    metrics.set_partition_count_source(lambda: len(broker.data.partitions))
    metrics.track_purgatory("Produce", broker.data.produce_purgatory.num_delayed)
    metrics.track_purgatory("Fetch", broker.data.fetch_purgatory.num_delayed)
    metrics.set_log_size_source(
        lambda: [(tp.topic, tp.partition, p.log.size_bytes) for tp, p in broker.data.partitions.items()]
    )
    metrics.set_replication_source(lambda: replication_counts(broker))
    broker.metrics = metrics
    port = broker.config.metrics_port
    broker.metrics_server = metrics.start_http_server(port, broker.config.metrics_host) if port else None


def replication_counts(broker) -> dict[str, int]:
    """The replication gauges: partitions led here (and how many lack replicas in their ISR, or fall below
    min.insync.replicas), partitions of the cluster without a leader, fenced brokers."""
    leaders = under = under_min = 0
    for partition in broker.data.partitions.values():
        if partition.is_leader:
            leaders += 1
            if len(partition.isr) < len(partition.replicas):
                under += 1
            if len(partition.isr) < partition.min_insync_replicas:
                under_min += 1
    image = broker.metadata.image
    offline = sum(1 for t in image.topics_by_id.values() for p in t.partitions.values() if p.leader < 0)
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    return {"leaders": leaders, "under_replicated": under, "under_min_isr": under_min, "offline": offline,
            "fenced_brokers": fenced, "follower_consumer_reads": broker.data.follower_consumer_reads,
            "preferred_replica_answers": broker.data.preferred_replica_answers}


def arm_timer(broker) -> None:
    deadline = broker.timer.next_expiration_ms()
    if deadline is None:
        return
    if broker._timer_deadline is not None and broker._timer_deadline <= deadline and broker._timer_handle is not None:
        return
    if broker._timer_handle is not None:
        broker._timer_handle.cancel()
    loop = asyncio.get_running_loop()
    delay_s = max(0.0, (deadline - now_ms()) / 1000)
    broker._timer_deadline = deadline
    broker._timer_handle = loop.call_later(delay_s, _fire_timer, broker)


def _fire_timer(broker) -> None:
    broker._timer_handle = None
    broker._timer_deadline = None
    try:
        broker.timer.advance_clock(now_ms())
    finally:
        arm_timer(broker)


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


async def _housekeeping(broker) -> None:
    """Retention, flushes, checkpoints and cleaning on the log manager's schedule (each call may do nothing).

    Flushes and checkpoints fsync, and compaction reads and rewrites whole segments: they run in worker
    threads (one flush and one cleaning at a time), off the event loop, as Kafka runs them off its
    request threads. The cleaner works on a snapshot of the segment list and swaps under a short lock
    inside the log; a flush syncs rolled segments, which no longer change.
    """
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
            manager = broker.log_manager
            broker.log_dirs.check_failed_paths()
            manager.maybe_delete_old_segments(now, upper_bound_offset=lambda tp: _high_watermark(broker, tp))
            manager.maybe_remove_expired_producers(now)
            # Work goes to a thread only when there is some: a worker woken every second to find nothing
            # still competes with the requests being served for the GIL (and, on a broker pinned to one
            # core, for the core).
            if flushing is None or flushing.done():
                if manager.flush_due(now) or manager.checkpoint_due(now):
                    flushing = _resubmit(loop, flushing, "flush", flush_and_checkpoint, manager, now)
            if broker.config.log_cleaner_enable and now >= next_clean_ms and (cleaning is None or cleaning.done()):
                if cleaning is not None and cleaning.exception() is None and cleaning.result() is None:
                    # The last pass found nothing to clean: back off, as Kafka's cleaner threads do.
                    next_clean_ms = now + broker.config.log_cleaner_backoff_ms
                    cleaning = None
                else:
                    cleaning = _resubmit(loop, cleaning, "log cleaning", manager.maybe_clean, now)
            broker._maintenance = [f for f in (flushing, cleaning) if f is not None]
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


def _high_watermark(broker, tp) -> int | None:
    partition = broker.data.get_partition(tp)
    return partition.high_watermark if partition is not None else None


async def stop_components(broker) -> None:
    if broker._timer_handle is not None:
        broker._timer_handle.cancel()
    sender = broker.txn_marker_sender
    if sender is not None:
        await sender.close()
    if broker.metrics_server is not None:
        broker.metrics_server.stop()
    # Let a flush or cleaning that is running in a worker thread finish before the logs close under it.
    await asyncio.gather(*broker._maintenance, return_exceptions=True)
    if broker.replica_fetchers is not None:  # before the logs they append to close
        await broker.replica_fetchers.shutdown()
    if broker.log_dirs is not None:
        await broker.log_dirs.stop()
    if broker.quorum is not None:  # None when the start failed before the quorum was made
        await broker.quorum.stop()
        await broker.controller.close()
        await broker.quorum.connections.close()
    if broker.log_manager is not None:
        broker.log_manager.close()
