"""Graceful shutdown of a real broker process while consumers long-poll.

SIGTERM (or SIGINT) must not wait out a parked fetch: the broker answers it with what it has, stops
taking requests, flushes and checkpoints, writes the clean-shutdown marker and exits 0 within seconds.
"""

from __future__ import annotations

import signal
import subprocess
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.broker.testing import RawClient
from odradek.protocol.messages import FetchRequest
from odradek.storage.names import CLEAN_SHUTDOWN_FILE

pytestmark = pytest.mark.timeout(60)

TIMEOUT_S = 15
RECORDS = 10
EXIT_DEADLINE_S = 45  # a deadline for the poll on the process, not a speed claim: the parked fetch waits ~24 days
PARKED_WAIT_MS = 2**31 - 1  # the longest wait the protocol can ask for: only an answer on shutdown ends it


def long_poll(topic: str, offset: int) -> FetchRequest:
    Topic = FetchRequest.FetchTopic
    return FetchRequest(
        max_wait_ms=PARKED_WAIT_MS, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        forgotten_topics_data=[], rack_id="",
        topics=[Topic(topic=topic, partitions=[Topic.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])],
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_consumers_long_poll_exits_cleanly_and_fast(fresh_broker, signum):
    broker = fresh_broker
    topic = "shutdown"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": TIMEOUT_S * 1000})
    for i in range(RECORDS):
        producer.produce(topic, value=b"r%d" % i)
    assert producer.flush(TIMEOUT_S) == 0

    # A raw fetch at the end of the log, parked in the purgatory for as long as the protocol allows.
    raw = RawClient(broker.bootstrap)
    raw.send(long_poll(topic, RECORDS), 11)
    with pytest.raises(TimeoutError):
        raw.receive(0.5)

    # A real consumer at the end of the log, long-polling (fetch.wait.max.ms 30 s) in a thread.
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "odradek-shutdown", "enable.auto.commit": False,
        "fetch.wait.max.ms": 30_000, "fetch.min.bytes": 1, "reconnect.backoff.max.ms": 1000,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    caught_up = threading.Event()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.offset())
                if len(seen) == RECORDS:
                    caught_up.set()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        assert caught_up.wait(TIMEOUT_S), f"consumer read {len(seen)} of {RECORDS}"
        broker.proc.send_signal(signum)
        try:
            code = broker.proc.wait(EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the broker did not exit within {EXIT_DEADLINE_S}s of the signal: a parked fetch held it")
        broker.stop()  # reaps the output reader
        assert code == 0, broker.log_text()[-3000:]
        assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
        assert "shutting down" in broker.log_text()
        assert "Traceback" not in broker.log_text(), broker.log_text()[-3000:]

        # The parked fetch was answered (no records, no error), then the connection closed.
        response = raw.receive(2.0)
        (partition,) = response.responses[0].partitions
        assert partition.error_code == 0 and partition.high_watermark == RECORDS
        assert not partition.records
        assert raw.closed_by_peer(2.0)
    finally:
        stop.set()
        poller.join(5)
        consumer.close()
        raw.close()
    assert seen == list(range(RECORDS))


def test_kill_9_leaves_no_clean_shutdown_marker(fresh_broker):
    """The marker is consumed at start-up, so only a clean stop can leave one behind."""
    broker = fresh_broker
    assert broker.stop() == 0
    assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    broker.start()
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    broker.kill()
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
