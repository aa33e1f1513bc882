"""Round trips of every message of every API at every valid version, drawn from the schema itself.

Two properties per (class, version):

* `decode(encode(m, v), v) == m`;
* `len(encode(m, v)) == size(m, v)`: `size()` walks the schema generically, so it is an independent check
  on the generated encoder (lengths, compact prefixes, which tagged fields are emitted).

And the rule Kafka's generated code enforces: a non-default value in a field the version lacks is an
error (`LocalProtocolError`) unless the field is ignorable, in which case it is dropped.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.codec import decode, encode, field_default, size
from odradek.protocol.errors import LocalProtocolError
from odradek.protocol.messages import REQUESTS, RESPONSES

from tests.unit.protocol_strategies import all_message_versions, message, pair_id

PAIRS = all_message_versions()

# Few examples per (class, version): there are ~500 of them, and the strategy reaches every field
# present in the version on each draw, so breadth comes from the parametrization, not the count.
ROUNDTRIP_SETTINGS = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
@ROUNDTRIP_SETTINGS
@given(data=st.data())
def test_round_trip(pair, data):
    cls, version = pair
    msg = data.draw(message(cls, version), label="message")
    wire = encode(msg, version)
    assert len(wire) == size(msg, version)
    assert decode(cls, wire, version) == msg
    # Encoding is deterministic: the decoded message encodes to the same bytes.
    assert encode(decode(cls, wire, version), version) == wire


def test_every_api_is_covered():
    assert {cls.API_KEY for cls, _ in PAIRS if cls.IS_REQUEST} == set(REQUESTS)
    assert {cls.API_KEY for cls, _ in PAIRS if not cls.IS_REQUEST} == set(RESPONSES)
    assert len(PAIRS) == sum(2 * (c.VALID_VERSIONS[1] - c.VALID_VERSIONS[0] + 1) for c in REQUESTS.values())


@pytest.mark.parametrize("pair", PAIRS, ids=pair_id)
def test_default_message_round_trips(pair):
    cls, version = pair
    msg = cls()
    try:
        wire = encode(msg, version)
    except LocalProtocolError:
        # A few messages have non-nullable fields whose default is None; such a message must be
        # filled in before it can be sent. That is an encode-time refusal, never a bad encoding.
        return
    assert len(wire) == size(msg, version)
    assert decode(cls, wire, version) == msg


# ---------------------------------------------------------------------------------------------------
# Fields absent from a version


def _absent_fields(cls: type, version: int, path: tuple = ()):
    """(path, field) for each field absent in `version`, in every struct reachable through present fields."""
    for f in cls.FIELDS:
        if version not in f.vrange:
            yield path, f
        elif f.is_struct or f.is_struct_array:
            yield from _absent_fields(f._cls, version, path + (f,))


def _non_default(f):
    d = field_default(f)
    if f.is_array:
        if d is None:
            return []
        element = f._cls() if f.is_struct_array else field_default_element(f.element_type)
        return [element]
    if f.is_struct:
        if f.default is None:
            return f._cls()
        inst = f._cls()  # a default struct with its first field changed
        first = inst.FIELDS[0]
        setattr(inst, first.name, _non_default(first))
        return inst
    t = f.type
    if t == "bool":
        return not d
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return d - 1 if d > 0 else d + 1
    if t == "float64":
        return d + 1.0
    if t == "string":
        return (d or "") + "x"
    if t in ("bytes", "records"):
        return b"x"
    if t == "uuid":
        return uuid.UUID(int=1) if d != uuid.UUID(int=1) else uuid.UUID(int=2)
    raise AssertionError(t)


def field_default_element(t: str):
    return {"string": "x", "uuid": uuid.UUID(int=1)}.get(t, 1)


def _build(cls: type, path: tuple, leaf, value):
    """A default message with one element along `path`, and `leaf` set to `value` at its end."""
    top = cls()
    obj = top
    for f in path:
        sub = f._cls()
        setattr(obj, f.name, [sub] if f.is_array else sub)
        obj = sub
    if leaf is not None:
        setattr(obj, leaf.name, value)
    return top


@pytest.mark.parametrize("cls", list(REQUESTS.values()) + list(RESPONSES.values()), ids=lambda c: c.__name__)
def test_absent_field_rules(cls):
    checked = 0
    low, high = cls.VALID_VERSIONS
    for version in range(low, high + 1):
        for path, f in _absent_fields(cls, version):
            baseline = _build(cls, path, None, None)
            try:
                expected = encode(baseline, version)
            except LocalProtocolError:
                continue  # the path itself needs values before it can be encoded; covered by round trips
            msg = _build(cls, path, f, _non_default(f))
            where = ".".join([cls.__name__] + [p.name for p in path] + [f.name])
            if f.ignorable:
                # Dropped silently: same bytes as without it, and it decodes to its default.
                assert encode(msg, version) == expected, where
                assert decode(cls, expected, version) == decode(cls, encode(baseline, version), version)
            else:
                with pytest.raises(LocalProtocolError, match=f.name):
                    encode(msg, version)
            checked += 1
    assert checked or all(
        not list(_absent_fields(cls, v)) for v in range(low, high + 1)
    ), f"{cls.__name__}: no absent-field case could be built"


def test_absent_field_examples():
    """The rule on fields everyone knows, stated by hand."""
    fetch = REQUESTS[1]
    part = fetch.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1, last_fetched_epoch=7)
    req = fetch(max_wait_ms=1, min_bytes=1, topics=[fetch.FetchTopic(topic="t", partitions=[part])])
    # last_fetched_epoch exists from v12 and is not ignorable.
    encode(req, 12)
    with pytest.raises(LocalProtocolError, match="last_fetched_epoch"):
        encode(req, 11)
    # A topic name is ignorable in v13+ (topics go by id): dropped, decoding to "".
    wire = encode(req, 13)
    assert decode(fetch, wire, 13).topics[0].topic == ""

    produce = REQUESTS[0]
    # transactional_id is nullable from v3 (the first valid version): None is fine everywhere.
    for v in range(3, 14):
        encode(produce(acks=1, timeout_ms=1), v)
    metadata = REQUESTS[3]
    # Null topics ("all topics") does not exist in v0.
    with pytest.raises(LocalProtocolError):
        encode(metadata(topics=None), 0)
    assert encode(metadata(topics=None), 1) == b"\xff\xff\xff\xff"


def test_encode_outside_valid_versions_is_local_error():
    produce = REQUESTS[0]
    for v in (2, 14):
        with pytest.raises(LocalProtocolError):
            encode(produce(), v)
