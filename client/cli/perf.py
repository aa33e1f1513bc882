"""`odradek perf produce|consume`: throughput and latency, with a live progress bar and an optional plot.

perf produce sends `--num-records` records of `--record-size` random bytes (optionally capped at
`--throughput` records/s) and times each one from `send()` to its delivery callback: that is the latency
a producer's caller sees, linger and batching included. perf consume reads `--num-records` records from
the beginning of every partition and takes each record's latency as receipt time minus the record's
timestamp, which is end-to-end latency when a producer is writing at the same time.

Both report records/s, MB/s and latency average, p50, p95, p99, p99.9 and max; `--plot FILE.png` draws
throughput and latency percentiles over time (in about 40 windows) (matplotlib, the `plot` extra).
The progress bar goes to stderr, so `--output json` on stdout stays clean.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import math
import os
import sys
import time
from array import array
from typing import Any

from ..cluster import TopicPartition
from ..config import ConsumerConfig, ProducerConfig
from ..errors import ConfigError
from .common import SubParsers, non_negative, positive, topic_argument
from .properties import client_config


def register(sub: SubParsers) -> None:
    """`perf produce|consume`."""
    psub = SubParsers(sub.add("perf", help="measure throughput and latency"), "action")
    p = psub.add("produce", handler=perf_produce, help="produce records as fast as allowed")
    topic_argument(p)
    p.add_argument("--num-records", "-n", type=positive, default=100_000)
    p.add_argument("--record-size", "-s", type=positive, default=100)
    p.add_argument("--throughput", type=positive, default=None, help="records per second (default: unlimited)")
    p.add_argument("--acks", choices=["0", "1", "-1", "all"], default=None)
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default=None)
    p.add_argument("--batch-size", type=positive, default=None)
    p.add_argument("--linger-ms", type=non_negative, default=None)
    p.add_argument("--keys", type=non_negative, default=0, help="use this many distinct keys (0: no keys)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="draw throughput and latency (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true")
    p = psub.add("consume", handler=perf_consume, help="consume records as fast as possible")
    topic_argument(p)
    p.add_argument("--num-records", "--messages", "-n", type=positive, default=100_000)
    p.add_argument("--group", "-g", default=None)
    p.add_argument("--plot", default=None, metavar="FILE.png")
    p.add_argument("--no-progress", action="store_true")



def percentile(sorted_values: Any, p: float) -> float:
    """The nearest-rank percentile (p in 0..100) of already sorted values."""
    if not len(sorted_values):
        return float("nan")
    rank = max(math.ceil(p / 100 * len(sorted_values)) - 1, 0)
    return sorted_values[min(rank, len(sorted_values) - 1)]


def summarize(count: int, total_bytes: int, elapsed: float, latencies: array, errors: int = 0) -> dict[str, Any]:
    values = sorted(latencies)
    return {
        "records": count,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "records_per_sec": round(count / elapsed, 1) if elapsed > 0 else None,
        "mb_per_sec": round(total_bytes / elapsed / 1e6, 3) if elapsed > 0 else None,
        "latency_ms": {
            "avg": round(sum(values) / len(values), 3) if values else None,
            "p50": round(percentile(values, 50), 3) if values else None,
            "p95": round(percentile(values, 95), 3) if values else None,
            "p99": round(percentile(values, 99), 3) if values else None,
            "p99.9": round(percentile(values, 99.9), 3) if values else None,
            "max": round(values[-1], 3) if values else None,
        },
    }


def _print_summary(out: Any, title: str, stats: dict[str, Any]) -> None:
    if out.json:
        out.emit_json(stats)
        return
    lat = stats["latency_ms"]
    out.line(f"{title}: {stats['records']} records in {stats['seconds']} s, {stats['records_per_sec']} records/s, "
             f"{stats['mb_per_sec']} MB/s" + (f", {stats['errors']} errors" if stats["errors"] else ""))
    out.table(["LATENCY (ms)", "AVG", "P50", "P95", "P99", "P99.9", "MAX"],
              [["", lat["avg"], lat["p50"], lat["p95"], lat["p99"], lat["p99.9"], lat["max"]]])


def _check_plot(path: str | None) -> None:
    if path is None:
        return
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("--plot needs matplotlib: pip install 'odradek[plot]'")


def draw_plot(path: str, title: str, times: array, latencies: array) -> None:
    """Throughput and latency percentiles per time window; `times` are seconds since the start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    span = max(times) if len(times) else 1.0
    window = min(max(span / 40, 0.05), 1.0)
    windows: dict[int, list[float]] = {}
    for t, latency in zip(times, latencies):
        windows.setdefault(int(t / window), []).append(latency)
    xs = [w * window for w in sorted(windows)]
    rates = [len(windows[w]) / window for w in sorted(windows)]
    p50 = [percentile(sorted(windows[w]), 50) for w in sorted(windows)]
    p99 = [percentile(sorted(windows[w]), 99) for w in sorted(windows)]
    p999 = [percentile(sorted(windows[w]), 99.9) for w in sorted(windows)]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    ax1.plot(xs, rates, drawstyle="steps-post")
    ax1.set_ylabel("records/s")
    ax1.set_title(title)
    ax1.grid(alpha=0.3)
    ax2.plot(xs, p50, label="p50")
    ax2.plot(xs, p99, label="p99")
    ax2.plot(xs, p999, label="p99.9")
    ax2.set_ylabel("latency (ms)")
    ax2.set_xlabel("seconds")
    ax2.legend()
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class _Progress:
    def __init__(self, total: int, label: str, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty() or enabled and os.environ.get("ODRADEK_FORCE_PROGRESS") == "1"
        self._progress = None
        self._task = None
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(), console=Console(stderr=True), refresh_per_second=8, transient=False,
            )
            self._task = self._progress.add_task(label, total=total, rate="")

    def __enter__(self) -> "_Progress":
        if self._progress is not None:
            self._progress.start()
        return self

    def update(self, done: int, elapsed: float) -> None:
        if self._progress is not None:
            rate = f"{done / elapsed:,.0f} rec/s" if elapsed > 0 else ""
            self._progress.update(self._task, completed=done, rate=rate)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()


