"""Client quotas: which quota applies to a client, how fast it goes, and how long to throttle it (Kafka's
ClientQuotaManager, Sensor and Rate).

Theory of operation
-------------------
Quotas are configured per entity (`user`, `client-id`, or both; a null name is that type's default) in the
cluster metadata log (ClientQuotaRecord) and held in the image as {entity: {key: value}}. The quota of a
client (user, client id) for a key is the first of these entities that has the key (Kafka's precedence):

    (user, client-id)  (user, default client-id)  (user)
    (default user, client-id)  (default user, default client-id)  (default user)
    (client-id)  (default client-id)

The entity found also says who shares one measurement: a quota set on a user alone is shared by all of
its client ids, a quota involving a client id is measured per client id (Kafka's metric tags).

A `Rate` is Kafka's windowed rate: `samples` windows of `window_ms`; each value recorded adds to the current
window; the rate is the sum of the live windows over the time they span, which is counted as at least
samples - 1 full windows (so a client that just started is not measured over a few milliseconds). When
a value pushes the rate over the quota, the client is throttled for

    (rate - quota) / quota * window span

(how long it must stay idle for the rate to come back to the quota: QuotaUtils.throttleTime). The response carries it as throttle_time_ms and the broker stops reading from
the connection for that long (KIP-219). Pure: every call takes now_ms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# key -> whether the value must be integral (Kafka's LONG/INT quota configs)
CLIENT_QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
                     CONTROLLER_MUTATION_RATE: False}
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: True}

EntityKey = tuple[tuple[str, str | None], ...]  # sorted (entity type, name or None for the default) pairs


class QuotaError(ValueError):
    """A quota entity, key or value AlterClientQuotas must refuse (INVALID_REQUEST)."""


def entity_key(entity: Iterable[tuple[str, str | None]]) -> EntityKey:
    """The image's key of an entity, checked as Kafka's ClientQuotaControlManager checks it."""
    pairs = list(entity)
    if not pairs:
        raise QuotaError("Invalid empty client quota entity")
    types = [t for t, _ in pairs]
    if len(set(types)) != len(types):
        raise QuotaError("Invalid quota entity: an entity type is given more than once")
    for t, name in pairs:
        if t not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {t}")
        if name is not None and not name and t != CLIENT_ID:
            raise QuotaError(f"Invalid empty {t} name")
    if IP in types and len(types) > 1:
        raise QuotaError("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    return tuple(sorted(pairs, key=lambda p: (p[0], p[1] is None, p[1] or "")))


def validate_quota_op(entity: EntityKey, key: str, value: float, remove: bool) -> None:
    keys = IP_QUOTA_KEYS if entity[0][0] == IP else CLIENT_QUOTA_KEYS
    if key not in keys:
        raise QuotaError(f"Invalid configuration key {key}")
    if remove:
        return
    if value != value or value in (float("inf"), float("-inf")):
        raise QuotaError(f"Invalid value {value} for configuration key {key}")
    if keys[key] and value != int(value):
        raise QuotaError(f"Configuration {key} must be a Long value")
    if value <= 0:
        raise QuotaError(f"Configuration {key} must be positive, not {value}")


def _candidates(user: str, client_id: str) -> tuple[tuple[EntityKey, tuple[str, str]], ...]:
    """Kafka's precedence: each entity to look at, with the (user, client id) tags of the shared measurement."""
    return (
        (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
        (((CLIENT_ID, None), (USER, user)), (user, client_id)),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
        (((CLIENT_ID, None), (USER, None)), (user, client_id)),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, None),), ("", client_id)),
    )


