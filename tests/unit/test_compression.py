"""Codecs of protocol/compression.py: round trips, bounded decompression, garbage handling, and agreement
with kafka-python's own codec functions (an independent implementation of the same wire formats)."""

from __future__ import annotations

import os
import struct
import tracemalloc
import zlib

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol import compression as c
from odradek.protocol.errors import CorruptRecordError, LocalProtocolError, RecordTooLargeError

CODECS = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
IDS = [c.CODEC_NAMES[x] for x in CODECS]
MiB = 1 << 20

kafka_codec = pytest.importorskip("kafka.codec")


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=5000))
def test_round_trip(codec, data):
    z = c.compress(codec, data)
    assert c.decompress(codec, z, len(data)) == data
    assert c.decompress(codec, bytearray(z), len(data) + 10) == data
    assert c.decompress(codec, memoryview(z), len(data) + 10) == data


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@pytest.mark.parametrize("size", [0, 1, 32 * 1024 + 1, 64 * 1024 + 7, 700_000])
def test_round_trip_block_boundaries(codec, size):
    # Half random, half repetitive: spans several xerial (32 KiB), lz4 (64 KiB) blocks and decoder steps.
    data = (os.urandom(size // 2) + b"kafka" * size)[:size]
    z = c.compress(codec, data)
    assert c.decompress(codec, z, size) == data
    if size:
        with pytest.raises(RecordTooLargeError):
            c.decompress(codec, z, size - 1)


def test_none_codec():
    assert c.compress(c.NONE, bytearray(b"abc")) == b"abc"
    assert c.decompress(c.NONE, memoryview(b"abc"), 3) == b"abc"
    with pytest.raises(RecordTooLargeError):
        c.decompress(c.NONE, b"abcd", 3)


def test_unknown_codec():
    with pytest.raises(LocalProtocolError):
        c.compress(5, b"x")
    for codec in (5, 6, 7):
        with pytest.raises(CorruptRecordError):
            c.decompress(codec, b"x", 100)


def test_written_formats_match_the_java_client():
    # snappy: xerial header, then [int32 BE length][raw snappy block] with 32 KiB input blocks.
    data = b"0123456789" * 10_000
    z = c.compress(c.SNAPPY, data)
    assert z[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first,) = struct.unpack_from(">i", z, 16)
    assert snappy.decompress(z[20 : 20 + first]) == data[: 32 * 1024]
    # lz4: frame magic, FLG = version 01 + independent blocks only, BD = 64 KiB max block.
    z = c.compress(c.LZ4, data)
    assert z[:4] == b"\x04\x22\x4d\x18" and z[4] == 0x60 and z[5] == 0x40
    # gzip: a gzip member (magic 1f 8b, deflate).
    assert c.compress(c.GZIP, data)[:3] == b"\x1f\x8b\x08"
    assert c.compress(c.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"


def test_snappy_reads_raw_and_xerial():
    data = b"raw snappy as librdkafka writes it " * 50
    assert c.decompress(c.SNAPPY, snappy.compress(data), len(data)) == data
    assert c.decompress(c.SNAPPY, c.compress(c.SNAPPY, b""), 0) == b""
    # Version fields written little-endian (seen from some producers) are tolerated.
    z = c.compress(c.SNAPPY, data)
    z = z[:8] + struct.pack("<ii", 1, 1) + z[16:]
    assert c.decompress(c.SNAPPY, z, len(data)) == data


def test_concatenated_members_and_frames():
    a, b = b"first " * 100, b"second " * 100
    assert c.decompress(c.GZIP, c.compress(c.GZIP, a) + c.compress(c.GZIP, b), MiB) == a + b
    assert c.decompress(c.LZ4, c.compress(c.LZ4, a) + c.compress(c.LZ4, b), MiB) == a + b
    assert c.decompress(c.ZSTD, c.compress(c.ZSTD, a) + c.compress(c.ZSTD, b), MiB) == a + b
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"xyz"
    assert c.decompress(c.ZSTD, skippable + c.compress(c.ZSTD, a), MiB) == a


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_truncated_and_trailing_garbage_are_corrupt(codec):
    data = os.urandom(3000) + b"x" * 3000
    z = c.compress(codec, data)
    for cut in (0, 1, 3, 10, len(z) // 2, len(z) - 1):
        with pytest.raises(CorruptRecordError):
            c.decompress(codec, z[:cut], MiB)
    if codec != c.SNAPPY:  # a xerial stream has no end marker: extra bytes read as a (bad) block
        with pytest.raises(CorruptRecordError):
            c.decompress(codec, z + b"\x00garbage", MiB)


def test_zstd_streaming_frame_without_content_size():
    data = b"streamed like zstd-jni " * 1000
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    z = cobj.compress(data) + cobj.flush()
    assert c.decompress(c.ZSTD, z, len(data)) == data
    with pytest.raises(RecordTooLargeError):
        c.decompress(c.ZSTD, z, len(data) - 1)


# ----------------------------------------------------------------------------------- decompression bombs

BOMB = 100 * MiB


def _gzip_bomb() -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    return b"".join(co.compress(chunk) for _ in range(BOMB // MiB)) + co.flush()


def _snappy_bomb() -> bytes:
    block = snappy.compress(bytes(32 * 1024))
    one = struct.pack(">i", len(block)) + block
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + one * (BOMB // (32 * 1024))


def _lz4_bomb() -> bytes:
    # Content size written in the frame header claims the full 100 MB.
    co = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB, content_checksum=True)
    chunk = bytes(MiB)
    return co.begin(BOMB) + b"".join(co.compress(chunk) for _ in range(BOMB // MiB)) + co.flush()


def _zstd_bomb() -> bytes:
    co = zstandard.ZstdCompressor(level=1).compressobj(size=BOMB)  # header claims 100 MB
    chunk = bytes(MiB)
    return b"".join(co.compress(chunk) for _ in range(BOMB // MiB)) + co.flush()


BOMBS = {c.GZIP: _gzip_bomb, c.SNAPPY: _snappy_bomb, c.LZ4: _lz4_bomb, c.ZSTD: _zstd_bomb}


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_decompression_bomb_is_refused_in_bounded_memory(codec):
    bomb = BOMBS[codec]()
    assert len(bomb) < 5 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            c.decompress(codec, bomb, MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The output so far (1 MiB) plus one step, the input copy and the final join stay far below 100 MB.
    assert peak < len(bomb) + 4 * MiB


def test_raw_snappy_block_claiming_a_huge_length_is_refused_before_decoding():
    forged = b"\xff\xff\xff\xff\x0f" + b"\x00" * 20  # preamble: 4 GiB - 1
    with pytest.raises(RecordTooLargeError):
        c.decompress(c.SNAPPY, forged, MiB)
    with pytest.raises(RecordTooLargeError):
        c.decompress(c.SNAPPY, snappy.compress(bytes(2 * MiB)), MiB)
    # A xerial stream: the budget is shared across blocks.
    z = c.compress(c.SNAPPY, bytes(2 * MiB))
    with pytest.raises(RecordTooLargeError):
        c.decompress(c.SNAPPY, z, MiB)


# ------------------------------------------------------------------------------------------ garbage input

ALLOWED = (CorruptRecordError, RecordTooLargeError)


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=300))
def test_random_bytes_only_raise_protocol_errors(codec, junk):
    try:
        c.decompress(codec, junk, 64 * 1024)
    except ALLOWED:
        pass


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=2000), mutations=st.lists(st.tuples(st.integers(0), st.integers(0, 255)),
                                                                    min_size=1, max_size=4))
def test_mutated_streams_only_raise_protocol_errors(codec, data, mutations):
    z = bytearray(c.compress(codec, data + data))
    for where, byte in mutations:
        z[where % len(z)] = byte
    try:
        out = c.decompress(codec, z, 64 * 1024)
    except ALLOWED:
        return
    assert len(out) <= 64 * 1024


# ------------------------------------------------------------------------- agreement with kafka-python


@pytest.mark.parametrize("size", [0, 10, 40_000, 200_000])
def test_agrees_with_kafka_python_codecs(size):
    data = (os.urandom(size // 3) + b"interop" * size)[:size]
    theirs = {
        c.GZIP: (kafka_codec.gzip_encode, kafka_codec.gzip_decode),
        c.SNAPPY: (kafka_codec.snappy_encode, kafka_codec.snappy_decode),
        c.LZ4: (kafka_codec.lz4_encode, kafka_codec.lz4_decode),
        c.ZSTD: (kafka_codec.zstd_encode, kafka_codec.zstd_decode),
    }
    for codec, (encode, decode) in theirs.items():
        assert c.decompress(codec, encode(data), size) == data, c.CODEC_NAMES[codec]
        assert decode(c.compress(codec, data)) == data, c.CODEC_NAMES[codec]
    # kafka-python can also write raw (non-xerial) snappy, as librdkafka does.
    assert c.decompress(c.SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=False), size) == data
