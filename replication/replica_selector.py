"""Fetch from the closest replica (KIP-392): which replica a consumer should read a partition from.

Theory of operation
-------------------
A consumer's Fetch v11+ names its rack (`rack_id`, from `client.rack`). The leader of a partition asks the
broker's replica selector (`replica.selector.class`) which replica the consumer should read from, among
the leader and the in-sync followers that hold the fetch offset; when the answer is not the leader, the
leader reads nothing and answers `preferred_read_replica` with that broker's id, and the consumer fetches
from it from then on. A follower serves consumer fetches up to its own high watermark (never beyond), so a
consumer there sees only committed records, possibly a little later than at the leader.

Kafka's two selectors, by their class names:

  * `org.apache.kafka.common.replica.LeaderSelector` (and no selector at all, the default): the leader;
  * `org.apache.kafka.common.replica.RackAwareReplicaSelector`: the leader when it is in the client's rack
    or no replica is; else the most caught-up replica of the client's rack (highest log end offset, then
    the most recently caught up; the lowest broker id breaks what remains of a tie, where Kafka's is
    arbitrary).

Any other class name cannot be honoured, and refuses the broker's start (`replica_selector_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "LEADER_SELECTOR",
    "RACK_AWARE_REPLICA_SELECTOR",
    "ClientMetadata",
    "LeaderSelector",
    "RackAwareReplicaSelector",
    "ReplicaSelector",
    "ReplicaView",
    "replica_selector_for",
]

LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a consumer's fetch says of the consumer (Kafka's ClientMetadata): its rack, and the listener it
    came in on (the preferred replica must be reachable there)."""

    rack_id: str
    client_id: str = ""
    listener_name: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(self, client: ClientMetadata, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView:
        """The replica to read from; `replicas` includes the leader."""


class LeaderSelector:
    def select(self, client: ClientMetadata, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView:
        return leader


class RackAwareReplicaSelector:
    def select(self, client: ClientMetadata, leader: ReplicaView, replicas: Sequence[ReplicaView]) -> ReplicaView:
        if not client.rack_id:
            return leader
        same_rack = [r for r in replicas if r.rack == client.rack_id]
        if not same_rack or any(r.broker_id == leader.broker_id for r in same_rack):
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, -r.broker_id))


def replica_selector_for(class_name: str | None) -> ReplicaSelector | None:
    """The selector `replica.selector.class` names; None when unset (leader only, no preferred replica is
    ever answered). Raises ValueError for a class this broker does not have."""
    if not class_name:
        return None
    if class_name == LEADER_SELECTOR:
        return LeaderSelector()
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    raise ValueError(
        f"{class_name!r} is not a replica selector this broker has: use {RACK_AWARE_REPLICA_SELECTOR} or "
        f"{LEADER_SELECTOR}"
    )
