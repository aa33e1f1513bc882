"""Applying a large metadata update to the hosted partitions in slices, between turns of the event loop.

The metadata publisher replaces the image whole and tells its listeners in one call; the replica
manager's listener (replication/hosting.py, `PartitionHosting` with a budget) does the partitions that may
not wait at once and queues the rest. This task does the queue: `SLICE_PARTITIONS` partitions per turn,
then it yields to the loop (`asyncio.sleep(0)`: every callback ready by then runs, so heartbeats, the
quorum's fetches and clients' requests go on between slices). What is applied, in what order and with
which state, is decided below broker/ (deterministic, unit-tested on its own); this module only decides
when, so a slice's size is the one tunable here.

Why a count and not a time budget: a count keeps the work per turn the same on every run (a failing case
replays), and a partition's cost is nearly constant (about a millisecond to create its log here: a
directory, the empty segment, the epoch checkpoint). 64 partitions keep a turn well under 100 ms on the
loaded two-core machine the benchmarks run on; bench/partition_scale.py reports the longest stall.

An operator sees one line per queue once it is done (how many partitions, in how many slices, over how
long), and `odradek_metadata_partitions_pending` (broker/metrics.py) while it runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from odradek.replication.hosting import PartitionHosting

from .heap import HeapFreezer

log = structlog.get_logger("odradek.replication")

SLICE_PARTITIONS = 64
"""Partitions applied per turn of the loop, and in the publisher's own call (PartitionHosting's budget)."""


class HostingDriver:
    """Runs `hosting.apply_pending` in slices whenever partitions are queued (`wake`, the listener's
    `on_pending`); `after_slice` is called after each slice (timers a new partition armed). With `heap`,
    the objects a slice made are frozen out of the cyclic collector's full walks after it (broker/heap.py)."""

    def __init__(self, hosting: PartitionHosting, *, after_slice: Callable[[], None],
                 slice_partitions: int = SLICE_PARTITIONS, heap: HeapFreezer | None = None) -> None:
        self.hosting = hosting
        self.after_slice = after_slice
        self.slice_partitions = slice_partitions
        self.heap = heap
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        heap = self.heap
        if heap is not None and heap.schedule is None:
            heap.schedule = asyncio.get_running_loop().call_soon_threadsafe
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                await self._drain()
        finally:
            if heap is not None:
                heap.stop()

    async def _drain(self) -> None:
        started = time.monotonic()
        queued = self.hosting.pending
        slices = 0
        while True:
            try:
                left = self.hosting.apply_pending(self.slice_partitions)
            except Exception:  # noqa: BLE001 - one partition's failure must not stop the others'
                log.exception("applying committed metadata to a partition failed", pending=self.hosting.pending)
                left = self.hosting.pending
            slices += 1
            self.after_slice()
            if self.heap is not None:
                self.heap.after_slice()
            if not left:
                break
            await asyncio.sleep(0)
        log.info("partitions hosted as the committed metadata says", partitions=queued, slices=slices,
                 took_ms=round((time.monotonic() - started) * 1000),
                 frozen_objects=self.heap.frozen if self.heap is not None else None)
