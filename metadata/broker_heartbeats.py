"""Broker sessions at the controller: who heartbeated when, and how far each has read the metadata log.

As Kafka's BrokerHeartbeatManager, this is the controller's soft state: not in the metadata log, lost when
the controller changes, and then started afresh (`start_sessions`), which gives every registered broker a
whole session timeout before it can be fenced. Time is always an argument (`now_ms`).

A broker's session is valid while it is unfenced and its last heartbeat is at most
`session_timeout_ms` old (`broker.session.timeout.ms`, Kafka's default 9000). Its metadata offset (the
offset it reported having replayed) decides when it may be unfenced and, for the others, when a broker in
controlled shutdown may go: once every active broker (unfenced, not shutting down) has replayed the
records that moved its leaderships away (`controlled_shutdown_offset`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_SESSION_TIMEOUT_MS", "BrokerHeartbeatManager", "BrokerSession"]

DEFAULT_SESSION_TIMEOUT_MS = 9000


@dataclass(slots=True)
class BrokerSession:
    broker_id: int
    last_contact_ms: int
    fenced: bool
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1  # -1: not shutting down

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.sessions: dict[int, BrokerSession] = {}

    def start_sessions(self, brokers: dict[int, bool], now_ms: int) -> None:
        """Every one of `brokers` (broker id -> fenced, from the image) gets a session starting now; nothing
        is kept from before (Kafka's ClusterControlManager.activate makes a new heartbeat manager). A node
        that was the active controller before and is again must not judge by what it saw then: its brokers
        have been heartbeating to another controller since, so their old last-contact times would fence
        live brokers at once, and a fenced flag since cleared by another controller would hide a broker
        that really stops heartbeating (found by the fault loop: a cut-off leader never fenced)."""
        self.sessions = {broker_id: BrokerSession(broker_id, now_ms, fenced) for broker_id, fenced in brokers.items()}

    def register(self, broker_id: int, fenced: bool, now_ms: int) -> None:
        """A registration was decided: its session starts now; a changed fencing state keeps the offset."""
        session = self.sessions.get(broker_id)
        offset = -1
        if session is not None and session.fenced != fenced:
            offset = session.metadata_offset
        self.touch(broker_id, fenced, offset, now_ms)

    def remove(self, broker_id: int) -> None:
        self.sessions.pop(broker_id, None)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now_ms: int) -> None:
        session = self.sessions.get(broker_id)
        if session is None:
            session = self.sessions[broker_id] = BrokerSession(broker_id, now_ms, fenced)
        session.last_contact_ms = now_ms
        session.fenced = fenced
        session.metadata_offset = metadata_offset
        if fenced:
            session.controlled_shutdown_offset = -1  # a fenced broker shuts down on its next heartbeat

    def fence(self, broker_id: int) -> None:
        session = self.sessions.get(broker_id)
        if session is not None:
            session.fenced = True
            session.controlled_shutdown_offset = -1

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        session = self.sessions.get(broker_id)
        if session is None or session.fenced:
            return False
        return session.last_contact_ms + self.session_timeout_ms >= now_ms

    def stale_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose session expired, longest silent first (ties by id)."""
        stale = [
            s for s in self.sessions.values()
            if not s.fenced and s.last_contact_ms + self.session_timeout_ms < now_ms
        ]
        return [s.broker_id for s in sorted(stale, key=lambda s: (s.last_contact_ms, s.broker_id))]

    def next_expiry_ms(self) -> int | None:
        """When the next unfenced session expires (the first time `stale_brokers` can name it), or None."""
        unfenced = [s.last_contact_ms for s in self.sessions.values() if not s.fenced]
        return min(unfenced) + self.session_timeout_ms + 1 if unfenced else None

    def enter_controlled_shutdown(self, broker_id: int, offset: int) -> None:
        """The broker is shutting down once every active broker has replayed `offset` (kept if already set)."""
        session = self.sessions[broker_id]
        if session.controlled_shutdown_offset < 0:
            session.controlled_shutdown_offset = offset

    def lowest_active_offset(self) -> int:
        """The lowest metadata offset of the active brokers (unfenced, not shutting down); with none, a value
        above every offset."""
        offsets = [s.metadata_offset for s in self.sessions.values() if not s.fenced and not s.shutting_down]
        return min(offsets) if offsets else (1 << 63) - 1
