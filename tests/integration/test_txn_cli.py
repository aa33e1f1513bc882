"""`odradek txn` as `kafka-transactions.sh`: describe-producers, find-hanging, and abort of what it finds.

A hanging transaction is a transactional write no coordinator knows of, so none will ever write its
marker and the partition's last stable offset stays behind it. With KIP-890 verification on, a broker
refuses such a write, so this broker runs with `transaction.partition.verification.enable=false` (what an
older broker, or a client bug before KIP-890, left behind): a raw transactional batch of an idempotent
producer id, stamped an hour ago. Beside it, a real transaction held open by confluent-kafka is not
hanging: its coordinator holds the partition and will end it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.messages import InitProducerIdRequest, ListOffsetsRequest, ProduceRequest
from odradek.protocol.records import build_batch

pytestmark = pytest.mark.timeout(180)

HOUR_MS = 3_600_000


def odradek(bootstrap: str, *args: str, output: str = "json") -> subprocess.CompletedProcess:
    env = dict(os.environ, ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    return subprocess.run([sys.executable, "-m", "odradek", "--output", output, *args], capture_output=True,
                          text=True, timeout=60, env=env)


def ok_json(bootstrap: str, *args: str):
    result = odradek(bootstrap, *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stray_transactional_write(bootstrap: str, topic: str) -> tuple[int, int]:
    """A transactional batch no coordinator knows of (an idempotent producer id), an hour old: (pid, offset)."""
    with RawClient(bootstrap) as client:
        for _ in range(100):  # bounded: COORDINATOR_LOAD_IN_PROGRESS while an id block is allocated
            init = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
            if init.error_code == 0:
                break
            time.sleep(0.05)
        assert init.error_code == 0
        batch = build_batch([(b"k", b"stray", None, int(time.time() * 1000) - HOUR_MS)], producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch, base_sequence=0, transactional=True)
        T = ProduceRequest.TopicProduceData
        response = client.request(ProduceRequest(transactional_id="stray-writer", acks=-1, timeout_ms=10_000, topic_data=[
            T(name=topic, partition_data=[T.PartitionProduceData(index=0, records=batch)])]), 9)
        part = response.responses[0].partition_responses[0]
        assert part.error_code == 0, part
        return init.producer_id, part.base_offset


def last_stable_offset(bootstrap: str, topic: str) -> int:
    L = ListOffsetsRequest.ListOffsetsTopic
    with RawClient(bootstrap) as client:
        response = client.request(ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
            L(name=topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
    return response.topics[0].partitions[0].offset


def test_describe_producers_find_hanging_and_abort(tmp_path):
    with BrokerThread(tmp_path, transaction_partition_verification_enable=False) as broker:
        bs = broker.bootstrap
        stray_topic, live_topic = "stray", "live"
        admin = AdminClient({"bootstrap.servers": bs})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in (stray_topic, live_topic)]).values():
            future.result(30)
        pid, start = stray_transactional_write(bs, stray_topic)
        live = Producer({"bootstrap.servers": bs, "transactional.id": "live-txn"})
        live.init_transactions(30)
        live.begin_transaction()
        live.produce(live_topic, value=b"open")
        live.flush(30)

        (producer,) = ok_json(bs, "txn", "describe-producers", "--topic", stray_topic, "--partition", "0")
        assert (producer["producer_id"], producer["current_transaction_start_offset"]) == (pid, start)
        assert producer["coordinator_epoch"] == -1  # no marker was ever written for it

        hanging = ok_json(bs, "txn", "find-hanging", "--broker-id", "1")
        assert [(h["topic"], h["partition"], h["producer_id"], h["start_offset"]) for h in hanging] == \
            [(stray_topic, 0, pid, start)]
        assert hanging[0]["duration_min"] >= 59
        # The live transaction is open but not hanging, whatever the timeout: its coordinator holds the partition.
        assert ok_json(bs, "txn", "find-hanging", "--topic", live_topic, "--max-transaction-timeout", "0") == []
        assert ok_json(bs, "txn", "find-hanging", "--topic", stray_topic, "--max-transaction-timeout", "120") == []
        assert last_stable_offset(bs, stray_topic) == start
        table = odradek(bs, "txn", "find-hanging", "--topic", stray_topic, output="text")
        assert table.returncode == 0, table.stderr
        header, row = table.stdout.splitlines()
        assert header.split()[:3] == ["TOPIC", "PARTITION", "PRODUCER"] and row.split()[:3] == [stray_topic, "0", str(pid)]

        aborted = ok_json(bs, "txn", "abort", "--topic", stray_topic, "--partition", "0", "--start-offset", str(start))
        assert aborted["aborted"] and aborted["producer_id"] == pid
        assert ok_json(bs, "txn", "find-hanging", "--topic", stray_topic, "--partition", "0") == []
        assert last_stable_offset(bs, stray_topic) == start + 2  # past the stray batch and its ABORT marker

        listed = ok_json(bs, "txn", "list")
        assert {"transactional_id": "live-txn", "coordinator": 1, "state": "Ongoing"}.items() <= listed[0].items()
        assert [t["transactional_id"] for t in ok_json(bs, "txn", "list", "--transactional-id-pattern", "live-.*")] == \
            ["live-txn"]
        assert ok_json(bs, "txn", "list", "--transactional-id-pattern", "live") == []  # matched whole, as Kafka's
        live.commit_transaction(30)
        reader = Consumer({"bootstrap.servers": bs, "group.id": "cli-reader", "isolation.level": "read_committed"})
        reader.assign([KafkaTopicPartition(live_topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = [m.value() for m in reader.consume(10, timeout=0.5) if m.error() is None]
        reader.close()
        assert got == [b"open"]


def test_find_hanging_needs_a_scope(tmp_path):
    result = odradek("127.0.0.1:1", "txn", "find-hanging")
    assert result.returncode == 2 and "--topic or --broker-id" in result.stderr
    result = odradek("127.0.0.1:1", "txn", "find-hanging", "--broker-id", "1", "--partition", "0")
    assert result.returncode == 2 and "--partition needs --topic" in result.stderr
