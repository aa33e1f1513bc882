"""Transactions end to end with real clients (confluent-kafka, aiokafka, kafka-python) on a broker process:
commit and abort with read_committed consumers that never see aborted records and see committed ones in
order; a consume-transform-produce loop with send_offsets_to_transaction; zombie fencing; a transaction
left open past its timeout is aborted by the coordinator and the last stable offset moves on.

Waits are bounded polls of the system's own answers (consumers polling, DescribeTransactions).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.testing import RawClient
from odradek.protocol.messages import DescribeTransactionsRequest, FindCoordinatorRequest

pytestmark = pytest.mark.timeout(180)

DEADLINE_S = 60


def create(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(30)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_committed(bootstrap: str, topic: str, expected: int, *, settle_s: float = 1.0) -> list[bytes]:
    """Values a read_committed consumer gets, in partition order; waits for `expected` then `settle_s` more
    (bounded) to catch anything that should not be there."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": name("reader"), "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + DEADLINE_S
    extra_until = None
    try:
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append((m.partition(), m.offset(), m.value()))
            if len(got) >= expected and extra_until is None:
                extra_until = time.monotonic() + settle_s
            if extra_until is not None and time.monotonic() >= extra_until:
                break
    finally:
        consumer.close()
    return [v for _, _, v in sorted(got)]


def coordinator_state(bootstrap: str, txn_id: str) -> str:
    with RawClient(bootstrap) as client:
        found = client.request(FindCoordinatorRequest(key=txn_id, key_type=1), 3)
        assert found.error_code == 0
        response = client.request(DescribeTransactionsRequest(transactional_ids=[txn_id]), 0)
    (state,) = response.transaction_states
    return state.transaction_state


def wait_for_state(bootstrap: str, txn_id: str, states: set[str]) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        state = coordinator_state(bootstrap, txn_id)
        if state in states or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def test_confluent_commit_and_abort(broker):
    topic = name("cf")
    create(broker.bootstrap, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name("cf-txn")})
    p.init_transactions(30)
    want = []
    for round_ in range(4):
        p.begin_transaction()
        values = [f"r{round_}-{i}".encode() for i in range(20)]
        for v in values:
            p.produce(topic, key=v[:2], value=v)
        if round_ % 2:
            p.flush()
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            want.extend(values)
    got = read_committed(broker.bootstrap, topic, len(want))
    assert sorted(got) == sorted(want)
    for prefix in (b"r0", b"r2"):  # in order within their partitions
        assert [v for v in got if v.startswith(prefix)] == sorted((v for v in want if v.startswith(prefix)),
                                                                  key=lambda v: int(v.split(b"-")[1]))


def test_consume_transform_produce_with_offsets_in_the_transaction(broker):
    source, sink, group = name("src"), name("dst"), name("etl")
    create(broker.bootstrap, source, sink)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        plain.produce(source, key=str(i % 7).encode(), value=str(i).encode())
    plain.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name("etl-txn")})
    producer.init_transactions(30)
    done, aborted_once = 0, False
    deadline = time.monotonic() + DEADLINE_S
    while done < 100 and time.monotonic() < deadline:
        batch = consumer.consume(25, 0.5)
        batch = [m for m in batch if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, key=m.key(), value=b"x" + m.value())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        if not aborted_once:  # the first batch is aborted: its output vanishes and its input is read again
            aborted_once = True
            producer.abort_transaction(30)
            for tp in consumer.committed(consumer.assignment(), 30):
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            continue
        producer.commit_transaction(30)
        done += len(batch)
    consumer.close()
    assert done == 100
    out = read_committed(broker.bootstrap, sink, 100)
    assert sorted(out) == sorted(b"x%d" % i for i in range(100))  # exactly once: no loss, no duplicate
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(source, 0), TopicPartition(source, 1)], 30)
    check.close()
    assert sum(tp.offset for tp in committed) == 100


def test_zombie_fencing(broker):
    topic, txn_id = name("zombie"), name("z-txn")
    create(broker.bootstrap, topic, partitions=1)
    old = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie-1")
    old.flush(30)
    new = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    new.init_transactions(30)  # aborts the old one's transaction and fences its epoch
    new.begin_transaction()
    new.produce(topic, value=b"fresh")
    new.commit_transaction(30)
    old.produce(topic, value=b"zombie-2")
    with pytest.raises(KafkaException) as e:
        old.commit_transaction(30)
    assert e.value.args[0].fatal() or not e.value.args[0].retriable()
    assert read_committed(broker.bootstrap, topic, 1) == [b"fresh"]


