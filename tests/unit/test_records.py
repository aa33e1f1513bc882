"""Record batch v2: varints, record encoding/decoding, control records, in-place header rewrites, hostile
input, and byte-level agreement with kafka-python's independent record batch builder and reader."""

from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol import compression as comp
from odradek.protocol import records as R
from odradek.protocol import varint as V
from odradek.protocol.errors import (
    CorruptRecordError,
    LocalProtocolError,
    RecordTooLargeError,
    RemoteProtocolError,
)

CODECS = [comp.NONE, comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD]
IDS = [comp.CODEC_NAMES[x] for x in CODECS]
MiB = 1 << 20
HYP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


def decode(buf, limit=MiB):
    return list(R.iter_records(buf, max_uncompressed_bytes=limit))


# ----------------------------------------------------------------------------------------------- varints


@pytest.mark.parametrize(
    "write, read, value, encoded",
    [
        (V.write_uvarint, V.read_uvarint, 0, "00"),
        (V.write_uvarint, V.read_uvarint, 127, "7f"),
        (V.write_uvarint, V.read_uvarint, 300, "ac02"),
        (V.write_uvarint, V.read_uvarint, 2**32 - 1, "ffffffff0f"),
        (V.write_varint, V.read_varint, 0, "00"),
        (V.write_varint, V.read_varint, -1, "01"),
        (V.write_varint, V.read_varint, 1, "02"),
        (V.write_varint, V.read_varint, -64, "7f"),
        (V.write_varint, V.read_varint, 64, "8001"),
        (V.write_varint, V.read_varint, 2**31 - 1, "feffffff0f"),
        (V.write_varint, V.read_varint, -(2**31), "ffffffff0f"),
        (V.write_varlong, V.read_varlong, -(2**63), "ffffffffffffffffff01"),
        (V.write_varlong, V.read_varlong, 2**63 - 1, "feffffffffffffffff01"),
    ],
)
def test_varint_vectors(write, read, value, encoded):
    out = bytearray(b"\xaa")
    write(out, value)
    assert out[1:].hex() == encoded
    assert read(bytes(out) + b"\xbb", 1) == (value, len(out))


@settings(max_examples=200, deadline=None)
@given(u=st.integers(0, 2**32 - 1), i=I32, q=I64)
def test_varint_round_trip_and_sizes(u, i, q):
    for write, read, size, value in (
        (V.write_uvarint, V.read_uvarint, V.uvarint_size, u),
        (V.write_varint, V.read_varint, V.varint_size, i),
        (V.write_varlong, V.read_varlong, V.varlong_size, q),
    ):
        out = bytearray()
        write(out, value)
        assert len(out) == size(value)
        assert read(memoryview(out), 0) == (value, len(out))


def test_varint_read_errors():
    for read in (V.read_uvarint, V.read_varint, V.read_varlong):
        for bad in (b"", b"\x80", b"\xff\xff"):
            with pytest.raises(RemoteProtocolError):
                read(bad, 0)
        with pytest.raises(RemoteProtocolError):
            read(b"\x00", 1)
    too_long_32 = b"\x80\x80\x80\x80\x80\x00"
    with pytest.raises(RemoteProtocolError):
        V.read_uvarint(too_long_32, 0)
    with pytest.raises(RemoteProtocolError):
        V.read_varint(too_long_32, 0)
    with pytest.raises(RemoteProtocolError):  # 5 bytes, but the value needs 33 bits
        V.read_uvarint(b"\xff\xff\xff\xff\x1f", 0)
    assert V.read_varlong(b"\x80\x80\x80\x80\x80\x00", 0) == (0, 6)  # fine for 64-bit
    with pytest.raises(RemoteProtocolError):
        V.read_varlong(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(RemoteProtocolError):
        V.read_varlong(b"\xff" * 9 + b"\x02", 0)  # 65 bits


def test_varint_write_range_errors():
    for write, bad in (
        (V.write_uvarint, -1),
        (V.write_uvarint, 2**32),
        (V.write_varint, 2**31),
        (V.write_varint, -(2**31) - 1),
        (V.write_varlong, 2**63),
    ):
        with pytest.raises(LocalProtocolError):
            write(bytearray(), bad)


# ---------------------------------------------------------------------------------------------- records

header_st = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20))
record_st = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.lists(header_st, max_size=3),
    st.integers(0, 2**41),
)


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@HYP
@given(recs=st.lists(record_st, min_size=1, max_size=30), base_offset=st.integers(0, 2**62))
def test_round_trip(codec, recs, base_offset):
    buf = R.build_batch(recs, base_offset=base_offset, compression=codec)
    h = R.validate_batch(buf)
    assert h.size == len(buf)
    assert h.compression == codec
    assert h.records_count == len(recs) and h.last_offset_delta == len(recs) - 1
    assert h.base_timestamp == recs[0][3]
    assert h.max_timestamp == max(r[3] for r in recs)
    out = decode(buf)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in out] == [(k, v, hs, ts) for k, v, hs, ts in recs]
    assert [r.offset for r in out] == list(range(base_offset, base_offset + len(recs)))


