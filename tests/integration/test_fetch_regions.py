"""Fetched records leave by one of two ways: small file regions are read and sent with the rest of the
response (broker.network.SMALL_REGION_BYTES), larger ones by sendfile. Both must carry the same bytes."""

from __future__ import annotations

import pytest

from odradek.broker.network import SMALL_REGION_BYTES
from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.messages import FetchRequest, MetadataRequest, ProduceRequest
from odradek.protocol.records import build_batch, iter_batches, iter_records

pytestmark = pytest.mark.timeout(120)

Topic = ProduceRequest.TopicProduceData
Part = Topic.PartitionProduceData


def fetch(client: RawClient, offset: int, max_bytes: int):
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, topics=[
        FetchRequest.FetchTopic(topic="f", partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])
    part = client.request(request, 12).responses[0].partitions[0]
    assert part.error_code == 0
    return bytes(part.records)


def test_small_and_large_regions_carry_the_same_bytes(tmp_path):
    broker = BrokerThread(tmp_path, **{"num.partitions": 1}).start()
    try:
        with RawClient(broker.bootstrap) as client:
            meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="f")],
                                                  allow_auto_topic_creation=True), 9)
            assert meta.topics[0].error_code == 0
            values = [bytes([i]) * 3000 for i in range(20)]  # ~60 KB in 20 batches of ~3 KB
            for value in values:
                request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                    Topic(name="f", partition_data=[Part(index=0, records=build_batch([(None, value, [], 1_700_000_000_000)]))])])
                assert client.request(request, 9).responses[0].partition_responses[0].error_code == 0
            whole = fetch(client, 0, 1 << 20)
            assert len(whole) > SMALL_REGION_BYTES  # sent by sendfile
            pieces = b""
            offset = 0
            while offset < len(values):
                piece = fetch(client, offset, 4000)  # one batch a time: inline
                assert 0 < len(piece) <= SMALL_REGION_BYTES
                pieces += piece
                offset = list(iter_batches(piece))[-1][1].next_offset
            assert pieces == whole
            got = [r.value for pos, h in iter_batches(whole)
                   for r in iter_records(whole[pos : pos + h.size], max_uncompressed_bytes=1 << 20)]
            assert got == values
    finally:
        broker.stop()
