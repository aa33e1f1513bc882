"""Transactional next to idempotent produce throughput, on the same broker in the same run.

    python -m bench.txn_bench [--records N] [--txn-size 100] [--value-bytes 100] [--json]

One odradek broker process; a topic of 3 partitions. With confluent-kafka (librdkafka) default batching:

- idempotent: `enable.idempotence=true`, N records, one flush at the end;
- transactional: `transactional.id` set, N records in transactions of `--txn-size` records (begin, produce,
  commit: every commit flushes the transaction's records, then EndTxn, then the coordinator writes the
  markers to each partition before the next transaction may add partitions);

and for the transactional run, how long a commit takes (median and p99 of commit_transaction()). Prints
records/s for both and their ratio. Nothing asserts a figure: the numbers depend on the machine and load.
What to expect: small transactions are bounded by round trips (AddPartitionsToTxn, the flush, EndTxn, the
marker writes the next transaction waits for with CONCURRENT_TRANSACTIONS), not by bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer, libversion, version
from confluent_kafka.admin import AdminClient, NewTopic

from .procs import Server

PARTITIONS = 3


def _topic(bootstrap: str) -> str:
    name = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    return name


def idempotent(bootstrap: str, records: int, value: bytes) -> dict:
    topic = _topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i % 64).encode())
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    return {"records": records, "seconds": round(elapsed, 3), "records_per_s": round(records / elapsed)}


def transactional(bootstrap: str, records: int, txn_size: int, value: bytes) -> dict:
    topic = _topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 5})
    producer.init_transactions(60)
    commits_ms = []
    started = time.perf_counter()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        for i in range(min(txn_size, records - sent)):
            producer.produce(topic, value=value, key=str((sent + i) % 64).encode())
        sent += min(txn_size, records - sent)
        t = time.perf_counter()
        producer.commit_transaction(60)
        commits_ms.append((time.perf_counter() - t) * 1000)
    elapsed = time.perf_counter() - started
    commits_ms.sort()
    return {"records": records, "transactions": len(commits_ms), "seconds": round(elapsed, 3),
            "records_per_s": round(records / elapsed),
            "commit_ms_median": round(statistics.median(commits_ms), 2),
            "commit_ms_p99": round(commits_ms[min(len(commits_ms) - 1, int(len(commits_ms) * 0.99))], 2)}


def _first(v) -> str:
    return v if isinstance(v, str) else v[0]


def run(*, records: int = 20_000, txn_size: int = 100, value_bytes: int = 100,
        workdir: str | Path | None = None) -> dict:
    value = b"v" * value_bytes
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        server = Server("odradek", Path(tmp) / "txn").start()
        try:
            transactional(server.bootstrap, min(records, 10 * txn_size), txn_size, value)  # warm up both paths
            idem = idempotent(server.bootstrap, records, value)
            txn = transactional(server.bootstrap, records, txn_size, value)
        finally:
            server.stop()
    return {"client": f"confluent-kafka {_first(version())} (librdkafka {_first(libversion())})", "partitions": PARTITIONS,
            "value_bytes": value_bytes, "txn_size": txn_size, "idempotent": idem, "transactional": txn,
            "ratio": round(txn["records_per_s"] / idem["records_per_s"], 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Transactional vs idempotent produce throughput.")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--txn-size", type=int, default=100, help="records per transaction")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(records=args.records, txn_size=args.txn_size, value_bytes=args.value_bytes)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    idem, txn = results["idempotent"], results["transactional"]
    print(f"{results['client']}, {PARTITIONS} partitions, {args.value_bytes}-byte values")
    print(f"{'mode':<34}{'records':>9}{'seconds':>9}{'records/s':>11}")
    print(f"{'idempotent':<34}{idem['records']:>9}{idem['seconds']:>9}{idem['records_per_s']:>11}")
    print(f"{f'transactional ({args.txn_size}-record txns)':<34}{txn['records']:>9}{txn['seconds']:>9}"
          f"{txn['records_per_s']:>11}")
    print(f"transactional / idempotent: {results['ratio']}; commit_transaction(): median {txn['commit_ms_median']} ms, "
          f"p99 {txn['commit_ms_p99']} ms over {txn['transactions']} transactions")


if __name__ == "__main__":
    main()