def test_negative_timestamp_deltas_and_nulls():
    recs = [(None, b"a", [], 5000), (b"k", None, [("h", None), ("", b"")], 1000), (None, None, None, -1)]
    buf = R.build_batch(recs)
    h = R.validate_batch(buf)
    assert (h.base_timestamp, h.max_timestamp) == (5000, 5000)
    out = decode(buf)
    assert [r.timestamp for r in out] == [5000, 1000, -1]
    assert out[1].headers == [("h", None), ("", b"")] and out[2].headers == []
    assert out[0].key is None and out[1].value is None


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_many_records(codec):
    recs = [(str(i).encode(), os.urandom(8) + b"v" * (i % 50), [("i", str(i).encode())], 10_000 + i % 7)
            for i in range(5000)]
    buf = R.build_batch(recs, compression=codec, producer_id=42, producer_epoch=3, base_sequence=100)
    h = R.validate_batch(buf)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (42, 3, 100, 5099)
    out = decode(buf, 4 * MiB)
    assert len(out) == 5000
    assert [(r.key, r.value, r.headers, r.timestamp) for r in out] == recs


def test_record_objects_keep_offset_gaps_and_attributes():
    recs = [R.Record(100, 1, b"a", b"1"), R.Record(103, 2, b"b", b"2", [("x", b"y")]), R.Record(110, 3, None, b"3")]
    buf = R.build_batch(recs, base_offset=100, delete_horizon_ms=50, partition_leader_epoch=7)
    h = R.validate_batch(buf)
    assert h.last_offset_delta == 10 and h.records_count == 3 and h.partition_leader_epoch == 7
    assert h.attributes & R.ATTR_DELETE_HORIZON and h.base_timestamp == 50
    assert decode(buf) == recs
    with pytest.raises(LocalProtocolError):
        R.build_batch([R.Record(5, 1, b"a", b"1"), R.Record(5, 1, b"a", b"1")], base_offset=5)
    with pytest.raises(LocalProtocolError):
        R.build_batch([])


def test_header_key_bytes_and_undecodable_keys_round_trip():
    buf = R.build_batch([(b"k", b"v", [(b"\xff\xfe", b"x"), ("ok", b"y")], 1)])
    (rec,) = decode(buf)
    assert rec.headers[1] == ("ok", b"y")
    assert rec.headers[0][0].encode("utf-8", "surrogateescape") == b"\xff\xfe"
    assert R.build_batch([rec]) == buf  # lossless rebuild


def test_flags():
    buf = R.build_batch([(b"k", b"v", [], 1)], transactional=True, producer_id=9, producer_epoch=0,
                        base_sequence=0, timestamp_type_log_append=True)
    h = R.validate_batch(buf)
    assert h.is_transactional and not h.is_control and h.timestamp_type_log_append


def test_stamping_offsets_and_epoch_keeps_crc_valid():
    buf = bytearray(R.build_batch([(b"k", b"v", [], 1)] * 3, compression=comp.LZ4))
    R.stamp_base_offset(buf, 0, 1_000_000)
    R.stamp_leader_epoch(buf, 0, 12)
    h = R.validate_batch(buf)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset) == (1_000_000, 12, 1_000_002)
    assert [r.offset for r in decode(buf)] == [1_000_000, 1_000_001, 1_000_002]


