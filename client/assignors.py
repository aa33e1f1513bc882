"""Partition assignors for the classic consumer group protocol, run by the group leader.

Each member's JoinGroup metadata is a `ConsumerProtocolSubscription` (topics, owned partitions and
generation); the leader's assignor maps every member to a list of partitions, sent back in SyncGroup as a
`ConsumerProtocolAssignment`. The algorithms match Kafka's Java assignors of the same names, so a
mixed group of Java and Odradek consumers agrees on who reads what:

* `range`: per topic, members subscribed to it sorted by member id; the first `n % m` members get
  `n // m + 1` consecutive partitions, the rest `n // m`.
* `roundrobin`: all subscribed partitions sorted by (topic, partition), dealt one at a time to the members
  sorted by id, skipping members not subscribed to the partition's topic.
* `cooperative-sticky`: balanced (member counts differ by at most one where subscriptions allow) while
  keeping as many owned partitions in place as possible. It is *cooperative* (KIP-429): a partition that
  must move from member A to member B is left out of this round's assignment, so A revokes it and
  rejoins, and B receives it in the next round: no partition is ever owned by two members at once, and
  the partitions that stay put are never revoked.

`encode_subscription` / `decode_assignment` (and the reverse pair) read and write the versioned blobs;
a blob of a newer version than 3 is read with the v3 layout, as Kafka does.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.codec import decode_from, encode
from odradek.protocol.messages import DATA_CLASSES

from .common import TopicPartition

# Generated classes (nested TopicPartition, VALID_VERSIONS): Any, as mypy sees `type` in DATA_CLASSES.
SUBSCRIPTION: Any = DATA_CLASSES["ConsumerProtocolSubscription"]
ASSIGNMENT: Any = DATA_CLASSES["ConsumerProtocolAssignment"]
_I16 = struct.Struct(">h")

EAGER = "eager"
COOPERATIVE = "cooperative"


@dataclass
class Subscription:
    topics: list[str]
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    user_data: bytes | None = None
    rack_id: str | None = None


def encode_subscription(sub: Subscription, version: int = 3) -> bytes:
    owned: dict[str, list[int]] = defaultdict(list)
    for tp in sub.owned_partitions:
        owned[tp.topic].append(tp.partition)
    msg = SUBSCRIPTION(
        topics=sorted(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[SUBSCRIPTION.TopicPartition(topic=t, partitions=sorted(p)) for t, p in sorted(owned.items())],
        generation_id=sub.generation_id,
        rack_id=sub.rack_id,
    )
    return _I16.pack(version) + encode(msg, version)


def decode_subscription(data: bytes) -> Subscription:
    version = _I16.unpack_from(data, 0)[0]
    low, high = SUBSCRIPTION.VALID_VERSIONS
    msg, _ = decode_from(SUBSCRIPTION, data, min(max(version, low), high), 2)
    owned = [TopicPartition(t.topic, p) for t in msg.owned_partitions for p in t.partitions]
    return Subscription(list(msg.topics), owned, msg.generation_id, msg.user_data, msg.rack_id)


def encode_assignment(partitions: list[TopicPartition], user_data: bytes | None = None, version: int = 3) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    msg = ASSIGNMENT(
        assigned_partitions=[ASSIGNMENT.TopicPartition(topic=t, partitions=sorted(p)) for t, p in sorted(by_topic.items())],
        user_data=user_data,
    )
    return _I16.pack(version) + encode(msg, version)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:
        return []
    version = _I16.unpack_from(data, 0)[0]
    low, high = ASSIGNMENT.VALID_VERSIONS
    msg, _ = decode_from(ASSIGNMENT, data, min(max(version, low), high), 2)
    return [TopicPartition(t.topic, p) for t in msg.assigned_partitions for p in t.partitions]


class Assignor:
    name = ""
    protocol = EAGER

    def assign(self, partitions: dict[str, int], subscriptions: dict[str, Subscription]) -> dict[str, list[TopicPartition]]:
        """`partitions`: topic -> partition count; `subscriptions`: member id -> Subscription."""
        raise NotImplementedError


class RangeAssignor(Assignor):
    name = "range"

    def assign(self, partitions, subscriptions):
        result: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        by_topic: dict[str, list[str]] = defaultdict(list)
        for member, sub in subscriptions.items():
            for topic in sub.topics:
                by_topic[topic].append(member)
        for topic, members in by_topic.items():
            count = partitions.get(topic)
            if not count:
                continue
            members.sort()
            per, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                n = per + (1 if i < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + n))
                start += n
        return result


class RoundRobinAssignor(Assignor):
    name = "roundrobin"

    def assign(self, partitions, subscriptions):
        result: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = sorted(subscriptions)
        if not members:
            return result
        topics = sorted({t for s in subscriptions.values() for t in s.topics if partitions.get(t)})
        index = 0
        for topic in topics:
            for p in range(partitions[topic]):
                for _ in range(len(members)):
                    member = members[index % len(members)]
                    index += 1
                    if topic in subscriptions[member].topics:
                        result[member].append(TopicPartition(topic, p))
                        break
        return result


class CooperativeStickyAssignor(Assignor):
    name = "cooperative-sticky"
    protocol = COOPERATIVE

    def assign(self, partitions, subscriptions):
        members = sorted(subscriptions)
        eligible: dict[str, list[str]] = defaultdict(list)
        for m in members:
            for t in set(subscriptions[m].topics):
                eligible[t].append(m)
        all_partitions = [TopicPartition(t, p) for t in sorted(eligible) for p in range(partitions.get(t, 0))]
        valid = set(all_partitions)

        # Previous owners: a partition claimed by two members goes to the one with the higher generation.
        owner: dict[TopicPartition, tuple[int, str]] = {}
        for m in members:
            sub = subscriptions[m]
            for tp in sub.owned_partitions:
                if tp in valid and tp.topic in sub.topics:
                    prev = owner.get(tp)
                    if prev is None or sub.generation_id > prev[0]:
                        owner[tp] = (sub.generation_id, m)
        previous = {tp: m for tp, (_, m) in owner.items()}

        assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for tp in all_partitions:
            if tp in previous:
                assignment[previous[tp]].append(tp)
        for tp in all_partitions:
            if tp not in previous:
                candidates = eligible[tp.topic]
                target = min(candidates, key=lambda m: (len(assignment[m]), m))
                assignment[target].append(tp)

        # Move partitions from the most loaded members to eligible members with at least two fewer.
        moved = True
        while moved:
            moved = False
            for m in sorted(members, key=lambda m: (-len(assignment[m]), m)):
                for tp in sorted(assignment[m], key=lambda tp: (tp in previous and previous[tp] == m, tp)):
                    target = min(eligible[tp.topic], key=lambda x: (len(assignment[x]), x))
                    if len(assignment[target]) + 1 < len(assignment[m]):
                        assignment[m].remove(tp)
                        assignment[target].append(tp)
                        moved = True
                        break
                if moved:
                    break

        # Cooperative: a partition changing owner is withheld until its previous owner has revoked it.
        for m in members:
            assignment[m] = sorted(tp for tp in assignment[m] if previous.get(tp, m) == m)
        return assignment


ASSIGNORS: dict[str, type[Assignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}
