"""The partitions' side of transactions on a live broker, driven by raw requests where the transaction
coordinator would act: transactional batches produced with a producer id (the broker's verification with
the coordinator switched off, `transaction.partition.verification.enable=false`, so that no coordinator
transaction is needed), COMMIT/ABORT markers written with WriteTxnMarkers, and real clients reading with isolation.level=read_committed (confluent-kafka and
kafka-python) that never see an aborted record and see committed ones in order; the last stable offset
in ListOffsets and Fetch; fencing of stale markers; DescribeProducers.
"""

from __future__ import annotations

import time

import pytest

from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    CreateTopicsRequest,
    DescribeProducersRequest,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from odradek.protocol.records import build_batch, iter_batches
from tests.harness.txn_markers import NOW, TIMEOUT_S, TOPIC, read_committed_values

pytestmark = pytest.mark.timeout(120)

UNVERIFIED = {"transaction_partition_verification_enable": False}  # (the partitions' side only: see the module doc)
HARNESS_TRANSACTIONAL_ID = "markers-harness"  # transactional batches need a transactional id in the request

PTopic = ProduceRequest.TopicProduceData
Marker = WriteTxnMarkersRequest.WritableTxnMarker


def create_topic(client: RawClient, name: str) -> None:
    response = client.request(CreateTopicsRequest(timeout_ms=10_000, validate_only=False, topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[],
                                           configs=[])]), 5)
    assert response.topics[0].error_code == 0


def producer_id(client: RawClient) -> int:
    for _ in range(100):
        response = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
        if response.error_code == 0:
            return response.producer_id
        time.sleep(0.05)  # COORDINATOR_LOAD_IN_PROGRESS while an id block is allocated: retried as clients do
    raise AssertionError("no producer id")


def produce(client: RawClient, pid: int, seq: int, values: list[bytes], *, transactional: bool = True) -> int:
    batch = build_batch([(b"k", v, None, NOW) for v in values], producer_id=pid, producer_epoch=0,
                        base_sequence=seq, transactional=transactional)
    response = client.request(ProduceRequest(
        transactional_id=HARNESS_TRANSACTIONAL_ID if transactional else None, acks=-1, timeout_ms=10_000, topic_data=[
        PTopic(name=TOPIC, partition_data=[PTopic.PartitionProduceData(index=0, records=batch)])]), 9)
    part = response.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return part.base_offset


def write_marker(client: RawClient, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 5,
                 topic: str = TOPIC, partition: int = 0) -> int:
    response = client.request(WriteTxnMarkersRequest(markers=[Marker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=[Marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])])]), 1)
    (result,) = response.markers
    assert result.producer_id == pid
    return result.topics[0].partitions[0].error_code


def latest(client: RawClient, isolation_level: int) -> int:
    LTopic = ListOffsetsRequest.ListOffsetsTopic
    response = client.request(ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
        LTopic(name=TOPIC, partitions=[LTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
    return response.topics[0].partitions[0].offset


def fetch_committed(client: RawClient):
    FTopic = FetchRequest.FetchTopic
    response = client.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                           isolation_level=1, topics=[FTopic(topic=TOPIC, partitions=[
                                               FTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                     partition_max_bytes=1 << 20)])],
                                           forgotten_topics_data=[]), 11)
    return response.responses[0].partitions[0]


