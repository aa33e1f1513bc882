"""broker/hosting_driver.py: queued partitions are applied in slices, and the loop runs other callbacks
between two slices (what a large metadata update must not stop: heartbeats, the quorum, clients)."""

from __future__ import annotations

import asyncio

from odradek.broker.hosting_driver import HostingDriver


class FakeHosting:
    def __init__(self, queued: int, fail_at: int = -1) -> None:
        self.queue = list(range(queued))
        self.slices: list[list[int]] = []
        self.fail_at = fail_at

    @property
    def pending(self) -> int:
        return len(self.queue)

    def apply_pending(self, limit: int | None = None) -> int:
        n = len(self.queue) if limit is None else limit
        done, self.queue = self.queue[:n], self.queue[n:]
        self.slices.append(done)
        if self.fail_at in done:
            raise OSError("disk said no")
        return len(self.queue)


def test_slices_interleave_with_the_rest_of_the_loop_and_a_failure_does_not_stop_the_rest():
    async def scenario():
        hosting = FakeHosting(10, fail_at=4)
        after = []
        driver = HostingDriver(hosting, after_slice=lambda: after.append(len(hosting.queue)),  # type: ignore[arg-type]
                               slice_partitions=3)
        task = asyncio.create_task(driver.run())
        ticks = []

        async def other():
            for _ in range(6):
                ticks.append(len(hosting.queue))
                await asyncio.sleep(0)

        driver.wake()
        await asyncio.gather(other(), asyncio.sleep(0.05))
        task.cancel()
        return hosting, after, ticks

    hosting, after, ticks = asyncio.run(scenario())
    assert hosting.slices == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # the slice holding 4 failed; the rest went on
    assert after == [7, 4, 1, 0]
    assert len(set(ticks)) > 2  # the other task ran between slices, seeing the queue shrink


# -- broker/heap.py: what the slices made is frozen out of the collector's full walks


def test_slices_freeze_the_heap_and_a_stopped_driver_thaws_it():
    import gc

    from odradek.broker.heap import HeapFreezer

    async def scenario():
        heap = HeapFreezer()
        driver = HostingDriver(FakeHosting(5), after_slice=lambda: None, slice_partitions=2,  # type: ignore[arg-type]
                               heap=heap)
        task = asyncio.create_task(driver.run())
        driver.wake()
        await asyncio.sleep(0.01)
        frozen = gc.get_freeze_count()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return frozen

    gc.unfreeze()
    try:
        assert asyncio.run(scenario()) > 0
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_removed_topics_thaw_the_heap_until_a_full_collection_reclaimed_them():
    import gc
    import uuid

    from odradek.broker.heap import HeapFreezer
    from odradek.metadata.image import MetadataImage, TopicImage
    from odradek.metadata.publisher import MetadataUpdate

    scheduled: list = []
    heap = HeapFreezer(schedule=scheduled.append, thaw_after_removed=0)
    gone = TopicImage("gone", uuid.UUID(int=5), {})
    removal = MetadataUpdate(MetadataImage(), MetadataImage(), frozenset(), {gone.topic_id: gone})
    gc.unfreeze()
    try:
        heap.after_slice()
        assert heap.frozen > 0
        heap.on_metadata_update(MetadataUpdate(MetadataImage(), MetadataImage(), frozenset()))  # nothing removed
        assert heap.frozen > 0 and not heap.thawed
        heap.on_metadata_update(removal)
        assert heap.frozen == 0 and heap.thawed
        gc.collect(1)  # a young collection is not the one that reclaims the removed topic
        assert heap.thawed and not scheduled
        gc.collect()  # the interpreter's own full collection: frozen again soon after, on the loop's thread
        assert not heap.thawed and scheduled == [heap._refreeze]
        scheduled.pop()()
        assert heap.frozen > 0 and heap._on_gc not in gc.callbacks
        heap.on_metadata_update(removal)
        assert heap.frozen == 0 and heap.thawed
        heap.after_slice()  # or the next slice's collection walks everything, then freezes
        assert heap.frozen > 0 and not heap.thawed and heap._on_gc not in gc.callbacks
    finally:
        heap.stop()
        gc.unfreeze()
    assert heap.frozen == 0


def test_the_heap_is_thawed_once_enough_partitions_were_removed():
    """A small deleted topic does not cost a whole-heap walk: the heap thaws once committed updates have
    removed `thaw_after_removed` partitions since it was frozen (broker/heap.py)."""
    import gc
    import uuid

    from odradek.broker.heap import HeapFreezer
    from odradek.metadata.image import MetadataImage, TopicImage
    from odradek.metadata.publisher import MetadataUpdate

    def removal(name: str, topic_int: int, partitions: int) -> MetadataUpdate:
        topic = TopicImage(name, uuid.UUID(int=topic_int), {p: object() for p in range(partitions)})
        return MetadataUpdate(MetadataImage(), MetadataImage(), frozenset(), {topic.topic_id: topic})

    heap = HeapFreezer(schedule=lambda callback: None, thaw_after_removed=3)
    gc.unfreeze()
    try:
        heap.after_slice()
        heap.on_metadata_update(removal("small", 6, 2))
        assert heap.frozen > 0 and not heap.thawed and heap.removed_partitions == 2
        heap.on_metadata_update(removal("another", 7, 1))  # 3 removed since the freeze: thawed
        assert heap.frozen == 0 and heap.thawed and heap.removed_partitions == 0
        heap.after_slice()
        heap.on_metadata_update(removal("third", 8, 2))  # counted afresh after the freeze
        assert heap.frozen > 0 and not heap.thawed and heap.removed_partitions == 2
    finally:
        heap.stop()
        gc.unfreeze()
