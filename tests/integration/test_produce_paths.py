"""The produce fast path answers exactly as the general path does.

Two in-process brokers take the same produce requests in the same order, one with the fast path
(`Broker.produce_fast_path`, the default) and one without: every response, and the log each one leaves, must
be equal. The requests, at versions 3 to 13 (v13 names topics by id), cover what a client sends (acks=1,
acks=all, several partitions and topics, an idempotent producer with a retried duplicate) and what it should
not (an unknown topic or partition, a bad CRC, a legacy batch, empty records, invalid acks, an internal
topic, an out-of-order sequence, a partition named twice): the fast path serves the first kind and hands the
second back before appending anything.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from odradek.broker import server as broker_server
from odradek.broker.context import DECLINED
from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.messages import (
    CreateTopicsRequest,
    FetchRequest,
    InitProducerIdRequest,
    MetadataRequest,
    ProduceRequest,
)
from odradek.protocol.records import build_batch

pytestmark = pytest.mark.timeout(120)

Topic = ProduceRequest.TopicProduceData
Part = Topic.PartitionProduceData


def batch(value: bytes, **kw) -> bytes:
    return build_batch([(b"k", value, [], 1_700_000_000_000), (None, value * 2, [], 1_700_000_000_001)], **kw)


def produce(parts: list[tuple[str, int, bytes | None]], acks: int = -1) -> ProduceRequest:
    topics: dict[str, list] = {}
    for name, index, records in parts:
        topics.setdefault(name, []).append(Part(index=index, records=records))
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000,
                          topic_data=[Topic(name=n, partition_data=p) for n, p in topics.items()])


def produce_by_id(parts: list[tuple[object, int, bytes]]) -> ProduceRequest:
    topics: dict[object, list] = {}
    for topic_id, index, records in parts:
        topics.setdefault(topic_id, []).append(Part(index=index, records=records))
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000,
                          topic_data=[Topic(topic_id=t, partition_data=p) for t, p in topics.items()])


def script(producer_id: int, epoch: int, ids: dict[str, object]) -> list[tuple[ProduceRequest, int]]:
    bad_crc = bytearray(batch(b"crc"))
    bad_crc[-1] ^= 0xFF
    legacy = bytearray(batch(b"old"))
    legacy[16] = 1
    idem = lambda seq, value: batch(value, producer_id=producer_id, producer_epoch=epoch, base_sequence=seq)  # noqa: E731
    return [
        (produce([("a", 0, batch(b"one"))], acks=1), 9),
        (produce([("a", 0, batch(b"two")), ("a", 1, batch(b"three")), ("a", 2, batch(b"four"))]), 10),
        (produce([("a", 1, batch(b"five") + batch(b"six")), ("b", 0, batch(b"seven"))]), 11),
        (produce([("a", 0, batch(b"unknown")), ("nope", 0, batch(b"x"))]), 12),
        (produce([("a", 42, batch(b"x"))]), 5),
        (produce([("a", 0, bytes(bad_crc))]), 7),
        (produce([("a", 0, bytes(legacy))]), 6),
        (produce([("a", 0, b"")]), 11),
        (produce([("a", 0, None)]), 11),
        (produce([("a", 0, batch(b"x"))], acks=2), 12),
        (produce([("__consumer_offsets", 0, batch(b"x"))]), 9),
        (produce([("a", 2, idem(0, b"idem-0"))]), 8),
        (produce([("a", 2, idem(0, b"idem-0"))]), 10),  # the retried duplicate: the first offsets again
        (produce([("a", 2, idem(7, b"gap"))]), 8),  # OUT_OF_ORDER_SEQUENCE_NUMBER, with its message (v8+)
        (produce([("a", 0, batch(b"twice")), ("a", 0, batch(b"twice-again"))]), 12),
        (produce([("b", 0, batch(b"eight", compression=3))], acks=1), 3),  # lz4; v3: no log_start_offset
        (produce([("a", 0, batch(b"seven-again"))]), 7),  # v7: no error_message
        (produce_by_id([(ids["a"], 1, batch(b"by-id")), (ids["b"], 0, batch(b"by-id-b"))]), 13),  # topic ids
        (produce_by_id([(uuid.UUID(int=7), 0, batch(b"unknown-id"))]), 13),  # UNKNOWN_TOPIC_ID
        (produce([("b", 0, batch(b"then-bad")), ("b", 0, b"")]), 11),  # the last entry (an error) decides
        # KIP-467's record_errors: the keyless record (index 1) on a compacted topic, flexible and classic
        (produce([("c", 0, batch(b"keyless"))]), 12),
        (produce([("c", 0, batch(b"keyless"))]), 8),
        (produce([("a", 0, build_batch([(b"k", b"now", [], 1_700_000_000_000),
                                        (b"k", b"future", [], 4_000_000_000_000)]))]), 11),  # INVALID_TIMESTAMP
        (produce([("c", 0, build_batch([(b"k", b"keyed", [], 1_700_000_000_000)]))]), 9),
    ]


def run(bootstrap: str) -> tuple[list, list]:
    with RawClient(bootstrap) as client:
        ids = {}
        for name in ("a", "b"):
            meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                                  allow_auto_topic_creation=True), 12)
            assert meta.topics[0].error_code == 0
            ids[name] = meta.topics[0].topic_id
        created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="c", num_partitions=1, replication_factor=1, assignments=[],
            configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name="cleanup.policy", value="compact")])]), 7)
        assert created.topics[0].error_code == 0
        ip = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
        responses = [client.request(req, version) for req, version in script(ip.producer_id, ip.producer_epoch, ids)]
        # A timestamp error's bounds come from each broker's clock: cut them, so that the answers compare.
        for response in responses:
            for topic in response.responses:
                for p in topic.partition_responses:
                    for e in p.record_errors:
                        e.batch_index_error_message = re.sub(r"within \[.*\]", "within [...]",
                                                             e.batch_index_error_message)
        # Each broker made its own topic ids: name them, so that the two brokers' answers compare.
        names = {topic_id: name for name, topic_id in ids.items()}
        for response in responses:
            for topic in response.responses:
                if topic.topic_id in names:
                    topic.name, topic.topic_id = names[topic.topic_id], None
        client.send(produce([("a", 1, batch(b"acks-0"))], acks=0), 9, expect_response=False)
        responses.append(client.request(produce([("a", 1, batch(b"after-acks-0"))], acks=1), 9))
        logs = []
        for name, index in (("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 0)):
            fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=10 << 20, isolation_level=0, topics=[
                FetchRequest.FetchTopic(topic=name, partitions=[FetchRequest.FetchTopic.FetchPartition(
                    partition=index, fetch_offset=0, partition_max_bytes=10 << 20)])])
            part = client.request(fetch, 12).responses[0].partitions[0]
            logs.append((part.error_code, part.high_watermark, bytes(part.records or b"")))
        return responses, logs


def test_fast_and_general_paths_answer_alike(tmp_path, monkeypatch):
    served = []
    real = broker_server.serve_produce_frame

    def counting(services, request, connection):
        result = real(services, request, connection)
        served.append(result is not DECLINED)
        return result

    monkeypatch.setattr(broker_server, "serve_produce_frame", counting)
    fast = BrokerThread(tmp_path / "fast", **{"num.partitions": 3}).start()
    monkeypatch.setattr(broker_server.Broker, "produce_fast_path", False)
    general = BrokerThread(tmp_path / "general", **{"num.partitions": 3}).start()
    try:
        assert fast.broker.network.serve_produce_frame is not None
        assert general.broker.network.serve_produce_frame is None
        fast_responses, fast_logs = run(fast.bootstrap)
        taken = list(served)
        general_responses, general_logs = run(general.bootstrap)
        assert served == taken  # the general broker never went near the fast path
    finally:
        fast.stop()
        general.stop()
    # Appended batches carry the broker's time only when log.append.time is set: equal here.
    assert fast_responses == general_responses
    assert fast_logs == general_logs
    assert all(hw > 0 for _, hw, _ in fast_logs)
    # The fast path served the clean requests (a bad CRC is found by the log, as on the general path) and
    # handed back the others before appending.
    # (null records never reach it: the wire half declines them.)
    T, F = True, False
    assert taken == [T, T, T, F, F, T, F, F, F, F, T, T, T, F, T, T, T, F, F, T, T, T, T, F, T]
    codes = [[p.error_code for t in r.responses for p in t.partition_responses] for r in fast_responses]
    assert codes[5] == [2] and codes[12] == [0] and codes[13] == [45]  # CORRUPT_MESSAGE, duplicate, out of order
    # Kafka's answers (LogValidator.validateKey / validateTimestamp / processRecordErrors, ReplicaManager's
    # RecordValidationException case: the exception's message as error_message): INVALID_RECORD (87) naming
    # record 1, at v12 and v8 alike; INVALID_TIMESTAMP (32) naming record 1; the keyed batch appended.
    keyless = "Compacted topic cannot accept message without key in topic partition c-0"
    for response in fast_responses[20:22]:
        (part,) = response.responses[0].partition_responses
        assert (part.error_code, part.base_offset) == (87, -1)
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, keyless)]
        assert part.error_message == ("One or more records have been rejected due to 1 record errors in total, and "
                                      f"only showing the first three errors at most: [RecordError(batchIndex=1, "
                                      f"message='{keyless}')]")
    (part,) = fast_responses[22].responses[0].partition_responses
    assert part.error_code == 32 and part.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, "Timestamp 4000000000000 of message with offset 1 is out of range. The timestamp should be within [...]")]
    assert codes[23] == [0]
    assert fast_responses[12].responses[0].partition_responses[0].base_offset == \
        fast_responses[11].responses[0].partition_responses[0].base_offset
    # A partition named twice is answered once, and only its last entry is written (as Kafka does).
    (twice,) = fast_responses[14].responses
    assert [p.index for p in twice.partition_responses] == [0]
    a0 = fast_logs[0][2]
    assert b"twice-again" in a0 and b"twice" not in a0.replace(b"twice-again", b"")
    (then_bad,) = fast_responses[19].responses
    assert [(p.index, p.error_code) for p in then_bad.partition_responses] == [(0, codes[7][0])]
    assert codes[7][0] != 0 and b"then-bad" not in fast_logs[3][2]



def transactional_run(bootstrap: str) -> list:
    """With an authorizer: a transaction's first write (verified: the general path), its second (the
    transaction is open there: the fast path serves it when WRITE on the id and the topic is granted), and a
    transactional batch in a request without a transactional id (refused whole)."""
    from odradek.protocol.messages import AddPartitionsToTxnRequest, FindCoordinatorRequest

    txn_id = "tx-paths"
    with RawClient(bootstrap) as client:
        meta = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a")],
                                              allow_auto_topic_creation=True), 12)
        assert meta.topics[0].error_code == 0
        assert client.request(FindCoordinatorRequest(key=txn_id, key_type=1), 3).error_code == 0
        for _ in range(200):  # COORDINATOR_LOAD_IN_PROGRESS while the coordinator loads
            init = client.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60_000), 4)
            if init.error_code == 0:
                break
            time.sleep(0.05)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        add = client.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="a", partitions=[0])]), 3)
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

        def txn_produce(seq: int, transactional_id: str | None):
            request = produce([("a", 0, batch(b"t%d" % seq, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                               transactional=True))])
            request.transactional_id = transactional_id
            return client.request(request, 9)

        return [txn_produce(0, txn_id), txn_produce(2, txn_id), txn_produce(4, None)]


def test_transactional_writes_with_an_authorizer_answer_alike_on_both_paths(tmp_path, monkeypatch):
    served = []
    real = broker_server.serve_produce_frame

    def counting(services, request, connection):
        result = real(services, request, connection)
        served.append(result is not DECLINED)
        return result

    settings = {"num.partitions": 1, "super.users": "User:ANONYMOUS",
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    monkeypatch.setattr(broker_server, "serve_produce_frame", counting)
    fast = BrokerThread(tmp_path / "fast", **settings).start()
    monkeypatch.setattr(broker_server.Broker, "produce_fast_path", False)
    general = BrokerThread(tmp_path / "general", **settings).start()
    try:
        fast_responses = transactional_run(fast.bootstrap)
        taken = list(served)
        general_responses = transactional_run(general.bootstrap)
        assert served == taken
    finally:
        fast.stop()
        general.stop()
    assert fast_responses == general_responses
    codes = [[p.error_code for t in r.responses for p in t.partition_responses] for r in fast_responses]
    assert codes == [[0], [0], [53]]  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED without a transactional id
    # The first write is verified (general path); the second is in the open transaction, and the authorizer
    # grants it, so the fast path serves it; the third is refused (general path).
    assert taken == [False, True, False]