async def perf_produce(args: argparse.Namespace, out: Any) -> int:
    from ..producer import Producer

    _check_plot(args.plot)
    config = client_config(ProducerConfig, args, defaults=dict(acks="all", compression_type="none",
                                                             batch_size=65_536, linger_ms=5),
                           acks=args.acks, compression_type=args.compression, batch_size=args.batch_size,
                           linger_ms=args.linger_ms)
    config = config.replace(max_block_ms=max(config.default_api_timeout_ms, 30_000))
    payload = os.urandom(args.record_size)
    keys = [str(i).encode() for i in range(args.keys)] if args.keys else None
    n = args.num_records
    latencies = array("d")
    done_at = array("d")
    errors: list[BaseException] = []
    acked = 0

    async with Producer(config) as producer:
        await producer.partitions_for(args.topic)
        start = time.perf_counter()

        def on_done(sent_at: float, future: asyncio.Future) -> None:
            nonlocal acked
            now = time.perf_counter()
            if future.cancelled() or future.exception() is not None:
                errors.append(future.exception() or asyncio.CancelledError())
                return
            acked += 1
            latencies.append((now - sent_at) * 1000)
            done_at.append(now - start)

        with _Progress(n, "produce", not args.no_progress and not out.json) as progress:
            last_update = 0.0
            for i in range(n):
                if args.throughput:
                    ahead = i / args.throughput - (time.perf_counter() - start)
                    if ahead > 0.001:
                        await asyncio.sleep(ahead)
                sent_at = time.perf_counter()
                future = await producer.send(args.topic, payload, keys[i % len(keys)] if keys else None)
                future.add_done_callback(functools.partial(on_done, sent_at))
                if i % 1000 == 0:
                    now = time.perf_counter()
                    if now - last_update > 0.2:
                        progress.update(acked, now - start)
                        last_update = now
                        await asyncio.sleep(0)
            await producer.flush()
            elapsed = time.perf_counter() - start
            progress.update(acked, elapsed)
    stats = summarize(acked, acked * args.record_size, elapsed, latencies, len(errors))
    stats.update({"topic": args.topic, "record_size": args.record_size, "acks": str(config.acks),
                  "compression": config.compression_type})
    _print_summary(out, "produced", stats)
    if args.plot:
        draw_plot(args.plot, f"odradek perf produce {args.topic} ({args.record_size} B, acks={config.acks})",
                  done_at, latencies)
        sys.stderr.write(f"plot written to {args.plot}\n")
    if errors:
        sys.stderr.write(f"odradek: error: {len(errors)} record(s) failed: {errors[0]}\n")
        return 1
    return 0


async def perf_consume(args: argparse.Namespace, out: Any) -> int:
    from ..consumer import Consumer

    _check_plot(args.plot)
    config = client_config(ConsumerConfig, args, defaults=dict(max_poll_records=10_000), group_id=args.group,
                           auto_offset_reset="earliest", enable_auto_commit=bool(args.group),
                           allow_auto_create_topics=False)
    n = args.num_records
    latencies = array("d")
    times = array("d")
    total_bytes = 0
    count = 0
    async with Consumer(config=config) as consumer:
        parts = await consumer.client.partitions_for(args.topic, must_exist=True)
        if args.group:
            consumer.subscribe([args.topic])
        else:
            consumer.assign([TopicPartition(args.topic, p) for p in parts])
            consumer.seek_to_beginning()
        idle_limit = config.default_api_timeout_ms / 1000
        with _Progress(n, "consume", not args.no_progress and not out.json) as progress:
            start = time.perf_counter()
            last_data = start
            while count < n:
                batch = await consumer.getmany(timeout_ms=500, max_records=n - count)
                now = time.perf_counter()
                if not batch:
                    if now - last_data > idle_limit:
                        break
                    continue
                last_data = now
                wall_ms = time.time() * 1000
                offset = now - start
                for records in batch.values():
                    for r in records:
                        latencies.append(max(wall_ms - r.timestamp, 0.0))
                        times.append(offset)
                        total_bytes += max(r.serialized_value_size, 0) + max(r.serialized_key_size, 0)
                    count += len(records)
                progress.update(count, now - start)
            elapsed = (last_data if count else time.perf_counter()) - start
    stats = summarize(count, total_bytes, elapsed, latencies)
    stats["topic"] = args.topic
    _print_summary(out, "consumed", stats)
    if args.plot and count:
        draw_plot(args.plot, f"odradek perf consume {args.topic} (end-to-end latency)", times, latencies)
        sys.stderr.write(f"plot written to {args.plot}\n")
    if count < n:
        sys.stderr.write(f"odradek: error: only {count} of {n} record(s) arrived within {idle_limit:g} s of idleness\n")
        return 1
    return 0


__all__ = ["draw_plot", "percentile", "perf_consume", "perf_produce", "summarize"]
