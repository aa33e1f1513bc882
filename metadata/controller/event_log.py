"""What the active controller tells the operator: one log event per cluster state change it committed.

The controller's decisions become records (quorum_controller.py); what an operator wants to read is the
change those records make: a topic created or deleted, a broker registered, fenced, unfenced or shut
down, an ISR that shrank or grew, a partition left without a leader or given an unclean one. `describe`
turns one committed batch into those events, reading each record against the partition and broker state
the records before it in the batch leave (a fencing batch removes the broker from an ISR and then moves
the leadership: two records, each compared with the state after the first). `log_committed` writes them.

Why here, and only here: every node replays the same records (the standby controllers and every broker),
so logging on replay would tell each event once per node. The active controller decided the change; it
logs it once, when the batch is committed (broker/controller_channel.py calls `log_committed` then, never
for a batch that failed to commit or a validate_only request). What happens to a replica on a broker
(leader, follower) is logged by that broker (replication/replica_manager.py).

Levels follow Kafka's: INFO for state changes, WARN where something was lost or taken away (a broker
fenced without asking, an ISR shrink, a partition without leader, an unclean election). Fields are the
names an operator filters on: `topic`, `partition`, `broker`, `broker_epoch`, `leader`, `leader_epoch`,
`isr`. `cause` says what led to the decision where the caller knows it (a session that expired, a
broker's heartbeat, a registration).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple

import structlog

from odradek.metadata.image import BrokerRegistration, MetadataImage, PartitionImage, merge_partition_change, uuid_string
from odradek.metadata.records import (
    BrokerRegistrationChangeRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)

log = structlog.get_logger("odradek.controller")

INFO = "info"
WARNING = "warning"
DEBUG = "debug"


class Event(NamedTuple):
    level: str  # a structlog method name: "info", "warning", "debug"
    event: str
    fields: dict[str, Any]


def _listeners(r) -> list[str]:
    return [f"{e.name}://{e.host}:{e.port}" for e in r.end_points]


def describe(records: Iterable[Any], before: MetadataImage, cause: str | None = None) -> list[Event]:
    """The events of committed `records`, read against `before` (the image the batch was decided on)."""
    events: list[Event] = []
    names: dict[uuid.UUID, str] = {t.topic_id: t.name for t in before.topics_by_id.values()}
    partitions: dict[tuple[uuid.UUID, int], PartitionImage] = {}
    brokers: dict[int, BrokerRegistration | None] = {}
    created: dict[uuid.UUID, Event] = {}
    extra = {"cause": cause} if cause else {}

    def partition(topic_id: uuid.UUID, index: int) -> PartitionImage | None:
        key = (topic_id, index)
        if key not in partitions:
            topic = before.topics_by_id.get(topic_id)
            p = topic.partitions.get(index) if topic is not None else None
            if p is None:
                return None
            partitions[key] = p
        return partitions[key]

    def broker(broker_id: int) -> BrokerRegistration | None:
        return brokers[broker_id] if broker_id in brokers else before.brokers.get(broker_id)

    for r in records:
        if isinstance(r, TopicRecord):
            names[r.topic_id] = r.name
            created[r.topic_id] = e = Event(INFO, "topic created", {
                "topic": r.name, "topic_id": uuid_string(r.topic_id), "partitions": 0, "replication_factor": 0})
            events.append(e)
        elif isinstance(r, PartitionRecord):
            partitions[(r.topic_id, r.partition_id)] = PartitionImage(
                replicas=tuple(r.replicas), isr=tuple(r.isr), leader=r.leader, leader_epoch=r.leader_epoch,
                partition_epoch=r.partition_epoch)
            new_topic = created.get(r.topic_id)
            if new_topic is not None:
                new_topic.fields["partitions"] += 1
                new_topic.fields["replication_factor"] = max(new_topic.fields["replication_factor"], len(r.replicas))
            else:
                events.append(Event(INFO, "partition created", {
                    "topic": names.get(r.topic_id, str(r.topic_id)), "partition": r.partition_id,
                    "replicas": list(r.replicas), "leader": r.leader, "leader_epoch": r.leader_epoch}))
        elif isinstance(r, RemoveTopicRecord):
            events.append(Event(INFO, "topic deleted", {
                "topic": names.get(r.topic_id, str(r.topic_id)), "topic_id": uuid_string(r.topic_id)}))
        elif isinstance(r, PartitionChangeRecord):
            old = partition(r.topic_id, r.partition_id)
            if old is None:
                continue
            new = partitions[(r.topic_id, r.partition_id)] = merge_partition_change(old, r)
            events.extend(_partition_events(names.get(r.topic_id, str(r.topic_id)), r.partition_id, old, new, extra))
        elif isinstance(r, RegisterBrokerRecord):
            previous = broker(r.broker_id)
            same = previous is not None and previous.incarnation_id == r.incarnation_id
            events.append(Event(INFO, "broker registration updated" if same else "broker registered", {
                "broker": r.broker_id, "broker_epoch": r.broker_epoch, "incarnation_id": uuid_string(r.incarnation_id),
                "listeners": _listeners(r), "rack": r.rack, "fenced": bool(r.fenced), **extra}))
            brokers[r.broker_id] = BrokerRegistration(
                r.broker_id, r.incarnation_id, r.broker_epoch, (), r.rack, bool(r.fenced), bool(r.in_controlled_shutdown))
        elif isinstance(r, UnregisterBrokerRecord):
            events.append(Event(INFO, "broker unregistered", {"broker": r.broker_id, "broker_epoch": r.broker_epoch}))
            brokers[r.broker_id] = None
        elif isinstance(r, BrokerRegistrationChangeRecord):
            previous = broker(r.broker_id)
            shutting_down = previous is not None and previous.in_controlled_shutdown
            fields = {"broker": r.broker_id, "broker_epoch": r.broker_epoch}
            if r.in_controlled_shutdown == 1 and not shutting_down:
                events.append(Event(INFO, "broker in controlled shutdown", fields))
                shutting_down = True
            if r.fenced == 1 and (previous is None or not previous.fenced):
                if shutting_down:  # the end of a controlled shutdown: asked for, nothing lost
                    events.append(Event(INFO, "broker shut down", fields))
                else:
                    events.append(Event(WARNING, "broker fenced", {**fields, **extra}))
            elif r.fenced == -1 and (previous is None or previous.fenced):
                events.append(Event(INFO, "broker unfenced", fields))
            if previous is not None:
                fenced = {-1: False, 1: True}.get(r.fenced, previous.fenced)
                brokers[r.broker_id] = dataclasses.replace(previous, fenced=fenced, in_controlled_shutdown=shutting_down)
    return events


def _partition_events(topic: str, index: int, old: PartitionImage, new: PartitionImage,
                      extra: dict[str, Any]) -> list[Event]:
    events: list[Event] = []
    fields = {"topic": topic, "partition": index, "leader": new.leader, "leader_epoch": new.leader_epoch,
              "isr": list(new.isr)}
    removed = [b for b in old.isr if b not in new.isr]
    added = [b for b in new.isr if b not in old.isr]
    if removed:
        events.append(Event(WARNING, "isr shrunk", {**fields, "previous_isr": list(old.isr), "removed": removed, **extra}))
    if added:
        events.append(Event(INFO, "isr expanded", {**fields, "previous_isr": list(old.isr), "added": added}))
    if new.leader_epoch != old.leader_epoch:
        moved = {**fields, "previous_leader": old.leader}
        if new.leader < 0 <= old.leader:
            events.append(Event(WARNING, "partition has no leader", {**moved, **extra}))
        elif new.leader >= 0 and old.isr and new.leader not in old.isr:
            events.append(Event(WARNING, "unclean leader election", moved))
        else:
            events.append(Event(DEBUG, "partition leader elected", moved))
    return events


def log_committed(records: Iterable[Any], before: MetadataImage, cause: str | None = None) -> None:
    """Log the events of a batch the active controller committed (see the module doc)."""
    for level, event, fields in describe(records, before, cause):
        if level == WARNING:
            log.warning(event, **fields)
        elif level == INFO:
            log.info(event, **fields)
        else:
            log.debug(event, **fields)
