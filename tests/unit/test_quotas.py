"""Client quotas (metadata/quota.py): entity precedence, the windowed rate, throttle times; quota records
through the controller, the image and snapshots. Time is an argument throughout."""

from __future__ import annotations

import random

import pytest

from odradek.metadata.controller import Controller
from odradek.metadata.image import MetadataError, replay_all
from odradek.metadata.snapshot import decode_snapshot, encode_snapshot
from odradek.metadata.quota import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    ConnectionCreationRates,
    QuotaError,
    QuotaSensors,
    Rate,
    entity_key,
    resolve_quota,
)

U, C = "user", "client-id"


def quotas(*entries):
    return {entity_key(entity): {PRODUCER_BYTE_RATE: value} for entity, value in entries}


PRECEDENCE = [
    ([(U, "alice"), (C, "app")], 1),
    ([(U, "alice"), (C, None)], 2),
    ([(U, "alice")], 3),
    ([(U, None), (C, "app")], 4),
    ([(U, None), (C, None)], 5),
    ([(U, None)], 6),
    ([(C, "app")], 7),
    ([(C, None)], 8),
]
TAGS = [("alice", "app"), ("alice", "app"), ("alice", ""), ("alice", "app"), ("alice", "app"), ("alice", ""),
        ("", "app"), ("", "app")]


@pytest.mark.parametrize("first", range(len(PRECEDENCE)))
def test_the_most_specific_entity_wins(first):
    configured = quotas(*PRECEDENCE[first:])
    assert resolve_quota(configured, PRODUCER_BYTE_RATE, "alice", "app") == (first + 1, TAGS[first])


def test_no_quota_for_another_key_or_client():
    configured = quotas(([(U, "alice")], 10))
    assert resolve_quota(configured, CONSUMER_BYTE_RATE, "alice", "app") is None
    assert resolve_quota(configured, PRODUCER_BYTE_RATE, "bob", "app") is None


@pytest.mark.parametrize("entity", [[], [(U, "a"), (U, "b")], [("group", "g")], [("ip", "1.2.3.4"), (U, "a")]])
def test_invalid_entities(entity):
    with pytest.raises(QuotaError):
        entity_key(entity)


def test_rate_counts_at_least_samples_minus_one_windows():
    rate = Rate(samples=11, window_ms=1000, now_ms=0)
    rate.record(10_000, 0)
    assert rate.measure(0) == pytest.approx(1000.0)  # 10 000 over the 10 s minimum span
    for second in range(1, 30):
        rate.record(1000, second * 1000)
    # Old windows expire: the rate settles on what is recorded per second.
    assert rate.measure(29_000) == pytest.approx(1000 * 11 / 10, rel=0.01)


def test_throttle_time_is_how_long_to_get_back_to_the_quota():
    sensors = QuotaSensors(PRODUCER_BYTE_RATE, samples=11, window_ms=1000)
    configured = quotas(([(U, "alice")], 1000))
    assert sensors.record(configured, "alice", "app", 5000, 0) == 0  # 500 B/s over 10 s: within
    throttle = sensors.record(configured, "alice", "other", 10_000, 0)  # the user's quota is shared by its clients
    assert throttle == 5000  # 1500 B/s over 10 s: (1500 - 1000) / 1000 * 10 s
    assert sensors.record(configured, "bob", "app", 10**9, 0) == 0  # no quota for bob
    assert len(sensors) == 1


def test_a_producer_held_to_its_quota_by_throttling():
    """A simulated client that waits out each throttle time sends at the quota on average."""
    sensors = QuotaSensors(PRODUCER_BYTE_RATE, samples=11, window_ms=1000)
    configured = quotas(([(C, "app")], 1_000_000))
    now_ms, sent = 0, 0
    while now_ms < 60_000:
        sent += 100_000
        now_ms += 10 + sensors.record(configured, "ANONYMOUS", "app", 100_000, now_ms)
    assert sent / (now_ms / 1000) == pytest.approx(1_000_000, rel=0.15)


def test_a_throttled_fetch_is_unrecorded_and_fetches_are_capped_at_the_quota_window():
    """KafkaApis.handleFetchRequest: a throttled fetch is answered empty, so its bytes are taken back; and a
    consumer's fetch is capped at quota x (samples - 1) windows, the most one response may be unthrottled."""
    sensors = QuotaSensors(CONSUMER_BYTE_RATE, samples=11, window_ms=1000)
    configured = {entity_key([(C, "app")]): {CONSUMER_BYTE_RATE: 1000.0}}
    assert sensors.max_value_in_window(configured, "ANONYMOUS", "app") == 10_000
    assert sensors.max_value_in_window(configured, "ANONYMOUS", "other") == float("inf")
    assert sensors.record(configured, "ANONYMOUS", "app", 10_000, 0) == 0  # exactly the cap: within
    assert sensors.record(configured, "ANONYMOUS", "app", 5_000, 100) > 0  # more: throttled...
    sensors.unrecord(configured, "ANONYMOUS", "app", 5_000, 100)  # ...answered empty, so taken back
    assert sensors.record(configured, "ANONYMOUS", "app", 0, 100) == 0
    # Once the first window has aged out, the consumer may read again.
    assert sensors.record(configured, "ANONYMOUS", "app", 5_000, 11_100) == 0


