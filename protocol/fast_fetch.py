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
from .varint import write_array_count, write_uvarint

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
    write_array_count(out, len(topics), flexible)
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
        write_array_count(out, len(partitions), flexible)
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
                write_array_count(out, 0, flexible)
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


# -- a follower's Fetch request ------------------------------------------------------------------------

# Fetch v18's partition high_watermark (KIP-1166) at its default: the replica does not say it (a consumer,
# or a follower of an earlier release); it is then not sent, and a leader parks the fetch as before.
NO_HIGH_WATERMARK = 0x7FFFFFFFFFFFFFFF
FOLLOWER_VERSIONS = range(15, 19)  # replica_state (15+), topic ids (13+), flexible; v18: the follower's HW
_REQUEST_TOP = struct.Struct(">iiibii")  # max_wait_ms, min_bytes, max_bytes, isolation_level, session id, epoch
_REQUEST_PARTITION = struct.Struct(">iiqiqi")  # partition, leader epoch, fetch offset, last epoch, log start, max
_HIGH_WATERMARK_TAG = struct.Struct(">BBBq")  # one tagged field: count 1, tag 1, size 8, the value
_REPLICA_STATE_TAG = struct.Struct(">BBBiqB")  # one tagged field: count 1, tag 1, size 13, id, epoch, no tags


def encode_follower_fetch(out: bytearray, api_version: int, *, replica_id: int, replica_epoch: int, max_wait_ms: int,
                          min_bytes: int, max_bytes: int, topics) -> None:
    """Append a follower's Fetch request body (v15-v18) to `out`, after its request header: what
    broker/replica_fetcher.py sends to a leader every round, written in one pass instead of building a
    request, topic and partition objects for the codec to walk (a tenth of a follower's CPU at low rates).

    `topics`: [(topic id as 16 bytes, [(partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
    log_start_offset, partition_max_bytes, high_watermark)])]; the high watermark goes out from v18 only
    (KIP-1166), and only when known (>= 0). No session, no rack, no cluster id, no forgotten topics, no
    directory id: what a follower's fetch carries. tests/unit/test_protocol_fast_fetch.py compares it with
    the codec byte for byte."""
    if api_version not in FOLLOWER_VERSIONS:
        raise ValueError(f"a follower's Fetch is packed at v15-v18, not v{api_version}")
    with_hw = api_version >= 18
    out += _REQUEST_TOP.pack(max_wait_ms, min_bytes, max_bytes, 0, 0, -1)
    write_array_count(out, len(topics), True)
    pack_partition = _REQUEST_PARTITION.pack
    for topic_id, partitions in topics:
        out += topic_id
        write_array_count(out, len(partitions), True)
        for index, leader_epoch, fetch_offset, last_epoch, log_start, part_max, high_watermark in partitions:
            out += pack_partition(index, leader_epoch, fetch_offset, last_epoch, log_start, part_max)
            if with_hw and high_watermark != NO_HIGH_WATERMARK:
                out += _HIGH_WATERMARK_TAG.pack(1, 1, 8, high_watermark)
            else:
                out.append(0)
        out.append(0)  # the topic's tagged fields
    out += b"\x01\x01"  # no forgotten topics, rack ""
    out += _REPLICA_STATE_TAG.pack(1, 1, 13, replica_id, replica_epoch, 0)