@pytest.mark.parametrize("codec", [comp.NONE, comp.ZSTD], ids=["none", "zstd"])
def test_set_log_append_time(codec):
    first = R.build_batch([(b"x", b"y", [], 1)])
    second = R.build_batch([(b"k", b"v", [], 10), (b"k", b"w", [], 20)], compression=codec)
    buf = bytearray(first + second)
    before = R.validate_batch(buf, len(first)).crc
    R.set_log_append_time(buf, len(first), 777_000)
    h = R.validate_batch(buf, len(first))  # CRC recomputed
    assert h.crc != before
    assert h.timestamp_type_log_append and h.compression == codec
    assert (h.base_timestamp, h.max_timestamp) == (10, 777_000)
    assert [r.timestamp for r in decode(memoryview(buf)[len(first):])] == [777_000, 777_000]
    assert bytes(buf[: len(first)]) == first
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        R.validate_batch(buf, len(first))
    with pytest.raises(CorruptRecordError):
        R.set_log_append_time(bytearray(second[:-1]), 0, 1)


def test_iter_batches_stops_at_a_partial_trailing_batch():
    batches = [R.build_batch([(b"k", bytes([i]) * i, [], i)] * (i + 1), base_offset=10 * i) for i in range(4)]
    buf = b"".join(batches)
    walked = list(R.iter_batches(buf))
    assert [pos for pos, _ in walked] == [sum(map(len, batches[:i])) for i in range(4)]
    assert [h.base_offset for _, h in walked] == [0, 10, 20, 30]
    for cut in (1, 11, 12, 60, len(batches[0]) - 1):
        assert len(list(R.iter_batches(buf + batches[0][:cut]))) == 4
    assert list(R.iter_batches(b"")) == []
    bad = bytearray(batches[0])
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(CorruptRecordError):
        list(R.iter_batches(bytes(bad)))
    bad = bytearray(batches[0])
    bad[16] = 1
    with pytest.raises(CorruptRecordError):
        list(R.iter_batches(bytes(bad)))


# ------------------------------------------------------------------------------------------ control records


@pytest.mark.parametrize("marker", [R.COMMIT, R.ABORT])
def test_control_batch(marker):
    buf = R.build_control_batch(marker, producer_id=77, producer_epoch=4, coordinator_epoch=9, timestamp=1234)
    h = R.validate_batch(buf)
    assert h.is_control and h.is_transactional and h.records_count == 1
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 4, -1)
    (rec,) = decode(buf)
    assert rec.key == struct.pack(">hh", 0, marker)
    assert rec.value == struct.pack(">hi", 0, 9)
    assert rec.timestamp == 1234
    assert R.parse_control_record(rec) == (marker, 9)


