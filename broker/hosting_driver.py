"""Applying a large metadata update in slices, between turns of the event loop: its records (`ReplayDriver`,
the loader's queue) and then its partitions (`HostingDriver`).

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

from odradek.metadata.loader import MetadataLoader
from odradek.replication.hosting import PartitionHosting

from .heap import HeapFreezer

log = structlog.get_logger("odradek.replication")

SLICE_PARTITIONS = 64
"""Partitions applied per turn of the loop, and in the publisher's own call (PartitionHosting's budget)."""

SLICE_RECORDS = 1000
"""Metadata records replayed per turn of the loop, and in the call that delivers a batch (the loader's
replay budget): about 8 ms of decoding and replay on an idle core of the benchmarks' machine, so a
CreateTopics of 10,000 partitions is replayed over 11 turns; batches of up to 1,000 records (every
decision but the large ones) are published in the delivering call, as before."""


class ReplayDriver:
    """Works off the metadata loader's queue of committed batches (metadata/loader.py), `SLICE_RECORDS` per
    turn of the loop. Each slice runs as a call into the Raft node (`run_in_node`, QuorumDriver.call_in_node):
    a commit listener that appends records (the controller's) leaves their polling to the driver's timer,
    as when the node itself delivers a batch. `wake` is the loader's `on_pending`. With `heap`, what is alive
    after each slice is frozen out of the cyclic collector's full walks (broker/heap.py): py-spy had a
    whole-heap collection inside the publish of a 10,000-partition update otherwise."""

    def __init__(self, loader: MetadataLoader, run_in_node: Callable[[Callable[[], None]], None], *,
                 slice_records: int = SLICE_RECORDS, heap: HeapFreezer | None = None) -> None:
        self.loader = loader
        self.run_in_node = run_in_node
        self.slice_records = slice_records
        self.heap = heap  # frozen after each slice, as the hosting slices do (broker/heap.py)
        self._scheduled = False
        self._started = 0.0
        self._slices = 0

    def wake(self) -> None:
        if not self._scheduled:
            if not self._slices:
                self._started = time.monotonic()
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._step)

    def _slice(self) -> None:
        self.loader.replay_pending(self.slice_records)
        if self.heap is not None:
            # What start-up made and what this replay built (the next image) is long-lived: out of the
            # collector's full walks before the partitions of the update are made.
            self.heap.after_slice()

    def _step(self) -> None:
        self._scheduled = False
        self._slices += 1
        try:
            self.run_in_node(self._slice)
        finally:
            if self.loader.pending:
                self.wake()
            else:
                log.info("metadata replayed in slices", slices=self._slices, applied_end_offset=self.loader.applied_end_offset,
                         took_ms=round((time.monotonic() - self._started) * 1000))
                self._slices = 0


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
