"""The error codes a response carries, wherever they sit in it (Kafka's `AbstractResponse.errorCounts()`).

A response answers with error codes at several depths: one for the whole request (`error_code` of a
FindCoordinator or a Fetch session), one per topic (CreateTopics), one per partition (Produce, Fetch,
ListOffsets), sometimes one per member or per transaction. Kafka writes an `errorCounts()` by hand for each
response class; here the walk is derived from the schema: a field whose name ends in `error_code` is a
code, a struct or struct array is visited if some field below it is one. The plan for a class is built once
(the first time a response of that class is seen) and kept, so a walk touches only the fields on the way to
a code: for a Metadata response, its topics and their partitions, never the replica lists.

Only non-zero codes are returned: a broker counts errors per API and error name (its
`request_errors_total`), and NONE would make that count one per partition of every produce and fetch
answered, which the request counts already say."""

from __future__ import annotations

from typing import Any

from .codec import Message

__all__ = ["error_codes"]

# A plan is a tuple of steps (attribute, kind, class below); kind: _CODE, _STRUCT, _ARRAY.
_CODE, _STRUCT, _ARRAY = 0, 1, 2
_Plan = tuple[tuple[str, int, Any], ...]
_PLANS: dict[type, _Plan] = {}


def error_codes(message: Message) -> list[int]:
    """The non-zero error codes in `message` and everything below it, one per occurrence."""
    out: list[int] = []
    cls = type(message)
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _plan(cls)
    if plan:
        _walk(message, plan, out)
    return out


def _plan(cls: type) -> _Plan:
    steps: list[tuple[str, int, Any]] = []
    for f in getattr(cls, "FIELDS", ()):
        if f.is_struct or f.is_struct_array:
            sub = f._cls
            if _PLANS.get(sub, None) is None:
                _plan(sub)
            if _PLANS[sub]:
                steps.append((f.name, _ARRAY if f.is_struct_array else _STRUCT, sub))
        elif f.name.endswith("error_code"):
            steps.append((f.name, _CODE, None))
    plan = _PLANS[cls] = tuple(steps)
    return plan


def _walk(message: Any, plan: _Plan, out: list[int]) -> None:
    for name, kind, sub in plan:
        value = getattr(message, name, None)
        if kind == _CODE:
            if value:
                out.append(int(value))
        elif value is not None:
            below = _PLANS[sub]
            if kind == _ARRAY:
                for item in value:
                    if item is not None:
                        _walk(item, below, out)
            else:
                _walk(value, below, out)
