"""The broker's cost per acknowledged share-group record on a partition leader (broker/share/manager.py), no
network: a real log on disk, the in-memory persister, and 1, 4 or 16 members fetching and accepting.

    python -m bench.share_fetch_bench [--json] [--records N]

The log holds `--records` records (default 200,000) in batches of `BATCH` (500). Each member, in turn,
fetches (`max_records` = one batch), then accepts what it got in one acknowledgement; every acknowledgement
is persisted before it is answered, as on the broker. Reported: microseconds per acknowledged record for the
whole fetch + acknowledge cycle, for each member count, and the same cycle's share spent in the persister
write (the in-memory one: a network persister adds its round trip per write, not per record). Requests'
decoding and encoding and the socket are not included: measure those with the protocol benches.
Figures are medians of `ROUNDS` rounds; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid

from odradek.broker.share.manager import SharePartitionManager, ShareSettings
from odradek.broker.share.persister import InMemoryPersister
from odradek.protocol.records import build_batch
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

BATCH = 500
ROUNDS = 3
MEMBERS = (1, 4, 16)
TP = TopicPartition("bench", 0)
TID = uuid.uuid4()


class _TimedPersister(InMemoryPersister):
    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    async def write(self, key, leader_epoch, snapshot, delivery_complete_count=-1):
        t0 = time.perf_counter()
        try:
            return await super().write(key, leader_epoch, snapshot, delivery_complete_count)
        finally:
            self.seconds += time.perf_counter() - t0


def _log(directory: str, records: int) -> tuple[ReplicaManager, Log]:
    data = ReplicaManager(node_id=1, timer=Timer(start_ms=0))
    log = Log.open(directory, LogConfig(), now_ms=0)
    data.add_leader_partition(TP, topic_id=TID, log=log, leader_epoch=0, replicas=[1], isr=[1],
                              min_insync_replicas=1, now_ms=0)
    value = b"x" * 100
    for _ in range(records // BATCH):
        data.append_internal(TP, bytearray(build_batch([(None, value, None, 0)] * BATCH)), now_ms=0)
    return data, log


async def _cycle(data: ReplicaManager, members: int, records: int) -> tuple[float, float, int]:
    persister = _TimedPersister()
    manager = SharePartitionManager(data=data, persister=persister, clock=lambda: 0,
                                    settings=ShareSettings(auto_offset_reset="earliest", max_record_locks=10_000))
    names = [f"m{i}" for i in range(members)]
    acknowledged = 0
    t0 = time.perf_counter()
    while acknowledged < records:
        for member in names:
            got = (await manager.fetch("g", member, [(TID, TP)], max_records=BATCH, max_bytes=1 << 22,
                                       max_wait_ms=0))[TP]
            if not got.acquired:
                continue
            batches = [(r.first_offset, r.last_offset, [1]) for r in got.acquired]
            answer = (await manager.acknowledge("g", member, [(TID, TP, batches)]))[TP]
            assert answer[0] == 0, answer
            acknowledged += sum(r.last_offset - r.first_offset + 1 for r in got.acquired)
    elapsed = time.perf_counter() - t0
    await manager.close()
    return elapsed, persister.seconds, acknowledged


def run(records: int = 200_000) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data, log = _log(f"{tmp}/bench-0", records)
        try:
            for members in MEMBERS:
                times, writes = [], []
                for _ in range(ROUNDS):
                    elapsed, persisting, acknowledged = asyncio.run(_cycle(data, members, records))
                    times.append(elapsed / acknowledged * 1e6)
                    writes.append(persisting / acknowledged * 1e6)
                out[f"members_{members}_us_per_acked_record"] = round(statistics.median(times), 3)
                out[f"members_{members}_persister_us_per_record"] = round(statistics.median(writes), 3)
        finally:
            log.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    result = run(args.records)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:44} {v:8.3f}")


if __name__ == "__main__":
    main()
