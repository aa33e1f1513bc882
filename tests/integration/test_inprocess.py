"""The broker inside the test process: `async with Broker(...)`, `running_broker`, `BrokerThread`, and the
`odradek_broker` pytest fixture that the package installs for users' own tests (entry point pytest11).
"""

from __future__ import annotations

import asyncio
import threading
import time
from importlib.metadata import entry_points

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from odradek.broker.server import Broker
from odradek.broker.testing import BrokerThread, running_broker
from odradek.storage.names import CLEAN_SHUTDOWN_FILE

pytestmark = pytest.mark.timeout(60)

TIMEOUT_S = 15


async def aio_roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", request_timeout_ms=TIMEOUT_S * 1000)
    await asyncio.wait_for(producer.start(), TIMEOUT_S)
    try:
        for v in values:
            await asyncio.wait_for(producer.send_and_wait(topic, v, key=b"k", headers=[("h", b"1")]), TIMEOUT_S)
    finally:
        await asyncio.wait_for(producer.stop(), TIMEOUT_S)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_wait_ms=100)
    await asyncio.wait_for(consumer.start(), TIMEOUT_S)
    try:
        tp = AioTopicPartition(topic, 0)
        consumer.assign([tp])
        await asyncio.wait_for(consumer.seek_to_beginning(tp), TIMEOUT_S)
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(values) and time.monotonic() < deadline:
            batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=500), TIMEOUT_S)
            got += [m.value for m in batch.get(tp, [])]
        return got
    finally:
        await asyncio.wait_for(consumer.stop(), TIMEOUT_S)


def confluent_roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "zstd"})
    for v in values:
        producer.produce(topic, v, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inprocess", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(len(values), timeout=0.5) if m.error() is None]
        return got
    finally:
        consumer.close()


# -- async: the broker on the test's own event loop --

async def test_async_with_broker_and_a_real_client(tmp_path):
    values = [b"one", b"two", b"three"]
    async with Broker(listeners="PLAINTEXT://127.0.0.1:0", log_dirs=str(tmp_path)) as broker:
        assert await aio_roundtrip(f"127.0.0.1:{broker.bound_port}", "inproc", values) == values
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


async def test_running_broker_with_overrides(tmp_path):
    async with running_broker(tmp_path, num_partitions=3, **{"log.segment.bytes": 1 << 20}) as kafka:
        assert kafka.host == "127.0.0.1" and kafka.port > 0 and kafka.bootstrap.endswith(f":{kafka.port}")
        assert kafka.broker.config.num_partitions == 3 and kafka.broker.config.log_segment_bytes == 1 << 20
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
        await asyncio.wait_for(producer.start(), TIMEOUT_S)
        try:
            await asyncio.wait_for(producer.send_and_wait("three-partitions", b"x", partition=2), TIMEOUT_S)
            assert await asyncio.wait_for(producer.partitions_for("three-partitions"), TIMEOUT_S) == {0, 1, 2}
        finally:
            await asyncio.wait_for(producer.stop(), TIMEOUT_S)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


# -- sync: the broker in a background thread --

def test_broker_thread_serves_sync_clients_and_restarts_on_its_data(tmp_path):
    before = set(threading.enumerate())
    with BrokerThread(tmp_path) as kafka:
        assert confluent_roundtrip(kafka.bootstrap, "thread", [b"a", b"b"]) == [b"a", b"b"]
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with BrokerThread(tmp_path) as kafka:
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, request_timeout_ms=TIMEOUT_S * 1000, max_block_ms=TIMEOUT_S * 1000)
        try:
            assert producer.send("thread", b"c").get(timeout=TIMEOUT_S).offset == 2
        finally:
            producer.close(timeout=TIMEOUT_S)
        assert confluent_roundtrip(kafka.bootstrap, "thread", []) == []
    broker_threads = [t for t in set(threading.enumerate()) - before if t.name == "odradek-broker"]
    assert not broker_threads


def test_broker_thread_reports_a_failed_start(tmp_path):
    with BrokerThread(tmp_path) as first:
        # The data directory is locked by the first broker: the second must fail loudly, not hang.
        second = BrokerThread(tmp_path, start_timeout_s=TIMEOUT_S)
        with pytest.raises(RuntimeError, match="failed to start"):
            second.start()
        assert confluent_roundtrip(first.bootstrap, "still-up", [b"z"]) == [b"z"]


# -- the pytest plugin --

def test_plugin_is_installed_through_the_pytest11_entry_point(request):
    (ep,) = [ep for ep in entry_points(group="pytest11") if ep.name == "odradek"]
    assert ep.value == "odradek.broker.pytest_plugin"
    assert request.config.pluginmanager.get_plugin("odradek") is not None


def test_odradek_broker_fixture(odradek_broker):
    assert odradek_broker.bootstrap == f"127.0.0.1:{odradek_broker.port}"
    assert confluent_roundtrip(odradek_broker.bootstrap, "fixture", [b"p", b"q"]) == [b"p", b"q"]


@pytest.mark.odradek_broker(num_partitions=2)
def test_odradek_broker_fixture_takes_properties_from_a_marker(odradek_broker):
    assert confluent_roundtrip(odradek_broker.bootstrap, "two", [b"x"]) == [b"x"]
    md = AdminClient({"bootstrap.servers": odradek_broker.bootstrap}).list_topics(topic="two", timeout=TIMEOUT_S)
    assert sorted(md.topics["two"].partitions) == [0, 1]


async def test_odradek_broker_fixture_in_an_async_test(odradek_broker):
    """The fixture's broker has its own loop, so an async test's clients can use it too."""
    assert await aio_roundtrip(odradek_broker.bootstrap, "async-fixture", [b"m"]) == [b"m"]
