"""Request handlers, one module per API family, registered with the versions they serve.

A handler is a plain function `handle(services: BrokerServices, ctx: RequestContext, request)`:
`services` (broker/services.py) is everything it may use, typed and named; `ctx` (broker/context.py)
says who asks, on which listener, with which security protocol and principal. It answers with a
message, `Packed` (a frame it packed itself), `None` (no response: acks=0 produce), or something that
completes later: an `asyncio.Future` (a delayed operation completing from the purgatory), a `Deferred`
(a coordinator's or the controller channel's answer) or a coroutine (a handler that awaits); the
dispatcher turns the last two into futures. Handlers never block: they run synchronously on the event
loop and return at once. A handler that changes metadata asks the controller channel and answers from
its result, never writing metadata or opening logs itself.

The ApiVersions table is derived from what is registered here, so nothing is advertised that is not
served. A handler may advertise a wider range than it accepts (Produce v0-2, as Kafka 4 does for old
librdkafka's feature detection): `advertise` widens the table, `versions` is what is accepted.

A handler registered behind a `gate` (SHARE: the share-group APIs) is served, and so advertised, only when
the broker enables that gate (`odradek.share.enabled`): until every API a feature needs is served, the
broker advertises none of them, as a client that sees ShareGroupHeartbeat will go on to ShareFetch.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from odradek.protocol.codec import Message
from odradek.protocol.messages import REQUESTS
from odradek.purgatory.deferred import Deferred

from ..context import Packed

if TYPE_CHECKING:
    from ..context import RequestContext
    from ..services import BrokerServices

# What a handler answers with (the module doc): a message, a packed frame, no response, or one of them later.
Answer: TypeAlias = (
    "Message | Packed | None | asyncio.Future[Any] | Deferred[Any] | Coroutine[Any, Any, Message | Packed | None]"
)
# A handler; the request is the message class of its API key (`request: ProduceRequest`).
Handler: TypeAlias = "Callable[[BrokerServices, RequestContext, Any], Answer]"
H = TypeVar("H", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    advertised_min: int
    handler: Handler
    gate: str | None = None


# Which listeners serve an API: the broker listeners (clients, other brokers) or the controller listeners
# (the quorum and brokers talking to the controller), each with its own ApiVersions, as Kafka's are.
BROKER, CONTROLLER = "broker", "controller"
# Gates (see the module doc): SHARE is `odradek.share.enabled`.
SHARE = "share"
_REGISTRY: dict[str, dict[int, Registration]] = {BROKER: {}, CONTROLLER: {}}

FAMILIES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "topics",
    "configs",
    "cluster",
    "producer_ids",
    "txn_markers",
    "producers",
    "groups",
    "offsets",
    "quorum",
    "transactions",
    "share_state",
    "sasl",
    "acls",
    "quotas",
    "envelope",
    "share_fetch",
    "share_groups",
)


def handles(
    api_key: int, versions: tuple[int, int] | None = None, *, advertise_min: int | None = None,
    listeners: tuple[str, ...] = (BROKER,), gate: str | None = None,
) -> Callable[[H], H]:
    """Register a handler for `api_key` over `versions` (default: every version the schema defines), on
    the broker listeners, the controller listeners, or both; behind `gate` if given."""

    def register(fn: H) -> H:
        low, high = versions if versions is not None else REQUESTS[api_key].VALID_VERSIONS
        for scope in listeners:
            if api_key in _REGISTRY[scope]:
                raise RuntimeError(f"api key {api_key} registered twice for {scope} listeners")
            _REGISTRY[scope][api_key] = Registration(api_key, low, high, low if advertise_min is None else advertise_min, fn,
                                                     gate)
        return fn

    return register


def load_handlers(scope: str = BROKER, gates: frozenset[str] = frozenset()) -> dict[int, Registration]:
    """The handlers of `scope`'s listeners: every ungated one, and the gated ones whose gate is in `gates`."""
    for family in FAMILIES:
        try:
            importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise
    return {k: r for k, r in _REGISTRY[scope].items() if r.gate is None or r.gate in gates}


def gates_of(config) -> frozenset[str]:
    """The gates a broker config opens."""
    return frozenset({SHARE} if config.share_enabled else ())


def accepted_versions(registry: dict[int, Registration]) -> dict[int, tuple[int, int]]:
    return {k: (r.min_version, r.max_version) for k, r in registry.items()}


def advertised_versions(registry: dict[int, Registration]) -> dict[int, tuple[int, int]]:
    return {k: (r.advertised_min, r.max_version) for k, r in registry.items()}
