"""The controller quorum on the event loop: the Raft node's timers and messages, the metadata it commits.

Every node runs its metadata this way, a lone node included: there the node is the only voter of its
quorum (Kafka's combined mode with one controller), it elects itself as soon as it starts, needs no
socket for the quorum, and what it appends is committed as soon as it is flushed.

Three parts, each small, around the sans-I/O `raft.RaftNode` and its listener `metadata.loader.MetadataLoader`
(committed batches published as images):

* `QuorumDriver` runs the node: it arms one timer for the node's next deadline, sends the node's requests
  to other nodes (`NodeConnections`: long-polling Fetch and FetchSnapshot on a connection of their own,
  so that they never hold up a vote), hands it their responses (None when a request failed), and answers
  the quorum requests other nodes send here (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of
  `__cluster_metadata`, FetchSnapshot, DescribeQuorum) with futures the node completes.
* `QuorumControllerChannel` is the controller channel of a node that may be the active controller: while
  this node leads the quorum and has applied everything before its epoch (its LeaderChange batch is
  committed), it decides and appends through Raft and answers each call once its batch is committed;
  otherwise it is not active, and callers forward to the active controller.
* `ClusterControllerChannel` is `services.controller`: the calls are decided here while this node is the
  active controller, else sent to the active one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from odradek.purgatory.deferred import Deferred
from odradek.protocol.envelope import (
    address_bytes,
    decode_response_data,
    encode_request_data,
    serialize_principal,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import (
    CreateTopicsResponse,
    EnvelopeRequest,
    FetchRequest,
    FetchSnapshotRequest,
)
from odradek.metadata.controller import Controller
from odradek.metadata.image import MetadataError
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.records import encode_metadata_record
from odradek.raft import CommittedBatch, NotLeaderError, OutboundRequest, OutboundResponse, RaftNode, Role
from odradek.raft.state import FollowerState

from .config import BrokerConfig
from .context import ConnectionContext
from .controller_channel import ControllerDecisions
from .node_client import NodeConnections, NodeDisconnected, NodeUnavailable, api_versions_request, max_version_in

log = structlog.get_logger("odradek.quorum")

_LONG_POLLS = (FetchRequest, FetchSnapshotRequest)


class QuorumLeaderWatch:
    """Whether this node knows a leader of the controller quorum, and since when it knows none: what the
    `odradek_quorum_*` gauges, the log lines of a lost and a regained quorum leader and `cluster status`
    report. Sans-I/O: after each call into the Raft node, `observe` is given the leader it is in touch with
    (`known_leader`), its epoch and the time, and answers the transition it saw, if any.

    A leader is known while this node leads the quorum, or follows a leader that has answered its fetches
    in this term of following (`known_leader`). A voter that stopped hearing from its leader (prospective,
    candidate; or back to following it after a pre-vote round it lost, KIP-996, with no answer since), a
    leader that resigned because no majority fetched from it (check quorum), an observer that found none:
    no leader. With a majority of the voters gone, every survivor ends there and stays there, trying new
    epochs, until enough voters are back; its broker keeps serving on the last committed metadata
    (node.Membership)."""

    def __init__(self, now_ms: int) -> None:
        self.leader_id = -1  # the known leader, -1 while none is
        self.epoch = 0
        self.last_leader_id = -1  # the last leader known, kept while none is (the log line names it)
        self.since_ms = now_ms  # when the current state (a leader known, or none) began

    @property
    def leader_known(self) -> bool:
        return self.leader_id >= 0

    def observe(self, known: int, epoch: int, now_ms: int) -> str | None:
        """Given the leader known now (-1: none): 'lost' when the known leader is gone, 'elected' when a
        leader is known again (or for the first time), 'moved' when another leader is known without a gap,
        None when nothing changed."""
        self.epoch = epoch
        if known == self.leader_id:
            return None
        before, self.leader_id = self.leader_id, known
        if known < 0:
            self.last_leader_id, self.since_ms = before, now_ms
            return "lost"
        self.since_ms = now_ms
        return "elected" if before < 0 else "moved"

    def seconds_without_leader(self, now_ms: int) -> float:
        return 0.0 if self.leader_known else max(0, now_ms - self.since_ms) / 1000


def known_leader(raft: RaftNode) -> int:
    """The quorum leader this node is in touch with: itself while it leads, the leader it follows once that
    leader has answered a fetch in this term of following; else -1."""
    state = raft.state
    if raft.role == Role.LEADER or (isinstance(state, FollowerState) and state.has_fetched):
        return raft.leader_id
    return -1


class QuorumDriver:
    def __init__(self, raft: RaftNode, connections: NodeConnections, clock: Callable[[], int], *,
                 request_timeout_ms: int = 2000, after_each_call: Callable[[], None] | None = None) -> None:
        self.raft = raft
        self.connections = connections
        self.clock = clock
        self.request_timeout_ms = request_timeout_ms
        self._pending: dict[int, asyncio.Future] = {}
        self._next_request_id = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._stopped = False
        self._in_node = False  # inside a call into the node (its listeners run there)
        self._fetch_versions: dict[int, int] = {}  # node id -> the highest Fetch version it accepts (ApiVersions)
        self.after_each_call = after_each_call  # e.g. the loader's snapshots
        self.leader_watch = QuorumLeaderWatch(clock())
        self._loss_reported = False  # the current loss was logged (its end is logged too)
        self._leader_lost_listeners: list[Callable[[int], None]] = []
        self.log_failure: str | None = None  # why the metadata log can no longer be written (the driver stopped)
        self._disconnected: dict[int, int] = {}  # node id -> when it closed or refused our connection, not answered since
        self._on_log_failure: Callable[[str], None] | None = None

    def on_log_failure(self, callback: Callable[[str], None]) -> None:
        """`callback(why)` when writing the metadata log fails (broker/log_dirs.py: the node stops)."""
        self._on_log_failure = callback

    def disconnected_peers(self) -> list[int]:
        """The nodes that closed or refused a quorum connection of ours and have not answered a request since
        (their process is gone, as far as this node knows)."""
        return sorted(self._disconnected)

    def _log_failed(self, error: OSError) -> None:
        """An append, flush, snapshot or quorum-state write of the metadata log raised (a full disk, an I/O
        error). Kafka treats a failed metadata log directory as fatal (the broker halts): the node could no
        longer vote, lead or follow the metadata safely, and what it wrote last may not be durable (a failed
        fsync). The node is left as it is, mid-call: nothing more goes in or out of it (a vote it may have
        decided is never sent, so an unpersisted one cannot count), the requests waiting on it are dropped,
        and the node's owner stops the process. What is on disk stays recoverable: a segment append that
        fails leaves nothing of the batch (storage/segment.py), a snapshot or quorum-state file is written
        aside and renamed into place only whole, and a restart with space back recovers the log to its last
        whole batch and carries on."""
        if self.log_failure is not None:
            return
        self.log_failure = f"writing the metadata log failed: {error}"
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for future in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        log.critical("the metadata log cannot be written; the quorum stops on this node", node=self.raft.node_id,
                     cause=str(error), errno=error.errno, role=self.raft.role.name, epoch=self.raft.epoch)
        if self._on_log_failure is not None:
            self._on_log_failure(self.log_failure)

    def on_leader_lost(self, listener: Callable[[int], None]) -> None:
        """`listener(epoch)` when this node stops knowing a quorum leader (the local controller channel
        stops deciding then: a leader that lost its majority commits nothing more)."""
        self._leader_lost_listeners.append(listener)

    def _watch_leader(self) -> None:
        """After each call into the node: act on a lost or found quorum leader. A loss is reported (a
        warning) only once it has lasted a fetch timeout: a leader that resigns on its way down is replaced
        within an election, which is not worth an operator's attention; a quorum without a majority is."""
        raft, watch = self.raft, self.leader_watch
        without_ms = self.clock() - watch.since_ms
        change = watch.observe(known_leader(raft), raft.epoch, self.clock())
        if change is None:
            return
        if change == "lost":
            for listener in list(self._leader_lost_listeners):
                listener(raft.epoch)
            if not self._stopped:
                asyncio.get_running_loop().call_later(
                    raft.config.fetch_timeout_ms / 1000, self._report_lost, watch.since_ms)
        elif self._loss_reported:
            self._loss_reported = False
            log.info("controller quorum leader known again", leader=watch.leader_id, epoch=raft.epoch,
                     last_leader=watch.last_leader_id, without_leader_ms=without_ms)

    def _report_lost(self, since_ms: int) -> None:
        watch = self.leader_watch
        if self._stopped or watch.leader_known or watch.since_ms != since_ms:
            return  # a leader was found meanwhile (or lost again later: that loss reports itself)
        self._loss_reported = True
        log.warning("controller quorum leader lost: metadata changes wait for a new one; brokers serve on their "
                    "last committed metadata", last_leader=watch.last_leader_id, epoch=watch.epoch,
                    without_leader_ms=self.clock() - since_ms)

    @property
    def is_lone_voter(self) -> bool:
        """This node is its quorum's only voter (a lone node): it elects itself and commits alone."""
        return self.raft.config.voters == (self.raft.node_id,)

    def start(self) -> None:
        self._call(self.raft.poll)

    def _call(self, fn: Callable, *args) -> None:
        """Call into the node, then act on what it answers. The node's listeners run inside such a call and
        may append (the new active controller's bootstrap records, a decision taken on a commit): `append`
        leaves the polling of those to the call around it, whose re-armed timer (due at once: the leader
        has records to flush) commits them. A lone voter would otherwise commit them inside the node's
        delivery of the batch before them."""
        if self._stopped:
            return
        self._in_node = True
        try:
            outbound = fn(*args, self.clock())
        except OSError as e:
            self._log_failed(e)
            return
        finally:
            self._in_node = False
        self.process(outbound)

    def call_in_node(self, fn: Callable[[], None]) -> None:
        """Run `fn` (the loader's replay of a slice, broker/hosting_driver.py) as a call into the node: what
        its listeners append is polled by the re-armed timer, and snapshots are considered after it."""
        def call(now_ms: int) -> list:
            fn()
            return []

        self._call(call)

    async def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for future in self._pending.values():
            if not future.done():
                future.cancel()

    # -- inbound

    def handle_request(self, request) -> asyncio.Future:
        """A quorum request from another node: a future of the node's response."""
        self._next_request_id += 1
        request_id = self._next_request_id
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._call(self.raft.handle_request, -1, request_id, request)
        except Exception:
            self._pending.pop(request_id, None)
            raise
        if self._stopped and not future.done():  # stopping, or the metadata log failed: no answer will come
            self._pending.pop(request_id, None)
            future.cancel()
        return future

    def append(self, records: list[bytes]) -> int:
        """Append as leader (NotLeaderError otherwise); the offset of the last record. A lone voter has
        committed them (flushed, and published by the loader) when this returns, unless it was called from
        inside the node (see `_call`)."""
        if self.log_failure is not None:
            raise NotLeaderError(self.log_failure)
        if self._in_node:
            return self.raft.append(records, self.clock())
        self._in_node = True
        try:
            offset = self.raft.append(records, self.clock())
            outbound = self.raft.poll(self.clock())
        except OSError as e:
            self._log_failed(e)
            raise NotLeaderError(self.log_failure) from e
        finally:
            self._in_node = False
        self.process(outbound)
        return offset

    # -- the node's output

    def process(self, outbound: list) -> None:
        if self._stopped:
            return
        for message in outbound:
            if type(message) is OutboundResponse:
                future = self._pending.pop(message.request_id, None)
                if future is not None and not future.done():
                    future.set_result(message.message)
            elif type(message) is OutboundRequest:
                task = asyncio.get_running_loop().create_task(self._send(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if self.after_each_call is not None:
            try:
                self.after_each_call()
            except OSError as e:  # a metadata snapshot that could not be written
                self._log_failed(e)
                return
        self._watch_leader()
        self._rearm()

    async def _send(self, request: OutboundRequest) -> None:
        purpose = "raft-fetch" if isinstance(request.message, _LONG_POLLS) else "raft"
        timeout_s = self.request_timeout_ms / 1000 + (1.0 if purpose == "raft-fetch" else 0.0)
        version = request.api_version
        try:
            if type(request.message) is FetchRequest:
                version = await self._fetch_version(request.destination, version)
            response = await self.connections.request(
                request.destination, request.message, version, purpose=purpose, timeout_s=timeout_s,
            )
            self._disconnected.pop(request.destination, None)
        except NodeUnavailable as e:
            response = None
            self._fetch_versions.pop(request.destination, None)  # it may come back as another release
            log.debug("quorum request failed", destination=request.destination,
                      request=type(request.message).__name__, error=str(e))
            if isinstance(e, NodeDisconnected):
                self._disconnected.setdefault(request.destination, self.clock())
            if isinstance(e, NodeDisconnected) and not self._stopped:
                # The peer's host closed or refused the connection: its process is gone (the raft rule
                # that then elects a new leader after a short grace is RaftNode.handle_disconnect).
                self._call(self.raft.handle_disconnect, request.destination)
        if not self._stopped:
            self._call(self.raft.handle_response, request.destination, request.correlation_id, response)

    def fetch_version_to(self, node_id: int) -> int | None:
        """The highest Fetch version `node_id` accepts, as its ApiVersions said (None: not asked yet)."""
        return self._fetch_versions.get(node_id)

    async def _fetch_version(self, node_id: int, wanted: int) -> int:
        """The Fetch version to send `node_id`: the node's (`wanted`), capped by the highest its controller
        listener accepts, asked once with ApiVersions as Kafka's NetworkClient negotiates. A node of an
        earlier release accepts Fetch up to v17 only and closes the connection on v18 (an unknown version);
        at v17 the fetch goes without KIP-1166's high watermark (an ignorable tagged field), and the leader
        parks it as before. Forgotten when a request to the node fails: it may come back upgraded."""
        known = self._fetch_versions.get(node_id)
        if known is None:
            answer = await self.connections.request(node_id, api_versions_request("quorum"), 3, purpose="raft",
                                                    timeout_s=self.request_timeout_ms / 1000)
            accepted = max_version_in(answer, FetchRequest.API_KEY)
            known = wanted if accepted is None else accepted
            if answer.error_code == 0:
                self._fetch_versions[node_id] = known
        return min(wanted, known)

    def _rearm(self) -> None:
        deadline = self.raft.next_deadline_ms
        if self._timer is not None and self._timer_at == deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = deadline
        self._timer = loop.call_later(max(0.0, (deadline - self.clock()) / 1000), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        if not self._stopped:
            self._call(self.raft.poll)


class QuorumControllerChannel(ControllerDecisions):
    """The controller channel of a node in the quorum (see the module doc)."""

    def __init__(self, controller: Controller, config: BrokerConfig, clock: Callable[[], int],
                 driver: QuorumDriver, loader: MetadataLoader, *, cluster_id: str | None = None) -> None:
        super().__init__(controller, config, clock)
        self.config = config
        self.driver = driver
        self.loader = loader
        self.is_active = False
        self.cluster_id = cluster_id  # from meta.properties: written by the first active controller
        self._tick_handle: asyncio.TimerHandle | None = None
        self._waiting: list[tuple[int, Deferred]] = []  # (last offset, commit) in offset order
        self._activated_before = False
        self.activated = asyncio.Event()  # set while active (a lone node's broker waits for it to register)
        # broker id -> the connection its heartbeats last arrived on (watched: see `heartbeat`)
        self._broker_connections: dict[int, ConnectionContext] = {}
        loader.on_commit(self._committed)
        loader.on_leader_change(self._leader_changed)
        driver.on_leader_lost(self._leader_lost)

    def _leader_changed(self, leader_id: int, epoch: int) -> None:
        if self.is_active:
            log.info("no longer the active controller", leader=leader_id, epoch=epoch)
        self.is_active = False
        self.activated.clear()
        self._fail_waiting(MetadataError(ErrorCode.NOT_CONTROLLER, f"The active controller moved to node {leader_id}."))

    def _leader_lost(self, epoch: int) -> None:
        """No quorum leader any more (this node resigned, or stopped hearing from the leader): a decision
        waiting for its commit fails with NOT_CONTROLLER (retriable) rather than waiting for a commit that
        no majority will make."""
        if self.is_active:
            log.info("no longer the active controller: no quorum leader", epoch=epoch)
        self.is_active = False
        self.activated.clear()
        self._fail_waiting(MetadataError(ErrorCode.NOT_CONTROLLER, "The controller quorum has no leader."))

    def _committed(self, batch: CommittedBatch) -> None:
        raft = self.driver.raft
        if not self.is_active and raft.is_leader and batch.is_control and batch.epoch == raft.epoch:
            # Everything before this epoch is applied: the controller may decide from the image now.
            self.controller.advance(self.loader.image, batch.last_offset + 1)
            self.controller.activate(self.clock())
            if not self._activated_before and "broker" in self.config.process_roles:
                # The broker of this node lives and dies with this process: the registration of this node
                # the image holds now is from an earlier process (a restart, a lone node's upgrade), and
                # must not keep the session that would refuse the new incarnation's registration
                # (DUPLICATE_BROKER_REGISTRATION) for a whole broker.session.timeout.ms. If this process's
                # broker registered already (with another controller), its next heartbeat starts a session.
                self.controller.heartbeats.remove(self.config.node_id)
            # Nodes whose quorum connection this node saw closed (their process died: most often the
            # previous active controller, whose broker died with it) have heartbeated to nobody since: the
            # disconnect grace starts now for them, rather than the presumed session's heartbeat interval
            # plus grace (broker_heartbeats.py). A live one learns of the new controller and heartbeats at once.
            for node_id in self.driver.disconnected_peers():
                if self.controller.broker_disconnected(node_id, self.clock()):
                    log.info("a node's quorum connection closed before this controller took over: it is fenced "
                             "unless it heartbeats within the grace", broker=node_id,
                             grace_ms=self.controller.settings.broker_disconnect_grace_ms)
            self._activated_before = True
            self.is_active = True
            self.activated.set()
            log.info("active controller", epoch=raft.epoch)
            self._schedule_tick()
            if self.loader.image.cluster_id is None and self.cluster_id is not None:
                self._bootstrap()
            else:
                activation = self.controller.activation_records()
                if activation:
                    self._single(lambda: (activation, None))
        while self._waiting and self._waiting[0][0] <= batch.last_offset:
            _, commit = self._waiting.pop(0)
            commit.complete(None)

    def heartbeat(self, request, *, connection: ConnectionContext | None = None) -> Deferred:
        """BrokerHeartbeat, deciding here; the connection it came on is watched. When that connection
        closes (EOF or RST: the broker's process died, its kernel closed its sockets), the controller is
        told (`Controller.broker_disconnected`) and fences the broker after
        odradek.broker.session.disconnect.grace.ms unless it heartbeats again meanwhile, instead of after
        broker.session.timeout.ms (metadata/broker_heartbeats.py has the rule and why it is safe). Only a
        heartbeat of the broker's registered epoch is watched: an old incarnation's connection closing says
        nothing about the new one. A broker's heartbeats arriving on a new connection make it the one
        watched, so the close of its old one, however late it is seen, suspects nothing."""
        if connection is not None and self.is_active:
            registration = self.controller.image.brokers.get(request.broker_id)
            if registration is not None and registration.broker_epoch == request.broker_epoch:
                self._watch(request.broker_id, connection)
        return super().heartbeat(request)

    def _watch(self, broker_id: int, connection: ConnectionContext) -> None:
        if self._broker_connections.get(broker_id) is connection:
            return
        self._broker_connections[broker_id] = connection
        connection.when_closed(lambda: self._broker_connection_closed(broker_id, connection))

    def _broker_connection_closed(self, broker_id: int, connection: ConnectionContext) -> None:
        if self._broker_connections.get(broker_id) is not connection:
            return
        del self._broker_connections[broker_id]
        if self.is_active and self.controller.broker_disconnected(broker_id, self.clock()):
            log.info("a broker's heartbeat connection closed: it is fenced unless it heartbeats again within the grace",
                     broker=broker_id, grace_ms=self.controller.settings.broker_disconnect_grace_ms,
                     connection=connection.connection_id)
            self._schedule_tick()

    def _schedule_tick(self) -> None:
        """The controller's periodic decisions (expired broker sessions, leader elections) at its deadline."""
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if not self.is_active:
            return
        deadline = self.controller.next_deadline_ms()
        delay_s = 1.0 if deadline is None else max(0.0, min(1.0, (deadline - self.clock()) / 1000))
        self._tick_handle = asyncio.get_running_loop().call_later(delay_s, self._tick)

    def _tick(self) -> None:
        self._tick_handle = None
        if self.is_active:
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the next tick tries again
                log.exception("controller tick failed")
            self._schedule_tick()

    def stop(self) -> None:
        """No more periodic decisions (the log is about to close)."""
        self.is_active = False
        if self._tick_handle is not None:
            self._tick_handle.cancel()

    def _bootstrap(self) -> None:
        """The first active controller of a new cluster writes what `odradek storage format` decided: the
        metadata.version feature level and the cluster id (Kafka's bootstrap records)."""
        assert self.cluster_id is not None  # (checked by the caller)
        records = self.controller.bootstrap_records(self.cluster_id)
        self._single(lambda: (records, None))

    def _commit(self, records: list, working) -> Deferred:
        try:
            last = self.driver.append([encode_metadata_record(r) for r in records])
        except NotLeaderError:
            self.is_active = False
            raise MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller.") from None
        self.controller.advance(working, last + 1)  # later decisions see these records before they commit
        if self.loader.applied_end_offset > last:
            return Deferred.completed(None)  # a lone voter: committed (and published) by the append itself
        commit: Deferred = Deferred()
        self._waiting.append((last, commit))
        return commit

    def _fail_waiting(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, []
        for _, commit in waiting:
            commit.fail(error)
        self.controller.advance(self.loader.image, self.loader.applied_end_offset)


def _says_not_controller(response) -> bool:
    """Whether a controller RPC's response says NOT_CONTROLLER, at its top or in any of its entries (Kafka's
    channel looks at the response's errorCounts: CreateTopics carries it per topic)."""
    not_controller = int(ErrorCode.NOT_CONTROLLER)
    if isinstance(response, CreateTopicsResponse):
        return any(topic.error_code == not_controller for topic in response.topics)
    return getattr(response, "error_code", None) == not_controller


class ForwardingRefused(Exception):
    """The active controller refused a forwarded request's envelope (not the request inside it)."""


class ClusterControllerChannel:
    """`services.controller` on a node of a cluster: the calls are decided here while this node is the
    active controller, else sent to it as Kafka's controller RPCs over its controller listener
    (CreateTopics for internal topics, AllocateProducerIds, BrokerRegistration). Client admin requests
    (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) are forwarded
    whole by their handlers (`forward`), as KIP-590 brokers do, so they never reach the other calls here
    on a node that is not the active controller."""

    def __init__(self, local: QuorumControllerChannel | None, loader: MetadataLoader, connections: NodeConnections,
                 *, node_id: int, request_timeout_s: float = 30.0) -> None:
        self.local = local
        self.loader = loader
        self.connections = connections
        self.node_id = node_id
        self.request_timeout_s = request_timeout_s
        self._tasks: set[asyncio.Task] = set()

    @property
    def is_active(self) -> bool:
        return self.local is not None and self.local.is_active

    @property
    def _active(self) -> QuorumControllerChannel | None:
        """The controller in this process while it is the active one, else None."""
        local = self.local
        return local if local is not None and local.is_active else None

    # -- forwarding

    async def forward(self, request, version: int, *, timeout_s: float | None = None, client=None,
                      purpose: str = "forward"):
        """Send a request to the active controller; its response. With `client` (the request context of a
        client's admin request, broker/handlers/envelope.py) the request goes inside an Envelope with the
        client's principal and address, and the inner response is answered; without, it goes as it is (a
        node's own RPC). While the quorum has no leader, or the one it names cannot be reached (it just
        died), stops being the leader while the request waits (it froze, and the quorum moved on) or
        answers NOT_CONTROLLER (the envelope's error, or any error of a node's own RPC's response), wait
        and send it to the new one, as Kafka's NodeToControllerRequestThread does, until `timeout_s`
        (default `request_timeout_s`).

        A request given up while a node still holds it (the lead moved meanwhile, or the time is up) also
        gives up the connection to that node, as Kafka's channel disconnects from a stale controller: a node
        serves one request at a time per connection, so any later request to that node on the same
        connection would queue behind the abandoned one, however long the node holds it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.request_timeout_s if timeout_s is None else timeout_s)
        if client is not None:
            header = RequestHeader(client.header.api_key, version, client.header.correlation_id, client.header.client_id)
            envelope = EnvelopeRequest(
                request_data=encode_request_data(header, request),
                request_principal=serialize_principal(client.principal.principal_type, client.principal.name),
                client_host_address=address_bytes(client.client_host),
            )
            message, message_version = envelope, 0
        else:
            message, message_version = request, version
        while True:
            leader = await self._leader(deadline)
            sent = loop.create_task(self.connections.request(
                leader, message, message_version, purpose=purpose, timeout_s=max(0.1, deadline - loop.time()),
            ))
            try:
                while not sent.done():
                    await asyncio.wait({sent}, timeout=0.1)
                    if not sent.done() and (self.loader.leader_id != leader or loop.time() > deadline):
                        sent.cancel()
                        self._abandon(leader, purpose, "the active controller moved while it held a forwarded request")
                        break
                if sent.done() and not sent.cancelled():
                    response = sent.result()
                    if client is None:
                        if not _says_not_controller(response):
                            return response
                        # (not a node's answer to keep: send it again once the loader names the new leader)
                    elif response.error_code == ErrorCode.NOT_CONTROLLER:
                        pass  # the lead moved after the request left: send it again to the new leader
                    elif response.error_code:
                        # The controller refused the envelope itself (this node lacks CLUSTER_ACTION there,
                        # or they disagree on the format): a misconfigured cluster, not the client's error.
                        code = ErrorCode.for_code(response.error_code)
                        log.error("the active controller refused a forwarded request's envelope", controller=leader,
                                  api_key=header.api_key, error=code.name)
                        raise ForwardingRefused(f"the active controller refused the envelope: {code.name}")
                    else:
                        return decode_response_data(response.response_data, header)
            except NodeUnavailable:
                pass
            finally:
                if not sent.done():
                    sent.cancel()
            if loop.time() > deadline:
                raise NodeUnavailable(f"no answer from the active controller within the request timeout")
            await asyncio.sleep(0.05)

    def _abandon(self, node_id: int, purpose: str, reason: str) -> None:
        try:
            self.connections.get(node_id, purpose).reset(f"node {node_id} {reason}")
        except NodeUnavailable:  # no address for it any more: no connection either
            pass

    async def _leader(self, deadline: float) -> int:
        """The active controller's node id, waited for until `deadline`; NodeUnavailable then, saying why (the
        forwarded client reads it in its REQUEST_TIMED_OUT: the command line explains it, see client/cli)."""
        loop = asyncio.get_running_loop()
        while self.loader.leader_id < 0 or self.loader.leader_id == self.node_id and not self.is_active:
            if loop.time() > deadline:
                if self.loader.leader_id < 0:
                    raise NodeUnavailable("no active controller: the controller quorum has no leader")
                raise NodeUnavailable("no active controller: this node leads the controller quorum but is not "
                                      "active yet")
            await asyncio.sleep(0.05)
        return self.loader.leader_id

    def _remote(self, coro_fn) -> Deferred:
        out: Deferred = Deferred()

        async def run() -> None:
            try:
                out.complete(await coro_fn())
            except Exception as e:  # noqa: BLE001 - the caller sees the failure on its Deferred
                out.fail(e)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return out

    # -- the calls

    def create_topics(self, topics, *, validate_only: bool = False, internal: bool = False) -> Deferred:
        if (active := self._active) is not None:
            return active.create_topics(topics, validate_only=validate_only, internal=internal)
        from odradek.protocol.messages import CreateTopicsRequest

        request = CreateTopicsRequest(validate_only=validate_only, timeout_ms=int(self.request_timeout_s * 1000), topics=[
            CreateTopicsRequest.CreatableTopic(
                name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                assignments=[CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                             for i, b in sorted((t.assignments or {}).items())],
                configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
            )
            for t in topics
        ])

        async def call():
            from .controller_channel import CreatedTopic

            response = await self.forward(request, 7)
            results: list[CreatedTopic | MetadataError] = []
            for r in response.topics:
                if r.error_code:
                    results.append(MetadataError(ErrorCode(r.error_code), r.error_message or ""))
                else:
                    results.append(CreatedTopic(r.name, r.topic_id, r.num_partitions, r.replication_factor, {}))
            return results

        return self._remote(call)

    def delete_topics(self, topics) -> Deferred:
        return self._local_only("delete_topics", topics)

    def create_partitions(self, topics, *, validate_only: bool = False) -> Deferred:
        return self._local_only("create_partitions", topics, validate_only=validate_only)

    def alter_configs(self, changes, *, validate_only: bool = False) -> Deferred:
        return self._local_only("alter_configs", changes, validate_only=validate_only)

    def alter_user_scram_credentials(self, deletions, upsertions) -> Deferred:
        return self._local_only("alter_user_scram_credentials", deletions, upsertions)

    def create_acls(self, bindings) -> Deferred:
        return self._local_only("create_acls", bindings)

    def delete_acls(self, filters) -> Deferred:
        return self._local_only("delete_acls", filters)

    def alter_client_quotas(self, entries, *, validate_only: bool = False) -> Deferred:
        return self._local_only("alter_client_quotas", entries, validate_only=validate_only)

    def register_broker(self, broker_id: int, endpoints, *, rack: str | None, cluster_id: str | None) -> Deferred:
        """Register a broker unfenced at once, decided here (no BrokerRegistration, no heartbeat session):
        how tests show a lone node the other brokers of a cluster. Brokers themselves register through
        `broker_registration` and are unfenced by their heartbeats."""
        return self._local_only("register_broker", broker_id, endpoints, rack=rack, cluster_id=cluster_id)

    def _local_only(self, name: str, *args, **kwargs) -> Deferred:
        if self.is_active:
            return getattr(self.local, name)(*args, **kwargs)
        return Deferred.failed(MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller."))

    def allocate_producer_ids(self, broker_id: int) -> Deferred:
        if (active := self._active) is not None:
            return active.allocate_producer_ids(broker_id)
        from odradek.protocol.messages import AllocateProducerIdsRequest
        from odradek.metadata.image import ProducerIdsBlock

        async def call():
            epoch = self.loader.image.brokers.get(broker_id)
            request = AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch.broker_epoch if epoch else -1)
            response = await self.forward(request, 0)
            if response.error_code:
                raise MetadataError(ErrorCode(response.error_code), "AllocateProducerIds failed")
            return ProducerIdsBlock(broker_id, response.producer_id_start, response.producer_id_len)

        return self._remote(call)

    # -- the brokers' RPCs: decided here when active, else sent to the active controller as they are

    def _decide_or_forward(self, name: str, request, version: int) -> Deferred:
        if self.is_active:
            return getattr(self.local, name)(request)
        return self._remote(lambda: self.forward(request, version))

    def broker_registration(self, request) -> Deferred:
        # v3: the first with PreviousBrokerEpoch (KIP-966), which the controller reads to tell a clean
        # shutdown from a crash.
        return self._decide_or_forward("broker_registration", request, 3)

    def heartbeat(self, request, *, timeout_s: float | None = None, connection: ConnectionContext | None = None) -> Deferred:
        """Decided here when active (`connection`: the one it arrived on, watched); else sent to the active
        controller on a connection of its own ("heartbeat"), which nothing else uses: the controller fences
        a broker soon after the connection its heartbeats arrive on closes, so no other request's timeout
        may close it."""
        if (active := self._active) is not None:
            return active.heartbeat(request, connection=connection)
        return self._remote(lambda: self.forward(request, 0, timeout_s=timeout_s, purpose="heartbeat"))

    def unregister(self, request) -> Deferred:
        return self._decide_or_forward("unregister", request, 0)

    def alter_partition(self, request, version: int) -> Deferred:
        if (active := self._active) is not None:
            return active.alter_partition(request, version)
        return self._remote(lambda: self.forward(request, version))

    def assign_replicas_to_dirs(self, request) -> Deferred:
        return self._decide_or_forward("assign_replicas_to_dirs", request, 0)

    def elect_leaders(self, request) -> Deferred:
        return self._local_only("elect_leaders", request)

    def alter_partition_reassignments(self, request) -> Deferred:
        return self._local_only("alter_partition_reassignments", request)

    def list_partition_reassignments(self, request):
        if self.local is None:
            raise MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not a controller.")
        return self.local.list_partition_reassignments(request)

    async def close(self) -> None:
        if self.local is not None:  # no more periodic decisions: the log is about to close
            self.local.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
