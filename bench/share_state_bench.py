"""The share coordinator's cost per WriteShareGroupState and per record reloaded (coordinator/share/), no broker.

    python -m bench.share_state_bench [--json]

One ShareCoordinator on an in-memory log (records encoded and decoded as on disk, durable on append):

- write_10_ranges: a leader's write of 10 in-flight ranges moving forward (start offset +10 each time), with
  the default 500 updates per snapshot: encode, append, replay (the combine of ranges) per write;
- write_snapshot_each: the same with a snapshot every write (share.coordinator.snapshot.update.records.per.snapshot=0);
- read: ReadShareGroupState of a share-partition of 10 ranges (an operation that writes nothing);
- reload_per_record: a failover's load of the log the first scenario wrote (decode + replay per record).

Figures are medians of a few rounds in microseconds; nothing asserts a time. The network and the log's
replication come on top in a cluster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from odradek.coordinator.runtime import InMemoryPartitionWriter
from odradek.coordinator.share.config import ShareCoordinatorConfig
from odradek.coordinator.share.coordinator import ShareCoordinator
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.share import RecordState, StateBatch

WRITES = 5_000
ROUNDS = 3
TOPIC = uuid.UUID(int=7)


def _coordinator(per_snapshot: int, writer: InMemoryPartitionWriter) -> ShareCoordinator:
    c = ShareCoordinator(writer, Timer(start_ms=0), ShareCoordinatorConfig(
        state_topic_num_partitions=1, snapshot_update_records_per_snapshot=per_snapshot))
    c.startup(0)
    return c


def _ranges(start: int) -> list[StateBatch]:
    return [StateBatch(start + 10 * i, start + 10 * i + 9, RecordState.ACKNOWLEDGED if i % 3 else RecordState.AVAILABLE,
                       1 + i % 2) for i in range(10)]


def _writes(per_snapshot: int) -> tuple[float, InMemoryPartitionWriter]:
    writer = InMemoryPartitionWriter()
    c = _coordinator(per_snapshot, writer)
    c.initialize("g", TOPIC, 0, 0, 0, 0)
    began = time.perf_counter()
    for n in range(WRITES):
        answer = c.write("g", TOPIC, 0, 0, 1, 10 * n, -1, _ranges(10 * n), n).result()
        assert answer.error_code == 0
    return (time.perf_counter() - began) / WRITES * 1e6, writer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        us, writer = _writes(500)
        results.setdefault("write_10_ranges_us", []).append(us)
        results.setdefault("write_snapshot_each_us", []).append(_writes(0)[0])
        c = _coordinator(500, writer)
        began = time.perf_counter()
        for n in range(1000):
            c.read("g", TOPIC, 0, 1, n).result()
        results.setdefault("read_us", []).append((time.perf_counter() - began) / 1000 * 1e6)
        records = len(writer.logs[0])
        began = time.perf_counter()
        _coordinator(500, writer)
        results.setdefault("reload_per_record_us", []).append((time.perf_counter() - began) / records * 1e6)
    medians = {name: round(statistics.median(values), 1) for name, values in results.items()}
    if args.json:
        print(json.dumps(medians))
    else:
        for name, value in medians.items():
            print(f"{name:28} {value:10.1f}")


if __name__ == "__main__":
    main()
