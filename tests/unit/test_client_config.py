"""Client configuration, error mapping, and the picklable blocking facades (no broker needed)."""

from __future__ import annotations

import pickle

import pytest

from odradek.client.blocking import BlockingAdmin, BlockingConsumer, BlockingProducer
from odradek.client.config import ClientConfig, ConsumerConfig, ProducerConfig, parse_bootstrap
from odradek.client.errors import ConfigError, ErrorCode, KafkaConnectionError, KafkaError


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["h"]) == [("h", 9092)]
    assert parse_bootstrap("[::1]:9093,PLAINTEXT://x:5") == [("::1", 9093), ("x", 5)]
    for bad in ("", "h:notaport", "h:0", ":5"):
        with pytest.raises(ConfigError):
            parse_bootstrap(bad)


def test_bootstrap_default_from_environment(monkeypatch):
    monkeypatch.setenv("ODRADEK_BOOTSTRAP_SERVERS", "envhost:1234")
    assert ClientConfig().bootstrap_servers == "envhost:1234"
    monkeypatch.delenv("ODRADEK_BOOTSTRAP_SERVERS")
    assert ClientConfig().bootstrap_servers == "localhost:9092"


def test_from_dict_takes_kafka_names():
    c = ProducerConfig.from_dict({"bootstrap.servers": "h:1", "linger.ms": 7, "compression_type": "zstd"})
    assert (c.bootstrap_servers, c.linger_ms, c.compression_type) == ("h:1", 7, "zstd")
    with pytest.raises(ConfigError, match="unknown"):
        ProducerConfig.from_dict({"no.such.option": 1})


def test_producer_validation_and_idempotence_default():
    assert ProducerConfig().idempotent
    assert not ProducerConfig(acks=1).idempotent
    assert ProducerConfig(acks="all").required_acks == -1
    with pytest.raises(ConfigError):
        ProducerConfig(acks=1, enable_idempotence=True)
    with pytest.raises(ConfigError):
        ProducerConfig(compression_type="brotli")
    with pytest.raises(ConfigError):
        ProducerConfig(max_in_flight_requests_per_connection=6)
    with pytest.raises(ConfigError):
        ProducerConfig(linger_ms=-1)


def test_consumer_validation():
    assert ConsumerConfig(partition_assignment_strategy="roundrobin, range").assignor_names == ["roundrobin", "range"]
    with pytest.raises(ConfigError):
        ConsumerConfig(auto_offset_reset="smallest")
    with pytest.raises(ConfigError):
        ConsumerConfig(partition_assignment_strategy="sticky-ish")
    with pytest.raises(ConfigError):
        ConsumerConfig(isolation_level="serializable")


def test_kafka_error_flags():
    e = KafkaError(6, context="t-0")
    assert e.code is ErrorCode.NOT_LEADER_OR_FOLLOWER and e.retriable and e.invalid_metadata
    assert "t-0" in str(e) and "NOT_LEADER_OR_FOLLOWER" in str(e)
    assert not KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS).retriable
    assert KafkaError(9999).code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert not KafkaError(3, retriable=False).retriable
    assert KafkaConnectionError("x").retriable


def test_blocking_facades_pickle_to_their_config():
    producer = BlockingProducer(bootstrap_servers="h:1", linger_ms=3)
    consumer = BlockingConsumer("topic", bootstrap_servers="h:2", group_id="g", consumer_timeout_ms=50)
    admin = BlockingAdmin(bootstrap_servers="h:3")
    p2, c2, a2 = (pickle.loads(pickle.dumps(x)) for x in (producer, consumer, admin))
    assert p2.config == producer.config and p2.config.linger_ms == 3
    assert c2.config.group_id == "g" and c2._topics == ["topic"] and c2.consumer_timeout_ms == 50
    assert a2.config.bootstrap_servers == "h:3"
    assert p2._client is None and p2._thread is None  # nothing live was carried over
