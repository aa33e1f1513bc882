"""The console's record walk (console/scan.py) against protocol/records.py's decoder: the same records from
the same batches (plain and compressed, long and short varints, null keys and values, headers), and the same
refusal of corrupt ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.console.scan import batch_records
from odradek.protocol.compression import LZ4, NONE
from odradek.protocol.errors import CorruptRecordError, ProtocolError
from odradek.protocol.records import build_batch, iter_batches, iter_records, read_batch_header

_RECORD = st.tuples(st.one_of(st.none(), st.binary(max_size=200)), st.one_of(st.none(), st.binary(max_size=300)),
                    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
                    st.integers(0, 1 << 41))


def _walked(batch: bytes, partition: int = 3) -> list[tuple]:
    header = read_batch_header(batch, 0)
    return [(r.offset, r.timestamp, r.key_bytes, r.value_bytes, r.read_headers(), r.partition)
            for r in batch_records(memoryview(batch), 0, header, partition)]


def _decoded(batch: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers, 3)
            for r in iter_records(batch, max_uncompressed_bytes=1 << 26)]


@settings(max_examples=150, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=150), st.sampled_from([NONE, LZ4]), st.integers(0, 1 << 40))
def test_the_walk_gives_the_records_the_decoder_gives(records, compression, base_offset):
    batch = build_batch(records, base_offset=base_offset, compression=compression)
    assert _walked(batch) == _decoded(batch)


def test_headers_are_read_only_when_asked_and_then_checked():
    batch = bytearray(build_batch([(b"k", b"v", [("h", b"x")], 5)]))
    record = next(iter(batch_records(memoryview(bytes(batch)), 0, read_batch_header(batch, 0), 0)))
    assert record.header("h") == "x" and record.header_bytes("missing") is None


@pytest.mark.parametrize("cut", [1, 7, 20, 40])
def test_a_corrupt_batch_is_refused(cut):
    """Any byte changed after the header fails the CRC; a batch re-stamped with a broken record body fails
    the walk's own checks (never a silent short read)."""
    batch = bytearray(build_batch([(b"key", b"value" * 10, [("h", b"x")], 5)] * 3))
    batch[-cut] ^= 0x55
    with pytest.raises(ProtocolError):
        list(batch_records(memoryview(bytes(batch)), 0, read_batch_header(batch, 0), 0))


def test_records_past_the_declared_count_are_refused():
    from odradek.console.scan import _walk

    batch = build_batch([(b"k", b"v", [], 1)] * 2)
    header = read_batch_header(batch, 0)
    body = batch[61:]
    with pytest.raises(CorruptRecordError, match="left after"):
        list(_walk(body + body[: len(body) // 2], header, 0))
    with pytest.raises(CorruptRecordError):
        list(_walk(body[:-3], header, 0))


def test_batches_in_a_fetch_answer_walk_in_order():
    answer = build_batch([(b"a", b"1", [], 1)] * 3, base_offset=0) + build_batch([(b"b", b"2", [], 2)] * 2, base_offset=3)
    offsets = [r.offset for pos, h in iter_batches(memoryview(answer))
               for r in batch_records(memoryview(answer), pos, h, 0)]
    assert offsets == [0, 1, 2, 3, 4]


def test_a_corrupt_batch_in_a_browse_is_a_browse_error_naming_where(monkeypatch):
    """Through browse(): a fake client whose Fetch answers one good and one corrupt batch."""
    import asyncio
    from types import SimpleNamespace

    from odradek.client.cluster import TopicPartition
    from odradek.client.config import ClientConfig
    from odradek.console import records as records_module
    from odradek.console.records import BrowseRequest, CorruptBatchError, browse

    good = build_batch([(b"k", b"v", [], 1)] * 2, base_offset=0)
    bad = bytearray(build_batch([(b"k", b"v", [], 1)] * 2, base_offset=2))
    bad[-1] ^= 0xFF

    class Client:
        config = ClientConfig(bootstrap_servers="127.0.0.1:1")

        async def partitions_for(self, topic, must_exist=False):
            return [0]

        async def leader_for(self, tp):
            return 1

        async def send(self, node, request, timeout_ms=None):
            part = SimpleNamespace(partition_index=0, error_code=0, records=good + bytes(bad))
            return SimpleNamespace(error_code=0, responses=[SimpleNamespace(topic="t", partitions=[part])])

    async def offsets(client, request, chosen):
        return {TopicPartition("t", 0): 0}, {TopicPartition("t", 0): 4}

    monkeypatch.setattr(records_module, "start_offsets", offsets)

    async def run():
        await browse(Client.config, Client(), BrowseRequest("t", start="earliest", max_seconds=10))

    with pytest.raises(CorruptBatchError, match="offset 2 of t-0 is corrupt"):
        asyncio.run(run())
