"""Broker sessions at the controller: who heartbeated when, and how far each has read the metadata log.

As Kafka's BrokerHeartbeatManager, this is the controller's soft state: not in the metadata log, lost when
the controller changes, and then started afresh (`start_sessions`), which gives every registered broker a
whole session timeout before it can be fenced. Time is always an argument (`now_ms`).

A broker's session is valid while it is unfenced and its last heartbeat is at most
`session_timeout_ms` old (`broker.session.timeout.ms`, Kafka's default 9000). Its metadata offset (the
offset it reported having replayed) decides when it may be unfenced and, for the others, when a broker in
controlled shutdown may go: once every active broker (unfenced, not shutting down) has replayed the
records that moved its leaderships away (`controlled_shutdown_offset`).

Two rules end a session sooner than its timeout, both only when `disconnect_grace_ms` >= 0 (the broker's
`odradek.broker.session.disconnect.grace.ms`; -1 turns them off and leaves Kafka's rule alone):

* A broker whose heartbeat connection closed (`disconnected`: the owner saw EOF or RST on the connection
  its heartbeats arrive on) and that has not heartbeated since is gone after `disconnect_grace_ms`. A
  process that dies has its sockets closed by its kernel at once, so the controller learns of the death
  within a round trip instead of a whole session; the grace lets a broker whose connection merely broke
  (a reset, a timeout on its side) reconnect and heartbeat first. A frozen process (SIGSTOP, a cut
  network) keeps its connections open and is fenced by the session timeout, as before.
* A session that a new active controller presumed at activation (`start_sessions`: it has heard nothing
  from the broker yet, `confirmed` False) must be confirmed by a heartbeat within
  `heartbeat_interval_ms + disconnect_grace_ms`: a live broker heartbeats at least that often (and at
  once when it learns of a new controller), while a broker that died with the previous controller (the
  same process, in combined mode) never will, and nothing else would tell the new controller.

Both rules can only suspect wrongly, never lose data: a wrongly fenced broker is fenced exactly as after
an expired session (it leaves ISRs and leaderships through the controller's records), and its next
heartbeat unfences it once it has caught up, as after any fencing. Neither makes a session valid longer.

A session proven live (`is_proven_live`: confirmed by a heartbeat to this controller, connection not seen
closed, not expired) is the only one that refuses a new incarnation's registration
(DUPLICATE_BROKER_REGISTRATION, cluster_control.py): a restarted process must not wait out the session
of the process it replaces when the controller has no evidence that one still runs.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_MS", "DEFAULT_SESSION_TIMEOUT_MS", "BrokerHeartbeatManager", "BrokerSession",
]

DEFAULT_SESSION_TIMEOUT_MS = 9000
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # broker.heartbeat.interval.ms


@dataclass(slots=True)
class BrokerSession:
    broker_id: int
    last_contact_ms: int
    fenced: bool
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1  # -1: not shutting down
    confirmed: bool = True  # heard from by this controller (False: presumed at activation)
    disconnected_ms: int = -1  # when its heartbeat connection was seen closed; -1: not since its last heartbeat

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    def __init__(
        self,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        *,
        disconnect_grace_ms: int = -1,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.disconnect_grace_ms = disconnect_grace_ms  # -1: connections and activation do not shorten sessions
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.sessions: dict[int, BrokerSession] = {}

    def expiry_ms(self, session: BrokerSession) -> int:
        """The last instant `session` is valid: its last contact plus the session timeout, sooner by the
        rules of the module doc (a closed connection, an unconfirmed presumed session)."""
        expiry = session.last_contact_ms + self.session_timeout_ms
        grace = self.disconnect_grace_ms
        if grace >= 0:
            if session.disconnected_ms >= 0:
                expiry = min(expiry, session.disconnected_ms + grace)
            if not session.confirmed:
                expiry = min(expiry, session.last_contact_ms + self.heartbeat_interval_ms + grace)
        return expiry

    def start_sessions(self, brokers: dict[int, bool], now_ms: int) -> None:
        """Every one of `brokers` (broker id -> fenced, from the image) gets a session starting now; nothing
        is kept from before (Kafka's ClusterControlManager.activate makes a new heartbeat manager). A node
        that was the active controller before and is again must not judge by what it saw then: its brokers
        have been heartbeating to another controller since, so their old last-contact times would fence
        live brokers at once, and a fenced flag since cleared by another controller would hide a broker
        that really stops heartbeating (found by the fault loop: a cut-off leader never fenced)."""
        self.sessions = {
            broker_id: BrokerSession(broker_id, now_ms, fenced, confirmed=False) for broker_id, fenced in brokers.items()
        }

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
        session.confirmed = True
        session.disconnected_ms = -1  # it reached us: over a live connection
        if fenced:
            session.controlled_shutdown_offset = -1  # a fenced broker shuts down on its next heartbeat

    def fence(self, broker_id: int) -> None:
        session = self.sessions.get(broker_id)
        if session is not None:
            session.fenced = True
            session.controlled_shutdown_offset = -1

    def disconnected(self, broker_id: int, now_ms: int) -> bool:
        """The connection the broker's heartbeats arrived on closed at `now_ms` (reported by the owner,
        which saw it). True if that starts the grace of an unfenced session; a later close while the grace
        runs keeps the first one, and the next heartbeat forgets it."""
        session = self.sessions.get(broker_id)
        if session is None or session.fenced or session.disconnected_ms >= 0:
            return False
        session.disconnected_ms = now_ms
        return True

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        session = self.sessions.get(broker_id)
        if session is None or session.fenced:
            return False
        return self.expiry_ms(session) >= now_ms

    def is_proven_live(self, broker_id: int, now_ms: int) -> bool:
        """A valid session this controller heard a heartbeat for, whose connection it has not seen close:
        the only evidence that the registered incarnation still runs."""
        session = self.sessions.get(broker_id)
        return (
            session is not None and session.confirmed and session.disconnected_ms < 0
            and self.has_valid_session(broker_id, now_ms)
        )

    def stale_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose session expired, longest silent first (ties by id)."""
        stale = [s for s in self.sessions.values() if not s.fenced and self.expiry_ms(s) < now_ms]
        return [s.broker_id for s in sorted(stale, key=lambda s: (s.last_contact_ms, s.broker_id))]

    def next_expiry_ms(self) -> int | None:
        """When the next unfenced session expires (the first time `stale_brokers` can name it), or None."""
        unfenced = [self.expiry_ms(s) for s in self.sessions.values() if not s.fenced]
        return min(unfenced) + 1 if unfenced else None

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
