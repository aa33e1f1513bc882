"""Decoding fetched data: read_committed drops aborted transactions and control batches; positions advance."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from odradek.client import Consumer, TopicPartition
from odradek.client.consumer import _PartitionState
from odradek.protocol.compression import GZIP
from odradek.protocol.records import ABORT, COMMIT, build_batch, build_control_batch

TP = TopicPartition("t", 0)


def _log() -> bytes:
    def recs(*values):
        return [(None, v, None, 1000) for v in values]

    return b"".join([
        build_batch(recs(b"a", b"b"), base_offset=0),
        build_batch(recs(b"x1", b"x2"), base_offset=2, producer_id=7, producer_epoch=0, base_sequence=0,
                    transactional=True),
        build_control_batch(ABORT, 7, 0, 0, 1000, base_offset=4),
        build_batch(recs(b"c", b"d"), base_offset=5, producer_id=8, producer_epoch=0, base_sequence=0,
                    transactional=True, compression=GZIP),
        build_control_batch(COMMIT, 8, 0, 0, 1000, base_offset=7),
        build_batch(recs(b"e"), base_offset=8),
    ])


def _decode(isolation: str, start: int = 0, data: bytes | None = None):
    consumer = Consumer(bootstrap_servers="127.0.0.1:1", isolation_level=isolation)
    state = _PartitionState()
    state.position = state.fetch_offset = start
    aborted = [SimpleNamespace(producer_id=7, first_offset=2)]
    consumer._decode(TP, state, _log() if data is None else data, aborted)
    return consumer, state


def test_read_committed_skips_aborted_and_control_batches():
    _, state = _decode("read_committed")
    assert [(r.offset, r.value) for r in state.buffer] == [(0, b"a"), (1, b"b"), (5, b"c"), (6, b"d"), (8, b"e")]
    assert state.fetch_offset == 9


def test_read_uncommitted_keeps_aborted_data_but_not_control_records():
    _, state = _decode("read_uncommitted")
    assert [r.offset for r in state.buffer] == [0, 1, 2, 3, 5, 6, 8]


def test_records_before_the_fetch_offset_are_dropped():
    _, state = _decode("read_uncommitted", start=6)
    assert [r.offset for r in state.buffer] == [6, 8]


def test_position_moves_past_trailing_control_batches():
    data = build_control_batch(COMMIT, 8, 0, 0, 1000, base_offset=0) + build_control_batch(COMMIT, 8, 0, 0, 1000, base_offset=1)
    consumer, state = _decode("read_committed", data=data)
    assert not state.buffer and state.position == 2 and state.fetch_offset == 2


def test_taking_records_advances_the_position_to_the_fetch_offset():
    consumer, state = _decode("read_committed")
    consumer._assignment[TP] = state
    taken = consumer._take((), 3)
    assert [r.offset for r in taken[TP]] == [0, 1, 5]
    assert state.position == 6
    taken = consumer._take((), 10)
    assert [r.offset for r in taken[TP]] == [6, 8]
    assert state.position == 9


def test_partial_trailing_batch_is_left_for_the_next_fetch():
    data = _log()
    _, state = _decode("read_uncommitted", data=data + build_batch([(None, b"zzz", None, 1)], base_offset=9)[:30])
    assert state.fetch_offset == 9


@pytest.mark.parametrize("corrupt_at,kept", [(70, []), (100, [0, 1])])
def test_corrupt_batches_surface_as_an_error(corrupt_at, kept):
    data = bytearray(_log())
    data[corrupt_at] ^= 0xFF
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    state = _PartitionState()
    state.position = state.fetch_offset = 0
    consumer._handle_partition(TP, state, SimpleNamespace(
        error_code=0, high_watermark=9, last_stable_offset=9, log_start_offset=0, records=bytes(data),
        aborted_transactions=None))
    assert consumer._errors and "CORRUPT_MESSAGE" in str(consumer._errors[0])
    assert [r.offset for r in state.buffer] == kept
    assert state.fetch_offset == (kept[-1] + 1 if kept else 0) and state.paused
