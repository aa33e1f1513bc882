"""The share-partition state machine's cost per record (replication/share/partition.py), no broker.

    python -m bench.share_partition_bench [--json]

Each scenario drives one SharePartition through `RECORDS` records fetched as log batches of `BATCH`
records and reports microseconds per record for the whole acquire + acknowledge cycle:

- one_member_accept: one consumer acquires each batch and accepts it whole (the common case: one range
  per batch, never split);
- many_members_accept: 16 consumers take turns, each holding a batch until all 16 have one, then all
  accept (16 ranges in flight);
- per_record_acks: each batch is acknowledged with one type per offset, alternating accept and release,
  and the released halves are acquired and accepted again (the worst case for range splitting);
- expire_and_redeliver: every lock expires and the batch is delivered a second time before acceptance.

Figures are medians of a few rounds; nothing here asserts a time. They are the broker-side bookkeeping
only: reading the log, sessions and the wire come on top in the broker slice.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from odradek.replication.share import AcknowledgeType, SharePartition

RECORDS = 100_000
BATCH = 500
ROUNDS = 3
ACCEPT, RELEASE = int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE)


def _one_member_accept() -> None:
    sp = SharePartition(max_record_locks=10_000)
    for first in range(0, RECORDS, BATCH):
        for r in sp.acquire("m", first, first + BATCH - 1, BATCH, now=0):
            sp.acknowledge("m", [(r.first_offset, r.last_offset, [ACCEPT])], now=1)


def _many_members_accept() -> None:
    sp = SharePartition(max_record_locks=10_000)
    members = [f"m{i}" for i in range(16)]
    held: list[tuple[str, int, int]] = []
    for n, first in enumerate(range(0, RECORDS, BATCH)):
        member = members[n % 16]
        held += [(member, r.first_offset, r.last_offset) for r in sp.acquire(member, first, first + BATCH - 1, BATCH, 0)]
        if len(held) == 16:
            for member, a, b in held:
                sp.acknowledge(member, [(a, b, [ACCEPT])], now=1)
            held.clear()


def _per_record_acks() -> None:
    sp = SharePartition(max_record_locks=10_000)
    types = [ACCEPT if i % 2 == 0 else RELEASE for i in range(BATCH)]
    for first in range(0, RECORDS, BATCH):
        sp.acquire("m", first, first + BATCH - 1, BATCH, now=0)
        sp.acknowledge("m", [(first, first + BATCH - 1, types)], now=1)
        again = sp.acquire("n", first, first + BATCH - 1, BATCH, now=2)
        sp.acknowledge("n", [(r.first_offset, r.last_offset, [ACCEPT]) for r in again], now=3)


def _expire_and_redeliver() -> None:
    sp = SharePartition(max_record_locks=10_000, record_lock_duration_ms=10)
    now = 0
    for first in range(0, RECORDS, BATCH):
        sp.acquire("m", first, first + BATCH - 1, BATCH, now)
        now += 10
        sp.expire(now)
        for r in sp.acquire("n", first, first + BATCH - 1, BATCH, now):
            sp.acknowledge("n", [(r.first_offset, r.last_offset, [ACCEPT])], now)


SCENARIOS: dict[str, Callable[[], None]] = {
    "one_member_accept": _one_member_accept,
    "many_members_accept": _many_members_accept,
    "per_record_acks": _per_record_acks,
    "expire_and_redeliver": _expire_and_redeliver,
}


def run() -> dict[str, float]:
    """Microseconds per record, per scenario."""
    out = {}
    for name, fn in SCENARIOS.items():
        times = []
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name + "_us_per_record"] = round(statistics.median(times) / RECORDS * 1e6, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run()
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:40} {v:8.3f}")


if __name__ == "__main__":
    main()
