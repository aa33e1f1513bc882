"""Walking the batches of a segment file with pread.

`iter_headers` reads only batch headers, in small blocks, and serves lookups, log-end-offset discovery and
producer-state replay: none of them needs record bytes. `iter_batches` yields whole batches from large
reads, for recovery and the cleaner. Both stop silently at the first batch that cannot be complete
(a header cut short, a length smaller than a header or reaching past `end`); callers compare where they
stopped with where they expected to stop.

`check_stored_batch` is the recovery check of a batch read back from disk. It differs from the produce
check (`protocol.records.validate_batch`) in one way: a batch with no records is legal on disk, because
the cleaner keeps emptied batches that carry a producer's last sequence number.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchHeader, compute_crc, read_batch_header

HEADER_BLOCK_BYTES = 8192
BATCH_BLOCK_BYTES = 1 << 20
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


def iter_headers(fd: int, start: int, end: int, *, block_bytes: int = HEADER_BLOCK_BYTES) -> Iterator[tuple[int, BatchHeader]]:
    """`(position, header)` of each complete batch in `[start, end)`."""
    pos = start
    buf = b""
    buf_pos = start
    while end - pos >= HEADER_SIZE:
        rel = pos - buf_pos
        if len(buf) - rel < HEADER_SIZE:
            buf = os.pread(fd, min(block_bytes, end - pos), pos)
            buf_pos, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        header = read_batch_header(buf, rel)
        if header.batch_length < _MIN_BATCH_LENGTH or header.size > end - pos:
            return
        yield pos, header
        pos += header.size


def iter_batches(fd: int, start: int, end: int, *, block_bytes: int = BATCH_BLOCK_BYTES) -> Iterator[tuple[int, memoryview]]:
    """`(position, bytes of the whole batch)` for each batch in `[start, end)` whose length is plausible.

    The view stays valid after the iteration moves on (each block is a fresh bytes object).
    """
    pos = start
    buf = b""
    buf_pos = start
    while end - pos >= HEADER_SIZE:
        rel = pos - buf_pos
        if len(buf) - rel < HEADER_SIZE:
            buf = os.pread(fd, min(block_bytes, end - pos), pos)
            buf_pos, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        batch_length = int.from_bytes(buf[rel + 8 : rel + 12], "big", signed=True)
        size = batch_length + LOG_OVERHEAD
        if batch_length < _MIN_BATCH_LENGTH or size > end - pos:
            return
        if len(buf) - rel < size:
            buf = os.pread(fd, min(max(block_bytes, size), end - pos), pos)
            buf_pos, rel = pos, 0
            if len(buf) < size:
                return
        yield pos, memoryview(buf)[rel : rel + size]
        pos += size


def check_stored_batch(batch) -> BatchHeader:
    """Validate one whole batch read back from a segment. Raises CorruptRecordError naming the fault."""
    header = read_batch_header(batch, 0)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported magic {header.magic}")
    if header.batch_length < _MIN_BATCH_LENGTH or header.size != len(batch):
        raise CorruptRecordError(f"batch length {header.batch_length} does not match the bytes read")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError("negative record count or last offset delta")
    if compute_crc(batch, 0, header.size) != header.crc:
        raise CorruptRecordError("CRC-32C mismatch")
    return header
