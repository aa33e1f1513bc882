"""Record batches <-> Arrow columns (pipeline/columnar.py): the column-wise decoder gives exactly what the
record-by-record decoder gives (nulls, codecs, LogAppendTime, offset bounds, headers), refuses malformed
records, and the column-wise encoder writes exactly the bytes `build_batch` writes, on the partitions the
Java producer would choose."""

from __future__ import annotations

import random

import pytest

pa = pytest.importorskip("pyarrow")

from odradek.client.partitioner import partition_for_key  # noqa: E402
from odradek.pipeline.arrow import read_schema, records_to_batch  # noqa: E402
from odradek.pipeline.columnar import decode_batches, encode_for_partitions, encode_records, key_partitions  # noqa: E402
from odradek.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD  # noqa: E402
from odradek.protocol.errors import CorruptRecordError  # noqa: E402
from odradek.protocol.records import build_batch, iter_batches, iter_records, wrap_records  # noqa: E402


def _random_records(rng: random.Random, count: int) -> list[tuple]:
    out = []
    for _ in range(count):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 1, 5, 70, 300]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 3, 100, 200, 20_000]))
        out.append((key, value, None, 1_700_000_000_000 + rng.randrange(-5, 100_000)))
    return out


def _log(rng: random.Random, codecs: list[int], *, log_append: bool = False) -> tuple[bytes, list]:
    buf = bytearray()
    offset = 0
    for codec in codecs:
        records = _random_records(rng, rng.choice([1, 2, 64, 200]))
        buf += build_batch(records, base_offset=offset, compression=codec, timestamp_type_log_append=log_append)
        offset += len(records) + rng.choice([0, 0, 3])  # a gap now and then, as compaction leaves
    return bytes(buf), list(iter_batches(memoryview(buf)))


def _slow(buf: bytes, batches: list, start: int, end: int, include_headers: bool = False) -> pa.RecordBatch:
    out = []
    for pos, h in batches:
        records = [r for r in iter_records(memoryview(buf)[pos:pos + h.size], max_uncompressed_bytes=1 << 30)
                   if start <= r.offset < end]
        if records:
            out.append(records_to_batch("t", 3, records, include_headers=include_headers,
                                        timestamp_type=1 if h.timestamp_type_log_append else 0))
    return pa.Table.from_batches(out, schema=read_schema(include_headers)).combine_chunks()