def test_open_transaction_is_aborted_at_its_timeout_and_the_lso_moves_on(broker):
    topic, txn_id = name("timeout"), name("t-txn")
    create(broker.bootstrap, topic, partitions=1)
    hanging = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                        "transaction.timeout.ms": 2000})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(topic, value=b"never")
    hanging.flush(30)
    # Another producer's committed records behind the hanging transaction become readable only once it is aborted.
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name("t-other")})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, value=b"after")
    other.commit_transaction(30)
    assert wait_for_state(broker.bootstrap, txn_id, {"CompleteAbort"}) == "CompleteAbort"
    assert read_committed(broker.bootstrap, topic, 1) == [b"after"]


def test_kafka_python_transactions(broker):
    from kafka import KafkaConsumer, KafkaProducer

    topic = name("kp")
    create(broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=name("kp-txn"))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, key=b"k", value=b"kp-c%d" % i)
    producer.commit_transaction()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, key=b"k", value=b"kp-a%d" % i)
    producer.abort_transaction()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None)
    got = [m.value for m in consumer]
    consumer.close()
    assert got == [b"kp-c%d" % i for i in range(10)]


def test_kafka_python_consume_transform_produce_with_group_metadata(broker):
    """kafka-python's loop: a read_committed group consumer, send_offsets_to_transaction with the consumer's
    group metadata (TxnOffsetCommit v3, KIP-447), the first transaction aborted and its input read again."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata

    source, sink, group = name("kp-src"), name("kp-dst"), name("kp-etl")
    create(broker.bootstrap, source, sink)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        plain.produce(source, key=str(i % 5).encode(), value=str(i).encode())
    plain.flush(30)
    consumer = KafkaConsumer(source, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=name("kp-etl-txn"))
    producer.init_transactions()
    done, aborted_once = 0, False
    deadline = time.monotonic() + DEADLINE_S
    try:
        while done < 40 and time.monotonic() < deadline:
            batch = [r for records in consumer.poll(timeout_ms=500, max_records=15).values() for r in records]
            if not batch:
                continue
            producer.begin_transaction()
            for r in batch:
                producer.send(sink, key=r.key, value=b"y" + r.value)
            positions = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
            producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            if not aborted_once:  # its output vanishes, its offsets are not committed: read it again
                aborted_once = True
                producer.abort_transaction()
                for tp in consumer.assignment():
                    committed = consumer.committed(tp)
                    consumer.seek(tp, committed if committed is not None else 0)
                continue
            producer.commit_transaction()
            done += len(batch)
    finally:
        producer.close()
        consumer.close()
    assert done == 40
    assert sorted(read_committed(broker.bootstrap, sink, 40)) == sorted(b"y%d" % i for i in range(40))
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = check.committed([TopicPartition(source, 0), TopicPartition(source, 1)], 30)
    check.close()
    assert sum(tp.offset for tp in committed) == 40


def test_aiokafka_transactions_with_offsets(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic, source = name("aio"), name("aio-src")
    create(broker.bootstrap, topic, source, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        plain.produce(source, value=b"in%d" % i)
    plain.flush(30)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=name("aio-txn"))
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send(topic, b"aio-c%d" % i)
                await producer.send_offsets_to_transaction({AioTopicPartition(source, 0): 5}, "aio-group")
            await producer.begin_transaction()
            await producer.send(topic, b"aio-aborted")
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(source, bootstrap_servers=broker.bootstrap, group_id="aio-group",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            assert await consumer.committed(AioTopicPartition(source, 0)) == 5
        finally:
            await consumer.stop()

        # aiokafka's own read_committed consumer: the committed records in order, never the aborted one.
        reader = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                  auto_offset_reset="earliest", enable_auto_commit=False, group_id=None)
        await reader.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < 5 and time.monotonic() < deadline:
                for records in (await reader.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
            for records in (await reader.getmany(timeout_ms=500)).values():  # nothing after them
                got.extend(r.value for r in records)
        finally:
            await reader.stop()
        assert got == [b"aio-c%d" % i for i in range(5)]

    asyncio.run(run())
    assert read_committed(broker.bootstrap, topic, 5) == [b"aio-c%d" % i for i in range(5)]


def test_a_transactional_write_to_a_partition_not_in_the_transaction_is_refused(broker):
    """KIP-890 part 1: the partition leader verifies a transaction's first write with the coordinator."""
    from odradek.protocol.errors import ErrorCode
    from odradek.protocol.messages import AddPartitionsToTxnRequest, InitProducerIdRequest, ProduceRequest
    from odradek.protocol.records import build_batch

    topic, txn_id = name("verify"), name("v-txn")
    create(broker.bootstrap, topic, partitions=2)
    PTopic = ProduceRequest.TopicProduceData
    with RawClient(broker.bootstrap) as client:
        assert client.request(FindCoordinatorRequest(key=txn_id, key_type=1), 3).error_code == 0
        init = None
        for _ in range(100):  # bounded: COORDINATOR_LOAD_IN_PROGRESS while the coordinator loads
            init = client.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60_000), 4)
            if init.error_code == 0:
                break
            time.sleep(0.05)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch

        def produce(partition: int, seq: int, version: int = 9) -> int:
            batch = build_batch([(b"k", b"v", None, int(time.time() * 1000))], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, transactional=True)
            response = client.request(ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=10_000, topic_data=[
                PTopic(name=topic, partition_data=[PTopic.PartitionProduceData(index=partition, records=batch)])]),
                version)
            return response.responses[0].partition_responses[0].error_code

        add = client.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]), 3)
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        assert produce(1, 0) == ErrorCode.INVALID_TXN_STATE  # never added
        assert produce(1, 0, version=11) == ErrorCode.TRANSACTION_ABORTABLE  # v11 knows the code
        assert produce(0, 0) == 0
        assert produce(0, 1) == 0  # the transaction is open there now: not verified again
        # Produce v12+ is Transactions V2 (KIP-890 part 2): the leader has the coordinator add the partition.
        assert produce(1, 0, version=12) == 0


