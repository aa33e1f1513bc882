"""Client quotas on this broker: bytes produced, bytes fetched and request time, measured per client and
turned into throttle times (metadata/quota.py has the rules and the arithmetic).

The quotas themselves are in the published image (`image.client_quotas`, from AlterClientQuotas through
the controller), so every broker holds the same ones; the measurements are this broker's own, as in Kafka.
With no quota configured anywhere each call is one emptiness test. A handler records what a request
did and gets the throttle time: it puts that in the response's throttle_time_ms and on the connection
(`ConnectionContext.throttle_ms`), and the network layer stops serving the connection for that long after
the response is written (KIP-219).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from odradek.metadata.publisher import MetadataPublisher
from odradek.metadata.quota import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ConnectionCreationRates,
    QuotaSensors,
)

from .config import BrokerConfig
from .context import ConnectionContext

def connection_creation_rates(config: BrokerConfig) -> ConnectionCreationRates:
    """KIP-612's rates from the broker's config: `max.connection.creation.rate` for the broker, and for each
    listener `listener.name.<l>.max.connection.creation.rate` (else the broker-wide value, as Kafka's
    per-listener configs fall back). The inter-broker listener (when there are others) and the controller
    listeners are left out of the broker-wide rate, as Kafka keeps its inter-broker listener open and its
    controllers count their own connections apart."""
    listeners = config.listener_list()
    protected = {listener.name for listener in config.controller_listeners()}
    if len(config.client_listeners()) > 1:
        protected.add(config.inter_broker_listener)
    return ConnectionCreationRates(
        broker_rate=config.max_connection_creation_rate,
        listener_rates={l.name: config.listener_setting(l.name, "max.connection.creation.rate") for l in listeners},
        protected_listeners=frozenset(protected),
        samples=config.quota_window_num, window_ms=config.quota_window_size_seconds * 1000,
    )


class ClientQuotas:
    __slots__ = ("metadata", "now_ms", "produce", "fetch", "request")

    def __init__(self, config: BrokerConfig, metadata: MetadataPublisher, now_ms: Callable[[], int] | None = None) -> None:
        self.metadata = metadata
        self.now_ms = now_ms or (lambda: time.monotonic_ns() // 1_000_000)
        samples, window_ms = config.quota_window_num, config.quota_window_size_seconds * 1000
        self.produce = QuotaSensors(PRODUCER_BYTE_RATE, samples=samples, window_ms=window_ms)
        self.fetch = QuotaSensors(CONSUMER_BYTE_RATE, samples=samples, window_ms=window_ms)
        self.request = QuotaSensors(REQUEST_PERCENTAGE, samples=samples, window_ms=window_ms)

    @property
    def metered(self) -> bool:
        """Whether requests are measured at all: some client quota is configured. The produce fast path asks
        too, and declines while it is true (a quota is per client id, which the fast path does not read)."""
        return bool(self.metadata.image.client_quotas)

    def _record(self, sensors: QuotaSensors, connection: ConnectionContext, client_id: str | None, value: float) -> int:
        quotas = self.metadata.image.client_quotas
        if not quotas:
            return 0
        throttle_ms = sensors.record(quotas, connection.principal.name, client_id or "", value, self.now_ms())
        if throttle_ms > connection.throttle_ms:
            connection.throttle_ms = throttle_ms
        return throttle_ms

    def record_produce(self, connection: ConnectionContext, client_id: str | None, nbytes: int) -> int:
        """Record a produce request's bytes; its throttle time in ms (0 within quota)."""
        return self._record(self.produce, connection, client_id, nbytes)

    def record_fetch(self, connection: ConnectionContext, client_id: str | None, nbytes: int) -> int:
        return self._record(self.fetch, connection, client_id, nbytes)

    def max_fetch_bytes(self, connection: ConnectionContext, client_id: str | None) -> int | None:
        """The most a consumer's fetch may return without being throttled for it alone (KafkaApis caps a
        consumer's fetch.max.bytes at it); None without a consumer_byte_rate quota."""
        quotas = self.metadata.image.client_quotas
        if not quotas:
            return None
        bound = self.fetch.max_value_in_window(quotas, connection.principal.name, client_id or "")
        return None if bound == float("inf") else max(1, int(bound))

    def unrecord_fetch(self, connection: ConnectionContext, client_id: str | None, nbytes: int) -> None:
        """Take back bytes recorded for a fetch that is answered empty because it is throttled (Kafka's
        unrecordQuotaSensor): the consumer reads them later, and is measured for them then."""
        quotas = self.metadata.image.client_quotas
        if quotas:
            self.fetch.unrecord(quotas, connection.principal.name, client_id or "", nbytes, self.now_ms())

    def record_request_time(self, connection: ConnectionContext, client_id: str | None, seconds: float) -> int:
        """Record the time a handler took (request_percentage: percent of one thread's time)."""
        if not self.metadata.image.client_quotas:
            return 0
        return self._record(self.request, connection, client_id, seconds * 100.0)
