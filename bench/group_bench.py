"""Consumer group join time: from subscribe() to the first assignment, for 1 and 3 members.

    python -m bench.group_bench [--repeats N] [--json]

One odradek broker per setting of group.initial.rebalance.delay.ms: Kafka's default, 3000 ms (a new
group waits that long for more members before its first rebalance), and 0. Each round creates a topic
of 6 partitions and a new group, and starts N confluent-kafka consumers with default settings on threads
of their own; they subscribe together. `run()` returns, per delay and member count, the medians over
the rounds of

- first_ms: subscribe() to the first member's first non-empty assignment;
- all_ms: subscribe() to the moment every member holds a non-empty assignment and together they hold
  every partition exactly once (with no delay, the first member may be assigned alone and then give
  partitions up as the others join: all_ms counts those extra rebalances);

plus the raw samples. Times come from polling every 5 ms, so they carry that much noise. Each broker
creates __consumer_offsets (a group request does that) before the first round. Nothing asserts a time.

What to expect, as in Kafka: with the 3000 ms delay, one member waits 3 s; three members joining together
wait 6 s, because a member that joins during the delay extends it once more (InitialDelayedJoin). With
no delay, three members that do not join in the same instant settle only when the first learns of the
rebalance from a heartbeat (heartbeat.interval.ms, 3000 by default): all_ms between ~0.1 and ~3 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, libversion, version
from confluent_kafka.admin import AdminClient, NewTopic

from .procs import Server

DELAYS_MS = (3000, 0)
MEMBERS = (1, 3)
PARTITIONS = 6
POLL_S = 0.005
DEADLINE_S = 60.0


class _Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str, go: threading.Barrier):
        super().__init__(daemon=True)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group}
        self.topic, self.go = topic, go
        self.stop = threading.Event()
        self.subscribed_at: float | None = None
        self.first_assigned_at: float | None = None
        self.assigned: frozenset[int] = frozenset()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = Consumer(self.conf)
            try:
                self.go.wait(DEADLINE_S)  # every consumer built: they subscribe together
                self.subscribed_at = time.monotonic()
                consumer.subscribe([self.topic])
                while not self.stop.is_set():
                    consumer.poll(POLL_S)
                    assigned = frozenset(tp.partition for tp in consumer.assignment())
                    if assigned and self.first_assigned_at is None:
                        self.first_assigned_at = time.monotonic()
                    self.assigned = assigned
            finally:
                consumer.close()
        except BaseException as e:  # reported by the round
            self.error = e


def _settled(members: list[_Member]) -> bool:
    seen = [m.assigned for m in members]
    if not all(seen):
        return False
    union = frozenset().union(*seen)
    return len(union) == sum(len(s) for s in seen) == PARTITIONS


def _round(bootstrap: str, n: int) -> dict:
    topic, group = f"gb-{uuid.uuid4().hex[:8]}", f"gb-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=30).values():
        future.result(30)
    go = threading.Barrier(n)
    members = [_Member(bootstrap, group, topic, go) for _ in range(n)]
    for m in members:
        m.start()
    deadline = time.monotonic() + DEADLINE_S
    all_at = None
    try:
        while time.monotonic() < deadline:
            if any(m.error for m in members):
                raise RuntimeError(f"a member failed: {next(m.error for m in members if m.error)!r}")
            if _settled(members):
                all_at = time.monotonic()
                break
            time.sleep(POLL_S)
        else:
            raise RuntimeError(f"{n} members did not settle in {DEADLINE_S}s")
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)
    if all_at is None or any(m.subscribed_at is None for m in members):
        raise RuntimeError("a member did not subscribe")
    start = min(m.subscribed_at for m in members)
    firsts = [m.first_assigned_at for m in members if m.first_assigned_at is not None]
    return {"first_ms": round((min(firsts) - start) * 1000, 1), "all_ms": round((all_at - start) * 1000, 1)}


def _warm_up(bootstrap: str) -> None:
    """Have the broker create __consumer_offsets (on the first group request, as Kafka does), so that the
    first round does not pay for it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.describe_consumer_groups(["gb-warm-up"], request_timeout=30)["gb-warm-up"].result(60)


def _first(v) -> str:
    """confluent-kafka's version()/libversion() give (string, int); some builds give the string alone."""
    return v if isinstance(v, str) else v[0]


def run(*, repeats: int = 3, workdir: str | Path | None = None) -> dict:
    results: dict = {"client": f"confluent-kafka {_first(version())} (librdkafka {_first(libversion())})",
                     "partitions": PARTITIONS, "repeats": repeats}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for delay in DELAYS_MS:
            server = Server("odradek", Path(tmp) / f"delay-{delay}",
                            extra=[f"group.initial.rebalance.delay.ms={delay}"]).start()
            try:
                _warm_up(server.bootstrap)
                row = {}
                for n in MEMBERS:
                    samples = [_round(server.bootstrap, n) for _ in range(repeats)]
                    row[f"members_{n}"] = {
                        "first_ms": statistics.median(s["first_ms"] for s in samples),
                        "all_ms": statistics.median(s["all_ms"] for s in samples),
                        "samples": samples,
                    }
                results[f"delay_{delay}ms"] = row
            finally:
                server.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Consumer group join time (subscribe to first assignment).")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per setting (median reported)")
    parser.add_argument("--json", action="store_true", help="print the result dict as JSON")
    args = parser.parse_args(argv)
    results = run(repeats=args.repeats)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{results['client']}, {PARTITIONS} partitions, median of {args.repeats}")
    print(f"{'initial delay':<16}{'members':>8}{'first (ms)':>12}{'all (ms)':>12}")
    for delay in DELAYS_MS:
        for n in MEMBERS:
            cell = results[f"delay_{delay}ms"][f"members_{n}"]
            print(f"{delay:<16}{n:>8}{cell['first_ms']:>12}{cell['all_ms']:>12}")


if __name__ == "__main__":
    main()