def kafka_python_committed(bootstrap: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    consumer.assign([KpTopicPartition(TOPIC, 0)])
    consumer.seek(KpTopicPartition(TOPIC, 0), 0)
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
    finally:
        consumer.close()
    return values


def test_read_committed_consumers_skip_aborted_transactions(tmp_path):
    with BrokerThread(tmp_path, **UNVERIFIED) as broker, RawClient(broker.bootstrap) as client:
        create_topic(client, TOPIC)
        aborter, committer, plain = producer_id(client), producer_id(client), producer_id(client)
        produce(client, plain, 0, [b"plain-0"], transactional=False)
        first_open = produce(client, aborter, 0, [b"aborted-0", b"aborted-1"])
        produce(client, committer, 0, [b"committed-0"])
        produce(client, aborter, 2, [b"aborted-2"])
        produce(client, committer, 1, [b"committed-1", b"committed-2"])
        # Open transactions hold the last stable offset at the first of them.
        assert latest(client, 1) == first_open == 1
        assert latest(client, 0) == 7
        part = fetch_committed(client)
        assert part.last_stable_offset == 1 and part.high_watermark == 7
        assert [h.base_offset for _, h in iter_batches(part.records)] == [0]

        assert write_marker(client, aborter, commit=False) == 0  # offset 7
        assert latest(client, 1) == 3  # the committer's transaction is still open
        assert write_marker(client, committer, commit=True) == 0  # offset 8
        assert latest(client, 1) == latest(client, 0) == 9
        produce(client, plain, 1, [b"plain-1"], transactional=False)

        part = fetch_committed(client)
        assert part.last_stable_offset == 10
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(aborter, 1)]

        want = [b"plain-0", b"committed-0", b"committed-1", b"committed-2", b"plain-1"]
        assert read_committed_values(broker.bootstrap, len(want)) == want
        assert kafka_python_committed(broker.bootstrap, len(want)) == want

        # Stale markers are fenced: an older coordinator epoch, an older producer epoch.
        produce(client, aborter, 3, [b"aborted-again"])
        assert write_marker(client, aborter, commit=True, coordinator_epoch=4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
        assert write_marker(client, aborter, commit=False, epoch=1) == 0
        produce_stale = client.request(WriteTxnMarkersRequest(markers=[Marker(
            producer_id=aborter, producer_epoch=0, transaction_result=True, coordinator_epoch=5,
            topics=[Marker.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]), 1)
        assert produce_stale.markers[0].topics[0].partitions[0].error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        # Partitions that are not here.
        assert write_marker(client, aborter, commit=False, epoch=1, topic="nope") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert write_marker(client, aborter, commit=False, epoch=1, partition=3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert read_committed_values(broker.bootstrap, len(want)) == want

        DTopic = DescribeProducersRequest.TopicRequest
        described = client.request(DescribeProducersRequest(topics=[DTopic(name=TOPIC, partition_indexes=[0])]), 0)
        part = described.topics[0].partitions[0]
        assert part.error_code == 0
        states = {p.producer_id: p for p in part.active_producers}
        assert set(states) == {aborter, committer, plain}
        assert (states[aborter].producer_epoch, states[aborter].coordinator_epoch,
                states[aborter].current_txn_start_offset) == (1, 5, -1)
        assert states[committer].last_sequence == 2 and states[plain].current_txn_start_offset == -1

    # After a restart (clean), the index and the producer state come back: the same answers.
    with BrokerThread(tmp_path, **UNVERIFIED) as broker:
        assert read_committed_values(broker.bootstrap, len(want)) == want


def test_kill_9_then_recovery_rebuilds_what_read_committed_readers_see(tmp_path):
    from tests.brokerproc import BrokerProcess

    proc = BrokerProcess(tmp_path, "transaction.partition.verification.enable=false").start()
    try:
        with RawClient(proc.bootstrap) as client:
            create_topic(client, TOPIC)
            aborter, committer = producer_id(client), producer_id(client)
            produce(client, aborter, 0, [b"aborted-0"])
            produce(client, committer, 0, [b"committed-0"])
            produce(client, aborter, 1, [b"aborted-1"])
            assert write_marker(client, aborter, commit=False) == 0
            assert write_marker(client, committer, commit=True) == 0
            produce(client, committer, 1, [b"open-0"])  # left open across the crash
            before = fetch_committed(client)
            assert before.last_stable_offset == 5
        proc.kill()  # no flush, no clean-shutdown marker, no snapshot: recovery replays the log
        proc.start()
        with RawClient(proc.bootstrap) as client:
            after = fetch_committed(client)
            assert after.last_stable_offset == 5 and after.high_watermark == 6
            assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(aborter, 0)]
            assert write_marker(client, committer, commit=True) == 0  # the open one is still open, and closes
            assert latest(client, 1) == 7
        assert read_committed_values(proc.bootstrap, 2) == [b"committed-0", b"open-0"]
    finally:
        proc.stop()
