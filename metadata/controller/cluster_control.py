"""The controller's view of the brokers (Kafka's ClusterControlManager): registration, heartbeats,
fencing and controlled shutdown.

A broker's registration lives in the image (RegisterBrokerRecord: incarnation, broker epoch, endpoints,
rack, fenced; BrokerRegistrationChangeRecord moves it between fenced, unfenced and controlled shutdown).
Its session does not: when it last heartbeated and which metadata offset it reported is soft state, kept by
`heartbeats` (broker_heartbeats.py, Kafka's BrokerHeartbeatManager) and started afresh by a new active
controller (`activate`).

The broker epoch is the offset of the broker's RegisterBrokerRecord (the log end offset plus the records
decided before it in the same batch), as in Kafka: it grows with every registration and says which
incarnation an RPC comes from. A broker registers fenced and is unfenced by a heartbeat once it has
replayed its own registration; it is fenced again when it asks, when its session expires, or when a new
incarnation registers in its place.

What a broker's state change does to partitions (leaving ISRs and leaderships, electing leaderless
partitions once it is active again) is decided by the replication control manager, reached through
`BrokerPartitionEffects`; the registration records and the session bookkeeping are decided here, in the
same `PartitionChanges` so that the records come out in Kafka's order (the partitions first when a broker
leaves, the registration first when it joins).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from enum import IntEnum
from typing import Protocol

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import BrokerHeartbeatResponse, BrokerRegistrationResponse, UnregisterBrokerResponse
from odradek.metadata.broker_heartbeats import DEFAULT_HEARTBEAT_INTERVAL_MS, BrokerHeartbeatManager
from odradek.metadata.image import BrokerRegistration, Endpoint, MetadataError, MetadataImage, random_uuid
from odradek.metadata.records import BrokerRegistrationChangeRecord, RegisterBrokerRecord, UnregisterBrokerRecord

from .brokers import RegisteredBrokers
from .feature_control import FeatureControlManager
from .partition_changes import PartitionChanges


class BrokerState(IntEnum):
    """Where a heartbeat leaves a broker (Kafka's BrokerControlState)."""

    FENCED = 0
    UNFENCED = 1
    CONTROLLED_SHUTDOWN = 2
    SHUTDOWN_NOW = 3

    @property
    def fenced(self) -> bool:
        return self in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW)


class BrokerPartitionEffects(Protocol):
    """What a broker leaving or joining does to the partitions (replication_control.py)."""

    def remove_broker(self, changes: PartitionChanges, broker_id: int, *, unregistered: bool = False) -> None: ...

    def remove_unclean_broker(self, changes: PartitionChanges, broker_id: int) -> bool: ...

    def elect_leaderless(self, changes: PartitionChanges) -> None: ...

    def leads_any(self, image: MetadataImage, broker_id: int) -> bool: ...


