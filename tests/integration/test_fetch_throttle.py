"""A consumer over its fetch quota is answered as Kafka answers it (KIP-219, KafkaApis.handleFetchRequest): an
empty response carrying throttle_time_ms, its connection muted for that long, the bytes not counted; and its
fetches are capped at what the quota lets through at once, so that it keeps making progress.

The broker measures quotas over 2 windows of 1 s (quota.window.num=2), so the shortest span a rate is taken
over is 1 s and a consumer with consumer_byte_rate=50000 reads at most 50 000 bytes per fetch.
"""

from __future__ import annotations

import time

import pytest

from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.messages import AlterClientQuotasRequest, FetchRequest, MetadataRequest, ProduceRequest
from odradek.protocol.records import build_batch, iter_batches

pytestmark = pytest.mark.timeout(120)

QUOTA = 50_000
RECORD = 5_000
RECORDS = 40  # 200 KB: four quota windows' worth
Topic = ProduceRequest.TopicProduceData


def fetch_request(offset: int) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0, topics=[
        FetchRequest.FetchTopic(topic="slow", partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=64 << 20)])])


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerThread(tmp_path_factory.mktemp("throttle"), **{"num.partitions": 1, "quota.window.num": 2}).start()
    with RawClient(broker.bootstrap) as client:
        meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="slow")],
                                              allow_auto_topic_creation=True), 9)
        assert meta.topics[0].error_code == 0
        for i in range(RECORDS):
            produced = client.request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[Topic(
                name="slow", partition_data=[Topic.PartitionProduceData(index=0, records=build_batch(
                    [(None, bytes([i]) * RECORD, [], 1_700_000_000_000)]))])]), 9)
            assert produced.responses[0].partition_responses[0].error_code == 0
        quota = client.request(AlterClientQuotasRequest(validate_only=False, entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id", entity_name=None)],
            ops=[AlterClientQuotasRequest.EntryData.OpData(key="consumer_byte_rate", value=float(QUOTA), remove=False)])]), 1)
        assert quota.entries[0].error_code == 0
    yield broker
    broker.stop()


def test_a_fetch_over_the_quota_is_answered_empty_with_its_throttle_time(broker):
    with RawClient(broker.bootstrap, client_id="raw-consumer") as client:
        first = client.request(fetch_request(0), 12)
        records = bytes(first.responses[0].partitions[0].records)
        # Capped at the quota's window (50 000 bytes, whole batches: 9 of ~5 070) although 64 MiB were asked.
        assert 0 < len(records) <= QUOTA and first.throttle_time_ms == 0
        offsets = [header.base_offset for _, header in iter_batches(records)]
        assert offsets == list(range(len(offsets)))

        second = client.request(fetch_request(len(offsets)), 12)
        assert second.responses == [] and second.error_code == 0 and second.session_id == 0
        assert 0 < second.throttle_time_ms <= 2_000
        # The empty answer was not counted: once muted for the throttle time, the connection is served again,
        # and the same offset yields the records it did not get (nothing is skipped).
        third = client.request(fetch_request(len(offsets)), 12)
        got = third.responses[0].partitions[0] if third.responses else None
        assert got is None or next(iter_batches(bytes(got.records)))[1].base_offset == len(offsets)


def test_librdkafka_is_throttled_and_reads_everything_once(broker):
    from confluent_kafka import Consumer, TopicPartition

    throttles: list[int] = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "throttled", "client.id": "rdkafka-slow",
                         "enable.auto.commit": False, "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    try:
        consumer.assign([TopicPartition("slow", 0, 0)])
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while len(offsets) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                assert message.value() == bytes([message.offset()]) * RECORD
                offsets.append(message.offset())
        started = time.monotonic()
        while not throttles and time.monotonic() - started < 5:  # the throttle callback is served by poll
            consumer.poll(0.1)
    finally:
        consumer.close()
    assert offsets == list(range(RECORDS))
    assert any(t > 0 for t in throttles)  # (librdkafka reports seconds, and 0 when a throttle ends)
