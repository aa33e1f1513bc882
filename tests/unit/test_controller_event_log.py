"""The active controller's event log (metadata/controller/event_log.py): what a committed batch tells an
operator, read against the image the batch was decided on."""

from __future__ import annotations

import random

from odradek.metadata.controller import Controller
from odradek.metadata.controller.event_log import describe
from odradek.metadata.image import Endpoint, replay_all


def _controller() -> tuple[Controller, list]:
    c = Controller(rng=random.Random(7))
    seen: list = []

    def apply(records: list, cause: str | None = None) -> list:
        before = c.image
        c.advance(replay_all(records, before), c.log_end_offset + len(records))
        events = describe(records, before, cause)
        seen.append(events)
        return events

    apply(c.bootstrap("ABCDEFGHIJKLMNOPQRSTUV", 1, [Endpoint("PLAINTEXT", "h1", 9092)]))
    for broker_id in (2, 3):
        apply(c.register_broker(broker_id, [Endpoint("PLAINTEXT", f"h{broker_id}", 9092)]))
    return c, [apply]


def _by_name(events) -> dict:
    out: dict = {}
    for e in events:
        out.setdefault(e.event, []).append(e)
    return out


def test_registration_topic_creation_fencing_and_deletion_each_tell_one_event_with_their_fields():
    c, (apply,) = _controller()
    events = apply(c.register_broker(4, [Endpoint("PLAINTEXT", "h4", 9094)], rack="r1"), "registration")
    (registered,) = events
    assert registered.level == "info" and registered.event == "broker registered"
    assert registered.fields == {"broker": 4, "broker_epoch": registered.fields["broker_epoch"],
                                 "incarnation_id": registered.fields["incarnation_id"],
                                 "listeners": ["PLAINTEXT://h4:9094"], "rack": "r1", "fenced": False,
                                 "cause": "registration"}

    (created,) = apply(c.create_topic("orders", 3, 3))
    assert (created.level, created.event) == ("info", "topic created")
    assert created.fields["topic"] == "orders" and created.fields["partitions"] == 3
    assert created.fields["replication_factor"] == 3

    partitions = c.image.topics_by_name["orders"].partitions
    led_by_2 = [i for i, p in partitions.items() if p.leader == 2]
    with_2 = [i for i, p in partitions.items() if 2 in p.isr]
    by_name = _by_name(apply(c.fence_broker(2), "session expired"))
    (fenced,) = by_name["broker fenced"]
    assert fenced.level == "warning" and fenced.fields["broker"] == 2 and fenced.fields["cause"] == "session expired"
    shrinks = by_name["isr shrunk"]
    assert sorted(e.fields["partition"] for e in shrinks) == with_2 and all(e.level == "warning" and e.fields["removed"] == [2] for e in shrinks)
    assert all(2 not in e.fields["isr"] and 2 in e.fields["previous_isr"] for e in shrinks)
    assert sorted(e.fields["partition"] for e in by_name.get("partition leader elected", [])) == sorted(led_by_2)

    by_name = _by_name(apply(c.unfence_broker(2)))
    assert [e.fields["broker"] for e in by_name["broker unfenced"]] == [2]

    (deleted,) = apply(c.delete_topic("orders"))
    assert (deleted.level, deleted.event, deleted.fields["topic"]) == ("info", "topic deleted", "orders")


def test_a_partition_left_without_its_last_leader_is_a_warning():
    c, (apply,) = _controller()
    apply(c.create_topic("solo", -1, -1, assignments={0: [3]}))
    by_name = _by_name(apply(c.fence_broker(3)))
    (offline,) = by_name["partition has no leader"]
    assert offline.level == "warning" and offline.fields["previous_leader"] == 3 and offline.fields["leader"] == -1
    # With eligible leader replicas on (KIP-966, finalized at bootstrap) the last ISR member leaves the ISR for
    # the ELR, as Kafka 4.1+ does; without ELR it would stay in the ISR.
    (shrunk,) = by_name["isr shrunk"]
    assert shrunk.fields["isr"] == [] and shrunk.fields["previous_isr"] == [3]
