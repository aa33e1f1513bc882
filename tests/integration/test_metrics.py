"""The broker's Prometheus endpoint reports requests, connections and partitions of a live broker."""

from __future__ import annotations

import socket
import urllib.request

from confluent_kafka import Producer

from tests.brokerproc import BrokerProcess


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_endpoint_reports_live_broker(tmp_path):
    port = _free_port()
    proc = BrokerProcess(tmp_path / "data", f"metrics.port={port}", "metrics.host=127.0.0.1").start()
    try:
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        producer.produce("metered", b"x" * 100)
        assert producer.flush(15) == 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        proc.stop()
    assert 'odradek_requests_total{api="Produce"' in text
    assert 'odradek_requests_total{api="ApiVersions"' in text
    assert "odradek_connections_active" in text
    assert "odradek_partitions" in text
    assert 'odradek_log_size_bytes{partition="0",topic="metered"}' in text
    # The process froze what start-up made out of the collector's full walks (broker/heap.py).
    frozen = [line for line in text.splitlines() if line.startswith("odradek_gc_frozen_objects ")]
    assert frozen and float(frozen[0].split()[1]) > 10_000, frozen


def _scrape(port: int) -> dict[tuple[str, str], float]:
    """request_errors_total by (api, error), as served."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("odradek_request_errors_total{"):
            labels, value = line[len("odradek_request_errors_total{"):].rsplit("} ", 1)
            fields = dict(item.split("=", 1) for item in labels.split(","))
            counts[(fields["api"].strip('"'), fields["error"].strip('"'))] = float(value)
    return counts


def test_error_codes_answered_are_counted_per_api_and_error(tmp_path):
    # Each error code answered counts once per occurrence, per partition too, by API and Kafka error name:
    # a topic created twice (CreateTopics), produce to partitions that do not exist (the general produce path),
    # a new idempotent producer starting past sequence 0 (refused by the log, answered by the produce fast
    # path), a fetch of partitions that do not exist (the packed fetch path), Metadata of an unknown topic.
    from odradek.broker.testing import RawClient
    from odradek.protocol.errors import ErrorCode
    from odradek.protocol.messages import (CreateTopicsRequest, FetchRequest, InitProducerIdRequest,
                                           MetadataRequest, ProduceRequest)
    from odradek.protocol.records import build_batch

    port = _free_port()
    proc = BrokerProcess(tmp_path / "data", f"metrics.port={port}", "metrics.host=127.0.0.1").start()
    answered: dict[tuple[str, str], int] = {}

    def note(api: str, *codes: int) -> None:
        for code in codes:
            if code:
                key = (api, ErrorCode(code).name)
                answered[key] = answered.get(key, 0) + 1

    Topic, Part = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
    try:
        before = _scrape(port)
        assert all(error != "NONE" for _, error in before)
        with RawClient(proc.bootstrap) as client:
            create = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name="errs", num_partitions=1, replication_factor=1)], timeout_ms=10000)
            for _ in range(2):
                note("CreateTopics", *(t.error_code for t in client.request(create, 5).topics))
            assert answered[("CreateTopics", "TOPIC_ALREADY_EXISTS")] == 1

            batch = build_batch([(None, b"v", [], 1_700_000_000_000)])
            produce = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                Topic(name="errs", partition_data=[Part(index=0, records=batch), Part(index=5, records=batch),
                                                   Part(index=6, records=batch)])])
            response = client.request(produce, 9)
            note("Produce", *(p.error_code for t in response.responses for p in t.partition_responses))
            assert answered[("Produce", "UNKNOWN_TOPIC_OR_PARTITION")] == 2

            pid = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
            assert pid.error_code == 0
            skipped = build_batch([(None, b"v", [], 1_700_000_000_000)], producer_id=pid.producer_id,
                                  producer_epoch=pid.producer_epoch, base_sequence=5)
            produce = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                Topic(name="errs", partition_data=[Part(index=0, records=skipped)])])
            response = client.request(produce, 9)
            fast_codes = [p.error_code for t in response.responses for p in t.partition_responses]
            assert fast_codes[0] != 0  # (OUT_OF_ORDER_SEQUENCE_NUMBER)
            note("Produce", *fast_codes)

            FTopic, FPart = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition
            fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
                FTopic(topic="errs", partitions=[FPart(partition=p, fetch_offset=0, partition_max_bytes=1 << 16)
                                                 for p in (0, 8, 9)])])
            response = client.request(fetch, 12)
            note("Fetch", response.error_code,
                 *(p.error_code for t in response.responses for p in t.partitions))
            assert answered[("Fetch", "UNKNOWN_TOPIC_OR_PARTITION")] == 2

            metadata = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="no-such-topic")],
                                       allow_auto_topic_creation=False)
            response = client.request(metadata, 9)
            note("Metadata", *(t.error_code for t in response.topics))
            assert answered[("Metadata", "UNKNOWN_TOPIC_OR_PARTITION")] == 1
        after = _scrape(port)
    finally:
        proc.stop()
    served = {key: n - before.get(key, 0) for key, n in after.items() if n - before.get(key, 0)}
    for key, n in answered.items():
        assert served.get(key) == n, (key, served)
    assert all(error != "NONE" for _, error in after)