class ClusterControlManager:
    """See the module doc. `rng` draws incarnation ids; `session_timeout_ms` is broker.session.timeout.ms;
    `disconnect_grace_ms` and `heartbeat_interval_ms` end sessions sooner (broker_heartbeats.py)."""

    def __init__(
        self,
        session_timeout_ms: int,
        rng: random.Random,
        brokers: RegisteredBrokers,
        features: FeatureControlManager,
        partitions: BrokerPartitionEffects,
        *,
        disconnect_grace_ms: int = -1,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    ) -> None:
        self.heartbeats = BrokerHeartbeatManager(
            session_timeout_ms, disconnect_grace_ms=disconnect_grace_ms, heartbeat_interval_ms=heartbeat_interval_ms
        )
        self._rng = rng
        self._brokers = brokers
        self._features = features
        self._partitions = partitions

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """This controller became the active one: every registered broker gets a session starting now (the
        sessions of a previous controller are not known here), as Kafka's activation does."""
        self.heartbeats.start_sessions({b.broker_id: b.fenced for b in image.brokers.values()}, now_ms)

    # -- registration records

    def register_broker(
        self,
        image: MetadataImage,
        log_end_offset: int,
        broker_id: int,
        endpoints: Sequence[Endpoint],
        *,
        rack: str | None = None,
        fenced: bool = False,
    ) -> list:
        """A RegisterBrokerRecord with a new incarnation id. The broker epoch is the log end offset, as in
        Kafka (there it is the registration's own offset): it grows with every registration appended."""
        if broker_id < 0:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Invalid broker id {broker_id}")
        names = [e.name for e in endpoints]
        if len(set(names)) != len(names):
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Duplicate listener names in {names}")
        previous = image.brokers.get(broker_id)
        broker_epoch = log_end_offset
        if previous is not None:
            broker_epoch = max(broker_epoch, previous.broker_epoch + 1)
        return [
            RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=random_uuid(self._rng),
                broker_epoch=broker_epoch,
                end_points=[
                    RegisterBrokerRecord.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in endpoints
                ],
                rack=rack,
                fenced=fenced,
            )
        ]

    def unregister_broker(self, image: MetadataImage, broker_id: int) -> list:
        """UnregisterBroker: the broker leaves every ISR and leadership, then its registration goes."""
        broker = self._brokers.registration(image, broker_id)
        changes = PartitionChanges(image)
        self._partitions.remove_broker(changes, broker_id, unregistered=True)
        changes.add_records([UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch)])
        return changes.records

    def fence_broker(self, image: MetadataImage, broker_id: int) -> list:
        """Fence the broker (Kafka's handleBrokerFenced): it leaves every ISR (but for a last member), the
        partitions it led elect new leaders, then the registration change. No-op records if fenced."""
        broker = self._brokers.registration(image, broker_id)
        changes = PartitionChanges(image)
        self._fence(changes, broker)
        self.heartbeats.fence(broker_id)  # its session ends: a new incarnation may register
        return changes.records

    def unfence_broker(self, image: MetadataImage, broker_id: int) -> list:
        """Unfence the broker (Kafka's handleBrokerUnfenced): the registration change, then leaderless
        partitions whose ISR holds it elect it."""
        broker = self._brokers.registration(image, broker_id)
        changes = PartitionChanges(image)
        self._unfence(changes, broker)
        return changes.records

    # -- the brokers' RPCs: BrokerRegistration, BrokerHeartbeat, UnregisterBroker; session expiry

    def register(self, image: MetadataImage, log_end_offset: int, request, now_ms: int) -> tuple[list, object]:
        """BrokerRegistration (Kafka's ClusterControlManager.registerBroker): (records,
        BrokerRegistrationResponse). Raises MetadataError: INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION
        (another incarnation is proven live: it heartbeated to this controller within its session and its
        connection has not been seen closed), UNSUPPORTED_VERSION (a feature level the broker cannot
        run), INVALID_REQUEST, BROKER_ID_NOT_REGISTERED (a ZooKeeper broker).

        The same incarnation again is idempotent: same broker epoch and state, a record only if its
        endpoints or rack changed (the image keeps no features). A new incarnation registers FENCED with a
        new broker epoch, the offset its RegisterBrokerRecord gets when the records are appended next
        (`log_end_offset` plus what precedes it). The heartbeat unfences it once it has replayed that offset.

        Before that record, what the previous incarnation leaves behind (Kafka's handleBrokerShutdown). Its
        shutdown was clean only if the broker proves it: BrokerRegistration v3's `previous_broker_epoch` is
        the broker epoch it wrote in its clean-shutdown marker, and must be the epoch registered now (-1,
        no marker, never is). Unclean, with ELR on: it may have lost records it acknowledged but had not
        flushed (a power loss), so it leaves every ISR, ELR and leadership (`remove_unclean_broker`).
        Clean, or ELR off: if it is still unfenced it leaves every ISR and leadership as a fenced broker
        does; its ELR places stay, so a partition whose replicas all stopped cleanly comes back with
        them.

        Kafka refuses a new incarnation while the old one's session is valid, and a valid session includes
        the one a new controller presumes at activation: so a node restarted after a whole cluster went
        down (docker-compose down, then up) waited out a full broker.session.timeout.ms before it could
        register, although it was the process the session stood for, dead. Kafka 4.x relaxes the rule for
        a broker that was in controlled shutdown (KAFKA-19047) and gives fenced brokers no session at
        activation (KAFKA-19130). Here a new incarnation replaces the old one at once unless the old one
        is proven live (`BrokerHeartbeatManager.is_proven_live`): a session only presumed, or whose
        connection closed, is no evidence of another process with this id, and the registration itself is.
        Two live processes with one node.id are still refused, once the first has heartbeated here."""
        if request.cluster_id != image.cluster_id:
            raise MetadataError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"Expected cluster ID {image.cluster_id}, but got cluster ID {request.cluster_id}",
            )
        broker_id = request.broker_id
        if broker_id < 0:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Invalid broker id {broker_id}")
        existing = image.brokers.get(broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            and self.heartbeats.is_proven_live(broker_id, now_ms)
        ):
            raise MetadataError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id."
            )
        if request.is_migrating_zk_broker:
            raise MetadataError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers."
            )
        self._features.check_broker_features(image, request.features)
        endpoints = [Endpoint(e.name, e.host, e.port, e.security_protocol) for e in request.listeners]
        features = [
            RegisterBrokerRecord.BrokerFeature(
                name=f.name,
                min_supported_version=f.min_supported_version,
                max_supported_version=f.max_supported_version,
            )
            for f in request.features
        ]
        changes = PartitionChanges(image)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            (record,) = self.register_broker(
                image, log_end_offset, broker_id, endpoints, rack=request.rack, fenced=existing.fenced
            )
            record.incarnation_id = existing.incarnation_id
            record.broker_epoch = existing.broker_epoch
            record.in_controlled_shutdown = existing.in_controlled_shutdown
            record.features = features
            if existing.endpoints != tuple(endpoints) or existing.rack != request.rack:
                changes.add_records([record])
        else:
            clean = existing is not None and request.previous_broker_epoch == existing.broker_epoch
            if existing is not None and not clean:
                self._partitions.remove_unclean_broker(changes, broker_id)
            elif existing is not None and not existing.fenced:
                self._partitions.remove_broker(changes, broker_id)
            (record,) = self.register_broker(
                image, log_end_offset, broker_id, endpoints, rack=request.rack, fenced=True
            )
            record.incarnation_id = request.incarnation_id
            record.broker_epoch = log_end_offset + len(changes.records)
            if existing is not None:
                record.broker_epoch = max(record.broker_epoch, existing.broker_epoch + 1)
            record.features = features
            changes.add_records([record])
            self.heartbeats.remove(broker_id)
        self.heartbeats.register(broker_id, record.fenced, now_ms)
        return changes.records, BrokerRegistrationResponse(error_code=0, broker_epoch=record.broker_epoch)

    def heartbeat(self, image: MetadataImage, log_end_offset: int, request, now_ms: int) -> tuple[list, object]:
        """BrokerHeartbeat (Kafka's processBrokerHeartbeat): (records, BrokerHeartbeatResponse). Raises
        MetadataError(STALE_BROKER_EPOCH) for an unknown broker or another broker epoch.

        The broker's next state (Kafka's BrokerHeartbeatManager.calculateNextBrokerState):
        FENCED: want_shut_down -> SHUTDOWN_NOW; caught up (current_metadata_offset >= the registration's
        offset, its broker epoch) and not want_fence -> UNFENCED (a broker that went through controlled
        shutdown stays fenced until it registers again). UNFENCED: want_fence -> FENCED (or SHUTDOWN_NOW
        with want_shut_down); want_shut_down -> CONTROLLED_SHUTDOWN if it leads anything, else
        SHUTDOWN_NOW. CONTROLLED_SHUTDOWN: SHUTDOWN_NOW once it leads nothing and every active broker has
        replayed the records that moved its leaderships. A change of state writes its records: fencing
        (and SHUTDOWN_NOW) as `fence_broker`, unfencing as `unfence_broker`, controlled shutdown marks the
        registration and moves every leadership away, removing the broker from each ISR."""
        broker_id = request.broker_id
        broker = self._brokers.check_broker_epoch(image, broker_id, request.broker_epoch)
        heartbeats = self.heartbeats
        if broker_id not in heartbeats.sessions:
            heartbeats.register(broker_id, broker.fenced, now_ms)
        session = heartbeats.sessions[broker_id]
        offset = request.current_metadata_offset
        if broker.fenced:
            current = BrokerState.FENCED
        elif broker.in_controlled_shutdown:
            current = BrokerState.CONTROLLED_SHUTDOWN
            if not session.shutting_down:  # a new controller: what is committed is what it moved
                heartbeats.enter_controlled_shutdown(broker_id, log_end_offset - 1)
        else:
            current = BrokerState.UNFENCED
        registration_offset = broker.broker_epoch
        if current == BrokerState.FENCED:
            if request.want_shut_down:
                next_state = BrokerState.SHUTDOWN_NOW
            elif not request.want_fence and offset >= registration_offset and not broker.in_controlled_shutdown:
                next_state = BrokerState.UNFENCED
            else:
                next_state = BrokerState.FENCED
        elif current == BrokerState.UNFENCED:
            if request.want_fence:
                next_state = BrokerState.SHUTDOWN_NOW if request.want_shut_down else BrokerState.FENCED
            elif request.want_shut_down:
                next_state = (
                    BrokerState.CONTROLLED_SHUTDOWN
                    if self._partitions.leads_any(image, broker_id)
                    else BrokerState.SHUTDOWN_NOW
                )
            else:
                next_state = BrokerState.UNFENCED
        elif self._partitions.leads_any(image, broker_id):
            next_state = BrokerState.CONTROLLED_SHUTDOWN
        elif session.controlled_shutdown_offset <= heartbeats.lowest_active_offset():
            next_state = BrokerState.SHUTDOWN_NOW
        else:
            next_state = BrokerState.CONTROLLED_SHUTDOWN

        changes = PartitionChanges(image)
        if next_state != current:
            if next_state.fenced and not broker.fenced:
                self._fence(changes, broker)
            elif next_state == BrokerState.UNFENCED:
                self._unfence(changes, broker)
            elif next_state == BrokerState.CONTROLLED_SHUTDOWN:
                changes.add_records([
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id, broker_epoch=broker.broker_epoch, in_controlled_shutdown=1
                    )
                ])
                self._partitions.remove_broker(changes, broker_id)
        heartbeats.touch(broker_id, next_state.fenced, offset, now_ms)
        if next_state == BrokerState.CONTROLLED_SHUTDOWN:
            # Shut down once every active broker has replayed the last of these records.
            heartbeats.enter_controlled_shutdown(broker_id, log_end_offset + len(changes.records) - 1)
        response = BrokerHeartbeatResponse(
            error_code=0,
            is_caught_up=offset >= registration_offset,
            is_fenced=next_state.fenced,
            should_shut_down=next_state == BrokerState.SHUTDOWN_NOW,
        )
        return changes.records, response

    def unregister(self, image: MetadataImage, request) -> tuple[list, object]:
        """UnregisterBroker: (records, UnregisterBrokerResponse). Raises MetadataError(BROKER_ID_NOT_REGISTERED)."""
        records = self.unregister_broker(image, request.broker_id)
        self.heartbeats.remove(request.broker_id)
        return records, UnregisterBrokerResponse(error_code=0, error_message=None)

    def maybe_fence_stale_brokers(self, image: MetadataImage, now_ms: int) -> list:
        """Records fencing every broker whose session expired (no heartbeat for session_timeout_ms, or its
        connection closed and the disconnect grace passed, or presumed at activation and never confirmed:
        broker_heartbeats.py), each as `fence_broker`, one after the other. Only brokers with a session are considered: those that
        registered or heartbeated here, or all registered ones after `activate`."""
        changes = PartitionChanges(image)
        for broker_id in self.heartbeats.stale_brokers(now_ms):
            broker = image.brokers.get(broker_id)
            if broker is None:
                self.heartbeats.remove(broker_id)
                continue
            if not broker.fenced:
                self._fence(changes, broker)
            self.heartbeats.fence(broker_id)
        return changes.records

    def broker_disconnected(self, broker_id: int, now_ms: int) -> bool:
        """The broker's heartbeat connection closed: its session ends after the disconnect grace unless it
        heartbeats again (broker_heartbeats.py). No records now: `maybe_fence_stale_brokers` fences it."""
        return self.heartbeats.disconnected(broker_id, now_ms)

    def next_expiry_ms(self) -> int | None:
        """When the next broker session expires, if any is live."""
        return self.heartbeats.next_expiry_ms()

    # -- helpers

    def _fence(self, changes: PartitionChanges, broker: BrokerRegistration) -> None:
        self._partitions.remove_broker(changes, broker.broker_id)
        if not broker.fenced:
            changes.add_records([
                BrokerRegistrationChangeRecord(broker_id=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=1)
            ])

    def _unfence(self, changes: PartitionChanges, broker: BrokerRegistration) -> None:
        changes.add_records([
            BrokerRegistrationChangeRecord(broker_id=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=-1)
        ])
        changes.set_active(broker.broker_id, not broker.in_controlled_shutdown)
        self._partitions.elect_leaderless(changes)
