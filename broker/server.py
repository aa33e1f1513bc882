"""The broker: wires storage, replication and coordinators to the network pipeline.

    async with Broker(config) as broker:      # in-process, e.g. in a user's tests
        print(broker.bound_port)

`odradek broker start` (broker/daemon.py) runs the same object until SIGTERM/SIGINT. Shutdown is graceful:
stop accepting, let each connection finish its current request, flush and checkpoint the logs, write the
clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable
from types import CoroutineType
from typing import TYPE_CHECKING, Any

import structlog

from . import handlers as handler_registry
from odradek.protocol.codec import Message
from odradek.protocol.error_codes import error_codes
from odradek.purgatory.deferred import Deferred
from odradek.storage.errors import KafkaStorageError

from .components import (
    FreshDirectories, build_node, check_ports_free, registration_endpoints, run_lifecycle, stop_node,
)
from .config import BrokerConfig, ConfigError
from .context import DECLINED, ConnectionContext, Packed, RequestContext, SecurityProtocol
from .handlers.api_versions import ApiVersionsAnswers, build_response
from .handlers.produce import serve_produce_frame
from .network import NetworkServer
from .node import Membership, Node
from .replica_fetcher import maintain_isr
from .quotas import connection_creation_rates
from .security import listener_security
from .services import BrokerServices

if TYPE_CHECKING:
    from odradek.coordinator.group.group_coordinator import GroupCoordinator
    from odradek.metadata.loader import MetadataLoader
    from odradek.metadata.publisher import MetadataPublisher
    from odradek.purgatory.timing_wheel import Timer
    from odradek.replication.replica_manager import ReplicaManager
    from odradek.storage.log_manager import LogManager

    from .log_dirs import LogDirs
    from .metrics import Metrics, MetricsServer
    from .quorum import ClusterControllerChannel, QuorumDriver
    from .replica_fetcher import ReplicaFetcherManager
    from .txn_wiring import MarkerSender

log = structlog.get_logger("odradek.broker")


class Broker:
    # Produce v3-v13 goes by the fast path (handlers.produce.serve_produce_frame); tests turn it off on an
    # instance, before start(), to compare its answers with the general path's.
    produce_fast_path = True

    def __init__(self, config: BrokerConfig | None = None, **overrides: Any):
        if config is None:
            config = BrokerConfig.from_properties({k.replace("_", "."): v for k, v in overrides.items()})
        self.config = config
        self.node_id = config.node_id
        self.registry = handler_registry.load_handlers(gates=handler_registry.gates_of(config))
        self.accepted_versions = handler_registry.accepted_versions(self.registry)
        self.advertised_versions = handler_registry.advertised_versions(self.registry)
        # ApiVersions answers carry the features of the current metadata image (handlers/api_versions.py).
        self.api_versions_response = ApiVersionsAnswers(build_response(self.advertised_versions))
        # The controller listeners serve the quorum's and the brokers' RPCs, with their own ApiVersions.
        self.controller_registry = handler_registry.load_handlers(handler_registry.CONTROLLER)
        self.controller_api_versions_response = ApiVersionsAnswers(build_response(
            handler_registry.advertised_versions(self.controller_registry)
        ))
        self.network: NetworkServer | None = None
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port)
        self.controller_bound: list[tuple[str, str, int]] = []
        # The node's parts (broker/node.py), built in order by components.build_node when the broker starts
        # and stopped in reverse by components.stop_node; read through the properties below.
        self._node: Node | None = None
        self.membership = Membership()  # registration, fencing, controlled shutdown (node.Membership)
        self.lifecycle: asyncio.Task | None = None  # registration and heartbeats (components.run_lifecycle)
        self._fetches_scheduled = False
        self._background: list[asyncio.Task] = []
        self._started = False
        # Why the node must stop (its metadata log directory failed), and who stops it (the daemon). A
        # failure met while starting makes the start fail with it instead.
        self.fatal_error: str | None = None
        self._on_fatal: Callable[[str], None] | None = None
        self._fatal_event = asyncio.Event()

    # -- life cycle --

    async def start(self) -> None:
        cfg = self.config
        refuse_unserved_settings(cfg)
        per_ip_overrides = ip_overrides(cfg)  # an unresolvable host name stops the start here
        # TLS contexts and SASL settings are read before anything starts: a bad key store stops the start.
        security = {
            listener.name: listener_security(cfg, listener.name, SecurityProtocol(listener.security_protocol), self._scram_credential)
            for listener in cfg.listener_list()
        }
        check_ports_free(cfg)  # a port in use stops the start before anything is written
        fresh = FreshDirectories(cfg)
        try:
            await self._start(cfg, security, per_ip_overrides)
        except BaseException:
            # A failed start leaves no task running, no lock held and, in directories that were absent or
            # empty before it, nothing written (components.FreshDirectories).
            await self._abandon_start()
            fresh.undo()
            raise
        # (The daemon tells where it listens, once per listener: broker/daemon.py.)
        self._started = True

    async def _start(self, cfg: BrokerConfig, security: dict, per_ip_overrides: Any) -> None:
        node = self._node = await build_node(
            cfg, self.membership, spawn=self.spawn, after_state_change=self.after_state_change, dispatch=self.dispatch,
            api_versions_response=self.api_versions_response,
            controller_api_versions_response=self.controller_api_versions_response,
        )
        node.log_dirs.on_fatal_error(self._fatal)
        network = self.network = NetworkServer(
            dispatch=self.dispatch,
            serve_produce_frame=self.serve_produce_frame if self.produce_fast_path else None,
            accepted_versions=self.accepted_versions,
            advertised_versions=self.advertised_versions,
            max_frame_bytes=cfg.socket_request_max_bytes,
            max_connections=cfg.max_connections,
            queued_max_requests=cfg.queued_max_requests,
            max_connections_per_ip=cfg.max_connections_per_ip,
            max_connections_per_ip_overrides=per_ip_overrides,
            listener_max_connections=listener_max_connections(cfg),
            protected_listeners=protected_listeners(cfg),
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            on_protocol_error=self._count_protocol_error,
            metrics=node.metrics,
            connection_rates=connection_creation_rates(cfg),
            client_quotas=lambda: node.metadata.image.client_quotas,
        )
        network.start()
        # Bind first, serve after registering: the registration carries the ports actually bound.
        for listener in cfg.client_listeners():
            host = listener.host or "0.0.0.0"
            protocol = SecurityProtocol(listener.security_protocol)
            bound_host, port = await network.listen(
                listener.name, host, listener.port, protocol, security=security[listener.name]
            )
            self.bound.append((listener.name, bound_host, port))
        if "controller" in cfg.process_roles and cfg.controller_listeners():
            network.add_scope(
                handler_registry.CONTROLLER, handler_registry.accepted_versions(self.controller_registry),
                handler_registry.advertised_versions(self.controller_registry),
            )
            for listener in cfg.controller_listeners():
                bound_host, port = await network.listen(
                    listener.name, listener.host or "0.0.0.0", listener.port,
                    SecurityProtocol(listener.security_protocol), scope=handler_registry.CONTROLLER,
                    security=security[listener.name],
                )
                self.controller_bound.append((listener.name, bound_host, port))
        self._register(node)
        if self.bound:
            # A node serves its controller listeners at once (the quorum needs them) and its broker
            # listeners once the controller says it has caught up with the metadata log (Kafka's
            # initialCatchUpFuture): until then its image may lack the SCRAM credentials, ACLs and
            # topics clients are judged by (a restarted node would refuse a valid login). Connections
            # made meanwhile wait in the listen backlog.
            await network.start_serving([name for name, _host, _port in self.controller_bound])
            if node.quorum.is_lone_voter and self.lifecycle is not None:
                # A lone node is its own controller: it is registered, unfenced and caught up within
                # a few event-loop turns, and start() returns once it serves, as a caller expects.
                await self._until_caught_up()
                await network.start_serving()
            else:  # the other voters may not be up yet: serve once they have elected a controller
                self.spawn(self._serve_when_caught_up())
        else:
            await network.start_serving()

    async def _abandon_start(self) -> None:
        """Undo a start that failed: stop what it started (the node's parts, its listeners, its tasks)."""
        self.bound.clear()
        self.controller_bound.clear()
        if self._node is None:  # build_node failed: it closed what it had opened
            for task in self._background:
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            return
        self._started = True
        await self.stop()

    def _register(self, node: Node) -> None:
        """Start the quorum (a lone node elects itself at once) and, on a node with the broker role, the
        broker's lifecycle (registration with the active controller, heartbeats, unfencing) and its ISR
        upkeep. Every node goes this way; a lone node's controller is in this process, called without a
        socket."""
        cfg = self.config
        endpoints = registration_endpoints(cfg, {name: port for name, _host, port in self.bound})
        node.quorum.start()
        if "broker" in cfg.process_roles:  # a controller-only node is no broker: it does not register
            self.lifecycle = self.spawn(run_lifecycle(node, self.membership, endpoints))
            self.spawn(maintain_isr(cfg, self.membership, node.data, node.metadata, node.controller, self.now_ms))

    async def _until_caught_up(self) -> None:
        """Wait for the lifecycle's first heartbeat answer that says caught up; raise what ended it first
        (a registration the node's own controller refused)."""
        lifecycle = self.lifecycle
        assert lifecycle is not None
        caught_up = asyncio.ensure_future(self.membership.caught_up.wait())
        fatal = asyncio.ensure_future(self._fatal_event.wait())
        try:
            await asyncio.wait({caught_up, lifecycle, fatal}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            caught_up.cancel()
            fatal.cancel()
        if self.fatal_error is not None:
            raise KafkaStorageError(self.fatal_error)
        if not self.membership.caught_up.is_set():
            lifecycle.result()  # raises what refused the registration
            raise RuntimeError("the broker lifecycle ended before the broker caught up")

    async def _serve_when_caught_up(self) -> None:
        await self.membership.caught_up.wait()
        network = self.network
        if network is not None and not network.draining:  # not stopping already
            await network.start_serving()
            log.info("caught up with the metadata log: serving the broker listeners")

    async def stop(self, drain_timeout_s: float = 5.0) -> None:
        if not self._started:
            return
        self._started = False
        node = self.node
        await self._controlled_shutdown(node)
        network = self.network
        if network is not None:  # (None only when a start failed before it was made)
            await network.stop_accepting()
        self._answer_long_polls()
        if network is not None:
            await network.drain(drain_timeout_s)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await stop_node(node, self.membership.broker_epoch)
        log.info("stopped")

    async def _controlled_shutdown(self, node: Node, timeout_s: float = 10.0) -> None:
        """A node of a cluster leaves in order (Kafka's controlled shutdown): its heartbeats ask to shut
        down until the controller has moved its leaderships away and says it may; then, if it leads the
        quorum, it resigns (EndQuorumEpoch) so that another voter takes over at once, not after a timeout.

        A lone node with no other broker skips both: there is nobody to move leaderships or the quorum's
        lead to. Its registration stays unfenced in the log; the next start registers a new incarnation,
        which fences the old one and is unfenced by its first heartbeat, as after a crash."""
        lone = node.quorum.is_lone_voter
        others = any(b != self.node_id for b in node.metadata.image.brokers)
        if self.membership.broker_epoch >= 0 and (others or not lone):
            self.membership.ask_to_shut_down()
            try:
                await asyncio.wait_for(self.membership.shutdown_granted.wait(), timeout_s)
                log.info("controlled shutdown granted")
            except asyncio.TimeoutError:
                log.warning("controlled shutdown not granted in time; stopping anyway", timeout_s=timeout_s)
        if node.quorum.raft.is_leader and not lone:
            node.quorum.process(node.quorum.raft.resign(node.quorum.clock()))
            await asyncio.sleep(0.1)  # let EndQuorumEpoch go out

    def _answer_long_polls(self) -> None:
        """Answer parked fetches (with what they have) and pending group joins (NOT_COORDINATOR, so clients
        look for the coordinator again) now, rather than hold shutdown for their timeouts."""
        node = self.node
        node.data.fetch_purgatory.complete_all()
        groups = node.services.groups_if_started
        if groups is not None:
            groups.shutdown()

    async def __aenter__(self) -> "Broker":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.append(task)
        return task

    def _scram_credential(self, mechanism, username: str):
        """A user's SCRAM credential from the committed metadata (AlterUserScramCredentials, --add-scram)."""
        return self.node.metadata.image.scram_credentials.get((username, int(mechanism)))

    @property
    def bound_port(self) -> int:
        return (self.bound or self.controller_bound)[0][2]

    @property
    def advertised_endpoint(self) -> tuple[str, int]:
        """The host and port of this broker's first registered endpoint (what clients of that listener use)."""
        endpoint = self.node.metadata.image.brokers[self.node_id].endpoints[0]
        return endpoint.host, endpoint.port

    @property
    def groups(self) -> GroupCoordinator:
        """The group coordinator, created with `__consumer_offsets` on first use as Kafka does."""
        return self.node.services.groups

    # -- the node's parts: read-only, None until the broker has started (broker/node.py)

    @property
    def node(self) -> Node:
        if self._node is None:
            raise RuntimeError("the broker has not started")
        return self._node

    @property
    def timer(self) -> Timer | None:
        return None if self._node is None else self._node.timer

    @property
    def log_manager(self) -> LogManager | None:
        return None if self._node is None else self._node.log_manager

    @property
    def data(self) -> ReplicaManager | None:
        """The data plane (logs, partitions, purgatories)."""
        return None if self._node is None else self._node.data

    @property
    def metadata(self) -> MetadataPublisher | None:
        """The publisher of committed metadata; `.image` is the current image."""
        return None if self._node is None else self._node.metadata

    @property
    def controller(self) -> ClusterControllerChannel | None:
        return None if self._node is None else self._node.controller

    @property
    def services(self) -> BrokerServices | None:
        """What handlers receive."""
        return None if self._node is None else self._node.services

    @property
    def cluster_id(self) -> str | None:
        return None if self._node is None else self._node.cluster_id

    @property
    def quorum(self) -> QuorumDriver | None:
        """The Raft driver (broker/quorum.py); a lone node is its quorum's only voter."""
        return None if self._node is None else self._node.quorum

    @property
    def metadata_loader(self) -> MetadataLoader | None:
        return None if self._node is None else self._node.metadata_loader

    @property
    def replica_fetchers(self) -> ReplicaFetcherManager | None:
        """The follower fetchers (broker/replica_fetcher.py); none on a lone node."""
        return None if self._node is None else self._node.replica_fetchers

    @replica_fetchers.setter
    def replica_fetchers(self, fetchers: ReplicaFetcherManager) -> None:
        self.node.follow_with(fetchers)  # tests that stop a follower's fetching and start it again

    @property
    def log_dirs(self) -> LogDirs | None:
        return None if self._node is None else self._node.log_dirs

    def on_fatal_error(self, callback: Callable[[str], None]) -> None:
        """Who stops this broker when it cannot go on (its metadata log directory failed): the daemon. Told at
        once of a failure met before it asked."""
        self._on_fatal = callback
        if self.fatal_error is not None:
            callback(self.fatal_error)

    def _fatal(self, why: str) -> None:
        if self.fatal_error is not None:
            return
        self.fatal_error = why
        self._fatal_event.set()
        if self._on_fatal is not None:
            self._on_fatal(why)

    @property
    def txn_marker_sender(self) -> MarkerSender | None:
        return None if self._node is None else self._node.txn_markers

    @property
    def metrics(self) -> Metrics | None:
        return None if self._node is None else self._node.metrics

    @property
    def metrics_server(self) -> MetricsServer | None:
        return None if self._node is None else self._node.metrics_server

    # -- the broker's standing with the controller (node.Membership)

    @property
    def broker_epoch(self) -> int:
        return self.membership.broker_epoch

    @property
    def fenced(self) -> bool:
        return self.membership.fenced

    @property
    def shutting_down(self) -> bool:
        return self.membership.shutting_down

    @property
    def heartbeat_now(self) -> asyncio.Event:
        return self.membership.heartbeat_now

    @property
    def shutdown_granted(self) -> asyncio.Event:
        return self.membership.shutdown_granted

    @property
    def caught_up(self) -> asyncio.Event:
        return self.membership.caught_up

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    future_from = staticmethod(BrokerServices.future_from)

    def after_state_change(self) -> None:
        """Re-arm the timing wheel's wake-up after anything that may have added a timer task."""
        if self._node is not None:
            self._node.wake.arm()

    # -- dispatch --

    def dispatch(self, ctx: RequestContext):
        """Run the handler registered for the request: a response, None (acks=0), or a future of one.
        A handler's exception is logged and re-raised; the connection then closes."""
        registry = self.controller_registry if ctx.connection.scope == handler_registry.CONTROLLER else self.registry
        registration = registry[ctx.api_key]
        node = self._node
        assert node is not None  # (requests reach a started broker only)
        services = node.services
        started = time.perf_counter()
        try:
            result = registration.handler(services, ctx, ctx.request)
        except Exception:
            log.exception("handler failed", api_key=ctx.api_key, api_version=ctx.api_version)
            self._observe(ctx.api_key, ctx.api_version, ctx.frame_size, started, error=True)
            raise
        services.quotas.record_request_time(ctx.connection, ctx.client_id, time.perf_counter() - started)
        return self._handled(ctx.api_key, ctx.api_version, ctx.frame_size, started, result)

    def serve_produce_frame(self, request, connection: ConnectionContext):
        """The produce fast path (handlers.produce.serve_produce_frame): what `dispatch` would hand back (a
        packed response or a future of it), or DECLINED when the request must go through `dispatch` after all."""
        node = self._node
        assert node is not None  # (requests reach a started broker only)
        started = time.perf_counter()
        try:
            result = serve_produce_frame(node.services, request, connection)
        except Exception:
            log.exception("handler failed", api_key=0, api_version=request.api_version)
            self._observe(0, request.api_version, len(request.frame), started, error=True)
            raise
        if result is DECLINED:
            return DECLINED
        return self._handled(0, request.api_version, len(request.frame), started, result)

    def _handled(self, api_key: int, api_version: int, frame_size: int, started: float, result):
        node = self._node
        assert node is not None  # (requests reach a started broker only)
        kind = type(result)
        if kind is Deferred:  # a coordinator's or the controller's answer
            result = node.services.answer(result, _same) if result.done else self.future_from(result)
        elif kind is CoroutineType:  # an async handler (a request forwarded to the active controller)
            result = asyncio.get_running_loop().create_task(result)
        node.wake.arm()  # a handler may have added timer tasks (delayed ops, group timeouts)
        if node.data.has_deferred_fetches and not self._fetches_scheduled:
            # Wake waiting fetches right after this response is written, not before it.
            self._fetches_scheduled = True
            asyncio.get_running_loop().call_soon(self._complete_fetches)
        if kind is Packed:  # the produce fast path's answer, its partitions' codes noted as it packed them
            self._observe(api_key, api_version, frame_size, started)
            if result.error_codes:
                node.metrics.count_errors(api_key, result.error_codes)
        elif isinstance(result, asyncio.Future) and not result.done():
            result.add_done_callback(lambda f: self._observe(api_key, api_version, frame_size, started, f))
        else:
            self._observe(api_key, api_version, frame_size, started, result)
        return result

    def _complete_fetches(self) -> None:
        self._fetches_scheduled = False
        node = self._node
        assert node is not None
        node.data.complete_delayed_fetches()
        node.wake.arm()

    def _observe(self, api_key: int, api_version: int, frame_size: int, started: float, response: Any = None,
                 error: bool = False) -> None:
        """Count a request answered (or, `error`, whose handler raised) and the error codes its response
        carries: a packed frame's as its handler noted them, a message's by walking it (error_codes)."""
        node = self._node
        if node is None:
            return
        metrics = node.metrics
        metrics.observe_request(api_key, api_version, time.perf_counter() - started, frame_size, error)
        if response is None:
            return
        if isinstance(response, asyncio.Future):
            if response.cancelled() or response.exception() is not None:
                return
            response = response.result()
        if type(response) is Packed:  # (a packed fetch: its handler noted the codes)
            codes = response.error_codes
        elif isinstance(response, Message):
            codes = error_codes(response)
        else:  # None (acks=0)
            return
        if codes:
            metrics.count_errors(api_key, codes)

    def _count_protocol_error(self) -> None:
        if self._node is not None:
            self._node.metrics.protocol_error()


def refuse_unserved_settings(cfg: BrokerConfig) -> None:
    """Refuse to start on a setting this broker cannot honour yet, rather than silently ignore it.

    * Listener security (TLS key stores, SASL mechanisms and users) is checked by broker.security when the
      listeners are made, before anything starts.
    * `controller.quorum.bootstrap.servers` without `controller.quorum.voters` asks for a dynamic quorum
      (KIP-853), which is not served: the voters must be listed.
    * A controller (process.roles has it) in a quorum with other voters needs a controller listener to be
      reached on.
    """
    voters = cfg.voters()
    if not voters and cfg.controller_quorum_bootstrap_servers:
        raise ConfigError(
            "a dynamic controller quorum (controller.quorum.bootstrap.servers without controller.quorum.voters) is "
            "not served; list the voters in controller.quorum.voters (id@host:port,...)",
            key="controller.quorum.bootstrap.servers",
        )
    others = [v for v in voters if v.node_id != cfg.node_id]
    if others and "controller" in cfg.process_roles and cfg.node_id in {v.node_id for v in voters} and not cfg.controller_listeners():
        raise ConfigError(
            f"node {cfg.node_id} is a voter of a quorum with other nodes but has no controller listener "
            f"({', '.join(cfg.controller_listener_names)}) in listeners",
            key="listeners",
        )


def ip_overrides(cfg: BrokerConfig) -> dict[str, int]:
    """`max.connections.per.ip.overrides` by client address: an address as written (normalized), a host name
    as every address it resolves to now (Kafka resolves it once, when it reads the config). A name that does
    not resolve refuses the start, as Kafka's UnknownHostException does."""
    result: dict[str, int] = {}
    for host, count in cfg.max_connections_per_ip_overrides.items():
        try:
            result[str(ipaddress.ip_address(host))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as e:
            raise ConfigError(f"cannot resolve {host!r}: {e.strerror or e}", key="max.connections.per.ip.overrides") from None
        for info in infos:
            result[str(ipaddress.ip_address(str(info[4][0]).split("%")[0]))] = count
    return result


def listener_max_connections(cfg: BrokerConfig) -> dict[str, int]:
    """`listener.name.<listener>.max.connections` where set (KIP-402); the broker-wide limit bounds them all."""
    return {
        listener.name: cfg.listener_setting(listener.name, "max.connections")
        for listener in cfg.listener_list()
        if f"{listener.name.lower()}.max.connections" in cfg._listener_settings
    }


def protected_listeners(cfg: BrokerConfig) -> frozenset[str]:
    """Listeners `max.connections` does not refuse (Kafka's ConnectionQuotas): the inter-broker listener when
    clients have listeners of their own, and the controller listeners, which count their connections apart."""
    protected = {listener.name for listener in cfg.controller_listeners()}
    if len(cfg.client_listeners()) > 1:
        protected.add(cfg.inter_broker_listener)
    return frozenset(protected)


def _same(value):
    return value
