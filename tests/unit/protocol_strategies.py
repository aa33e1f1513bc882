"""Hypothesis strategies for protocol messages, built generically from the schema (`cls.FIELDS`).

`message(cls, version)` draws a valid message of `cls` for `version`:

* only fields present in the version get random values; absent ones keep their defaults (the decoder
  gives defaults for them, so a round trip must too);
* nullable fields are sometimes None;
* tagged fields are sometimes left at their default (and so not emitted), sometimes random;
* flexible structs sometimes carry unknown tagged fields, with tags no field of the struct uses,
  listed in ascending tag order (the order the decoder reads them back in);
* `records` fields are random bytes (the codec does not look inside them).

Collections and strings are kept short: the point is to cover every field of every version, not to
stress lengths (the fuzz tests do that).
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from odradek.protocol.codec import ZERO_UUID, is_flexible, make_default
from odradek.protocol.messages import REQUESTS, RESPONSES
from odradek.protocol.schema import F

MAX_ITEMS = 2

_INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)


def all_message_versions() -> list[tuple[type, int]]:
    """Every (message class, version) pair: each request and response of each API."""
    pairs = []
    for registry in (REQUESTS, RESPONSES):
        for key in sorted(registry):
            cls = registry[key]
            low, high = cls.VALID_VERSIONS
            pairs.extend((cls, v) for v in range(low, high + 1))
    return pairs


def pair_id(pair) -> str:
    cls, version = pair
    return f"{cls.__name__}-v{version}"


def message(cls: type, version: int) -> st.SearchStrategy:
    return _struct(cls, version, is_flexible(cls, version))


def _primitive(t: str) -> st.SearchStrategy:
    if t in _INT_BOUNDS:
        lo, hi = _INT_BOUNDS[t]
        # Favour the edges: they are where sign and width mistakes show.
        return st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi))
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return _TEXT
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    raise AssertionError(f"no strategy for type {t}")


def _value(f: F, version: int, flexible: bool) -> st.SearchStrategy:
    nullable = version in f.nrange
    if f.is_array:
        element = _struct(f._cls, version, flexible) if f.is_struct_array else _primitive(f.element_type)
        base = st.lists(element, max_size=MAX_ITEMS)
    elif f.is_struct:
        base = _struct(f._cls, version, flexible)
    else:
        base = _primitive(f.type)
    if nullable:
        base = st.one_of(st.none(), base)
    if flexible and version in f.trange:
        # A tagged field at its default is not written at all; cover both cases.
        base = st.one_of(st.builds(make_default, st.just(f)), base)
    return base


@functools.cache
def _struct(cls: type, version: int, flexible: bool) -> st.SearchStrategy:
    kwargs = {}
    for f in cls.FIELDS:
        if version in f.vrange:
            kwargs[f.name] = _value(f, version, flexible)
    if flexible:
        kwargs["unknown_tagged_fields"] = _unknown_tags(cls)
    return st.builds(cls, **kwargs)


def _unknown_tags(cls: type) -> st.SearchStrategy:
    known = {f.tag for f in cls.FIELDS if f.tag is not None}
    tag = st.one_of(st.integers(0, 200), st.integers(0, 2**31 - 1)).filter(lambda t: t not in known)
    return st.lists(st.tuples(tag, st.binary(max_size=6)), max_size=2, unique_by=lambda t: t[0]).map(sorted)
