"""Reading batches back as bytes: `read_region`, `read_regions` and `Log.read_bytes`."""

from __future__ import annotations

import os

import pytest

from odradek.protocol.codec import FileRegion
from odradek.protocol.records import build_batch, iter_batches
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.segment import read_region, read_regions

NOW = 1_700_000_000_000


def batch(n: int = 2) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, b"v" * 100, None, NOW + i) for i in range(n)]))


@pytest.fixture
def log(tmp_path):
    config = LogConfig(segment_bytes=1024, index_interval_bytes=200, segment_index_bytes=4096)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    for _ in range(12):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) >= 3
    yield log
    log.close()


@pytest.fixture
def file_region(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(bytes(range(256)) * 4)
    fd = os.open(path, os.O_RDWR)
    yield fd, FileRegion(fd, 100, 500)
    os.close(fd)


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


def test_read_region_returns_the_span(file_region):
    fd, region = file_region
    expected = (bytes(range(256)) * 4)[100:600]
    assert read_region(region) == expected
    assert read_region(region, pad=True) == expected


def test_read_region_goes_on_after_a_short_read(file_region, monkeypatch):
    fd, region = file_region
    real_pread = os.pread
    calls = []

    def short_pread(fd, length, position):
        calls.append(length)
        return real_pread(fd, min(length, 64), position)

    monkeypatch.setattr(os, "pread", short_pread)
    assert read_region(region) == (bytes(range(256)) * 4)[100:600]
    assert len(calls) == 8  # 500 bytes, 64 at a time


def test_read_region_of_a_truncated_file_is_short_or_padded(file_region):
    fd, region = file_region
    os.ftruncate(fd, 300)
    assert read_region(region) == (bytes(range(256)) * 4)[100:300]
    padded = read_region(region, pad=True)
    assert len(padded) == 500 and padded[:200] == (bytes(range(256)) * 4)[100:300] and padded[200:] == bytes(300)
    os.ftruncate(fd, 50)  # the region now starts past the end
    assert read_region(region) == b""
    assert read_region(region, pad=True) == bytes(500)


def test_read_bytes_is_read_as_bytes(log):
    info = log.read(3, 10_000)
    data = log.read_bytes(3, 10_000)
    assert len(data) == info.size
    assert data == b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
    assert offsets_of(data)[0][0] == info.first_offset <= 3
    assert log.read_bytes(log.log_end_offset, 10_000) == b""
    assert log.read_bytes(0, 10_000, max_offset=0) == b""


def test_regions_across_segments_read_as_one_run_of_batches(log):
    first = log.read(0, 1 << 20)
    next_offset = offsets_of(read_regions(first.regions))[-1][1] + 1
    second = log.read(next_offset, 1 << 20)
    assert first.regions[0].fd != second.regions[0].fd  # two segment files
    data = read_regions(first.regions + second.regions)
    assert len(data) == first.size + second.size
    found = offsets_of(data)
    assert found[0][0] == 0
    assert all(prev[1] + 1 == nxt[0] for prev, nxt in zip(found, found[1:]))  # no gap, no overlap


def test_a_truncated_segment_ends_the_bytes_at_its_last_whole_batch(log):
    first = log.read(0, 1 << 20)
    whole = read_regions(first.regions)
    positions = [pos for pos, _ in iter_batches(whole)]
    cut = positions[1] + 30  # inside the second batch
    next_offset = offsets_of(whole)[-1][1] + 1
    second = log.read(next_offset, 1 << 20)
    os.ftruncate(first.regions[0].fd, first.regions[0].position + cut)

    data = read_regions(first.regions + second.regions)
    assert len(data) == cut  # the second segment's region is not read after the short one
    assert offsets_of(data) == offsets_of(whole)[:1]  # the partial batch is skipped by iter_batches
