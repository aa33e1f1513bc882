"""The purgatory on a manual clock: exactly-once completion, expiration, watcher purging."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.purgatory.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from odradek.purgatory.timing_wheel import Timer


class Operation(DelayedOperation):
    """Completes when `ready` is set; records every callback."""

    def __init__(self, delay_ms: int, *, now_ms: int = 0, ready: bool = False) -> None:
        super().__init__(delay_ms, now_ms=now_ms)
        self.ready = ready
        self.attempts = 0
        self.completions = 0
        self.expirations = 0
        self.on_complete_hook = None

    def try_complete(self) -> bool:
        self.attempts += 1
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1
        if self.on_complete_hook is not None:
            self.on_complete_hook()

    def on_expiration(self) -> None:
        self.expirations += 1


@pytest.fixture
def timer() -> Timer:
    return Timer(tick_ms=1, wheel_size=20, start_ms=0)


@pytest.fixture
def purgatory(timer: Timer) -> DelayedOperationPurgatory:
    return DelayedOperationPurgatory("produce", timer)


def test_completes_at_once_without_watching(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    op = Operation(100, ready=True)
    assert purgatory.try_complete_else_watch(op, ["a", "b"])
    assert op.completions == 1 and op.attempts == 1
    assert purgatory.watched("a") == 0 and purgatory.num_delayed() == 0
    assert timer.size == 0


def test_watched_then_completed_by_key(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    op = Operation(100)
    assert not purgatory.try_complete_else_watch(op, ["a", "b"])
    assert op.attempts == 2
    assert purgatory.watched("a") == purgatory.watched("b") == 1
    assert purgatory.num_delayed() == 1 and timer.size == 1
    assert purgatory.check_and_complete("a") == 0
    op.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.watched("a") == purgatory.watched("b") == 0
    assert purgatory.watch_keys() == []
    assert purgatory.num_delayed() == 0 and timer.size == 0
    assert timer.advance_clock(1000) == []
    assert purgatory.check_and_complete("b") == 0
    assert op.completions == 1


def test_expiration(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    op = Operation(100, now_ms=0)
    purgatory.try_complete_else_watch(op, ["a"])
    assert timer.next_expiration_ms() == 100
    assert timer.advance_clock(99) == []
    assert timer.advance_clock(100) == [op]
    assert op.completions == 1 and op.expirations == 1 and op.is_completed
    assert purgatory.watched("a") == 0 and purgatory.num_delayed() == 0
    op.ready = True
    assert purgatory.check_and_complete("a") == 0
    assert op.completions == 1


def test_key_check_then_expiration_at_the_same_instant(
    purgatory: DelayedOperationPurgatory, timer: Timer
) -> None:
    op = Operation(100)
    purgatory.try_complete_else_watch(op, ["a"])
    op.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert timer.advance_clock(100) == []
    assert (op.completions, op.expirations) == (1, 0)


def test_expiration_then_key_check_at_the_same_instant(
    purgatory: DelayedOperationPurgatory, timer: Timer
) -> None:
    op = Operation(100)
    purgatory.try_complete_else_watch(op, ["a"])
    op.ready = True
    assert timer.advance_clock(100) == [op]
    assert purgatory.check_and_complete("a") == 0
    assert (op.completions, op.expirations) == (1, 1)


def test_expiration_callback_completing_a_sibling(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    first, second = Operation(50), Operation(50)
    purgatory.try_complete_else_watch(first, ["a"])
    purgatory.try_complete_else_watch(second, ["a"])

    def complete_sibling() -> None:
        second.ready = True
        purgatory.check_and_complete("a")

    first.on_complete_hook = complete_sibling
    assert timer.advance_clock(50) == [first]
    assert (first.completions, first.expirations) == (1, 1)
    assert (second.completions, second.expirations) == (1, 0)
    assert purgatory.num_delayed() == 0 and timer.size == 0


def test_reentrant_completion_from_on_complete(purgatory: DelayedOperationPurgatory) -> None:
    op = Operation(100)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    op.on_complete_hook = lambda: (purgatory.check_and_complete("b"), op.force_complete())
    op.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert op.completions == 1


def test_completion_via_one_key_purges_the_others(purgatory: DelayedOperationPurgatory) -> None:
    ops = [Operation(10_000) for _ in range(1000)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["shared", object()])
    assert purgatory.watched("shared") == 1000
    assert len(purgatory.watch_keys()) == 1001
    for op in ops:
        op.ready = True
    assert purgatory.check_and_complete("shared") == 1000
    assert purgatory.watch_keys() == []
    assert purgatory.num_delayed() == 0


def test_second_attempt_after_watching_closes_the_race(
    purgatory: DelayedOperationPurgatory, timer: Timer
) -> None:
    class ReadyOnSecondAttempt(Operation):
        def try_complete(self) -> bool:
            self.ready = self.attempts >= 1
            return super().try_complete()

    op = ReadyOnSecondAttempt(100)
    assert purgatory.try_complete_else_watch(op, ["a"])
    assert op.attempts == 2 and op.completions == 1
    assert purgatory.watched("a") == 0 and timer.size == 0


def test_force_complete_from_outside_unwatches(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    op = Operation(100)
    purgatory.try_complete_else_watch(op, ["a"])
    assert op.force_complete()
    assert not op.force_complete()
    assert purgatory.watched("a") == 0 and timer.size == 0
    assert timer.advance_clock(200) == []
    assert (op.completions, op.expirations) == (1, 0)


def test_zero_delay_expires_on_the_next_advance(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    timer.advance_clock(10)
    op = Operation(0, now_ms=10)
    assert not purgatory.try_complete_else_watch(op, ["a"])
    assert op.completions == 0
    assert timer.next_expiration_ms() == 10
    assert timer.advance_clock(10) == [op]
    assert op.expirations == 1


def test_already_completed_operation_is_not_watched(purgatory: DelayedOperationPurgatory) -> None:
    op = Operation(100)
    op.force_complete()
    assert not purgatory.try_complete_else_watch(op, ["a"])
    assert purgatory.watched("a") == 0 and purgatory.num_delayed() == 0


def test_purgatories_sharing_a_timer_count_their_own(timer: Timer) -> None:
    produce = DelayedOperationPurgatory("produce", timer)
    fetch = DelayedOperationPurgatory("fetch", timer)
    produce.try_complete_else_watch(Operation(10), ["a"])
    fetch.try_complete_else_watch(Operation(20), ["a"])
    fetch.try_complete_else_watch(Operation(30), ["a"])
    assert produce.num_delayed() == 1 and fetch.num_delayed() == 2 and timer.size == 3
    timer.advance_clock(20)
    assert produce.num_delayed() == 0 and fetch.num_delayed() == 1


def test_misuse(purgatory: DelayedOperationPurgatory, timer: Timer) -> None:
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(Operation(10), [])
    op = Operation(10)
    purgatory.try_complete_else_watch(op, ["a"])
    with pytest.raises(ValueError):
        DelayedOperationPurgatory("other", timer).try_complete_else_watch(op, ["a"])


def test_duplicate_keys_are_watched_once(purgatory: DelayedOperationPurgatory) -> None:
    op = Operation(10)
    purgatory.try_complete_else_watch(op, ["a", "a", "b"])
    assert purgatory.watched("a") == 1
    op.ready = True
    assert purgatory.check_and_complete("a") == 1


_events = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 300), st.sets(st.integers(0, 5), min_size=1, max_size=3)),
        st.tuples(st.just("ready"), st.integers(0, 1000), st.integers(0, 5)),
        st.tuples(st.just("advance"), st.integers(0, 120), st.just(0)),
    ),
    max_size=200,
)


@settings(max_examples=150, deadline=None)
@given(events=_events)
def test_random_interleavings_complete_every_operation_exactly_once(events: list[tuple]) -> None:
    timer = Timer(start_ms=0)
    purgatory = DelayedOperationPurgatory("random", timer)
    now = 0
    ops: list[Operation] = []
    added_since_advance: set[Operation] = set()
    for kind, a, b in events:
        if kind == "add":
            op = Operation(a, now_ms=now)
            op.keys = sorted(b)
            ops.append(op)
            added_since_advance.add(op)
            purgatory.try_complete_else_watch(op, op.keys)
        elif kind == "ready" and ops:
            op = ops[a % len(ops)]
            op.ready = True
            purgatory.check_and_complete(op.keys[b % len(op.keys)])
        elif kind == "advance":
            now += a
            added_since_advance.clear()
            for op in timer.advance_clock(now):
                assert op.expiration_ms <= now
        pending = [op for op in ops if not op.is_completed]
        assert purgatory.num_delayed() == len(pending) == timer.size
        watched = sum(purgatory.watched(key) for key in purgatory.watch_keys())
        assert watched == sum(len(op.keys) for op in pending)
        for op in ops:
            assert op.completions == (1 if op.is_completed else 0)
            assert op.expirations <= op.completions
            if not op.is_completed and op.expiration_ms <= now:
                assert op in added_since_advance
    timer.advance_clock(now + 1000)
    assert all(op.completions == 1 for op in ops)
    assert purgatory.watch_keys() == [] and timer.size == 0


def test_a_batch_of_keys_tries_each_watching_operation_once(purgatory: DelayedOperationPurgatory) -> None:
    """check_and_complete_any: an operation watching many of the changed keys (a follower's fetch of many
    partitions) is tried once for the whole batch; every operation watching any key is tried."""
    wide = Operation(100)
    narrow = Operation(100)
    other = Operation(100)
    purgatory.try_complete_else_watch(wide, [f"p{i}" for i in range(50)])
    purgatory.try_complete_else_watch(narrow, ["p7"])
    purgatory.try_complete_else_watch(other, ["q"])
    before = (wide.attempts, narrow.attempts, other.attempts)
    assert purgatory.check_and_complete_any(f"p{i}" for i in range(50)) == 0
    assert (wide.attempts, narrow.attempts, other.attempts) == (before[0] + 1, before[1] + 1, before[2])
    wide.ready = narrow.ready = True
    assert purgatory.check_and_complete_any(["p3", "p7", "nothing"]) == 2
    assert purgatory.num_delayed() == 1 and purgatory.watched("p3") == 0 and purgatory.watched("q") == 1
