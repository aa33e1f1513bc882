"""Record-batch compression codecs, keyed by the codec id in batch attributes bits 0-2.

    0 none   1 gzip   2 snappy   3 lz4   4 zstd

What we write, and why (each matches what the Java client writes, the format every client must read):

* gzip: one gzip member (RFC 1952, mtime 0) via zlib, like java.util.zip.GZIPOutputStream.
* snappy: the xerial-framed ("snappy-java") stream the Java client writes: a 16-byte header
  (0x82 'SNAPPY' 0x00, int32 version 1, int32 compatible-version 1) then blocks of
  [int32 big-endian compressed length][raw snappy block], each block holding at most 32 KiB of input
  (snappy-java's default). librdkafka writes raw snappy instead, but it, kafka-python, aiokafka and
  snappy-java all detect the xerial header and read both; the reverse (a reader that only knows raw
  snappy, as some minimal clients do) would break on Java's own bytes anyway, so Java's format is the
  one format every real client has to accept.
* lz4: the LZ4 frame format with the exact options of Kafka's Lz4BlockOutputStream: 64 KiB independent
  blocks, no content size, no block or content checksum. Kafka's reader rejects linked blocks.
* zstd: one standard zstd frame (content size included; every zstd reader accepts it).

What we read: the above, plus raw (unframed) snappy, multi-member gzip, concatenated lz4 and zstd
frames. A raw snappy stream can never start with the xerial magic (its first bytes would be a 2-byte
length preamble followed by an invalid copy tag), so the detection is unambiguous.

Decompression is bounded: `decompress(codec, data, max_bytes)` never produces more than `max_bytes`
bytes, whatever the input claims; it decodes in steps of at most `_STEP` bytes and stops as soon as the
bound is passed (RecordTooLargeError). For snappy the declared length of each block is checked before
the block is decoded. Transient memory is the output so far plus one step, and the final join (about
twice the output). zstd's own window buffer is limited by the library default (128 MiB window, the same
limit the Java client's zstd-jni applies). Any malformed input raises CorruptRecordError and nothing else.
"""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import snappy
import zstandard

from .errors import CorruptRecordError, LocalProtocolError, RecordTooLargeError, RemoteProtocolError
from .varint import read_uvarint

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_STEP = 256 * 1024  # the most output one decompressor call may produce

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


# ---------------------------------------------------------------------------------------------- compress


def _gzip_compress(data, level: int | None) -> bytes:
    c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 31)  # wbits 16+15: gzip container
    return c.compress(data) + c.flush()


def _snappy_compress(data, level: int | None) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    # Empty input still gets one (empty) block: kafka-python takes a bare 16-byte header for raw snappy.
    for i in range(0, max(len(view), 1), _XERIAL_BLOCK):
        block = snappy.compress(bytes(view[i : i + _XERIAL_BLOCK]))
        out += _INT32.pack(len(block))
        out += block
    return bytes(out)


def _lz4_compress(data, level: int | None) -> bytes:
    return lz4.frame.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )


def _zstd_compress(data, level: int | None) -> bytes:
    return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)


_COMPRESSORS = {GZIP: _gzip_compress, SNAPPY: _snappy_compress, LZ4: _lz4_compress, ZSTD: _zstd_compress}


def compress(codec: int, data, *, level: int | None = None) -> bytes:
    """Compress `data` (bytes-like) with `codec`; `level` None means the codec's usual default."""
    if codec == NONE:
        return bytes(data)
    fn = _COMPRESSORS.get(codec)
    if fn is None:
        raise LocalProtocolError(f"unknown compression codec {codec}")
    return fn(data, level)


# -------------------------------------------------------------------------------------------- decompress


def _too_large(max_bytes: int) -> RecordTooLargeError:
    return RecordTooLargeError(f"decompressed records exceed {max_bytes} bytes")


def _gzip_decompress(data: bytes, max_bytes: int) -> bytes:
    out: list[bytes] = []
    total = 0
    d = zlib.decompressobj(31)
    while True:
        chunk = d.decompress(data, min(_STEP, max_bytes + 1 - total))
        stuck = not chunk and len(d.unconsumed_tail) == len(data)
        data = d.unconsumed_tail
        if chunk:
            total += len(chunk)
            if total > max_bytes:
                raise _too_large(max_bytes)
            out.append(chunk)
        if d.eof:
            if not d.unused_data:  # another member may follow, as in `cat a.gz b.gz`
                return b"".join(out)
            data = d.unused_data
            d = zlib.decompressobj(31)
        elif stuck:
            raise CorruptRecordError("truncated gzip payload")


def _snappy_raw(block: bytes, budget: int, max_bytes: int) -> bytes:
    declared, _ = read_uvarint(block, 0)  # the uncompressed length every raw snappy block starts with
    if declared > budget:
        raise _too_large(max_bytes)
    return snappy.decompress(block)


