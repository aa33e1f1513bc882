"""The share-group assignor (KIP-932; Kafka's `SimpleAssignor`, `group.share.assignors=simple`).

A share partition may be consumed by several members at once (the share-partition leader hands each
record to one member under an acquisition lock), so the assignor's job differs from a consumer group's:

- every subscribed partition must have at least one member, else its records wait for nobody;
- when members outnumber partitions, members share partitions: every member gets exactly one partition
  and the members spread over the partitions evenly (their counts per partition differ by at most one);
- when partitions outnumber members, each partition goes to exactly one member, balanced within one,
  which is the uniform assignor's exclusive assignment (sticky: a member keeps what it has where balance
  allows);
- a member only ever gets partitions of topics it subscribes to.

The balance bounds are exact when every member subscribes to the same topics (the common case, and the
one the property tests check); with mixed subscriptions every partition still gets a member and the
members that can only reach few partitions are placed first, but balance is best effort, as in Kafka.

Stickiness matters less than for a consumer group (no revocation dance: a move costs only the
share-partition's in-flight locks of that member, which expire or are released), but still counts: when
a member joins or leaves, the others keep their partitions as far as balance allows, so in-flight
batches are not needlessly abandoned. Deterministic: members and partitions are taken in sorted order,
so the same state always gives the same assignment (a failing seed replays).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from .assignors import Assignment, Partitions, Subscriptions, uniform_assignor

__all__ = ["simple_assignor"]


def simple_assignor(subscriptions: Subscriptions, partitions: Partitions,
                    current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """member id -> topic id -> partitions: the target assignment of a share group."""
    exclusive = uniform_assignor(subscriptions, partitions, current)
    assigned: dict[str, dict[uuid.UUID, set[int]]] = {
        m: {t: set(ps) for t, ps in a.items()} for m, a in exclusive.items()}
    members_of: dict[tuple[uuid.UUID, int], int] = {}
    for a in exclusive.values():
        for t, ps in a.items():
            for p in ps:
                members_of[(t, p)] = members_of.get((t, p), 0) + 1

    def subscribed(member_id: str) -> list[tuple[uuid.UUID, int]]:
        return [(t, p) for t in sorted(subscriptions[member_id]) for p in range(partitions.get(t, 0))]

    # Members the exclusive pass left empty handed (more members than partitions) share a partition.
    idle = sorted((m for m in subscriptions if not exclusive.get(m) and subscribed(m)),
                  key=lambda m: (len(subscribed(m)), m))
    if idle:
        busy = len(subscriptions) - len(idle)
        total = len(idle) + busy
        slots = max(len(members_of), 1)
        floor = total // slots
        left = []
        # Sticky pass: keep a partition held before while it has fewer than the even share of members.
        for member_id in idle:
            kept = None
            for t, ps in sorted(current.get(member_id, {}).items()):
                if t not in subscriptions[member_id]:
                    continue
                for p in sorted(ps):
                    if p < partitions.get(t, 0) and members_of.get((t, p), 0) < floor:
                        kept = (t, p)
                        break
                if kept:
                    break
            if kept is None:
                left.append(member_id)
                continue
            assigned[member_id] = {kept[0]: {kept[1]}}
            members_of[kept] = members_of.get(kept, 0) + 1
        for member_id in left:
            tp = min(subscribed(member_id), key=lambda tp: (members_of.get(tp, 0), tp))
            assigned[member_id] = {tp[0]: {tp[1]}}
            members_of[tp] = members_of.get(tp, 0) + 1
    return {m: {t: frozenset(ps) for t, ps in a.items() if ps} for m, a in assigned.items()}
