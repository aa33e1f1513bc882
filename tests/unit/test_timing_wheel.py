"""The hierarchical timing wheel on a manual clock: exact firing, cascades, cancellation, deadline order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.purgatory.timing_wheel import Timer, TimerTask, TimingWheel


def _recorder(fired: list[tuple[str, int]], clock: list[int]):
    def make(name: str):
        return lambda: fired.append((name, clock[0]))

    return make


def _levels(wheel: TimingWheel) -> list[tuple[int, int]]:
    levels = []
    level: TimingWheel | None = wheel
    while level is not None:
        levels.append((level.tick_ms, level.current_time_ms))
        level = level.overflow_wheel
    return levels


def test_worked_example_from_the_module_docstring() -> None:
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    a, b, c = TimerTask(15), TimerTask(300), TimerTask(9000)
    assert wheel.add(a) and wheel.add(b) and wheel.add(c)
    assert [t for t, _ in _levels(wheel)] == [1, 20, 400, 8000]
    assert a._bucket is wheel._buckets[15] and a._bucket.expiration_ms == 15
    level1 = wheel.overflow_wheel
    assert b._bucket is level1._buckets[15] and b._bucket.expiration_ms == 300
    level3 = level1.overflow_wheel.overflow_wheel
    assert c._bucket is level3._buckets[1] and c._bucket.expiration_ms == 8000

    clock = [0]
    fired: list[tuple[str, int]] = []
    make = _recorder(fired, clock)
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=0)
    for name, deadline in (("A", 15), ("B", 300), ("C", 9000)):
        timer.add(TimerTask(deadline, make(name)))
    expirations = []
    while (next_ms := timer.next_expiration_ms()) is not None:
        expirations.append(next_ms)
        clock[0] = next_ms
        timer.advance_clock(next_ms)
    assert expirations == [15, 300, 8000, 8800, 9000]
    assert fired == [("A", 15), ("B", 300), ("C", 9000)]
    assert timer.size == 0


def test_one_advance_runs_the_worked_example_in_order() -> None:
    timer = Timer(start_ms=0)
    tasks = [TimerTask(9000), TimerTask(300), TimerTask(15)]
    for task in tasks:
        timer.add(task)
    assert timer.advance_clock(9000) == tasks[::-1]


@pytest.mark.parametrize("deadline", [1, 2, 19, 20, 21, 399, 400, 401, 7999, 8000, 8001, 9000, 160_123])
def test_task_fires_exactly_at_its_tick(deadline: int) -> None:
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=0)
    task = TimerTask(deadline)
    timer.add(task)
    assert timer.advance_clock(deadline - 1) == []
    assert timer.size == 1
    assert timer.advance_clock(deadline) == [task]
    assert timer.size == 0
    assert timer.next_expiration_ms() is None


def test_stepping_one_millisecond_at_a_time() -> None:
    clock = [0]
    fired: list[tuple[str, int]] = []
    make = _recorder(fired, clock)
    timer = Timer(start_ms=0)
    deadlines = [5, 19, 20, 40, 401, 777, 8000, 8019]
    for deadline in deadlines:
        timer.add(TimerTask(deadline, make(str(deadline))))
    for now in range(1, 8100):
        clock[0] = now
        timer.advance_clock(now)
    assert fired == [(str(d), d) for d in deadlines]


def test_wheel_refuses_due_and_cancelled_tasks() -> None:
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=100)
    assert not wheel.add(TimerTask(100))
    assert not wheel.add(TimerTask(50))
    cancelled = TimerTask(150)
    cancelled.cancel()
    assert not wheel.add(cancelled)
    assert wheel.add(TimerTask(101))


def test_coarse_tick_fires_at_the_start_of_the_tick_holding_the_deadline() -> None:
    timer = Timer(tick_ms=10, wheel_size=8, start_ms=3)
    assert timer.current_time_ms == 0
    task = TimerTask(25)
    timer.add(task)
    assert timer.next_expiration_ms() == 20
    assert timer.advance_clock(19) == []
    assert timer.advance_clock(20) == [task]


def test_cancel_removes_the_task_and_its_bucket_deadline() -> None:
    timer = Timer(start_ms=0)
    early, late = TimerTask(10), TimerTask(500)
    timer.add(early)
    timer.add(late)
    assert timer.size == 2
    early.cancel()
    assert early.is_cancelled and not early.is_scheduled
    assert timer.size == 1
    assert timer.next_expiration_ms() == 400
    late.cancel()
    assert timer.size == 0
    assert timer.next_expiration_ms() is None
    assert timer.advance_clock(1000) == []


def test_cancelled_task_is_not_added_again() -> None:
    timer = Timer(start_ms=0)
    task = TimerTask(10)
    task.cancel()
    timer.add(task)
    assert timer.size == 0 and timer.advance_clock(10) == []


def test_a_bucket_emptied_by_cancel_is_queued_again_when_reused() -> None:
    timer = Timer(start_ms=0)
    first = TimerTask(7)
    timer.add(first)
    first.cancel()
    assert timer.next_expiration_ms() is None
    second = TimerTask(7)
    timer.add(second)
    assert timer.next_expiration_ms() == 7
    assert timer.advance_clock(7) == [second]


def test_callback_cancelling_a_task_due_in_the_same_advance() -> None:
    timer = Timer(start_ms=0)
    victim = TimerTask(6)
    killer = TimerTask(5, victim.cancel)
    timer.add(victim)
    timer.add(killer)
    assert timer.advance_clock(10) == [killer]
    assert timer.size == 0


def test_adding_a_scheduled_task_reschedules_it() -> None:
    timer = Timer(start_ms=0)
    task = TimerTask(10)
    timer.add(task)
    task.expiration_ms = 700
    timer.add(task)
    assert timer.size == 1
    assert timer.advance_clock(699) == []
    assert timer.advance_clock(700) == [task]


def test_task_already_due_runs_on_the_next_advance_not_inside_add() -> None:
    fired: list[int] = []
    timer = Timer(start_ms=0)
    timer.advance_clock(100)
    timer.add(TimerTask(40, lambda: fired.append(40)))
    timer.add(TimerTask(100, lambda: fired.append(100)))
    assert fired == [] and timer.size == 2
    assert timer.next_expiration_ms() == 100
    timer.advance_clock(100)
    assert sorted(fired) == [40, 100]
    assert timer.next_expiration_ms() is None


def test_task_added_by_a_callback_and_already_due_runs_on_the_next_call() -> None:
    fired: list[str] = []
    timer = Timer(start_ms=0)
    late = TimerTask(3, lambda: fired.append("late"))
    timer.add(TimerTask(5, lambda: (fired.append("first"), timer.add(late))))
    timer.advance_clock(5)
    assert fired == ["first"]
    assert timer.next_expiration_ms() == 5
    timer.advance_clock(5)
    assert fired == ["first", "late"]


def test_a_failing_callback_loses_no_task() -> None:
    fired: list[int] = []

    def boom() -> None:
        raise RuntimeError("boom")

    timer = Timer(start_ms=0)
    timer.add(TimerTask(1, boom))
    timer.add(TimerTask(2, lambda: fired.append(2)))
    with pytest.raises(RuntimeError):
        timer.advance_clock(5)
    assert timer.size == 1
    assert timer.next_expiration_ms() == 5
    timer.advance_clock(5)
    assert fired == [2]


def test_clock_never_moves_backwards() -> None:
    timer = Timer(start_ms=1000)
    task = TimerTask(1010)
    timer.add(task)
    assert timer.advance_clock(10) == []
    assert timer.current_time_ms == 1000
    assert timer.advance_clock(1010) == [task]


def test_constructor_validation() -> None:
    with pytest.raises(ValueError):
        TimingWheel(tick_ms=0, wheel_size=20, start_ms=0)
    with pytest.raises(ValueError):
        TimingWheel(tick_ms=1, wheel_size=1, start_ms=0)


_deadline_offsets = st.integers(min_value=-50, max_value=200_000)


@settings(max_examples=150, deadline=None)
@given(
    start_ms=st.integers(min_value=0, max_value=10**9),
    offsets=st.lists(_deadline_offsets, min_size=1, max_size=80),
    steps=st.lists(st.integers(min_value=0, max_value=30_000), min_size=1, max_size=40),
    cancel_every=st.integers(min_value=0, max_value=7),
    tick_ms=st.sampled_from([1, 1, 1, 2, 5]),
    wheel_size=st.sampled_from([2, 8, 20, 64]),
)
def test_random_tasks_fire_once_in_deadline_order_and_never_early(
    start_ms: int,
    offsets: list[int],
    steps: list[int],
    cancel_every: int,
    tick_ms: int,
    wheel_size: int,
) -> None:
    timer = Timer(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=start_ms)
    tasks = [TimerTask(start_ms + offset) for offset in offsets]
    for task in tasks:
        timer.add(task)
    cancelled = set()
    if cancel_every:
        for task in tasks[::cancel_every]:
            task.cancel()
            cancelled.add(task)

    def granule(ms: int) -> int:
        return ms - ms % tick_ms

    pending = {task for task in tasks if task not in cancelled}
    fired: list[TimerTask] = []
    now = start_ms
    for step in steps + [250_000]:
        earliest = min((granule(t.expiration_ms) for t in pending), default=None)
        next_ms = timer.next_expiration_ms()
        if earliest is not None:
            # A broker sleeping until next_expiration_ms() never oversleeps a deadline.
            assert next_ms is not None and next_ms <= max(earliest, timer.current_time_ms)
        now += step
        run = timer.advance_clock(now)
        assert [t.expiration_ms for t in run] == sorted(t.expiration_ms for t in run)
        for task in run:
            assert task in pending
            assert granule(task.expiration_ms) <= now
        due = {task for task in pending if granule(task.expiration_ms) <= now}
        assert set(run) == due
        pending -= due
        fired.extend(run)
        assert timer.size == len(pending)
    assert not pending
    assert len(fired) == len(set(fired)) == len(tasks) - len(cancelled)
    assert timer.next_expiration_ms() is None


@settings(max_examples=100, deadline=None)
@given(
    start_ms=st.integers(min_value=0, max_value=10**6),
    offsets=st.lists(st.integers(min_value=1, max_value=50_000), min_size=1, max_size=60),
)
def test_sleeping_until_next_expiration_fires_each_task_exactly_at_its_deadline(
    start_ms: int, offsets: list[int]
) -> None:
    clock = [start_ms]
    fired: list[tuple[int, int]] = []
    timer = Timer(start_ms=start_ms)
    for offset in offsets:
        deadline = start_ms + offset
        timer.add(TimerTask(deadline, lambda d=deadline: fired.append((d, clock[0]))))
    while (next_ms := timer.next_expiration_ms()) is not None:
        assert next_ms > clock[0] or next_ms == timer.current_time_ms
        clock[0] = next_ms
        timer.advance_clock(next_ms)
    assert len(fired) == len(offsets)
    assert all(deadline == at for deadline, at in fired)
    assert [d for d, _ in fired] == sorted(start_ms + o for o in offsets)
