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
