"""Hierarchical timing wheel: O(1) timers for the purgatory (Kafka's TimingWheel and SystemTimer).

Theory of operation
-------------------
A wheel has `wheel_size` buckets, each `tick_ms` wide, and covers `interval_ms = tick_ms * wheel_size`
starting at its `current_time_ms` (always a multiple of `tick_ms`). A task due in
`[current_time_ms + tick_ms, current_time_ms + interval_ms)` goes into the bucket
`(expiration_ms // tick_ms) % wheel_size`, whose own expiration becomes `(expiration_ms // tick_ms) *
tick_ms`. A task due further away goes to the overflow wheel, created on first use, whose tick is this
wheel's whole interval. A task due within the current tick is already expired and is refused.

Buckets, not tasks, are ordered in time. When a bucket's expiration is set it is pushed on a heap of
bucket deadlines (the DelayQueue that Kafka's reaper thread blocks on; here nothing blocks, so the broker
asks `Timer.next_expiration_ms()` how long to sleep). `Timer.advance_clock(now_ms)` pops every bucket
due by `now_ms`, moves the wheels to that bucket's expiration and re-inserts each of its tasks: a task
still in the future falls into a finer wheel (the cascade), a task that is not is expired and run. Adding
and cancelling are O(1) (a task knows its bucket); advancing costs O(log B) per due bucket, B being the
number of scheduled buckets, however many tasks they hold.

All times are milliseconds passed in by the caller: nothing here reads a clock.

Worked example: `Timer(tick_ms=1, wheel_size=20, start_ms=0)`
-------------------------------------------------------------
The levels are created as needed: level 0 (tick 1 ms, interval 20 ms), level 1 (tick 20, interval 400),
level 2 (tick 400, interval 8000), level 3 (tick 8000, interval 160 000). Three levels span 8 s at this
size, so the +9000 ms task below needs a fourth.

At t=0 three tasks are added:

- A, due 15: 15 < 0 + 20, so level 0, bucket 15 % 20 = 15, bucket expiration 15.
- B, due 300: past level 0; level 1 (current 0) covers it: virtual id 300 // 20 = 15, bucket 15,
  bucket expiration 300.
- C, due 9000: past level 1 (400) and level 2 (8000); level 3: virtual id 9000 // 8000 = 1, bucket 1,
  bucket expiration 8000.

The heap holds 15, 300 and 8000; `next_expiration_ms()` is 15.

- `advance_clock(15)`: level 0's bucket 15 pops, the wheels move to 15, and A (15 < 15 + 1) runs.
- `advance_clock(300)`: level 1's bucket pops, the wheels move to 300 (level 2 stays at 0, level 3 at
  0), and B runs straight from level 1: its deadline is a multiple of level 1's tick, so it never needs
  level 0.
- `advance_clock(8000)`: level 3's bucket pops and the wheels move to 8000. C is re-inserted: level 0
  covers up to 8020, level 1 up to 8400, level 2 (current 8000) up to 16 000, so C cascades into level 2,
  virtual id 9000 // 400 = 22, bucket 2, expiration 8800. `next_expiration_ms()` is now 8800.
- `advance_clock(8800)`: C cascades into level 1 (current 8800, covers up to 9200): virtual id 450,
  bucket 10, expiration 9000.
- `advance_clock(9000)`: C runs.

A single `advance_clock(9000)` from t=0 does the same work in one call and runs A, B, C in that order.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from operator import attrgetter

__all__ = ["DelayQueue", "TaskCounter", "Timer", "TimerTask", "TimerTaskList", "TimingWheel"]


class TimerTask:
    """A callback due at an absolute `expiration_ms`. Subclasses override `run()`, or pass `callback`."""

    __slots__ = ("expiration_ms", "_bucket", "_cancelled", "_callback")

    def __init__(self, expiration_ms: int, callback: Callable[[], object] | None = None) -> None:
        self.expiration_ms = expiration_ms
        self._bucket: TimerTaskList | None = None
        self._cancelled = False
        self._callback = callback

    def run(self) -> None:
        if self._callback is not None:
            self._callback()

    def cancel(self) -> None:
        """Remove the task from its bucket, if scheduled; a cancelled task is never run or re-added."""
        self._cancelled = True
        if self._bucket is not None:
            self._bucket.remove(self)

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    @property
    def is_scheduled(self) -> bool:
        return self._bucket is not None

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "scheduled" if self._bucket is not None else "idle"
        return f"<{type(self).__name__} expiration_ms={self.expiration_ms} {state}>"


_expiration_ms = attrgetter("expiration_ms")


class TaskCounter:
    """The number of tasks held by every bucket of one wheel hierarchy (Kafka's taskCounter)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: the tasks of one wheel slot, in insertion order, and the slot's current expiration.

    `expiration_ms` is -1 while the bucket is not on the delay queue.
    """

    __slots__ = ("expiration_ms", "_tasks", "_counter")

    def __init__(self, counter: TaskCounter) -> None:
        self.expiration_ms = -1
        self._tasks: dict[TimerTask, None] = {}
        self._counter = counter

    def add(self, task: TimerTask) -> None:
        if task._bucket is not None:
            task._bucket.remove(task)
        self._tasks[task] = None
        task._bucket = self
        self._counter.value += 1

    def remove(self, task: TimerTask) -> None:
        if task._bucket is self:
            del self._tasks[task]
            task._bucket = None
            self._counter.value -= 1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True when it changed, i.e. when the bucket must be (re)queued."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def flush(self) -> list[TimerTask]:
        """Empty the bucket and take it off the queue; return its tasks for re-insertion."""
        tasks = list(self._tasks)
        for task in tasks:
            task._bucket = None
        self._counter.value -= len(tasks)
        self._tasks.clear()
        self.expiration_ms = -1
        return tasks

    def __len__(self) -> int:
        return len(self._tasks)


class DelayQueue:
    """Buckets ordered by expiration, a heap standing in for Kafka's java.util.concurrent.DelayQueue.

    A bucket is pushed each time its expiration is set, so the heap may hold stale entries (the bucket
    was flushed, or reused for a later expiration) and entries for buckets emptied by cancellation; both
    are dropped lazily when they reach the top. An emptied bucket dropped this way has its expiration
    reset, so that the next task added to it queues it again.
    """

    __slots__ = ("_heap", "_sequence")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        self._sequence = itertools.count()

    def offer(self, bucket: TimerTaskList) -> None:
        heapq.heappush(self._heap, (bucket.expiration_ms, next(self._sequence), bucket))

    def _drop_dead_entries(self) -> None:
        heap = self._heap
        while heap:
            expiration_ms, _, bucket = heap[0]
            if bucket.expiration_ms == expiration_ms and len(bucket):
                return
            heapq.heappop(heap)
            if bucket.expiration_ms == expiration_ms:
                bucket.expiration_ms = -1

    def peek_expiration_ms(self) -> int | None:
        self._drop_dead_entries()
        return self._heap[0][0] if self._heap else None

    def poll(self, now_ms: int) -> TimerTaskList | None:
        """Pop the earliest non-empty bucket if it is due by `now_ms`."""
        self._drop_dead_entries()
        if self._heap and self._heap[0][0] <= now_ms:
            return heapq.heappop(self._heap)[2]
        return None

    def __len__(self) -> int:
        return len(self._heap)


class TimingWheel:
    """One level of the hierarchy; overflow levels are created on demand and share queue and counter."""

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "current_time_ms",
        "_buckets",
        "_queue",
        "_counter",
        "_overflow_wheel",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        queue: DelayQueue | None = None,
        task_counter: TaskCounter | None = None,
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"need tick_ms >= 1 and wheel_size >= 2, got {tick_ms} and {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - start_ms % tick_ms
        self._queue = queue if queue is not None else DelayQueue()
        self._counter = task_counter if task_counter is not None else TaskCounter()
        self._buckets = [TimerTaskList(self._counter) for _ in range(wheel_size)]
        self._overflow_wheel: TimingWheel | None = None

    @property
    def queue(self) -> DelayQueue:
        return self._queue

    @property
    def overflow_wheel(self) -> TimingWheel | None:
        return self._overflow_wheel

    def add(self, task: TimerTask) -> bool:
        """Place the task in this wheel or an overflow wheel; False if it is cancelled or already due."""
        expiration_ms = task.expiration_ms
        if task.is_cancelled or expiration_ms < self.current_time_ms + self.tick_ms:
            return False
        if expiration_ms < self.current_time_ms + self.interval_ms:
            virtual_id = expiration_ms // self.tick_ms
            bucket = self._buckets[virtual_id % self.wheel_size]
            bucket.add(task)
            # A slot is reused for a later expiration only after its bucket was flushed, so a changed
            # expiration means the bucket is new to the queue and must be offered.
            if bucket.set_expiration(virtual_id * self.tick_ms):
                self._queue.offer(bucket)
            return True
        if self._overflow_wheel is None:
            self._overflow_wheel = TimingWheel(
                self.interval_ms, self.wheel_size, self.current_time_ms, self._queue, self._counter
            )
        return self._overflow_wheel.add(task)

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel and its overflow wheels forward to `time_ms`, rounded down to each tick."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            if self._overflow_wheel is not None:
                self._overflow_wheel.advance_clock(self.current_time_ms)


class Timer:
    """The facade the purgatory uses: add tasks, advance a manual clock, learn the next deadline.

    A task added when already due (or overdue) is not run inside `add`: it waits in an overdue bucket
    whose deadline is the timer's current time, so every callback runs from `advance_clock` and
    `next_expiration_ms()` tells the caller to come back at once.

    Resolution is one tick: a task runs once the clock reaches the start of the tick holding its
    deadline, so with `tick_ms=1` and whole milliseconds, exactly at its deadline.
    """

    __slots__ = ("_queue", "_counter", "_wheel", "_overdue")

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None:
        self._queue = DelayQueue()
        self._counter = TaskCounter()
        self._wheel = TimingWheel(tick_ms, wheel_size, start_ms, self._queue, self._counter)
        self._overdue = TimerTaskList(self._counter)

    @property
    def current_time_ms(self) -> int:
        return self._wheel.current_time_ms

    @property
    def size(self) -> int:
        """Tasks scheduled and not yet run or cancelled."""
        return self._counter.value

    def add(self, task: TimerTask) -> None:
        """Schedule the task (rescheduling it if it already is); a cancelled task is ignored."""
        if task._bucket is not None:
            task._bucket.remove(task)
        if not self._wheel.add(task) and not task.is_cancelled:
            self._add_overdue(task)

    def _add_overdue(self, task: TimerTask) -> None:
        self._overdue.add(task)
        if self._overdue.expiration_ms < 0:
            self._overdue.expiration_ms = self._wheel.current_time_ms
            self._queue.offer(self._overdue)

    def next_expiration_ms(self) -> int | None:
        """The earliest bucket deadline: calling `advance_clock` before it does nothing."""
        return self._queue.peek_expiration_ms()

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        """Expire every task due by `now_ms`, run them in deadline order and return those run.

        The wheels are settled before any callback runs, so callbacks may add or cancel tasks freely; a
        task cancelled by an earlier callback of the same call is skipped. A task added by a callback
        and already due runs on the next call (`next_expiration_ms()` reports it as due).
        """
        expired: list[TimerTask] = []
        while (bucket := self._queue.poll(now_ms)) is not None:
            self._wheel.advance_clock(bucket.expiration_ms)
            for task in bucket.flush():
                if not self._wheel.add(task) and not task.is_cancelled:
                    expired.append(task)
        # Every bucket left is due after now_ms, so moving the wheels up to now_ms cannot make a slot
        # still holding tasks collide with a new expiration.
        self._wheel.advance_clock(now_ms)
        # Buckets pop in tick order already; the sort orders overdue tasks and tasks sharing a tick.
        expired.sort(key=_expiration_ms)
        run: list[TimerTask] = []
        for index, task in enumerate(expired):
            if task.is_cancelled:
                continue
            try:
                task.run()
            except BaseException:
                for pending in expired[index + 1 :]:
                    if not pending.is_cancelled:
                        self._add_overdue(pending)
                raise
            run.append(task)
        return run
