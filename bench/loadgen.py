"""The load generator: one confluent-kafka (librdkafka) client per process, driven by the harness.

    python -m bench.loadgen '<json spec>'

The process connects and warms up (metadata, producer id, a first flushed batch or a first fetched
record), prints `READY`, waits for `GO` on stdin (the harness reads the server's CPU counters in between),
runs, and prints one line `RESULT <json>`. Its own CPU time (all threads, librdkafka's included) over the
measured window is in the result, so the client's cost is reported apart from the server's.

Modes (spec["mode"]):
  produce          as fast as the client can, for duration_s, then flush; records/s over the whole window
  consume          assign() every partition from the beginning, read `expected` records
  latency-produce  a fixed rate of timestamped records; produce->ack latency from delivery callbacks
  latency-consume  assign() from the beginning; produce->consume latency from the timestamp in each value
"""

from __future__ import annotations

import json
import os
import resource
import struct
import sys
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

_STAMP = struct.Struct(">cqq")  # marker, monotonic ns at send, sequence
WARMUP, LATENCY = b"W", b"L"


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "GO":
        raise SystemExit(f"expected GO, got {line!r}")


def make_values(size: int, n: int = 1024) -> list[bytes]:
    """Values of `size` bytes that compress about 2:1 (half fixed text, half random hex), like events."""
    values = []
    rnd = os.urandom(n * size)
    for i in range(n):
        head = b'{"event":"page_view","site":"example","id":%08d,"payload":"' % i
        body = rnd[i * size : (i + 1) * size].hex().encode()
        v = (head + body)[: size - 2] + b'"}'
        values.append(v[:size].ljust(size, b" "))
    return values


class Stats:
    """librdkafka's statistics: requests and wire bytes, summed over the brokers, at two points in time."""

    def __init__(self):
        self.seq = 0
        self.raw = None

    def cb(self, raw: str) -> None:
        self.raw = raw
        self.seq += 1

    def snapshot(self, client, timeout_s: float = 1.5) -> dict | None:
        """Wait for a fresh statistics callback (served by poll/consume) and sum its counters."""
        seq, deadline = self.seq, time.monotonic() + timeout_s
        while self.seq == seq and time.monotonic() < deadline:
            if isinstance(client, Producer):
                client.poll(0.05)
            else:
                client.consume(num_messages=1, timeout=0.05)
        if self.raw is None:
            return None
        d = json.loads(self.raw)
        out = {"produce_requests": 0, "fetch_requests": 0, "tx_bytes": 0, "rx_bytes": 0}
        for b in d.get("brokers", {}).values():
            req = b.get("req", {})
            out["produce_requests"] += req.get("Produce", 0)
            out["fetch_requests"] += req.get("Fetch", 0)
            out["tx_bytes"] += b.get("txbytes", 0)
            out["rx_bytes"] += b.get("rxbytes", 0)
        return out


def stats_delta(a: dict | None, b: dict | None) -> dict:
    if not a or not b:
        return {}
    return {k: b[k] - a[k] for k in a}


def producer_conf(spec: dict) -> dict:
    conf = {
        "bootstrap.servers": spec["bootstrap"],
        "acks": str(spec.get("acks", 1)),
        "compression.type": spec.get("compression", "none"),
        "enable.idempotence": bool(spec.get("idempotence", False)),
        "linger.ms": spec.get("linger_ms", 5),
        "batch.size": spec.get("batch_size", 1_048_576),
        "batch.num.messages": 1_000_000,
        "message.max.bytes": spec.get("message_max_bytes", 1_048_588),
        "queue.buffering.max.messages": spec.get("queue_max_messages", 200_000),
        "queue.buffering.max.kbytes": 1_048_576,
        "socket.nagle.disable": True,
        "delivery.report.only.error": not spec.get("report_all", False),
        "max.in.flight.requests.per.connection": spec.get("max_in_flight", 5),
        "request.timeout.ms": 30_000,
        # A server that breaks mid-run fails the run in 30 s instead of librdkafka's 5 minutes of retries.
        "message.timeout.ms": 30_000,
    }
    conf.update(spec.get("conf", {}))
    return conf