def resolve_quota(quotas: Mapping[EntityKey, Mapping[str, float]], key: str, user: str, client_id: str
                  ) -> tuple[float, tuple[str, str]] | None:
    """(quota, measurement tags) of `key` for the client, or None when no entity sets it."""
    if not quotas:
        return None
    for entity, tags in _candidates(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            return values[key], tags
    return None


class Rate:
    """Kafka's Rate over a SampledStat of `samples` windows of `window_ms` (quota.window.num,
    quota.window.size.seconds)."""

    __slots__ = ("samples", "window_ms", "_starts", "_values", "_current")

    def __init__(self, samples: int = 11, window_ms: int = 1000, now_ms: int = 0) -> None:
        if samples < 2 or window_ms < 1:
            raise ValueError("a rate needs at least 2 samples of at least 1 ms")
        self.samples = samples
        self.window_ms = window_ms
        self._starts = [now_ms] + [-1] * (samples - 1)
        self._values = [0.0] * samples
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        self._advance(now_ms)
        self._values[self._current] += value

    def _advance(self, now_ms: int) -> None:
        if now_ms >= self._starts[self._current] + self.window_ms:
            self._current = (self._current + 1) % self.samples
            self._starts[self._current] = now_ms
            self._values[self._current] = 0.0

    def _purge(self, now_ms: int) -> None:
        expire_age = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if start >= 0 and now_ms - start >= expire_age:
                self._starts[i] = now_ms if i == self._current else -1
                self._values[i] = 0.0

    def window_span_ms(self, now_ms: int) -> int:
        """The time the live windows span, at least samples - 1 full windows (Rate.windowSize)."""
        live = [s for s in self._starts if s >= 0]
        elapsed = now_ms - min(live) if live else 0
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: int) -> float:
        """Units of value per second."""
        self._purge(now_ms)
        return sum(self._values) * 1000.0 / self.window_span_ms(now_ms)


@dataclass(slots=True)
class _Sensor:
    rate: Rate
    last_record_ms: int