@pytest.mark.parametrize("seed", range(6))
def test_decode_matches_the_record_by_record_decoder(seed):
    rng = random.Random(seed)
    codecs = [rng.choice([NONE, NONE, GZIP, LZ4, ZSTD, SNAPPY]) for _ in range(rng.randrange(1, 8))]
    buf, batches = _log(rng, codecs, log_append=seed % 3 == 2)
    last = batches[-1][1].next_offset
    for start, end in ((0, last), (1, last - 1), (last // 3, 2 * last // 3 + 1)):
        got = decode_batches("t", 3, buf, batches, start=start, end=end, include_headers=False)
        assert got.schema.equals(read_schema(False))
        assert pa.Table.from_batches([got]).equals(_slow(buf, batches, start, end)), (seed, start, end)


def test_headers_go_the_record_by_record_way_and_come_out_equal():
    records = [(b"k", b"v", [("h", b"1"), ("g", None)], 5), (None, b"w", None, 6)]
    buf = build_batch(records, base_offset=10)
    batches = list(iter_batches(memoryview(buf)))
    for include in (True, False):
        got = decode_batches("t", 3, buf, batches, start=0, end=100, include_headers=include)
        assert pa.Table.from_batches([got]).equals(_slow(buf, batches, 0, 100, include))
    plain = build_batch([(b"k", b"v", None, 5)])
    got = decode_batches("t", 3, plain, list(iter_batches(memoryview(plain))), start=0, end=9, include_headers=True)
    assert got.column("headers").to_pylist() == [None]  # no headers: a null cell, as Spark's Kafka source


def test_an_empty_selection_is_an_empty_batch_of_the_schema():
    buf = build_batch([(b"k", b"v", None, 5)], base_offset=7)
    got = decode_batches("t", 0, buf, list(iter_batches(memoryview(buf))), start=8, end=9, include_headers=False)
    assert got.num_rows == 0 and got.schema.equals(read_schema(False))


def test_many_small_batches_and_a_compressed_one_among_them_decode_as_the_record_by_record_decoder():
    # more than 16 batches take the run-end path for per-batch values; a compressed batch in the middle makes
    # the records sections be joined one after the other instead of read where they lie
    rng = random.Random(7)
    for codecs in ([NONE] * 20, [NONE] * 9 + [LZ4] + [NONE] * 10):
        buf, batches = _log(rng, codecs)
        last = batches[-1][1].next_offset
        got = decode_batches("t", 3, buf, batches, start=2, end=last, include_headers=False)
        assert pa.Table.from_batches([got]).equals(_slow(buf, batches, 2, last))


def test_records_of_8_kib_and_more_leave_the_fast_walk_and_come_out_equal():
    # a record length of three varint bytes is outside the walk's table: the careful walk takes the batch
    records = [(b"k%d" % i, bytes([i]) * size, None, 5) for i, size in enumerate((10, 9_000, 20, 70_000, 1))]
    buf = build_batch(records, base_offset=3)
    batches = list(iter_batches(memoryview(buf)))
    got = decode_batches("t", 0, buf, batches, start=0, end=100, include_headers=False)
    assert got.column("value").to_pylist() == [r[1] for r in records]
    assert got.column("offset").to_pylist() == [3, 4, 5, 6, 7]


def test_a_negative_record_length_is_refused():
    good = bytearray(build_batch([(b"key", b"value", None, 5), (b"k2", b"v2", None, 6)]))
    bad = bytearray(good)
    bad[61] = 0x03  # ZigZag(-2)
    with pytest.raises(CorruptRecordError, match="negative length"):
        decode_batches("t", 0, _reseal(bad), list(iter_batches(memoryview(bytes(bad)))), start=0, end=9,
                       include_headers=False)


def _reseal(batch: bytearray) -> bytes:
    from crc32c import crc32c

    batch[17:21] = crc32c(memoryview(batch)[21:]).to_bytes(4, "big")
    return bytes(batch)


def test_malformed_records_are_refused_even_with_a_valid_crc():
    good = bytearray(build_batch([(b"key", b"value", None, 5), (b"k2", b"v2", None, 6)]))
    # the first record's keyLength (after length, attributes, timestampDelta, offsetDelta) claims 4 bytes
    bad = bytearray(good)
    assert bad[61 + 4] == 6  # ZigZag(3)
    bad[61 + 4] = 8
    with pytest.raises(CorruptRecordError):
        decode_batches("t", 0, _reseal(bad), list(iter_batches(memoryview(bytes(bad)))), start=0, end=9,
                       include_headers=False)
    # a record length running past the batch
    bad = bytearray(good)
    bad[61] = 0x7E
    with pytest.raises(CorruptRecordError):
        decode_batches("t", 0, _reseal(bad), list(iter_batches(memoryview(bytes(bad)))), start=0, end=9,
                       include_headers=False)
    # a CRC mismatch
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        decode_batches("t", 0, bytes(bad), list(iter_batches(memoryview(bytes(bad)))), start=0, end=9,
                       include_headers=False)


@pytest.mark.parametrize("seed", range(4))
def test_encode_writes_the_bytes_build_batch_writes(seed):
    rng = random.Random(seed)
    records = _random_records(rng, rng.choice([1, 7, 300, 3000]))
    keys = pa.array([r[0] for r in records], pa.binary())
    values = pa.array([r[1] for r in records], pa.binary())
    body, sizes = encode_records(keys, values)
    assert wrap_records(body, len(records), 42, 42) == build_batch([(k, v, None, 42) for k, v, _, _ in records])
    assert sum(sizes.to_pylist()) == len(body)


def test_key_partitions_are_the_java_producers():
    rng = random.Random(1)
    keys = [None if i % 9 == 0 else rng.randbytes(rng.randrange(0, 40)) for i in range(2000)]
    for count in (1, 4, 7, 100):
        got = key_partitions(pa.array(keys, pa.binary()), count).to_pylist()
        assert got == [None if k is None else partition_for_key(k, count) for k in keys]
    assert key_partitions(pa.array(["a", "b"]).cast(pa.binary()).slice(1), 10).to_pylist() == [
        partition_for_key(b"b", 10)]


def test_encode_for_partitions_splits_by_partition_in_row_order_and_falls_back_when_it_must():
    n = 5000
    batch = pa.RecordBatch.from_arrays([pa.array([str(i) for i in range(n)]), pa.array(["v" * 50] * n)],
                                       names=["key", "value"])
    pieces = encode_for_partitions(batch, topic_option="out", partition_count=lambda t: 3, batch_size=16_384,
                                   now_ms=9, rng=random.Random(0))
    assert pieces is not None and {p[0] for p in pieces} == {"out"}
    seen: dict[int, list] = {}
    for _, partition, encoded in pieces:
        assert len(encoded.body) <= 16_384
        batch_bytes = wrap_records(encoded.body, encoded.count, 9, 9)
        seen.setdefault(partition, []).extend(r.key for r in iter_records(batch_bytes, max_uncompressed_bytes=1 << 20))
    assert sum(len(v) for v in seen.values()) == n
    for partition, keys in seen.items():
        assert all(partition_for_key(k, 3) == partition for k in keys)
        assert [int(k) for k in keys] == sorted(int(k) for k in keys)

    keyless = pa.RecordBatch.from_arrays([pa.array([b"v"] * 10)], names=["value"])
    pieces = encode_for_partitions(keyless, topic_option="out", partition_count=lambda t: 3, batch_size=16_384,
                                   now_ms=9, rng=random.Random(0))
    assert len(pieces) == 1 and pieces[0][2].count == 10  # one partition for the Arrow batch (sticky)

    given = pa.RecordBatch.from_arrays([pa.array([b"v"] * 3), pa.array([2, 0, 2], pa.int32()), pa.array(["a"] * 3)],
                                       names=["value", "partition", "topic"])
    pieces = encode_for_partitions(given, topic_option=None, partition_count=lambda t: 3, batch_size=16_384,
                                   now_ms=9, rng=random.Random(0))
    assert [(t, p, e.count) for t, p, e in pieces] == [("a", 0, 1), ("a", 2, 2)]

    two_topics = pa.RecordBatch.from_arrays([pa.array([b"v"] * 2), pa.array(["a", "b"])], names=["value", "topic"])
    mixed = pa.RecordBatch.from_arrays([pa.array([b"v"] * 2), pa.array([1, None], pa.int32())],
                                       names=["value", "partition"])
    huge = pa.RecordBatch.from_arrays([pa.array([b"v" * 20_000])], names=["value"])
    for odd in (two_topics, mixed, huge):
        assert encode_for_partitions(odd, topic_option=None if odd is two_topics else "t",
                                     partition_count=lambda t: 3, batch_size=16_384, now_ms=9,
                                     rng=random.Random(0)) is None