def run_produce(spec: dict) -> dict:
    errors = {"n": 0, "first": None}

    def on_delivery(err, msg):
        if err is not None:
            errors["n"] += 1
            if errors["first"] is None:
                errors["first"] = str(err)

    stats = Stats()
    conf = producer_conf(spec)
    conf["on_delivery"] = on_delivery
    conf["statistics.interval.ms"] = 200
    conf["stats_cb"] = stats.cb
    p = Producer(conf)
    topic, partitions = spec["topic"], spec["partitions"]
    values = make_values(spec.get("value_size", 100))
    nvalues = len(values)
    # Warm up: metadata, producer id, one batch per partition acknowledged.
    for k in range(partitions * 10):
        p.produce(topic, values[k % nvalues], partition=k % partitions)
    if p.flush(30) != 0 or errors["n"]:
        raise SystemExit(f"warm-up failed: {errors['first'] or 'flush timed out'}")
    s0 = stats.snapshot(p)
    say("READY")
    wait_go()
    # produce_batch() hands librdkafka a list at a time: about 1.5x the rate of one produce() call per
    # record, so that the client's one core runs out later. Records go round-robin over the partitions.
    chunk = 1024
    msgs = [{"value": values[i % nvalues], "partition": i % partitions} for i in range(chunk)]
    room = conf["queue.buffering.max.messages"] - chunk
    produce_batch, poll = p.produce_batch, p.poll
    duration = spec["duration_s"]
    max_records = spec.get("max_records") or (1 << 62)
    cpu0, t0 = cpu_self(), time.perf_counter()
    deadline = t0 + duration
    sent = 0
    while sent < max_records:
        if len(p) > room:
            poll(0.001)
            continue
        batch = msgs if max_records - sent >= chunk else msgs[: max_records - sent]
        try:
            k = produce_batch(topic, batch)
        except BufferError:
            k = 0
        sent += k
        if k < len(batch):  # the queue filled up: the failed dicts carry an "_error" key now
            for m in batch[k:]:
                m.pop("_error", None)
            poll(0.001)
        poll(0)
        if time.perf_counter() >= deadline:
            break
    t_sent = time.perf_counter()
    remaining = p.flush(spec.get("flush_timeout_s", 60))
    t1, cpu1 = time.perf_counter(), cpu_self()
    delivered = sent - remaining - errors["n"]
    size = spec.get("value_size", 100)
    wire = stats_delta(s0, stats.snapshot(p))  # after the window: does not count in it
    return {
        "records": delivered, "sent": sent, "undelivered": remaining, "errors": errors["n"], "first_error": errors["first"],
        "elapsed_s": t1 - t0, "send_phase_s": t_sent - t0, "bytes": delivered * size,
        "client_cpu_s": cpu1 - cpu0, "requests": wire.get("produce_requests"), "wire_bytes": wire.get("tx_bytes"),
    }


