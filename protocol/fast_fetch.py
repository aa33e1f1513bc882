"""A consumer's Fetch response (v4-v18) packed straight into its frame, without message objects.

Why: a tailing consumer's parked fetch completes when a produce lands, and what it then costs decides the
produce->consume latency. The generated codec would build a response, topic and partition object, then
walk them again to encode; this writes the same bytes in one pass (bench/PROFILE.md, "Fourth round").
It covers what the broker's fetch handler answers: throttle 0, no top-level error, session 0, every
partition with its offsets, aborted transactions null (read_uncommitted) or empty (read_committed), no
preferred replica and none of the tagged fields (diverging epoch, current leader, snapshot id, node
endpoints), which the handler never sets. tests/unit/test_protocol_fast_fetch.py compares it with the
codec byte for byte at every version.
"""

from __future__ import annotations

import struct

from .codec import FileRegion
from .connection import frame_chunks_size
from .varint import write_uvarint

FETCH_KEY = 1
FAST_VERSIONS = range(4, 19)
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD_CLASSIC = struct.Struct(">ii")  # frame size, correlation id; then the body
_HEAD_FLEXIBLE = struct.Struct(">iiB")  # ... and the response header's (empty) tagged fields
_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error code, high watermark, last stable offset
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and the log start offset


def encode_fetch_response(correlation_id: int, topics, api_version: int) -> list:
    """A whole Fetch response frame as chunks (bytearrays and the records' FileRegions, in order), the
    first of them starting with the frame size.

    `topics`: [(name, or from v13 the topic id as 16 bytes, [(index, error_code, high_watermark,
    last_stable_offset, log_start_offset, aborted, records)])] where `aborted` is None or an empty list and
    `records` is a list of FileRegions or bytes-likes (empty: no records)."""
    flexible = api_version >= FLEXIBLE_FROM
    out = bytearray((_HEAD_FLEXIBLE if flexible else _HEAD_CLASSIC).pack(0, correlation_id, *((0,) if flexible else ())))
    chunks: list = [out]
    out += _I32.pack(0) if api_version < 7 else _TOP.pack(0, 0, 0)
    _put_count(out, len(topics), flexible)
    partition = _PARTITION_V5 if api_version >= 5 else _PARTITION_V4
    with_replica = api_version >= 11
    by_id = api_version >= TOPIC_IDS_FROM
    for name, partitions in topics:
        if by_id:
            out += name
        else:
            data = name.encode("utf-8")
            if flexible:
                write_uvarint(out, len(data) + 1)
            else:
                out += _I16.pack(len(data))
            out += data
        _put_count(out, len(partitions), flexible)
        for index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted, records in partitions:
            if api_version >= 5:
                out += partition.pack(index, error_code, high_watermark, last_stable_offset, log_start_offset)
            else:
                out += partition.pack(index, error_code, high_watermark, last_stable_offset)
            if aborted is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            elif aborted:
                raise ValueError("aborted transactions are not encoded here")
            else:
                _put_count(out, 0, flexible)
            if with_replica:
                out += b"\xff\xff\xff\xff"  # preferred_read_replica -1
            size = frame_chunks_size(records)
            if flexible:
                write_uvarint(out, size + 1)
            else:
                out += _I32.pack(size)
            for chunk in records:
                if isinstance(chunk, FileRegion):
                    chunks.append(chunk)
                    out = bytearray()
                    chunks.append(out)
                else:
                    out += chunk
            if flexible:
                out.append(0)  # partition tagged fields
        if flexible:
            out.append(0)  # topic tagged fields
    if flexible:
        out.append(0)  # body tagged fields (node_endpoints absent)
    if not out:
        chunks.pop()
    _I32.pack_into(chunks[0], 0, frame_chunks_size(chunks) - 4)
    return chunks


def _put_count(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += _I32.pack(n)
