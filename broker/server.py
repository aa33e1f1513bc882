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
from types import CoroutineType
from typing import Any

import structlog

from . import handlers as handler_registry
from odradek.purgatory.deferred import Deferred

from .components import arm_timer
from .config import BrokerConfig, ConfigError
from .context import DECLINED, ConnectionContext, RequestContext, SecurityProtocol
from .handlers.api_versions import build_response
from .handlers.produce import serve_produce_frame
from .network import NetworkServer
from .quotas import connection_creation_rates
from .security import listener_security
from .services import BrokerServices

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
        self.registry = handler_registry.load_handlers()
        self.accepted_versions = handler_registry.accepted_versions(self.registry)
        self.advertised_versions = handler_registry.advertised_versions(self.registry)
        self.api_versions_response = build_response(self.advertised_versions)
        # The controller listeners serve the quorum's and the brokers' RPCs, with their own ApiVersions.
        self.controller_registry = handler_registry.load_handlers(handler_registry.CONTROLLER)
        self.controller_api_versions_response = build_response(
            handler_registry.advertised_versions(self.controller_registry)
        )
        self.network: NetworkServer | None = None
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port)
        self.controller_bound: list[tuple[str, str, int]] = []
        self.metrics = None
        self.metrics_server = None
        # Set by components.start_components, in this order:
        self.timer = None
        self.log_manager = None
        self.data = None  # the data plane (logs, partitions, purgatories)
        self.metadata = None  # the publisher of committed metadata; `.image` is the current image
        self.controller = None  # the controller channel
        self.services: BrokerServices | None = None  # what handlers receive
        self.cluster_id: str | None = None  # from meta.properties when the storage was formatted
        self.quorum = None  # the Raft driver (broker/quorum.py); a lone node is its quorum's only voter
        self.metadata_loader = None
        self.lifecycle: asyncio.Task | None = None  # registration and heartbeats (components._lifecycle)
        self.replica_fetchers = None  # the follower fetchers (broker/replica_fetcher.py); none on a lone node
        self.log_dirs = None  # moves between and failures of log directories (broker/log_dirs.py)
        self.txn_marker_sender = None  # the transaction coordinator's markers, once it has started (txn_wiring)
        self.broker_epoch = -1
        self.fenced = True  # until the controller unfences this broker
        self.shutting_down = False  # controlled shutdown asked for (heartbeats say want_shut_down)
        self.heartbeat_now = asyncio.Event()  # wakes the lifecycle for a heartbeat before its interval
        self.shutdown_granted = asyncio.Event()
        self.caught_up = asyncio.Event()  # a heartbeat answer said the metadata here is caught up
        self._timer_handle = None
        self._timer_deadline: int | None = None
        self._fetches_scheduled = False
        self._maintenance: list = []
        self._background: list[asyncio.Task] = []
        self._started = False

    # -- life cycle --

    async def start(self) -> None:
        from .components import register_broker, start_components

        cfg = self.config
        refuse_unserved_settings(cfg)
        per_ip_overrides = ip_overrides(cfg)  # an unresolvable host name stops the start here
        # TLS contexts and SASL settings are read before anything starts: a bad key store stops the start.
        security = {
            listener.name: listener_security(cfg, listener.name, SecurityProtocol(listener.security_protocol), self._scram_credential)
            for listener in cfg.listener_list()
        }
        await start_components(self)
        self.network = NetworkServer(
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
            metrics=self.metrics,
            connection_rates=connection_creation_rates(cfg),
            client_quotas=lambda: self.metadata.image.client_quotas,
        )
        self.network.start()
        # Bind first, serve after registering: the registration carries the ports actually bound.
        for listener in cfg.client_listeners():
            host = listener.host or "0.0.0.0"
            protocol = SecurityProtocol(listener.security_protocol)
            bound_host, port = await self.network.listen(
                listener.name, host, listener.port, protocol, security=security[listener.name]
            )
            self.bound.append((listener.name, bound_host, port))
        if "controller" in cfg.process_roles and cfg.controller_listeners():
            self.network.add_scope(
                handler_registry.CONTROLLER, handler_registry.accepted_versions(self.controller_registry),
                handler_registry.advertised_versions(self.controller_registry),
            )
            for listener in cfg.controller_listeners():
                bound_host, port = await self.network.listen(
                    listener.name, listener.host or "0.0.0.0", listener.port,
                    SecurityProtocol(listener.security_protocol), scope=handler_registry.CONTROLLER,
                    security=security[listener.name],
                )
                self.controller_bound.append((listener.name, bound_host, port))
        try:
            register_broker(self)
            if self.bound:
                # A node serves its controller listeners at once (the quorum needs them) and its broker
                # listeners once the controller says it has caught up with the metadata log (Kafka's
                # initialCatchUpFuture): until then its image may lack the SCRAM credentials, ACLs and
                # topics clients are judged by (a restarted node would refuse a valid login). Connections
                # made meanwhile wait in the listen backlog.
                await self.network.start_serving([name for name, _host, _port in self.controller_bound])
                if self.quorum.is_lone_voter and self.lifecycle is not None:
                    # A lone node is its own controller: it is registered, unfenced and caught up within
                    # a few event-loop turns, and start() returns once it serves, as a caller expects.
                    await self._until_caught_up()
                    await self.network.start_serving()
                else:  # the other voters may not be up yet: serve once they have elected a controller
                    self.spawn(self._serve_when_caught_up())
            else:
                await self.network.start_serving()
        except BaseException:
            self._started = True  # stop what started
            await self.stop()
            raise
        for name, host, port in [*self.bound, *self.controller_bound]:
            log.info("listening", listener=name, host=host, port=port)
        self._started = True

    async def _until_caught_up(self) -> None:
        """Wait for the lifecycle's first heartbeat answer that says caught up; raise what ended it first
        (a registration the node's own controller refused)."""
        caught_up = asyncio.ensure_future(self.caught_up.wait())
        try:
            await asyncio.wait({caught_up, self.lifecycle}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            caught_up.cancel()
        if not self.caught_up.is_set():
            self.lifecycle.result()  # raises what refused the registration
            raise RuntimeError("the broker lifecycle ended before the broker caught up")

    async def _serve_when_caught_up(self) -> None:
        await self.caught_up.wait()
        if not self.network.draining:  # not stopping already
            await self.network.start_serving()
            log.info("caught up with the metadata log: serving the broker listeners")

    async def stop(self, drain_timeout_s: float = 5.0) -> None:
        if not self._started:
            return
        self._started = False
        from .components import stop_components

        if self.quorum is not None:
            await self._controlled_shutdown()
        await self.network.stop_accepting()
        self._answer_long_polls()
        await self.network.drain(drain_timeout_s)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await stop_components(self)
        log.info("stopped")

    async def _controlled_shutdown(self, timeout_s: float = 10.0) -> None:
        """A node of a cluster leaves in order (Kafka's controlled shutdown): its heartbeats ask to shut
        down until the controller has moved its leaderships away and says it may; then, if it leads the
        quorum, it resigns (EndQuorumEpoch) so that another voter takes over at once, not after a timeout.

        A lone node with no other broker skips both: there is nobody to move leaderships or the quorum's
        lead to. Its registration stays unfenced in the log; the next start registers a new incarnation,
        which fences the old one and is unfenced by its first heartbeat, as after a crash."""
        lone = self.quorum.is_lone_voter
        others = any(b != self.node_id for b in self.metadata.image.brokers)
        if self.broker_epoch >= 0 and (others or not lone):
            self.shutting_down = True
            self.heartbeat_now.set()
            try:
                await asyncio.wait_for(self.shutdown_granted.wait(), timeout_s)
                log.info("controlled shutdown granted")
            except asyncio.TimeoutError:
                log.warning("controlled shutdown not granted in time; stopping anyway", timeout_s=timeout_s)
        if self.quorum.raft.is_leader and not lone:
            self.quorum.process(self.quorum.raft.resign(self.quorum.clock()))
            await asyncio.sleep(0.1)  # let EndQuorumEpoch go out

    def _answer_long_polls(self) -> None:
        """Answer parked fetches (with what they have) and pending group joins (NOT_COORDINATOR, so clients
        look for the coordinator again) now, rather than hold shutdown for their timeouts."""
        if self.data is not None:
            self.data.fetch_purgatory.complete_all()
        groups = self.services.groups_if_started if self.services is not None else None
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
        return self.metadata.image.scram_credentials.get((username, int(mechanism)))

    @property
    def bound_port(self) -> int:
        return (self.bound or self.controller_bound)[0][2]

    @property
    def advertised_endpoint(self) -> tuple[str, int]:
        """The host and port of this broker's first registered endpoint (what clients of that listener use)."""
        endpoint = self.metadata.image.brokers[self.node_id].endpoints[0]
        return endpoint.host, endpoint.port

    @property
    def groups(self):
        """The group coordinator, created with `__consumer_offsets` on first use as Kafka does."""
        return self.services.groups

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    future_from = staticmethod(BrokerServices.future_from)

    def after_state_change(self) -> None:
        """Re-arm the timing wheel's wake-up after anything that may have added a timer task."""
        arm_timer(self)

    # -- dispatch --

    def dispatch(self, ctx: RequestContext):
        """Run the handler registered for the request: a response, None (acks=0), or a future of one.
        A handler's exception is logged and re-raised; the connection then closes."""
        registry = self.controller_registry if ctx.connection.scope == handler_registry.CONTROLLER else self.registry
        registration = registry[ctx.api_key]
        started = time.perf_counter()
        try:
            result = registration.handler(self.services, ctx, ctx.request)
        except Exception:
            log.exception("handler failed", api_key=ctx.api_key, api_version=ctx.api_version)
            self._observe(ctx.api_key, ctx.api_version, ctx.frame_size, started, error=True)
            raise
        self.services.quotas.record_request_time(ctx.connection, ctx.client_id, time.perf_counter() - started)
        return self._handled(ctx.api_key, ctx.api_version, ctx.frame_size, started, result)

    def serve_produce_frame(self, request, connection: ConnectionContext):
        """The produce fast path (handlers.produce.serve_produce_frame): what `dispatch` would hand back (a
        packed response or a future of it), or DECLINED when the request must go through `dispatch` after all."""
        started = time.perf_counter()
        try:
            result = serve_produce_frame(self.services, request, connection)
        except Exception:
            log.exception("handler failed", api_key=0, api_version=request.api_version)
            self._observe(0, request.api_version, len(request.frame), started, error=True)
            raise
        if result is DECLINED:
            return DECLINED
        return self._handled(0, request.api_version, len(request.frame), started, result)

    def _handled(self, api_key: int, api_version: int, frame_size: int, started: float, result):
        kind = type(result)
        if kind is Deferred:  # a coordinator's or the controller's answer
            result = self.services.answer(result, _same) if result.done else self.future_from(result)
        elif kind is CoroutineType:  # an async handler (a request forwarded to the active controller)
            result = asyncio.get_running_loop().create_task(result)
        self.after_state_change()  # a handler may have added timer tasks (delayed ops, group timeouts)
        if self.data.has_deferred_fetches and not self._fetches_scheduled:
            # Wake waiting fetches right after this response is written, not before it.
            self._fetches_scheduled = True
            asyncio.get_running_loop().call_soon(self._complete_fetches)
        if isinstance(result, asyncio.Future) and not result.done():
            result.add_done_callback(lambda _f: self._observe(api_key, api_version, frame_size, started))
        else:
            self._observe(api_key, api_version, frame_size, started)
        return result

    def _complete_fetches(self) -> None:
        self._fetches_scheduled = False
        self.data.complete_delayed_fetches()
        self.after_state_change()

    def _observe(self, api_key: int, api_version: int, frame_size: int, started: float, error: bool = False) -> None:
        if self.metrics is not None:
            self.metrics.observe_request(api_key, api_version, time.perf_counter() - started, frame_size, error)

    def _count_protocol_error(self) -> None:
        if self.metrics is not None:
            self.metrics.protocol_error()


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
            result[str(ipaddress.ip_address(info[4][0].split("%")[0]))] = count
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
