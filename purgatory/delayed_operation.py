"""The purgatory: requests that wait for a condition or a timeout (Kafka's DelayedOperationPurgatory).

Theory of operation
-------------------
A `DelayedOperation` is a request that cannot be answered yet (acks=all before the high watermark
passes the batch; a fetch before `min_bytes` are available). It is watched under one or more keys
(TopicPartitions) and scheduled on a `Timer` at its deadline. Whoever moves state that an operation may
wait for calls `check_and_complete(key)` right after the move (after an append, after the high
watermark advances, after a leadership change); that retries `try_complete()` of each operation watched
under the key. The timer expires whatever is left.

An operation completes exactly once: `force_complete()` flips `is_completed` before anything else, so
later attempts, whether through another key, the timer or a re-entrant call from `on_complete()`
itself, return False. Completing also cancels the timer task and unwatches the operation from every key
it was watched under, so watcher lists hold only pending operations and memory stays bounded however the
operation completed (Kafka sweeps completed operations periodically instead, because its completions
race on threads).

Callbacks never await: the event loop is the lock, and there are no locks or threads here.
`try_complete()` runs twice in `try_complete_else_watch` as in Kafka (before and after watching); with
one thread the second attempt only matters when the first attempt, or watching, changes state, but it
keeps the contract (no state change between the check and the watch can be missed) independent of how
callers are scheduled.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from odradek.purgatory.timing_wheel import Timer, TimerTask

__all__ = ["DelayedOperation", "DelayedOperationPurgatory"]


class DelayedOperation(TimerTask):
    """A request that completes when `try_complete()` says so, or expires `delay_ms` after `now_ms`.

    Subclasses implement `try_complete()` (check the condition; if met, `return self.force_complete()`)
    and `on_complete()` (send the response). `on_expiration()` runs after `on_complete()` when the
    operation timed out.
    """

    __slots__ = ("delay_ms", "_completed", "_purgatory", "_watch_keys")

    def __init__(self, delay_ms: int, *, now_ms: int) -> None:
        super().__init__(now_ms + delay_ms)
        self.delay_ms = delay_ms
        self._completed = False
        self._purgatory: DelayedOperationPurgatory | None = None
        self._watch_keys: tuple[Hashable, ...] = ()

    @property
    def is_completed(self) -> bool:
        return self._completed

    def try_complete(self) -> bool:
        """Check whether the operation can complete; if so, return `self.force_complete()`."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Deliver the result. Called exactly once, whether the operation completed or expired."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Called after `on_complete()` when the operation completed by timing out."""

    def force_complete(self) -> bool:
        """Complete now: True for the one call that completed the operation, False afterwards."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        if self._purgatory is not None:
            self._purgatory._unwatch(self)
        self.on_complete()
        return True

    def run(self) -> None:
        if self.force_complete():
            self.on_expiration()

    def __repr__(self) -> str:
        state = "completed" if self._completed else "pending"
        return f"<{type(self).__name__} expiration_ms={self.expiration_ms} {state}>"


class DelayedOperationPurgatory:
    """Delayed operations of one kind, watched by key, expired by a timer (which may be shared)."""

    __slots__ = ("name", "_timer", "_watchers", "_delayed")

    def __init__(self, name: str, timer: Timer) -> None:
        self.name = name
        self._timer = timer
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}
        self._delayed: dict[DelayedOperation, None] = {}

    @property
    def timer(self) -> Timer:
        return self._timer

    def complete_all(self) -> int:
        """Force every waiting operation to complete now (shutdown); returns how many did."""
        return sum(1 for operation in list(self._delayed) if operation.force_complete())

    def try_complete_else_watch(self, operation: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete the operation now if it can; otherwise watch it under every key and time it.

        Returns True when this call completed the operation.
        """
        watch_keys = tuple(dict.fromkeys(keys))
        if not watch_keys:
            raise ValueError("a delayed operation needs at least one watch key")
        if operation._purgatory is not None:
            raise ValueError(f"{operation!r} is already watched by purgatory {operation._purgatory.name!r}")
        if operation.try_complete():
            return True
        if operation.is_completed:
            return False
        operation._purgatory = self
        operation._watch_keys = watch_keys
        for key in watch_keys:
            self._watchers.setdefault(key, {})[operation] = None
        self._delayed[operation] = None
        # Retry once watched: a state change between the first attempt and the watch would otherwise
        # leave the operation waiting for a `check_and_complete` that already happened.
        if operation.try_complete():
            return True
        if not operation.is_completed:
            self._timer.add(operation)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Retry every operation watched under `key`; return how many this call completed."""
        watchers = self._watchers.get(key)
        if not watchers:
            return 0
        completed = 0
        for operation in list(watchers):
            if not operation.is_completed and operation.try_complete():
                completed += 1
        return completed

    def check_and_complete_any(self, keys: Iterable[Hashable]) -> int:
        """Retry once every operation watched under any of `keys`; return how many this call completed. For a
        batch of state changes: an operation watching many of the keys (a follower's fetch of thousands of
        partitions) is tried once after all of them, not once per key, which made applying a metadata
        update to N partitions O(N x the fetch's partitions)."""
        operations: dict[DelayedOperation, None] = {}
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers:
                operations.update(watchers)
        completed = 0
        for operation in operations:
            if not operation.is_completed and operation.try_complete():
                completed += 1
        return completed

    def watched(self, key: Hashable) -> int:
        """Pending operations watched under `key`."""
        watchers = self._watchers.get(key)
        return len(watchers) if watchers else 0

    def num_delayed(self) -> int:
        """Pending operations in this purgatory."""
        return len(self._delayed)

    def watch_keys(self) -> list[Hashable]:
        """Keys with at least one pending operation."""
        return list(self._watchers)

    def _unwatch(self, operation: DelayedOperation) -> None:
        for key in operation._watch_keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.pop(operation, None)
                if not watchers:
                    del self._watchers[key]
        self._delayed.pop(operation, None)