def test_quota_records_through_controller_image_and_snapshot():
    controller = Controller(rng=random.Random(1))
    records, _ = controller.alter_client_quota([(U, "alice"), (C, None)], [(PRODUCER_BYTE_RATE, 1024.0, False)])
    image = replay_all(records)
    assert image.client_quotas == {((C, None), (U, "alice")): {PRODUCER_BYTE_RATE: 1024.0}}
    assert decode_snapshot(encode_snapshot(image, 0)) == image
    controller.image = image
    records, _ = controller.alter_client_quota([(C, None), (U, "alice")], [(PRODUCER_BYTE_RATE, 0.0, True)])
    assert replay_all(records, image).client_quotas == {}
    for bad in ([(PRODUCER_BYTE_RATE, 1.5, False)], [("nonsense", 1.0, False)], [(PRODUCER_BYTE_RATE, -1.0, False)]):
        with pytest.raises(MetadataError):
            controller.alter_client_quota([(U, "alice")], bad)


# -- connection creation rates (KIP-612)


def test_connections_over_the_broker_rate_wait_bounded_by_one_window():
    rates = ConnectionCreationRates(broker_rate=5, samples=11, window_ms=1000)
    # 50 connections at once are 5/s over the 10 s minimum span: within the rate.
    assert [rates.accept("CLIENT", 0) for _ in range(50)] == [0] * 50
    assert rates.accept("CLIENT", 0) == 200  # 51 over 10 s: (5.1 - 5) / 5 * 10 s
    assert max(rates.accept("CLIENT", 0) for _ in range(100)) == 1000  # never more than one quota window


def test_the_protected_listener_skips_the_broker_rate_but_not_its_own():
    rates = ConnectionCreationRates(broker_rate=1, listener_rates={"INTERNAL": 3}, protected_listeners=frozenset({"INTERNAL"}),
                                    samples=2, window_ms=1000)
    assert [rates.accept("INTERNAL", 0) for _ in range(3)] == [0, 0, 0]
    assert rates.accept("INTERNAL", 0) > 0  # its own rate: 4 in 1 s over 3/s
    assert rates.accept("CLIENT", 0) == 0  # the broker's rate did not count the internal ones
    assert rates.accept("CLIENT", 0) > 0


def test_an_acceptor_waiting_out_each_throttle_accepts_at_the_rate():
    """Connections arriving as fast as they can, accepted one after another as the acceptor waits, are
    accepted at the configured rate on average."""
    rates = ConnectionCreationRates(broker_rate=20, samples=11, window_ms=1000)
    now_ms, accepted = 0, 0
    while now_ms < 60_000:
        now_ms += 1 + rates.accept("CLIENT", now_ms)
        accepted += 1
    assert accepted / (now_ms / 1000) == pytest.approx(20, rel=0.15)


def test_an_address_over_its_connection_rate_is_closed_and_not_counted():
    rates = ConnectionCreationRates(broker_rate=100, samples=2, window_ms=1000)
    configured = {entity_key([("ip", "10.0.0.1")]): {"connection_creation_rate": 2.0},
                  entity_key([("ip", None)]): {"connection_creation_rate": 5.0}}
    assert ConnectionCreationRates.ip_rate(configured, "10.0.0.1") == 2.0
    assert ConnectionCreationRates.ip_rate(configured, "10.0.0.2") == 5.0  # the default ip entity
    assert ConnectionCreationRates.ip_rate({}, "10.0.0.2") is None
    assert [rates.ip_throttle(configured, "CLIENT", "10.0.0.1", 0) for _ in range(2)] == [0, 0]
    assert rates.ip_throttle(configured, "CLIENT", "10.0.0.1", 0) == 500  # 3 in 1 s over 2/s
    assert rates.ip_throttle(configured, "CLIENT", "10.0.0.1", 0) == 500  # the refused one was not counted
    assert rates.ip_throttle(configured, "CLIENT", "10.0.0.2", 0) == 0  # another address has its own rate
    assert rates.ip_throttle(configured, "CLIENT", "10.0.0.1", 2_000) == 0  # once the windows have passed


def test_request_percentage_throttles_a_client_over_its_share_of_handler_time():
    """request_percentage: handler time as percent of one thread (KIP-124); over it, the connection gets the
    throttle time (the network puts it in throttle_time_ms and mutes the channel, KIP-219)."""
    from types import SimpleNamespace

    from odradek.broker.config import BrokerConfig
    from odradek.broker.context import ConnectionContext
    from odradek.broker.quotas import ClientQuotas
    from odradek.metadata.quota import REQUEST_PERCENTAGE

    image = SimpleNamespace(client_quotas={entity_key([(C, "busy")]): {REQUEST_PERCENTAGE: 10.0}})
    now = [0]
    client_quotas = ClientQuotas(BrokerConfig(), SimpleNamespace(image=image), now_ms=lambda: now[0])
    connection = ConnectionContext("c", "10.0.0.1", "PLAINTEXT", "PLAINTEXT")
    assert client_quotas.record_request_time(connection, "idle", 5.0) == 0  # no quota for this client id
    assert client_quotas.record_request_time(connection, "busy", 0.001) == 0  # 0.1% of a second: within 10%
    now[0] += 10
    throttle_ms = client_quotas.record_request_time(connection, "busy", 2.0)  # 200% of a second: far over 10%
    assert throttle_ms > 0 and connection.throttle_ms == throttle_ms