def test_parse_control_record_edge_cases():
    assert R.parse_control_record(R.Record(0, 0, struct.pack(">hh", 0, 2), b"anything")) == (2, -1)
    # A newer key or value version is parsed as version 0, as Kafka does.
    assert R.parse_control_record(R.Record(0, 0, struct.pack(">hh", 1, 1), struct.pack(">hi", 3, 5) + b"++")) == (1, 5)
    for key, value in ((None, b""), (b"\x00\x00\x00", b""), (struct.pack(">hh", -1, 0), b""),
                       (struct.pack(">hh", 0, 0), None), (struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x00"),
                       (struct.pack(">hh", 0, 1), struct.pack(">hi", -1, 0))):
        with pytest.raises(CorruptRecordError):
            R.parse_control_record(R.Record(0, 0, key, value))
    with pytest.raises(LocalProtocolError):
        R.build_control_batch(2, 1, 1, 1, 1)


# ------------------------------------------------------------------------------------------ hostile input


def _with_records_section(records_section: bytes, count: int, codec: int = comp.NONE) -> bytes:
    """A batch whose records section is given raw (compressed with `codec`), with a correct CRC."""
    template = bytearray(R.build_batch([(b"k", b"v", [], 0)]))
    body = comp.compress(codec, records_section) if codec else records_section
    buf = template[: R.HEADER_SIZE] + body
    struct.pack_into(">i", buf, 8, len(buf) - R.LOG_OVERHEAD)
    struct.pack_into(">h", buf, 21, codec)
    struct.pack_into(">i", buf, 23, max(count - 1, 0))  # lastOffsetDelta consistent with the count
    struct.pack_into(">i", buf, 57, count)
    struct.pack_into(">I", buf, 17, R.compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def _record(body: bytes) -> bytes:
    out = bytearray()
    V.write_varint(out, len(body))
    return bytes(out) + body


GOOD = bytes.fromhex("00" "00" "00" "02" "6b" "02" "76" "00")  # attrs, tsDelta 0, offDelta 0, key "k", value "v", 0 headers


def test_record_level_faults():
    assert decode(_with_records_section(_record(GOOD), 1))[0].key == b"k"
    cases = {
        "count too high": _with_records_section(_record(GOOD), 2),
        "trailing bytes": _with_records_section(_record(GOOD) + b"\x00", 1),
        "length past the end": _with_records_section(_record(GOOD)[:-1], 1),
        "length shorter than fields": _with_records_section(bytes([2 * 7]) + GOOD[:7] + b"\x00", 1),
        "length longer than fields": _with_records_section(_record(GOOD + b"\x00"), 1),
        "key past record": _with_records_section(_record(bytes.fromhex("000000") + b"\x7e" + b"k" * 2), 1),
        "key length -2": _with_records_section(_record(bytes.fromhex("000000") + b"\x03" + b"\x01\x00"), 1),
        "negative header count": _with_records_section(_record(GOOD[:-1] + b"\x01"), 1),
        "huge header count": _with_records_section(_record(GOOD[:-1] + b"\xfe\xff\xff\xff\x0f"), 1),
        "negative header key": _with_records_section(_record(GOOD[:-1] + b"\x02\x01\x00"), 1),
        "header value past record": _with_records_section(_record(GOOD[:-1] + b"\x02\x02h\x7e"), 1),
        "over-long varint": _with_records_section(_record(b"\x00" + b"\x80" * 11 + b"\x00" + GOOD[2:]), 1),
        "count beyond bytes": _with_records_section(_record(GOOD), 2**31 - 1),
        "compressed count too high": _with_records_section(_record(GOOD), 2, comp.ZSTD),
    }
    for name, buf in cases.items():
        with pytest.raises(CorruptRecordError):
            decode(buf)
            pytest.fail(name)


def test_batch_level_faults_raise_at_call_time():
    good = R.build_batch([(b"k", b"v", [], 1)])
    with pytest.raises(CorruptRecordError):
        R.iter_records(good[:-1], max_uncompressed_bytes=MiB)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        R.iter_records(bytes(bad), max_uncompressed_bytes=MiB)
    with pytest.raises(CorruptRecordError):  # unknown codec id 6, CRC fixed up
        bad = bytearray(good)
        struct.pack_into(">h", bad, 21, 6)
        struct.pack_into(">I", bad, 17, R.compute_crc(bad, 0, len(bad)))
        R.iter_records(bytes(bad), max_uncompressed_bytes=MiB)
    # Bytes after the batch are not part of it.
    assert len(decode(good + b"\x00" * 5)) == 1


@pytest.mark.parametrize("codec", [comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD], ids=IDS[1:])
def test_decompression_bomb_in_a_batch(codec):
    zeros = bytes(20 * MiB)
    # The records section need not even be valid: the bound trips first.
    buf = _with_records_section(zeros, 1, codec)
    with pytest.raises(RecordTooLargeError):
        R.iter_records(buf, max_uncompressed_bytes=MiB)


ALLOWED = (CorruptRecordError, RecordTooLargeError, RemoteProtocolError)


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@HYP
@given(recs=st.lists(record_st, min_size=1, max_size=5), seed=st.integers(0, 2**32), flips=st.integers(1, 4))
def test_mutated_records_only_raise_protocol_errors(codec, recs, seed, flips):
    """Mutate the records section (before compression, so the codec decodes fine and the record parser sees
    the damage), fix the CRC, and decode: only protocol errors may come out."""
    rng = random.Random(seed)
    batch = R.build_batch(recs)
    section = bytearray(batch[R.HEADER_SIZE :])
    for _ in range(flips):
        section[rng.randrange(len(section))] = rng.randrange(256)
    if rng.random() < 0.3:
        del section[rng.randrange(len(section)) :]
    buf = _with_records_section(bytes(section), len(recs) + rng.choice((0, 0, 0, 1, -1)), codec)
    try:
        for rec in R.iter_records(buf, max_uncompressed_bytes=64 * 1024):
            assert isinstance(rec, R.Record)
    except ALLOWED:
        pass


@HYP
@given(junk=st.binary(max_size=200))
def test_random_bytes_only_raise_protocol_errors(junk):
    for buf in (junk, struct.pack(">qiib", 0, len(junk) + 49, 0, 2) + junk):
        try:
            list(R.iter_batches(buf))
            list(R.iter_records(buf, max_uncompressed_bytes=64 * 1024))
        except ALLOWED:
            pass


# ------------------------------------------------------------------------- agreement with kafka-python

kafka_records = pytest.importorskip("kafka.record.default_records")


def _interop_records(n: int):
    # Compressible values, so kafka-python's builder keeps the codec instead of falling back to none.
    return [
        (None if i % 5 == 0 else f"key-{i}".encode(), None if i % 7 == 3 else b"value-%d-" % i + b"x" * (i % 40),
         [("trace", b"abc"), ("null", None)] if i % 3 == 0 else [], 1_700_000_000_000 + (i * 37) % 1000 - 500)
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_kafka_python_builder_to_our_reader(codec):
    recs = _interop_records(300)
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=10 * MiB)
    for i, (key, value, headers, ts) in enumerate(recs):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    buf = bytes(builder.build())
    h = R.validate_batch(buf)
    assert h.compression == codec and h.records_count == 300
    out = decode(buf)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in out] == recs
    assert [r.offset for r in out] == list(range(300))
    assert [pos for pos, _ in R.iter_batches(buf + buf)] == [0, len(buf)]


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_our_builder_to_kafka_python_reader(codec):
    recs = _interop_records(300)
    buf = R.build_batch(recs, compression=codec, base_offset=1000, producer_id=5, producer_epoch=2,
                        base_sequence=40, transactional=True)
    batch = kafka_records.DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert (batch.compression_type, batch.base_offset, batch.producer_id, batch.producer_epoch,
            batch.base_sequence, batch.is_transactional, batch.records_count) == (codec, 1000, 5, 2, 40, True, 300)
    theirs = list(batch)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in theirs] == recs
    assert [r.offset for r in theirs] == list(range(1000, 1300))


@HYP
@given(recs=st.lists(record_st, min_size=1, max_size=10), codec=st.sampled_from(CODECS))
def test_byte_identical_to_kafka_python_when_uncompressed(recs, codec):
    """Uncompressed, the two builders must produce the very same bytes (kafka-python writes leader epoch 0)."""
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=10 * MiB)
    for i, (key, value, headers, ts) in enumerate(recs):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    assert bytes(builder.build()) == R.build_batch(recs, partition_leader_epoch=0)
    # And every codec's batch reads back the same through kafka-python.
    theirs = list(kafka_records.DefaultRecordBatch(bytearray(R.build_batch(recs, compression=codec))))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in theirs] == [(k, v, hs, ts) for k, v, hs, ts in recs]


@pytest.mark.parametrize("marker", [R.COMMIT, R.ABORT])
def test_kafka_python_reads_our_control_batch(marker):
    buf = R.build_control_batch(marker, producer_id=3, producer_epoch=1, coordinator_epoch=2, timestamp=99)
    batch = kafka_records.DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    (rec,) = list(batch)
    assert rec.type == marker and rec.commit == (marker == R.COMMIT)
