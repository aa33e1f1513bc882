"""Reads that use the batches recent appends left (LogSegment._recent) find the same
batches as reads that start from the sparse offset index: every offset of logs built by leader appends
(one batch and several), follower appends with offset gaps, rolls and truncations, at several read sizes."""

from __future__ import annotations

import random

import pytest

from odradek.protocol.records import build_batch
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

NOW = 1_700_000_000_000


def _reads(log: Log, max_offset=None):
    out = []
    for offset in range(log.log_start_offset, log.log_end_offset + 1):
        for max_bytes in (1, 300, 1 << 20):
            info = log.read(offset, max_bytes, max_offset=max_offset)
            out.append((offset, max_bytes, info.first_offset, [(r.position, r.length) for r in info.regions]))
    return out


def _check(log: Log) -> None:
    """Reads with the hints equal reads without them; the hints are put back afterwards."""
    hw = (log.log_start_offset + log.log_end_offset) // 2
    hinted = _reads(log), _reads(log, max_offset=hw)
    saved = [s._recent for s in log.segments]
    assert any(saved)
    for s in log.segments:
        s._recent = ()
    try:
        assert (_reads(log), _reads(log, max_offset=hw)) == hinted
    finally:
        for s, b in zip(log.segments, saved, strict=True):
            s._recent = b


def _batch(rnd: random.Random, base_offset: int = 0) -> bytearray:
    n = rnd.choice((1, 1, 3, 10))
    return bytearray(build_batch([(None, b"v" * rnd.choice((10, 120)), None, NOW + i) for i in range(n)],
                                 base_offset=base_offset))


@pytest.mark.parametrize("seed", range(4))
def test_leader_appends(tmp_path, seed):
    rnd = random.Random(seed)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=6000, index_interval_bytes=400), now_ms=NOW)
    for step in range(60):
        data = _batch(rnd) if rnd.random() < 0.8 else _batch(rnd) + _batch(rnd)
        log.append(data, leader_epoch=0, now_ms=NOW)
        if step % 7 == 6:
            _check(log)
        if step == 30:
            log.truncate_to(log.log_end_offset - 5)
            _check(log)
    _check(log)
    assert len(log.segments) > 1


def test_follower_appends_with_offset_gaps(tmp_path):
    rnd = random.Random(7)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=400), now_ms=NOW)
    offset = 0
    for _ in range(40):
        offset += rnd.choice((0, 0, 2, 9))  # a compacted leader's history skips offsets
        data = _batch(rnd, base_offset=offset)
        log.append_as_follower(data, now_ms=NOW)
        offset = log.log_end_offset
    _check(log)
