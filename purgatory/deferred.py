"""`Deferred`: a result that arrives later, completed exactly once, without an event loop.

The layers below broker/ answer asynchronously without asyncio: the controller answers a metadata change
once its records are committed, a coordinator answers once its records are replicated. Each returns a
`Deferred`; the broker turns it into an asyncio future only at the edge (BrokerServices.future_from).
Callbacks run synchronously when the value arrives, so completing one never awaits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Deferred", "gather"]

T = TypeVar("T")
_PENDING = object()


class Deferred(Generic[T]):
    """A result that arrives later: completed or failed exactly once; callbacks run on completion."""

    __slots__ = ("_value", "_error", "_callbacks")

    def __init__(self) -> None:
        self._value: Any = _PENDING
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Deferred[T]], None]] = []

    @classmethod
    def completed(cls, value: T) -> Deferred[T]:
        d: Deferred[T] = cls()
        d._value = value
        return d

    @classmethod
    def failed(cls, error: BaseException) -> Deferred[T]:
        d: Deferred[T] = cls()
        d._value = None
        d._error = error
        return d

    @property
    def done(self) -> bool:
        return self._value is not _PENDING

    @property
    def failed_with(self) -> BaseException | None:
        return self._error

    def result(self) -> T:
        if self._value is _PENDING:
            raise RuntimeError("Deferred is not complete")
        if self._error is not None:
            raise self._error
        return self._value

    def complete(self, value: T) -> bool:
        """Complete with `value`; False (and nothing happens) if already done."""
        if self._value is not _PENDING:
            return False
        self._value = value
        self._run_callbacks()
        return True

    def fail(self, error: BaseException) -> bool:
        if self._value is not _PENDING:
            return False
        self._value = None
        self._error = error
        self._run_callbacks()
        return True

    def add_callback(self, callback: Callable[[Deferred[T]], None]) -> None:
        """Call `callback(self)` once done (at once if already done)."""
        if self._value is _PENDING:
            self._callbacks.append(callback)
        else:
            callback(self)

    def then(self, fn: Callable[[T], Any], on_error: Callable[[BaseException], Any] | None = None) -> Deferred:
        """A Deferred of `fn(value)`, or of `on_error(error)` if given (else the error passes through)."""
        out: Deferred = Deferred()

        def chain(d: Deferred[T]) -> None:
            if d._error is None:
                out.complete(fn(d._value))
            elif on_error is not None:
                out.complete(on_error(d._error))
            else:
                out.fail(d._error)

        self.add_callback(chain)
        return out

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def __repr__(self) -> str:
        if self._value is _PENDING:
            return "<Deferred pending>"
        if self._error is not None:
            return f"<Deferred failed {self._error!r}>"
        return f"<Deferred {self._value!r}>"


def gather(deferreds: list[Deferred]) -> Deferred[list]:
    """A Deferred of every result, in order, once all are complete (failing with the first failure)."""
    out: Deferred[list] = Deferred()
    remaining = [len(deferreds)]
    if not deferreds:
        out.complete([])
        return out

    def one_done(_: Deferred) -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            for d in deferreds:
                if d.failed_with is not None:
                    out.fail(d.failed_with)
                    return
            out.complete([d.result() for d in deferreds])

    for d in deferreds:
        d.add_callback(one_done)
    return out