def consumer_conf(spec: dict) -> dict:
    conf = {
        "bootstrap.servers": spec["bootstrap"],
        "group.id": spec.get("group", "odradek-bench"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    conf.update(spec.get("conf", {}))
    return conf


def run_consume(spec: dict) -> dict:
    stats = Stats()
    c = Consumer(dict(consumer_conf(spec), **{"statistics.interval.ms": 200, "stats_cb": stats.cb}))
    topic, partitions = spec["topic"], spec["partitions"]
    md = c.list_topics(topic, timeout=30)
    if md.topics[topic].error is not None:
        raise SystemExit(f"topic {topic}: {md.topics[topic].error}")
    s0 = stats.snapshot(c, 0.5)
    say("READY")
    wait_go()
    expected, max_s = spec["expected"], spec["max_s"]
    cpu0, t0 = cpu_self(), time.perf_counter()
    start = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
    c.assign(start)
    n = nbytes = errors = 0
    first_error = None
    t_last = t0
    consume = c.consume
    deadline = t0 + max_s
    rewind_every = spec.get("rewind_every")  # re-read from offset 0 after this many records (profiling)
    next_rewind = rewind_every or 0
    while n < expected:
        now = time.perf_counter()
        if now >= deadline:
            break
        msgs = consume(num_messages=10_000, timeout=min(0.5, deadline - now))
        for m in msgs:
            if m.error() is not None:
                errors += 1
                first_error = first_error or str(m.error())
                continue
            n += 1
            nbytes += len(m.value())
        if msgs:
            t_last = time.perf_counter()
        if rewind_every and n >= next_rewind:
            c.assign(start)
            next_rewind = n + rewind_every
    cpu1 = cpu_self()
    wire = stats_delta(s0, stats.snapshot(c, 0.5))
    c.close()
    return {
        "records": n, "bytes": nbytes, "errors": errors, "first_error": first_error,
        "elapsed_s": t_last - t0, "client_cpu_s": cpu1 - cpu0, "timed_out": n < expected,
        "requests": wire.get("fetch_requests"), "wire_bytes": wire.get("rx_bytes"),
    }


def run_latency_produce(spec: dict) -> dict:
    lat_ns: list[int] = []
    errors = {"n": 0, "first": None}
    clock = time.monotonic_ns

    def on_delivery(err, msg):
        if err is not None:
            errors["n"] += 1
            errors["first"] = errors["first"] or str(err)
            return
        v = msg.value()
        if v[:1] == LATENCY:
            lat_ns.append(clock() - _STAMP.unpack_from(v)[1])

    conf = producer_conf(dict(spec, report_all=True))
    conf["on_delivery"] = on_delivery
    p = Producer(conf)
    topic, partitions, size = spec["topic"], spec["partitions"], spec.get("value_size", 100)
    pad = b"x" * (size - _STAMP.size)
    p.produce(topic, WARMUP + pad + b"x" * (_STAMP.size - 1), partition=0)
    if p.flush(30) != 0 or errors["n"]:
        raise SystemExit(f"warm-up failed: {errors['first'] or 'flush timed out'}")
    say("READY")
    wait_go()
    rate, count = spec["rate"], int(spec["rate"] * spec["duration_s"])
    interval_ns = int(1e9 / rate)
    cpu0 = cpu_self()
    t0 = clock()
    max_behind_ns = 0
    produce, poll = p.produce, p.poll
    for i in range(count):
        due = t0 + i * interval_ns
        while True:
            now = clock()
            wait = due - now
            if wait <= 0:
                break
            if wait >= 1_000_000:
                poll(wait / 1e9)  # librdkafka waits whole milliseconds
            else:
                time.sleep(wait / 1e9)
        max_behind_ns = max(max_behind_ns, now - due)
        produce(topic, _STAMP.pack(LATENCY, clock(), i) + pad, partition=i % partitions)
        poll(0)
    remaining = p.flush(30)
    t1, cpu1 = clock(), cpu_self()
    return {
        "sent": count, "acked": len(lat_ns), "undelivered": remaining, "errors": errors["n"], "first_error": errors["first"],
        "elapsed_s": (t1 - t0) / 1e9, "client_cpu_s": cpu1 - cpu0, "max_behind_schedule_ms": max_behind_ns / 1e6,
        "ack_latency": summarize(lat_ns),
    }


def run_latency_consume(spec: dict) -> dict:
    """Reads from the beginning; READY once the producer's warm-up record arrives; stops at `expected`."""
    c = Consumer(consumer_conf(spec))
    topic, partitions = spec["topic"], spec["partitions"]
    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "STOP":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    clock = time.monotonic_ns
    lat_ns: list[int] = []
    seen_warmup = False
    expected = spec["expected"]
    deadline = time.monotonic() + spec["max_s"]
    errors = 0
    cpu0 = None
    poll, consume = c.poll, c.consume
    while not stop.is_set() and len(lat_ns) < expected and time.monotonic() < deadline:
        # poll() returns as soon as one record is there (consume(n, timeout) would wait for n or the
        # timeout, adding up to the timeout to every latency); then take whatever else is already queued.
        first = poll(0.05)
        if first is None:
            continue
        for m in [first, *consume(num_messages=1000, timeout=0)]:
            now = clock()
            if m.error() is not None:
                errors += 1
                continue
            v = m.value()
            if v[:1] == LATENCY:
                lat_ns.append(now - _STAMP.unpack_from(v)[1])
            elif v[:1] == WARMUP and not seen_warmup:
                seen_warmup = True
                cpu0 = cpu_self()
                say("READY")
    cpu1 = cpu_self()
    c.close()
    return {"received": len(lat_ns), "expected": expected, "errors": errors, "e2e_latency": summarize(lat_ns),
            "client_cpu_s": cpu1 - (cpu0 if cpu0 is not None else cpu1), "saw_warmup": seen_warmup}


def summarize(lat_ns: list[int]) -> dict:
    if not lat_ns:
        return {"n": 0}
    s = sorted(lat_ns)
    n = len(s)

    def pct(q: float) -> float:
        return s[min(n - 1, int(q * n))] / 1e6

    return {"n": n, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999), "max_ms": s[-1] / 1e6,
            "mean_ms": sum(s) / n / 1e6}


MODES = {"produce": run_produce, "consume": run_consume, "latency-produce": run_latency_produce, "latency-consume": run_latency_consume}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    try:
        result = MODES[spec["mode"]](spec)
    except KafkaException as e:
        result = {"failed": str(e)}
    result["cpus"] = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    say("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
