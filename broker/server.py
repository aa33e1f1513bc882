"""The broker: wires storage, replication and coordinators to the network pipeline.

    async with Broker(config) as broker:      # in-process, e.g. in a user's tests
        print(broker.bound_port)

`odradek broker start` (broker/daemon.py) runs the same object until SIGTERM/SIGINT. Shutdown is graceful:
stop accepting, let each connection finish its current request, flush and checkpoint the logs, write the
clean-shutdown marker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from . import handlers as handler_registry
from .components import arm_timer
from .config import BrokerConfig
from .handlers.api_versions import build_response
from .handlers.produce import serve_produce_frame
from .network import NetworkServer, RequestContext

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
        self.network: NetworkServer | None = None
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port)
        self.metrics = None
        self.data = None  # the data plane (logs, partitions, purgatories), set by start()
        self.metadata = None
        self._groups = None
        self._groups_factory = None
        self.topics = None
        self.log_manager = None
        self.timer = None
        self._timer_handle = None
        self._timer_deadline: int | None = None
        self._fetches_scheduled = False
        self._background: list[asyncio.Task] = []
        self._started = False

    # -- life cycle --

    async def start(self) -> None:
        from .components import start_components

        await start_components(self)
        cfg = self.config
        self.network = NetworkServer(
            dispatch=self.dispatch,
            serve_produce_frame=self.serve_produce_frame if self.produce_fast_path else None,
            accepted_versions=self.accepted_versions,
            advertised_versions=self.advertised_versions,
            max_frame_bytes=cfg.socket_request_max_bytes,
            max_connections=cfg.max_connections,
            queued_max_requests=cfg.queued_max_requests,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            on_protocol_error=self._count_protocol_error,
            metrics=self.metrics,
        )
        self.network.start()
        for listener in cfg.client_listeners():
            host = listener.host or "0.0.0.0"
            bound_host, port = await self.network.listen(listener.name, host, listener.port)
            self.bound.append((listener.name, bound_host, port))
            log.info("listening", listener=listener.name, host=bound_host, port=port)
        self._started = True

    async def stop(self, drain_timeout_s: float = 5.0) -> None:
        if not self._started:
            return
        self._started = False
        from .components import stop_components

        await self.network.stop_accepting()
        self._answer_long_polls()
        await self.network.drain(drain_timeout_s)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await stop_components(self)
        log.info("stopped")

    def _answer_long_polls(self) -> None:
        """Answer parked fetches (with what they have) and pending group joins (NOT_COORDINATOR, so clients
        look for the coordinator again) now, rather than hold shutdown for their timeouts."""
        if self.data is not None:
            self.data.fetch_purgatory.complete_all()
        if self._groups is not None:
            self._groups.shutdown()

    async def __aenter__(self) -> "Broker":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.append(task)
        return task

    @property
    def bound_port(self) -> int:
        return self.bound[0][2]

    @property
    def advertised_endpoint(self) -> tuple[str, int]:
        """The host and port clients are told to use (advertised.listeners, else the bound listener)."""
        first = self.config.advertised_listener_list()[0]
        host = first.host if first.host not in ("", "0.0.0.0", "::") else "localhost"
        return host, first.port or self.bound_port

    # -- services for handlers --

    @property
    def groups(self):
        """The group coordinator, created with `__consumer_offsets` on first use as Kafka does."""
        if self._groups is None and self._groups_factory is not None:
            self._groups = self._groups_factory()
        return self._groups

    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    def topic_by_name(self, name: str):
        return self.metadata.image.topics_by_name.get(name)

    def topic_by_id(self, topic_id):
        return self.metadata.image.topics_by_id.get(topic_id)

    def is_internal_topic(self, name: str) -> bool:
        return self.topics.is_internal(name)

    def allows_internal_writes(self, name: str) -> bool:
        return False

    @staticmethod
    def future_from(deferred) -> asyncio.Future:
        """Adapt the coordinator's Deferred (no asyncio below broker/) to an asyncio future."""
        future = asyncio.get_running_loop().create_future()

        def settle(d) -> None:
            if future.done():
                return
            error = d.failed_with
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(d.result())

        deferred.add_callback(settle)
        return future

    def after_state_change(self) -> None:
        """Re-arm the timing wheel's wake-up after anything that may have added a timer task."""
        arm_timer(self)

    # -- dispatch --

    def dispatch(self, ctx: RequestContext):
        """Run the handler registered for the request: a response, None (acks=0), or a future of one.
        A handler's exception is logged and re-raised; the connection then closes."""
        registration = self.registry[ctx.api_key]
        started = time.perf_counter()
        try:
            result = registration.handler(self, ctx, ctx.request)
        except Exception:
            log.exception("handler failed", api_key=ctx.api_key, api_version=ctx.api_version)
            self._observe(ctx.api_key, ctx.api_version, ctx.frame_size, started, error=True)
            raise
        return self._handled(ctx.api_key, ctx.api_version, ctx.frame_size, started, result)

    def serve_produce_frame(self, request):
        """The produce fast path (handlers.produce.serve_produce_frame): response bytes, a future of them, or
        None when the request must go through `dispatch` after all."""
        started = time.perf_counter()
        try:
            result = serve_produce_frame(self, request)
        except Exception:
            log.exception("handler failed", api_key=0, api_version=request.api_version)
            self._observe(0, request.api_version, len(request.frame), started, error=True)
            raise
        if result is None:
            return None
        return self._handled(0, request.api_version, len(request.frame), started, result)

    def _handled(self, api_key: int, api_version: int, frame_size: int, started: float, result):
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
