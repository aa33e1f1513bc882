"""The shared client core against a scripted in-process broker: version negotiation, bootstrap, retries,
metadata refresh on NOT_LEADER_OR_FOLLOWER, timeouts and non-retriable errors."""

from __future__ import annotations

import asyncio

import pytest

from odradek.client import Producer
from odradek.client.cluster import KafkaClient
from odradek.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, NoBrokersAvailable
from odradek.protocol.messages import REQUESTS
from tests.harness.fake_broker import FakeBroker


async def test_bootstrap_skips_unreachable_servers_and_negotiates_versions():
    async with FakeBroker() as fake:
        async with KafkaClient(bootstrap_servers=f"127.0.0.1:1,{fake.bootstrap}") as client:
            assert client.cluster.cluster_id == "fake"
            assert client.cluster.partitions_for("t") == [0]
            conn = await client.connection(0)
            assert conn.version_for(3) == REQUESTS[3].VALID_VERSIONS[1]
            assert conn.version_for(0) == 11  # capped: v12 is Transactions V2, v13 addresses topics by id
    from odradek.client.connection import client_range
    assert client_range(26) == (0, 4) and client_range(28) == (0, 4)  # EndTxn/TxnOffsetCommit v5: Transactions V2


async def test_api_versions_falls_back_when_the_broker_knows_an_older_version():
    supported = {18: (0, 2), 3: (0, 8), 0: (3, 8), 22: (0, 1)}
    async with FakeBroker(supported) as fake:
        async with KafkaClient(bootstrap_servers=fake.bootstrap) as client:
            conn = await client.connection(0)
            assert conn.api_versions[18] == (0, 2)
            assert fake.versions[18] == 2
            assert conn.version_for(3) == 8 and fake.versions[3] == 8


async def test_no_reachable_broker_is_a_clear_error():
    with pytest.raises(NoBrokersAvailable, match="127.0.0.1:1"):
        await KafkaClient(bootstrap_servers="127.0.0.1:1", default_api_timeout_ms=300).start()


async def test_produce_retries_not_leader_after_refreshing_metadata():
    async with FakeBroker(produce_errors=[6, 6]) as fake:  # NOT_LEADER_OR_FOLLOWER twice
        async with Producer(bootstrap_servers=fake.bootstrap, retry_backoff_ms=10, metadata_max_age_ms=60_000) as p:
            metadata_before = fake.calls[3]
            result = await p.send_and_wait("t", b"v")
        assert result.offset == 0
        assert fake.calls[0] == 3
        assert fake.calls[3] > metadata_before


async def test_non_retriable_errors_fail_the_future_at_once():
    async with FakeBroker(produce_errors=[29]) as fake:  # TOPIC_AUTHORIZATION_FAILED
        async with Producer(bootstrap_servers=fake.bootstrap, retry_backoff_ms=10) as p:
            with pytest.raises(KafkaError) as info:
                await p.send_and_wait("t", b"v")
        assert info.value.code.name == "TOPIC_AUTHORIZATION_FAILED" and not info.value.retriable
        assert fake.calls[0] == 1


async def test_retriable_errors_stop_at_the_delivery_timeout():
    async with FakeBroker(produce_errors=[6] * 1000) as fake:
        async with Producer(bootstrap_servers=fake.bootstrap, retry_backoff_ms=20, retry_backoff_max_ms=50,
                            delivery_timeout_ms=400) as p:
            with pytest.raises((KafkaError, KafkaTimeoutError), match="NOT_LEADER_OR_FOLLOWER"):
                await asyncio.wait_for(p.send_and_wait("t", b"v"), 5)
        assert fake.calls[0] > 2


async def test_request_timeout_closes_the_connection():
    async with FakeBroker() as fake:
        async with KafkaClient(bootstrap_servers=fake.bootstrap) as client:
            fake.silent.add(3)
            conn = await client.connection(0)
            with pytest.raises(KafkaTimeoutError):
                await client.send(0, REQUESTS[3](topics=[]), timeout_ms=200)
            assert not conn.connected
            with pytest.raises(KafkaConnectionError):
                await conn.send(REQUESTS[3](topics=[]))
            fake.silent.clear()
            response = await client.send(0, REQUESTS[3](topics=[]))  # a new connection
            assert response.cluster_id == "fake"


async def test_acks_zero_resolves_without_a_response():
    async with FakeBroker() as fake:
        async with Producer(bootstrap_servers=fake.bootstrap, acks=0) as p:
            result = await p.send_and_wait("t", b"v")
        assert result.offset == -1 and fake.calls[22] == 0  # not idempotent: no producer id


async def test_send_encoded_queues_a_pre_encoded_batch_with_retries_and_checks():
    """Producer.send_encoded (the Spark sink's column-wise path): a records section encoded by the caller is
    sent as one batch, retried like any batch, and refused for a partition the topic does not have."""
    from odradek.client.producer import EncodedRecords
    from odradek.protocol.records import build_batch

    section = build_batch([(b"k", b"v", None, 7), (None, b"w", None, 7)])[61:]
    async with FakeBroker(produce_errors=[6]) as fake:  # NOT_LEADER_OR_FOLLOWER once
        async with Producer(bootstrap_servers=fake.bootstrap, retry_backoff_ms=10) as p:
            future = await p.send_encoded("t", 0, EncodedRecords(section, 2, 7, 7))
            result = await future
            assert (result.topic, result.partition, result.offset, result.timestamp) == ("t", 0, 0, 7)
            with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await p.send_encoded("t", 3, EncodedRecords(section, 2, 7, 7))
        assert fake.calls[0] == 2
