"""Keeping the cyclic garbage collector off the objects a broker's partitions are made of.

Theory of operation
-------------------
CPython frees most objects by reference counting; its cyclic collector exists for reference cycles, and a
collection of the oldest generation walks *every* object that generation holds, in one go, with the GIL
held. A broker's partitions are long-lived objects in their hundreds per partition (the partition, its
log, segments, indexes, producer state, fetcher state, the metadata image's entries): at 10,000 RF=3
partitions that is most of a 130 MiB heap. A full collection is due each time the objects promoted to the
oldest generation since the last one exceed a quarter of what it held then, so while a large topic is
created (the heap grows by half) and afterwards (every follower fetch of thousands of partitions promotes
its decoded request and response objects) the broker's event loop stopped for a whole-heap walk again and
again. py-spy (`--native`) on the three nodes of `bench.partition_scale` at 10,000 partitions put 14-18 %
of every node's samples in `gc_collect_main`, and those walks were the longest stalls the bench's probe
saw (up to 2.7 s on a loaded machine), long enough to cost the controller quorum its leader.

So, as CPython's documentation advises for long-running servers (`gc.freeze`, "moves all objects tracked
by the garbage collector into a permanent generation"): after each slice of a large metadata update
(broker/hosting_driver.py) has made its partitions, a full collection runs and everything left is frozen.
That collection is cheap: frozen objects are not walked, so it walks only what was made since the last
freeze (one slice's worth; the first one in a process walks what start-up made, once), and it reclaims
the cyclic garbage among those objects rather than freezing it. Later full collections walk only what
was made since. Kafka's JVM
does the same job with a generational, concurrent collector; a Python broker has to say what is old.

What freezing costs, and how it is bounded: frozen objects are still freed by reference counting (the
common case), but a *cycle* among them that becomes garbage is not collected while frozen. Objects alive
during a large update that die in cycles later stay: bench/partition_scale.py measured about 1 KiB per
partition more RSS with freezing (7.0-8.1 against 6.3-6.9 KiB at 5,000 and 10,000; bench/README.md,
"Round three"), flat over N, bounded by what large updates had alive, not growing with time. A removed
topic leaves exactly that (its partitions' objects), so once committed updates have removed
`THAW_AFTER_REMOVED_PARTITIONS` partitions (1,000: about 1 MiB) since the last freeze, the heap is thawed
(`gc.unfreeze`: everything back to the oldest generation), and it is frozen again only after a full
collection has walked it all (where the removed partitions are reclaimed): the next slice's own
collection (one whole-heap walk, as every full collection was before freezing), or a full collection of
the interpreter's own if that comes first. Freezing sooner would freeze the garbage with it. Thawing at
every removal would cost that whole-heap walk for every deleted topic, however small (36-38 ms on a
lone broker's start-up heap, a stall in the acknowledgements of everything it serves); the threshold
bounds what is kept to about 1 MiB. A broker that stops thaws what it froze (brokers run in-process in
tests share one collector). The policy is the same on every run: it follows the metadata, never a timer.

The broker process also freezes once when it has started (`freeze_after_start`, called by
broker/daemon.py when its listeners are bound): modules, classes, the protocol's codecs, configuration,
the metadata replayed at start, tens of thousands of objects that live as long as the process. Left to
the collector they were walked by every full collection, and one is due every few seconds under steady
load (each request promotes a few objects that live a little while): on one broker serving 5,000 acks=all
records/s and a tailing consumer, each full collection took 36-38 ms (`gc.callbacks`), and that one
stall per run was the cell's ack p99 (18-33 ms, p99.9 36-51 ms, against 0.6-3 ms before the heap grew
past it). After the freeze a full collection walks what was made since start. In-process brokers (tests)
do not do this: freezing there would freeze the test process's own objects.

An operator sees the frozen object count in the "partitions hosted" line (broker/hosting_driver.py), in
the gauge `odradek_gc_frozen_objects`, the "heap frozen after start-up" line, and a line when removed
topics thaw the heap.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import structlog

from odradek.metadata.publisher import MetadataUpdate

log = structlog.get_logger("odradek.replication")

THAW_AFTER_REMOVED_PARTITIONS = 1_000  # removed since the last freeze (see the module doc)


class HeapFreezer:
    """Freezes the heap after a slice of partitions was made (`after_slice`), thaws it when topics are
    removed (a metadata listener), and freezes again once a full collection has run since (see the module
    doc). `schedule` runs a callable on the event loop's thread soon (`loop.call_soon_threadsafe`; a full
    collection may run on any thread)."""

    def __init__(self, schedule: Callable[[Callable[[], None]], Any] | None = None,
                 thaw_after_removed: int = THAW_AFTER_REMOVED_PARTITIONS) -> None:
        self.schedule = schedule
        self.thaw_after_removed = thaw_after_removed
        self.removed_partitions = 0  # removed by committed updates since the heap was last frozen
        self.thawed = False  # topics were removed: thawed until a full collection has walked the heap
        self._watching = False

    def after_slice(self) -> None:
        """A slice of partitions is made: collect what is not frozen (after a thaw, everything) and freeze
        what is left."""
        gc.collect()
        gc.freeze()
        self.thawed = False
        self.removed_partitions = 0
        self._unwatch()

    @property
    def frozen(self) -> int:
        return gc.get_freeze_count()

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        if not update.removed_topics or not gc.get_freeze_count():
            return
        self.removed_partitions += sum(len(t.partitions) for t in update.removed_topics.values())
        if self.removed_partitions < self.thaw_after_removed:
            return
        log.info("heap thawed: removed topics are reclaimed by the next full collection",
                 topics=sorted(t.name for t in update.removed_topics.values()), frozen_objects=gc.get_freeze_count(),
                 removed_partitions=self.removed_partitions)
        gc.unfreeze()
        self.thawed = True
        self.removed_partitions = 0
        self._watch()

    def stop(self) -> None:
        """The broker stops: thaw what was frozen, and stop watching the collector."""
        self._unwatch()
        self.thawed = False
        gc.unfreeze()

    def _watch(self) -> None:
        if not self._watching:
            gc.callbacks.append(self._on_gc)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            gc.callbacks.remove(self._on_gc)
            self._watching = False

    def _on_gc(self, phase: str, info: dict) -> None:
        # (The list of callbacks is not changed from inside a callback: the loop's thread does it.)
        if phase == "stop" and info.get("generation") == 2 and self.thawed:
            self.thawed = False
            if self.schedule is not None:
                self.schedule(self._refreeze)

    def _refreeze(self) -> None:
        self._unwatch()
        if not self.thawed:
            gc.freeze()
            self.removed_partitions = 0
            log.debug("heap frozen again after a full collection", frozen_objects=gc.get_freeze_count())


def freeze_after_start(node_id: int) -> int:
    """The broker process has started: collect once and freeze what is left (see the module doc). Returns
    the number of frozen objects."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("heap frozen after start-up", node=node_id, frozen_objects=frozen,
             took_ms=round((time.perf_counter() - started) * 1000, 1))
    return frozen