def _snappy_decompress(data: bytes, max_bytes: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_raw(data, max_bytes, max_bytes)
    if len(data) < len(_XERIAL_HEADER):
        raise CorruptRecordError("truncated xerial snappy header")
    # The version fields are not checked: some writers (e.g. old Redpanda) put them little-endian.
    out: list[bytes] = []
    total = 0
    pos = len(_XERIAL_HEADER)
    n = len(data)
    while pos < n:
        if n - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or length > n - pos:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes, {n - pos} remain")
        block = _snappy_raw(data[pos : pos + length], max_bytes - total, max_bytes)
        pos += length
        total += len(block)
        out.append(block)
    return b"".join(out)


def _lz4_decompress(data: bytes, max_bytes: int) -> bytes:
    out: list[bytes] = []
    total = 0
    d = lz4.frame.LZ4FrameDecompressor()
    while True:
        chunk = d.decompress(data, max_length=min(_STEP, max_bytes + 1 - total))
        data = b""
        if chunk:
            total += len(chunk)
            if total > max_bytes:
                raise _too_large(max_bytes)
            out.append(chunk)
        if d.eof:
            if not d.unused_data:  # another frame may follow
                return b"".join(out)
            data = d.unused_data
            d = lz4.frame.LZ4FrameDecompressor()
        elif d.needs_input:
            raise CorruptRecordError("truncated lz4 payload")


_ZSTD_MAGIC = 0xFD2FB528
_FCS_SIZES = (0, 2, 4, 8)  # Frame_Content_Size bytes by FCS_Field_Size flag (flag 0: 1 byte if single segment)
_DICT_ID_SIZES = (0, 1, 2, 4)


def _zstd_check_frames(data: bytes) -> None:
    """Walk zstd frame and block headers (RFC 8878) without decoding: rejects truncated input and trailing
    garbage, which the streaming decoder would otherwise pass over silently."""
    n = len(data)
    if n == 0:
        raise CorruptRecordError("empty zstd payload")
    pos = 0
    while pos < n:
        if n - pos < 5:
            raise CorruptRecordError("truncated zstd frame header")
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: magic, int32 LE size, payload
            if n - pos < 8:
                raise CorruptRecordError("truncated zstd skippable frame")
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("not a zstd frame")
        fhd = data[pos + 4]
        single_segment = fhd & 0x20
        pos += 5 + (0 if single_segment else 1) + _DICT_ID_SIZES[fhd & 3]
        pos += _FCS_SIZES[fhd >> 6] or (1 if single_segment else 0)
        while True:
            if n - pos < 3:
                raise CorruptRecordError("truncated zstd block")
            bh = int.from_bytes(data[pos : pos + 3], "little")
            kind = (bh >> 1) & 3
            pos += 3 + (1 if kind == 1 else bh >> 3)  # an RLE block stores one byte
            if kind == 3:
                raise CorruptRecordError("reserved zstd block type")
            if bh & 1:  # last block of the frame
                break
        if fhd & 0x04:
            pos += 4  # content checksum
        if pos > n:
            raise CorruptRecordError("truncated zstd frame")


def _zstd_decompress(data: bytes, max_bytes: int) -> bytes:
    _zstd_check_frames(data)
    out: list[bytes] = []
    total = 0
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    while True:
        chunk = reader.read(min(_STEP, max_bytes + 1 - total))
        if not chunk:
            return b"".join(out)
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(max_bytes)
        out.append(chunk)


_DECOMPRESSORS = {GZIP: _gzip_decompress, SNAPPY: _snappy_decompress, LZ4: _lz4_decompress, ZSTD: _zstd_decompress}


def decompress(codec: int, data, max_bytes: int) -> bytes:
    """Decompress `data` (bytes-like) that was compressed with `codec`, producing at most `max_bytes`.

    Raises RecordTooLargeError past the bound, CorruptRecordError for anything malformed (including an
    unknown codec id, since the id comes from the peer's batch attributes).
    """
    if codec == NONE:
        if len(data) > max_bytes:
            raise _too_large(max_bytes)
        return bytes(data)
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    if not isinstance(data, bytes):
        data = bytes(data)
    try:
        return fn(data, max_bytes)
    except (CorruptRecordError, RecordTooLargeError, MemoryError):
        raise
    except RemoteProtocolError as e:  # a bad varint in a snappy block preamble
        raise CorruptRecordError(f"corrupt {CODEC_NAMES[codec]} payload: {e}") from e
    except Exception as e:  # each library has its own error types (zlib.error, RuntimeError, ZstdError...)
        raise CorruptRecordError(f"corrupt {CODEC_NAMES[codec]} payload: {e}") from e
