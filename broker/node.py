"""The node's parts, one typed object: what broker/components.py builds in order and stops in reverse.

`Broker` (broker/server.py) owns the network and dispatch; everything behind them is a `Node`, built by
`components.build_node` once the broker starts, each part from the parts before it:

    the timing wheel -> log manager -> replica manager -> publisher of committed metadata -> the follower
    fetchers (which follow the image) -> the metadata quorum (Raft driver, loader, controller channel) ->
    log directories -> the transaction markers' channel and the services handlers receive (with the
    coordinators' factories) -> metrics -> background schedules (housekeeping, the wheel's wake-up)

and stopped by `components.stop_node` in exactly the reverse order, so that nothing is stopped while a
part built after it still uses it (the fetchers stop before the logs they append to close). No part is
added to the node from outside: a new part is a new field here, typed, and a new step in both functions.

`Membership` is the broker's standing with the active controller (registration, fencing, controlled
shutdown), which exists before the node is built (a stop reads it) and is changed only through its methods.
`TimerDriver` drives the timing wheel from the event loop: one `loop.call_later` handle, re-armed after every
state change for the wheel's next deadline (nothing polls).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.metadata.publisher import MetadataPublisher
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.log_manager import LogManager

from .config import BrokerConfig
from .services import BrokerServices

if TYPE_CHECKING:
    from odradek.metadata.loader import MetadataLoader

    from .components import Housekeeping
    from .log_dirs import LogDirs
    from .metrics import Metrics, MetricsServer
    from .quorum import ClusterControllerChannel, QuorumDriver
    from .replica_fetcher import ReplicaFetcherManager
    from .txn_wiring import MarkerSender


class Membership:
    """This broker's standing with the active controller (Kafka's BrokerLifecycleManager state): its epoch
    once registered, whether the controller has it fenced, whether it asked to shut down, and the events the
    lifecycle task (components.run_lifecycle) and the broker's stop wait on.

    Heartbeats that go unanswered change nothing here but the lease (`heartbeat_unanswered`). Fencing is
    the controller's decision, learnt from an answer; a broker that cannot reach any controller has no new
    decision to learn, so it keeps the standing and the metadata image it last had and serves on them, as
    a Kafka broker does when the controller quorum is lost. Whether the quorum is gone or only this broker
    is cut off from it cannot be told apart from here: the lease says only that a session has passed
    without an answer, and ReplicaManager.set_lease_expired narrows its effect to what cannot be done
    without the controller anyway (an ISR change). Times are arguments (milliseconds), never read here."""

    def __init__(self) -> None:
        self.broker_epoch = -1
        self.fenced = True  # until the controller unfences this broker
        self.shutting_down = False  # controlled shutdown asked for (heartbeats say want_shut_down)
        self.heartbeat_now = asyncio.Event()  # wakes the lifecycle for a heartbeat before its interval
        self.shutdown_granted = asyncio.Event()
        self.caught_up = asyncio.Event()  # a heartbeat answer said the metadata here is caught up
        self.answered_at_ms: int | None = None  # the controller's last answer (registration or heartbeat)
        self.lease_lost = False  # no answer for a whole broker.session.timeout.ms

    def registered(self, broker_epoch: int, now_ms: int | None = None) -> None:
        self.broker_epoch = broker_epoch
        if now_ms is not None:
            self.answered_at_ms = now_ms

    def heard(self, *, fenced: bool) -> None:
        """A heartbeat's answer: fenced or not."""
        self.fenced = fenced

    def heartbeat_answered(self, now_ms: int) -> bool:
        """The controller answered a heartbeat: True when that ends a lost lease."""
        self.answered_at_ms = now_ms
        regained, self.lease_lost = self.lease_lost, False
        return regained

    def heartbeat_unanswered(self, now_ms: int, session_timeout_ms: int) -> bool:
        """A heartbeat failed (no controller, or none reachable): True when the lease is lost by it, i.e. no
        answer for a whole session. `fenced` stays as the controller last said: not hearing is not a
        decision."""
        if self.lease_lost or self.answered_at_ms is None or now_ms - self.answered_at_ms <= session_timeout_ms:
            return False
        self.lease_lost = True
        return True

    def contact_age_ms(self, now_ms: int) -> int | None:
        """Milliseconds since the controller last answered this broker; None before the first answer."""
        return None if self.answered_at_ms is None else max(0, now_ms - self.answered_at_ms)

    def controller_changed(self, leader_id: int, epoch: int) -> None:
        """The quorum has a new leader (a metadata loader listener): heartbeat at once rather than at the next
        interval, so that the new active controller hears from every live broker well within the
        heartbeat interval plus the disconnect grace it allows a session it presumed at activation
        (metadata/broker_heartbeats.py)."""
        if leader_id >= 0:
            self.heartbeat_now.set()

    def ask_to_shut_down(self) -> None:
        """A controlled shutdown: the next heartbeat (sent at once) asks for it."""
        self.shutting_down = True
        self.heartbeat_now.set()


class TimerDriver:
    """The timing wheel's wake-up: `arm()` after every state change (re)arms one `loop.call_later` for the
    wheel's next deadline, which advances the wheel to now and arms again."""

    def __init__(self, timer: Timer, clock: Callable[[], int]) -> None:
        self.timer = timer
        self.clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._deadline: int | None = None

    def arm(self) -> None:
        deadline = self.timer.next_expiration_ms()
        if deadline is None:
            return
        if self._deadline is not None and self._deadline <= deadline and self._handle is not None:
            return
        if self._handle is not None:
            self._handle.cancel()
        loop = asyncio.get_running_loop()
        delay_s = max(0.0, (deadline - self.clock()) / 1000)
        self._deadline = deadline
        self._handle = loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._deadline = None
        try:
            self.timer.advance_clock(self.clock())
        finally:
            self.arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


@dataclass(eq=False)
class Node:
    """The parts of a running node, in the order they were built (see the module's docstring)."""

    config: BrokerConfig
    cluster_id: str
    timer: Timer
    log_manager: LogManager
    data: ReplicaManager  # the data plane (logs, partitions, purgatories)
    metadata: MetadataPublisher  # the publisher of committed metadata; `.image` is the current image
    replica_fetchers: ReplicaFetcherManager | None  # the follower fetchers; none on a lone node or a controller
    quorum: QuorumDriver  # the Raft driver (broker/quorum.py); a lone node is its quorum's only voter
    metadata_loader: MetadataLoader
    controller: ClusterControllerChannel
    log_dirs: LogDirs  # moves between and failures of log directories (broker/log_dirs.py)
    txn_markers: MarkerSender  # the transaction coordinator's channel for WriteTxnMarkers (txn_wiring)
    services: BrokerServices  # what handlers receive
    metrics: Metrics
    metrics_server: MetricsServer | None
    housekeeping: Housekeeping  # retention, flushes, checkpoints, cleaning (components.py)
    wake: TimerDriver

    def follow_with(self, fetchers: ReplicaFetcherManager) -> None:
        """Replace the follower fetchers (tests that stop a follower's fetching and start it again); the log
        directories unfollow a failed directory's partitions with the new ones."""
        self.replica_fetchers = fetchers
        self.log_dirs.follow_with(fetchers)
