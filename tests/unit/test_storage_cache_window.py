"""The page-cache window: an active segment hands the page cache of all but its last bytes back to the OS."""

from __future__ import annotations

import os

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.protocol.records import build_batch, iter_batches
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
PAGE = os.sysconf("SC_PAGE_SIZE")


def batch(n: int = 20) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, os.urandom(200), None, NOW + i) for i in range(n)]))


def read_all(log: Log) -> bytes:
    out = b""
    offset = 0
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 30)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        out += data
        offset = [h for _, h in iter_batches(data)][-1].next_offset
    return out


def test_releases_all_but_the_window_in_page_steps_and_reads_stay_whole(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    calls = []
    log.cache_window_bytes = 2 * PAGE
    log.cache_release = lambda file, end: calls.append((file.fd, end))
    written = []
    for _ in range(40):
        b = batch()
        written.append(bytes(b))
        log.append(b, leader_epoch=0, now_ms=NOW)
    segment = log.segments[-1]
    assert calls, "a segment past two windows hands its older pages back"
    ends = [end for _, end in calls]
    assert ends == sorted(ends) and all(end % PAGE == 0 for end in ends)
    assert all(end <= segment.size - 2 * PAGE for end in ends)
    # Releases come in window-sized steps, not on every append.
    assert len(calls) <= segment.size // (2 * PAGE) + 1 < 40


def test_dropping_the_cache_for_real_keeps_every_byte(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    log.cache_window_bytes = PAGE  # no hook: drop_cache runs inline
    sent = []
    for _ in range(60):
        b = batch()
        info = log.append(b, leader_epoch=0, now_ms=NOW)
        sent.append((info.first_offset, bytes(b)))
    assert log.segments[-1].cache_released > 0
    data = read_all(log)
    assert len(data) == sum(len(b) for _, b in sent)
    assert [h.base_offset for _, h in iter_batches(data)] == [first for first, _ in sent]


def test_zero_window_leaves_the_cache_alone(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    log.cache_release = lambda file, end: pytest.fail("no release with a zero window")
    for _ in range(40):
        log.append(batch(), leader_epoch=0, now_ms=NOW)
    assert log.segments[-1].cache_released == 0


def test_log_manager_gives_its_logs_the_window_and_the_releaser(tmp_path):
    calls = []
    manager = LogManager(str(tmp_path / "data"), now_ms=NOW, cache_window_bytes=PAGE,
                         cache_release=lambda file, end: calls.append(end))
    try:
        log = manager.get_or_create_log(TopicPartition("t", 0), now_ms=NOW)
        for _ in range(40):
            log.append(batch(), leader_epoch=0, now_ms=NOW)
        assert calls and log.cache_window_bytes == PAGE
    finally:
        manager.close()


def test_broker_config_key():
    assert BrokerConfig.from_properties({}).log_cache_window_bytes == 32 * 1024 * 1024
    assert BrokerConfig.from_properties({"log.cache.window.bytes": "0"}).log_cache_window_bytes == 0
    with pytest.raises(ConfigError, match="log.cache.window.bytes"):
        BrokerConfig.from_properties({"log.cache.window.bytes": "-1"})
