"""`python -m bench.quota_bench`: a producer with a 1 MB/s quota is held to it.

Starts a broker process (`python -m odradek broker start`) on a fresh data directory, sets
`producer_byte_rate` for the client id `quota-bench` (AlterClientQuotas through the bundled admin client),
then runs a confluent-kafka producer with that client id as fast as it can for `--seconds` (default 40),
and prints the bytes acknowledged per second and the average after the warm-up. Kafka measures a quota
over `quota.window.num` (11) windows of `quota.window.size.seconds` (1 s), at least 10 windows long, so a
fresh client may send up to ~10 s of quota at once before the first throttle; after that the broker
answers with throttle_time_ms and stops reading the connection for that long (KIP-219), and the client
backs off as well. A second run without the quota shows what the same producer does unthrottled.

Then a confluent-kafka consumer with a 1 MB/s `consumer_byte_rate` (client id `quota-bench-consumer`) reads
what was produced: each fetch is capped at what the quota lets through at once, and a fetch over the quota
is answered empty with throttle_time_ms (KIP-219), so it too is held to 1 MB/s.

Figures only, no assertion: timings on a shared machine are not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import threading
import time

QUOTA_BYTES_PER_S = 1 << 20
CLIENT_ID = "quota-bench"
CONSUMER_CLIENT_ID = "quota-bench-consumer"
_LISTENING = re.compile(r"listening.*port=(\d+)")


def _start_broker(data_dir: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "broker", "start", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={data_dir}", "--override", "num.partitions=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        m = _LISTENING.search(line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # drain the log
            return proc, f"127.0.0.1:{m.group(1)}"
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError("the broker did not start")


async def _set_quota(bootstrap: str, value: float | None, client_id: str = CLIENT_ID,
                     key: str = "producer_byte_rate") -> None:
    from odradek.client.admin import Admin

    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.alter_client_quotas({"client-id": client_id}, {key: value})


def _consume(bootstrap: str, topic: str, seconds: float) -> tuple[list[int], int]:
    """Bytes consumed in each second of the run, and the throttle events librdkafka reported."""
    from confluent_kafka import Consumer, TopicPartition

    per_second = [0] * int(seconds + 1)
    throttled = [0]

    def on_throttle(event) -> None:
        if event.throttle_time > 0:
            throttled[0] += 1

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": CONSUMER_CLIENT_ID, "group.id": "quota-bench",
                         "enable.auto.commit": False, "throttle_cb": on_throttle})
    consumer.assign([TopicPartition(topic, 0, 0)])
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for message in consumer.consume(1000, 0.1):
            if message.error() is None:
                second = int(time.monotonic() - started)
                if second < len(per_second):
                    per_second[second] += len(message.value())
    consumer.close()
    return per_second[: int(seconds)], throttled[0]


def _produce(bootstrap: str, topic: str, seconds: float, record_bytes: int) -> list[int]:
    """Bytes acknowledged in each second of the run."""
    from confluent_kafka import Producer

    per_second = [0] * int(seconds + 1)
    started = time.monotonic()

    def delivered(err, msg) -> None:
        if err is None:
            second = int(time.monotonic() - started)
            if second < len(per_second):
                per_second[second] += len(msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID, "linger.ms": 5,
                         "batch.size": 64 * 1024, "queue.buffering.max.kbytes": 4096})
    value = b"x" * record_bytes
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    producer.flush(30)
    return per_second[: int(seconds)]


def _report(label: str, per_second: list[int], warmup_s: int) -> None:
    steady = per_second[warmup_s:]
    average = sum(steady) / max(1, len(steady))
    print(f"\n{label}")
    print("  per second (KiB): " + " ".join(f"{b // 1024}" for b in per_second))
    whole = sum(per_second) / len(per_second)
    print(f"  whole run: {whole / 1024:.0f} KiB/s = {whole / QUOTA_BYTES_PER_S:.2f} x the quota; "
          f"after {warmup_s} s: {average / 1024:.0f} KiB/s = {average / QUOTA_BYTES_PER_S:.2f} x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=15, help="seconds left out of the steady-state average")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unthrottled run")
    parser.add_argument("--consumer-seconds", type=float, default=30.0, help="the consumer run's length (0: none)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as data_dir:
        proc, bootstrap = _start_broker(data_dir)
        try:
            asyncio.run(_set_quota(bootstrap, QUOTA_BYTES_PER_S))
            print(f"broker {bootstrap}; producer_byte_rate={QUOTA_BYTES_PER_S} for client.id={CLIENT_ID}")
            _report(f"with a {QUOTA_BYTES_PER_S // 1024} KiB/s quota",
                    _produce(bootstrap, "quota-bench", args.seconds, args.record_bytes), args.warmup)
            if not args.no_baseline:
                asyncio.run(_set_quota(bootstrap, None))
                _report("without the quota (same producer, 10 s)",
                        _produce(bootstrap, "quota-bench-free", 10.0, args.record_bytes), 0)
            if args.consumer_seconds > 0:
                asyncio.run(_set_quota(bootstrap, QUOTA_BYTES_PER_S, CONSUMER_CLIENT_ID, "consumer_byte_rate"))
                per_second, throttled = _consume(bootstrap, "quota-bench", args.consumer_seconds)
                _report(f"a consumer with a {QUOTA_BYTES_PER_S // 1024} KiB/s consumer_byte_rate quota "
                        f"({throttled} throttled fetches)", per_second, min(args.warmup, len(per_second) // 2))
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