class QuotaSensors:
    """One quota type's measurements (produce, fetch or request time), keyed by their tags. Throttle times
    are computed as Kafka's ClientQuotaManager computes them; sensors idle for an hour are forgotten."""

    INACTIVE_MS = 3_600_000

    def __init__(self, key: str, *, samples: int = 11, window_ms: int = 1000) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_ms
        self._sensors: dict[tuple[str, str], _Sensor] = {}
        self._next_expiry_ms = 0

    def record(self, quotas: Mapping[EntityKey, Mapping[str, float]], user: str, client_id: str, value: float,
               now_ms: int) -> int:
        """Record `value` for the client; the throttle time in ms (0 when within its quota or none applies)."""
        found = resolve_quota(quotas, self.key, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = _Sensor(Rate(self.samples, self.window_ms, now_ms), now_ms)
            self._expire(now_ms)
        sensor.last_record_ms = now_ms
        sensor.rate.record(value, now_ms)
        rate = sensor.rate.measure(now_ms)
        if rate <= bound:
            return 0
        return round((rate - bound) / bound * sensor.rate.window_span_ms(now_ms))

    def max_value_in_window(self, quotas: Mapping[EntityKey, Mapping[str, float]], user: str, client_id: str) -> float:
        """The most one record may be without being throttled even after an idle spell: the quota over the
        shortest span a rate is measured on (Kafka's getMaxValueInQuotaWindow); infinite without a quota.
        A consumer's fetch is capped at it, so that one response never guarantees its own throttling."""
        found = resolve_quota(quotas, self.key, user, client_id)
        if found is None:
            return float("inf")
        return found[0] * (self.samples - 1) * self.window_ms / 1000.0

    def unrecord(self, quotas: Mapping[EntityKey, Mapping[str, float]], user: str, client_id: str, value: float,
                 now_ms: int) -> None:
        """Take back `value` recorded for the client (a negative record, no quota check: Kafka's
        unrecordQuotaSensor), for work that was measured and then not done."""
        found = resolve_quota(quotas, self.key, user, client_id)
        sensor = self._sensors.get(found[1]) if found is not None else None
        if sensor is not None:
            sensor.rate.record(-value, now_ms)

    def _expire(self, now_ms: int) -> None:
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + self.INACTIVE_MS
        for tags in [t for t, s in self._sensors.items() if now_ms - s.last_record_ms > self.INACTIVE_MS]:
            del self._sensors[tags]

    def __len__(self) -> int:
        return len(self._sensors)


# -- connection creation rates (KIP-612)

UNLIMITED_RATE = 2**31 - 1  # Kafka's Int.MaxValue: no limit


def _over(rate: Rate, bound: float, now_ms: int) -> int:
    """The throttle time of a rate over `bound` (QuotaUtils.throttleTime), 0 within it."""
    measured = rate.measure(now_ms)
    if measured <= bound:
        return 0
    return round((measured - bound) / bound * rate.window_span_ms(now_ms))


class ConnectionCreationRates:
    """How long to hold back each new connection (Kafka's ConnectionQuotas, KIP-612). Pure: time is passed in.

    Theory of operation
    -------------------
    Three rates of new connections are measured, each a `Rate` (quota.window.num windows of
    quota.window.size.seconds): the broker's (`max.connection.creation.rate`, over every listener but the
    inter-broker one, which stays open for the cluster's own traffic when there are other listeners), each
    listener's (`listener.name.<l>.max.connection.creation.rate`, defaulting to the broker-wide value as
    Kafka's per-listener configs do), and each client address's (the `connection_creation_rate` client
    quota of entity `ip`: the address's own, else the default ip entity's, else none).

    `accept(listener, now_ms)` counts a connection on the broker and listener rates and answers how long
    accepting it waits: the larger of their throttle times, at most one quota window (Kafka's acceptor
    blocks that long, so later connections on the listener wait behind it; the caller serializes them).
    A connection that made it is then checked against its address's rate by `ip_throttle`: over it, the
    connection is not counted (it never happened, for the rates) and is closed after the throttle time,
    which the caller does (Kafka's delayed close: a client retrying at once gains nothing).
    """

    def __init__(self, *, broker_rate: int = UNLIMITED_RATE, listener_rates: Mapping[str, int] | None = None,
                 protected_listeners: frozenset[str] = frozenset(), samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = window_ms
        self.broker_rate = broker_rate
        self.listener_rates = dict(listener_rates or {})
        self.protected_listeners = protected_listeners
        self._broker: Rate | None = None
        self._listeners: dict[str, Rate] = {}
        self._ips: dict[str, _Sensor] = {}
        self._next_expiry_ms = 0

    def _bounded(self, rate: Rate, bound: float, now_ms: int) -> int:
        return min(_over(rate, bound, now_ms), self.max_throttle_ms)

    def accept(self, listener: str, now_ms: int) -> int:
        """Count a new connection on `listener`; how long (ms) to wait before accepting it (0: at once)."""
        throttle_ms = 0
        if listener not in self.protected_listeners and self.broker_rate < UNLIMITED_RATE:
            if self._broker is None:
                self._broker = Rate(self.samples, self.window_ms, now_ms)
            self._broker.record(1.0, now_ms)
            throttle_ms = self._bounded(self._broker, self.broker_rate, now_ms)
        bound = self.listener_rates.get(listener, UNLIMITED_RATE)
        if bound < UNLIMITED_RATE:
            rate = self._listeners.get(listener)
            if rate is None:
                rate = self._listeners[listener] = Rate(self.samples, self.window_ms, now_ms)
            rate.record(1.0, now_ms)
            throttle_ms = max(throttle_ms, self._bounded(rate, bound, now_ms))
        return throttle_ms

    @staticmethod
    def ip_rate(quotas: Mapping[EntityKey, Mapping[str, float]], ip: str) -> float | None:
        """The connection_creation_rate quota of a client address: its own, else the default ip entity's."""
        for entity in (((IP, ip),), ((IP, None),)):
            values = quotas.get(entity)
            if values is not None and CONNECTION_CREATION_RATE in values:
                return values[CONNECTION_CREATION_RATE]
        return None

    def ip_throttle(self, quotas: Mapping[EntityKey, Mapping[str, float]], listener: str, ip: str, now_ms: int) -> int:
        """Count a connection from `ip` on its address's rate; 0 when within it, else the time (ms) after
        which to close it. A refused connection is taken back from every rate (Kafka's
        updateListenerMetrics): it is not a connection the broker accepted."""
        bound = self.ip_rate(quotas, ip) if quotas else None
        if bound is None:
            return 0
        sensor = self._ips.get(ip)
        if sensor is None:
            sensor = self._ips[ip] = _Sensor(Rate(self.samples, self.window_ms, now_ms), now_ms)
            self._expire(now_ms)
        sensor.last_record_ms = now_ms
        sensor.rate.record(1.0, now_ms)
        throttle_ms = self._bounded(sensor.rate, bound, now_ms)
        if throttle_ms:
            sensor.rate.record(-1.0, now_ms)
            if listener not in self.protected_listeners and self._broker is not None:
                self._broker.record(-1.0, now_ms)
            rate = self._listeners.get(listener)
            if rate is not None:
                rate.record(-1.0, now_ms)
        return throttle_ms

    def _expire(self, now_ms: int) -> None:
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + QuotaSensors.INACTIVE_MS
        for ip in [ip for ip, s in self._ips.items() if now_ms - s.last_record_ms > QuotaSensors.INACTIVE_MS]:
            del self._ips[ip]
