"""The console's record filter over a large partition: records looked at per second, the console's scan
(console/scan.py: raw Fetch, lazy records, cheap predicates first) against the consumer-based scan it
replaced, in turns on the same data in the same run.

    python -m bench.console_filter                       # starts a broker, writes 1M records (lz4) once
    python -m bench.console_filter --bootstrap HOST:PORT --records 1000000 --rounds 3

The old scan is kept here as the reference: the bundled Consumer (assign, seek, getmany), a RecordView per
record and the filter compiled as written (parse_filter(optimize=False)).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from odradek.client.admin import Admin, NewTopic
from odradek.client.config import ClientConfig, ConsumerConfig
from odradek.client.consumer import Consumer
from odradek.client.cluster import TopicPartition
from odradek.console.filter import RecordView, parse_filter
from odradek.console.records import BrowseRequest, browse

from .procs import free_port, terminate

FILTERS = ('value.json.n == 999993 or key == "k17"', 'key startswith "k99999"', "value.json.n > 999990",
           'headers.src == "x" or offset == 17')


async def old_scan(bootstrap: str, topic: str, expression: str, total: int) -> tuple[int, int]:
    """(records looked at, matches) as the console's browse did before: the consumer decodes every record."""
    matches = parse_filter(expression, optimize=False).matches
    config = ConsumerConfig(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                            max_poll_records=2000, max_partition_fetch_bytes=1_048_576, prefetch_bytes=2_097_152)
    consumer = Consumer(config=config)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    scanned = found = 0
    try:
        while scanned < total:
            batch = await consumer.getmany(timeout_ms=1000, max_records=2000)
            for records in batch.values():
                for r in records:
                    scanned += 1
                    if matches(RecordView(r.key, r.value, r.headers, r.offset, r.partition, r.timestamp)):
                        found += 1
    finally:
        await consumer.close(autocommit=False)
    return scanned, found


async def new_scan(bootstrap: str, topic: str, expression: str, total: int) -> tuple[int, int]:
    config = ClientConfig(bootstrap_servers=bootstrap)
    async with Admin(config) as admin:
        result = await browse(config, admin.client, BrowseRequest(
            topic, partition=0, start="earliest", max_scan=min(total, 1_000_000), limit=1000,
            filter=parse_filter(expression), max_seconds=600))
    return result.scanned, len(result.records)


def fill(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka import Producer

    async def create() -> None:
        async with Admin(ClientConfig(bootstrap_servers=bootstrap)) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
    asyncio.run(create())
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4"})
    for i in range(total):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % i, value=b'{"n": %d}' % i)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--topic", default="console-filter-bench")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-fill", action="store_true")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        port = free_port()
        data = tempfile.mkdtemp(prefix="odradek-console-bench-")
        broker = subprocess.Popen([sys.executable, "-m", "odradek", "broker", "start", "--override",
                                   f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
                                   "--override", "node.id=1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        assert broker.stdout is not None
        for line in broker.stdout:
            if re.search(r"listening on PLAINTEXT://", line):
                break
        bootstrap = f"127.0.0.1:{port}"
    try:
        if not args.skip_fill:
            fill(bootstrap, args.topic, args.records)
        print(f"{args.records:,} records in {args.topic}-0 (lz4, ~1 MB batches); records looked at per second, "
              f"median of {args.rounds} turns each")
        for expression in FILTERS:
            rates: dict[str, list[float]] = {"before": [], "after": []}
            matched = {}
            for _ in range(args.rounds):
                for name, scan in (("before", old_scan), ("after", new_scan)):
                    t0 = time.perf_counter()
                    scanned, found = asyncio.run(scan(bootstrap, args.topic, expression, args.records))
                    rates[name].append(scanned / (time.perf_counter() - t0))
                    matched[name] = found
            assert matched["before"] == matched["after"], matched
            before, after = statistics.median(rates["before"]), statistics.median(rates["after"])
            print(f"{expression:45s} before {before:10,.0f}/s  after {after:10,.0f}/s  x{after / before:4.1f}  "
                  f"({matched['after']} matches)")
    finally:
        if broker is not None:
            terminate(broker, 20)


if __name__ == "__main__":
    main()
