"""Server-side partition assignors of the consumer protocol (KIP-848): "uniform" and "range".

An assignor maps the group's members, each with the topic ids it subscribes to, onto the partitions of
those topics: every partition of a subscribed topic goes to exactly one member subscribed to it. Both
are deterministic (members and partitions are taken in sorted order), so a target assignment computed
twice from the same state is the same.

- uniform: balances the number of partitions per member (within one when subscriptions are
  homogeneous) and is sticky: a member keeps the partitions it has as far as balance allows, so a
  rebalance moves as few partitions as it can.
- range: per topic, the subscribers in member id order each take a contiguous range, the first
  `partitions % subscribers` one partition more: co-partitioned topics land on the same members.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

__all__ = ["ASSIGNORS", "range_assignor", "uniform_assignor"]

Assignment = dict[uuid.UUID, frozenset[int]]
Subscriptions = Mapping[str, frozenset[uuid.UUID]]  # member id -> subscribed topic ids
Partitions = Mapping[uuid.UUID, int]  # topic id -> number of partitions


def _freeze(assigned: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in assigned.items()}


def range_assignor(subscriptions: Subscriptions, partitions: Partitions,
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    assigned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    for topic_id in sorted({t for topics in subscriptions.values() for t in topics}):
        count = partitions.get(topic_id, 0)
        subscribers = sorted(m for m, topics in subscriptions.items() if topic_id in topics)
        if not count or not subscribers:
            continue
        per_member, extra = divmod(count, len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            n = per_member + (1 if i < extra else 0)
            if n:
                assigned[member_id][topic_id] = set(range(start, start + n))
            start += n
    return _freeze(assigned)


def uniform_assignor(subscriptions: Subscriptions, partitions: Partitions,
                     current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(m for m, topics in subscriptions.items() if topics)
    assignable = [(t, p) for t in sorted({t for m in members for t in subscriptions[m]}) for p in range(partitions.get(t, 0))]
    assigned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    if not members or not assignable:
        return _freeze(assigned)
    counts = dict.fromkeys(members, 0)
    floor, extra = divmod(len(assignable), len(members))
    owner: dict[tuple[uuid.UUID, int], str] = {}
    kept: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for member_id in members:
        topics = subscriptions[member_id]
        mine = sorted(
            (t, p) for t, ps in current.get(member_id, {}).items() if t in topics
            for p in ps if p < partitions.get(t, 0)
        )
        kept[member_id] = mine
    # Keep up to the floor quota first, then let members that had more keep one extra while extras last.
    for limit_pass in (0, 1):
        for member_id in sorted(members, key=lambda m: (-len(kept[m]), m)):
            for tp in kept[member_id]:
                if tp in owner:
                    continue
                quota = floor + (1 if limit_pass == 1 and extra > 0 else 0)
                if counts[member_id] >= quota:
                    break
                if limit_pass == 1 and counts[member_id] == floor:
                    extra -= 1
                owner[tp] = member_id
                counts[member_id] += 1
    for tp in assignable:
        if tp in owner:
            continue
        eligible = [m for m in members if tp[0] in subscriptions[m]]
        member_id = min(eligible, key=lambda m: (counts[m], m))
        owner[tp] = member_id
        counts[member_id] += 1
    for (topic_id, p), member_id in owner.items():
        assigned[member_id].setdefault(topic_id, set()).add(p)
    return _freeze(assigned)


ASSIGNORS: dict[str, Callable[[Subscriptions, Partitions, Mapping[str, Assignment]], dict[str, Assignment]]] = {
    "uniform": uniform_assignor,
    "range": range_assignor,
}
