"""Golden request frames captured from real clients (tests/vectors/, made by `python -m tests.capture`).

Each vector is one whole frame as the client sent it. We must parse it (fed whole and byte at a time)
and, re-encoding what we parsed with the header and body codecs ClientConnection uses, reproduce it
byte for byte: field order, compact lengths, null markers and tag buffers all have to agree with
what librdkafka, aiokafka and kafka-python actually write.

One known exception, listed in TRAILING: librdkafka 2.16's all-topics Metadata v13 request ends with
three bytes after its body, which ServerConnection ignores as Kafka does. There the re-encoding must
equal the frame without them.
"""

from __future__ import annotations

import pathlib
import struct

import pytest

from odradek.protocol.connection import ClientConnection, RequestReceived, ServerConnection
from odradek.protocol.messages import BY_KEY
from odradek.protocol.records import ATTR_CODEC_MASK, validate_batch
from odradek.protocol.schema import snake
from tests.harness.vectors import NAME, REQUIRED, TRAILING, VECTORS_DIR, reframe

FILES = sorted(VECTORS_DIR.glob("*/*.bin"))
PAYLOAD = b"vector-0"  # what tests.capture makes each producer send

GROUP = {"find_coordinator", "join_group", "sync_group", "heartbeat", "offset_fetch", "offset_commit", "leave_group"}
CLIENTS = ("confluent_kafka", "aiokafka", "kafka_python")


def _id(path: pathlib.Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_vectors_exist_for_every_client():
    for client in CLIENTS:
        names = [NAME.fullmatch(p.name) for p in (VECTORS_DIR / client).glob("*.bin")]
        assert all(names), f"{client}: a file does not follow <api>_request_v<N>_<nnn>.bin"
        apis = {m["api"] for m in names}
        assert REQUIRED | GROUP <= apis, f"{client}: missing {sorted(REQUIRED | GROUP - apis)}"
        assert (VECTORS_DIR / client / "VERSION").read_text().strip()


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_vector_parses_and_re_encodes_byte_identically(path):
    data = path.read_bytes()
    name = NAME.fullmatch(path.name)
    assert name, path.name

    (event,) = ServerConnection().receive_data(data)
    assert isinstance(event, RequestReceived)
    assert snake(BY_KEY[event.header.api_key].name) == name["api"]
    assert event.header.api_version == int(name["version"])
    assert event.frame_size == len(data) - 4

    again = reframe(event.header, event.request)
    if again != data:
        # Only the known stray bytes may differ: the re-encoding is the frame without them.
        trailing = TRAILING.get((path.parent.name, name["api"], int(name["version"])))
        assert trailing and data.endswith(trailing), "re-encoding differs from what the client sent"
        body = data[4 : len(data) - len(trailing)]
        assert again == struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_vector_byte_at_a_time(path):
    data = path.read_bytes()
    conn = ServerConnection()
    events = []
    for i in range(len(data)):
        got = conn.receive_data(data[i : i + 1])
        assert not got or i == len(data) - 1
        events += got
    assert events == ServerConnection().receive_data(data)
    assert conn.buffered_bytes == 0


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_client_connection_frames_the_same_bytes(path):
    """ClientConnection itself, given the client's id, writes the vector (its own correlation id aside)."""
    data = path.read_bytes()
    (event,) = ServerConnection().receive_data(data)
    if event.header.unknown_tagged_fields:
        pytest.skip("header tagged fields are not something ClientConnection writes")
    client = ClientConnection(client_id=event.header.client_id)
    correlation_id, frame = client.send_request(event.request, event.header.api_version)
    assert correlation_id == 0
    expected = reframe(event.header, event.request)  # equal to the vector, up to TRAILING
    assert frame[:8] + frame[12:] == expected[:8] + expected[12:]


def test_trailing_bytes_are_exactly_the_known_cases():
    """Which real frames carry bytes after the body: the librdkafka quirk, and nothing else."""
    found = {}
    for path in FILES:
        data = path.read_bytes()
        (event,) = ServerConnection().receive_data(data)
        extra = len(data) - len(reframe(event.header, event.request))
        if extra:
            m = NAME.fullmatch(path.name)
            found[(path.parent.name, m["api"], int(m["version"]))] = data[len(data) - extra :]
    assert found == TRAILING


@pytest.mark.parametrize("path", [p for p in FILES if p.name.startswith("produce_")], ids=_id)
def test_produce_vectors_carry_valid_record_batches(path):
    """The clients' record batches pass our layout and CRC-32C checks, and hold the message sent."""
    (event,) = ServerConnection().receive_data(path.read_bytes())
    batches = [p.records for t in event.request.topic_data for p in t.partition_data]
    assert batches
    for records in batches:
        header = validate_batch(records, 0)
        assert header.size == len(records)
        if header.attributes & ATTR_CODEC_MASK == 0:
            assert PAYLOAD in bytes(records)