def test_bundled_producer_and_consumer(broker):
    from odradek.client import Consumer as OdConsumer
    from odradek.client import Producer as OdProducer
    from odradek.client.cluster import TopicPartition as OdTopicPartition

    topic, source, group = name("od"), name("od-src"), name("od-group")
    create(broker.bootstrap, topic, source, partitions=2)

    async def run() -> list[bytes]:
        async with OdProducer(bootstrap_servers=broker.bootstrap, transactional_id=name("od-txn")) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            for i in range(30):
                await producer.send(topic, b"od-c%d" % i, key=b"k%d" % (i % 3))
            await producer.send_offsets_to_transaction({OdTopicPartition(source, 0): 7, OdTopicPartition(source, 1): 3},
                                                       group)
            await producer.commit_transaction()
            producer.begin_transaction()
            for i in range(10):
                await producer.send(topic, b"od-a%d" % i)
            await producer.abort_transaction()
            producer.begin_transaction()
            await producer.send(topic, b"od-last", key=b"k0")
            await producer.commit_transaction()
        async with OdConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                              auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
            committed = await consumer.committed(OdTopicPartition(source, 0))
            assert committed == 7 or getattr(committed, "offset", None) == 7
        got = []
        async with OdConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", group_id=name("od-r"),
                              isolation_level="read_committed") as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < 31 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
        return got

    got = asyncio.run(run())
    assert sorted(got) == sorted([b"od-c%d" % i for i in range(30)] + [b"od-last"])


def test_cli_lists_describes_and_aborts_a_hanging_transaction(broker):
    import json
    import os
    import subprocess
    import sys

    def odradek(*args: str) -> str:
        exe = os.path.join(os.path.dirname(sys.executable), "odradek")
        result = subprocess.run([exe, "--bootstrap-server", broker.bootstrap, "--output", "json", *args],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    topic, txn_id = name("cli"), name("cli-txn")
    create(broker.bootstrap, topic, partitions=1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"hanging")
    p.flush(30)
    listed = {t["transactional_id"]: t for t in json.loads(odradek("txn", "list", "--state", "Ongoing"))}
    assert listed[txn_id]["state"] == "Ongoing" and listed[txn_id]["coordinator"] == 1  # kafka-transactions.sh's columns
    described = json.loads(odradek("txn", "describe", "--transactional-id", txn_id))
    assert described["state"] == "Ongoing" and described["partitions"] == [f"{topic}-0"]
    assert described["duration_ms"] >= 0 and described["start_time_ms"] > 0
    aborted = json.loads(odradek("txn", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0"))
    assert aborted["aborted"]
    # The partition's last stable offset moved on: a committed record after it is readable at once.
    other = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name("cli-other")})
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, value=b"after")
    other.commit_transaction(30)
    assert read_committed(broker.bootstrap, topic, 1) == [b"after"]
