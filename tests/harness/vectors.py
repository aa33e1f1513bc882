"""The golden protocol frames in tests/vectors/: where they are, how they are named, which must exist, and how
a captured frame is re-framed."""

from __future__ import annotations

import pathlib
import re
import struct
from odradek.protocol.codec import encode_into
from odradek.protocol.headers import RequestHeader, write_request_header


VECTORS_DIR = pathlib.Path(__file__).resolve().parent.parent / "vectors"
NAME = re.compile(r"(?P<api>[a-z0-9_]+)_request_v(?P<version>\d+)_(?P<nnn>\d{3})\.bin")
# What each client must have sent on its way through bootstrap, produce, fetch and a group
# (kafka-protocol.md §1.3); kcat is optional (captured only where it is installed).
REQUIRED = {"api_versions", "metadata", "init_producer_id", "produce", "list_offsets", "fetch"}
# (client, api, version) -> the bytes a client leaves after the request body.
TRAILING = {("confluent_kafka", "metadata", 13): b"\x01\x00\x00"}


def reframe(header: RequestHeader, request) -> bytes:
    """The frame ClientConnection.send_request would write, with the header's own correlation id."""
    out = bytearray(4)
    write_request_header(out, header)
    chunks: list = []
    encode_into(request, header.api_version, out, chunks)
    assert not chunks
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)
