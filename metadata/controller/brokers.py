"""The registered brokers as the other control managers may ask about them.

Registrations live in the image (RegisterBrokerRecord, BrokerRegistrationChangeRecord); the cluster control
manager decides them. The replication, producer-id and cluster managers all need to read them the same
way: which broker may lead, join an ISR or be placed on (`is_active`: registered, unfenced, not in
controlled shutdown; Kafka's ClusterControlManager.isActive), which broker ids a request may name, and
whether a broker's RPC carries its current broker epoch. `RegisteredBrokers` is that narrow, stateless
view: each question takes the image it is asked against.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import BrokerRegistration, MetadataError, MetadataImage


def is_active(broker: BrokerRegistration) -> bool:
    """Kafka's ClusterControlManager.isActive: may lead, join an ISR, be placed on."""
    return not broker.fenced and not broker.in_controlled_shutdown


class RegisteredBrokers:
    """See the module doc."""

    def is_registered(self, image: MetadataImage, broker_id: int) -> bool:
        return broker_id in image.brokers

    def is_active(self, image: MetadataImage, broker_id: int) -> bool:
        broker = image.brokers.get(broker_id)
        return broker is not None and is_active(broker)

    def usable_brokers(self, image: MetadataImage) -> list[int]:
        """The active brokers' ids, ascending."""
        return sorted(b.broker_id for b in image.brokers.values() if is_active(b))

    def placement_candidates(self, image: MetadataImage) -> list[tuple[int, str | None]]:
        """(broker id, rack) of every active broker, in registration order (the placer draws from them)."""
        return [(b.broker_id, b.rack) for b in image.brokers.values() if is_active(b)]

    def registration(self, image: MetadataImage, broker_id: int) -> BrokerRegistration:
        """The broker's registration; MetadataError(BROKER_ID_NOT_REGISTERED) if it has none."""
        broker = image.brokers.get(broker_id)
        if broker is None:
            raise MetadataError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered.")
        return broker

    def check_broker_epoch(self, image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        """The registration of the broker an RPC comes from; MetadataError(STALE_BROKER_EPOCH) if it has none
        or the RPC names another broker epoch (an older incarnation)."""
        broker = image.brokers.get(broker_id)
        if broker is None:
            raise MetadataError(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if broker.broker_epoch != broker_epoch:
            raise MetadataError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"Expected broker epoch {broker.broker_epoch}, but got broker epoch {broker_epoch}",
            )
        return broker
