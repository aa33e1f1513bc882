"""Crash recovery: damaged segment files are cut at the first bad batch and the log carries on.

Each example writes a log without closing it (as a crash would leave it), damages one segment file (cut at
a random byte, garbage appended, a bit flipped), reopens it as after an unclean shutdown and checks that
every batch before the damage is kept, nothing from the damage on survives, and appends and reads work.
Bits are not flipped in baseOffset and partitionLeaderEpoch: Kafka's format leaves those two fields
outside the CRC so that brokers can stamp them, and recovery can only catch a change that makes offsets
go backwards.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.records import build_batch, iter_batches
from odradek.storage.config import LogConfig
from odradek.storage.log import Log

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=256, segment_index_bytes=2048)
UNPROTECTED = set(range(0, 8)) | set(range(12, 16))


def batch(n: int, size: int, ts: int) -> bytearray:
    return bytearray(build_batch([(b"k%d" % i, os.urandom(size), None, ts + i) for i in range(n)]))


def write_log(directory: str, shape: list[tuple[int, int]]) -> Log:
    log = Log.open(directory, CONFIG, now_ms=NOW)
    for i, (n, size) in enumerate(shape):
        log.append(batch(n, size, NOW + i), leader_epoch=i // 7, now_ms=NOW)
    return log


def stored(log: Log) -> list[tuple[int, int, int, bytes]]:
    """(segment index, position, base offset, bytes) of every batch, read straight from the files."""
    out = []
    for k, segment in enumerate(log.segments):
        with open(segment.path(), "rb") as f:
            data = f.read()
        out += [(k, p, h.base_offset, data[p : p + h.size]) for p, h in iter_batches(data)]
    return out


def all_bytes(log: Log) -> bytes:
    out, offset = b"", log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        chunk = b"".join(os.pread(r.fd, r.length, r.position) for r in read.regions)
        headers = [h for _, h in iter_batches(chunk)]
        out += chunk
        offset = headers[-1].next_offset
    return out


shapes = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, data=st.data())
def test_recovery_keeps_everything_before_the_damage_and_nothing_after(shape, data):
    with tempfile.TemporaryDirectory() as root:
        directory = os.path.join(root, "t-0")
        log = write_log(directory, shape)
        before = stored(log)
        end = log.log_end_offset
        segment_paths = [s.path() for s in log.segments]
        del log

        kind = data.draw(st.sampled_from(["cut", "garbage", "flip"]))
        k = data.draw(st.integers(0, len(segment_paths) - 1))
        path = segment_paths[k]
        size = os.path.getsize(path)
        in_segment = [(p, b) for seg, p, _, b in before if seg == k]
        if kind == "cut":
            cut = data.draw(st.integers(0, size))
            os.truncate(path, cut)
            survivors = [b for seg, p, _, b in before if seg < k or (seg == k and p + len(b) <= cut)]
            if cut in {p for p, _ in in_segment} | {size}:
                # A cut between two batches leaves a well-formed, shorter segment: nothing to detect (Kafka
                # keeps the later segments too).
                survivors += [b for seg, _, _, b in before if seg > k]
        elif kind == "garbage":
            k = len(segment_paths) - 1
            path = segment_paths[k]
            with open(path, "ab") as f:
                f.write(data.draw(st.binary(min_size=1, max_size=200)))
            survivors = [b for _, _, _, b in before]
        else:
            if size == 0:
                return
            candidates = [p + i for p, b in in_segment for i in range(len(b)) if i not in UNPROTECTED]
            where = data.draw(st.sampled_from(candidates))
            bit = data.draw(st.integers(0, 7))
            with open(path, "r+b") as f:
                f.seek(where)
                byte = f.read(1)[0]
                f.seek(where)
                f.write(bytes([byte ^ (1 << bit)]))
            survivors = [b for seg, p, _, b in before if seg < k or (seg == k and p + len(b) <= where)]

        recovered = Log.open(directory, CONFIG, now_ms=NOW + 10)
        assert all_bytes(recovered) == b"".join(survivors)
        last_survived = bool(survivors) and survivors[-1] is before[-1][3]
        expected_end = end if last_survived else before[len(survivors)][2]
        assert recovered.log_end_offset == expected_end
        for segment in recovered.segments[:-1]:
            assert segment.offset_index.entries * 8 == os.path.getsize(segment.path(".index"))

        info = recovered.append(batch(2, 10, NOW + 100), leader_epoch=9, now_ms=NOW + 100)
        assert info.first_offset == expected_end
        tail = recovered.read(info.first_offset, 1 << 20)
        assert tail.first_offset == info.first_offset and tail.size > 0
        recovered.close()
        again = Log.open(directory, CONFIG, now_ms=NOW + 200, recovery_point=info.last_offset + 1, had_clean_shutdown=True)
        assert again.log_end_offset == info.last_offset + 1
        assert all_bytes(again) == all_bytes(recovered)


def test_recovery_starts_at_the_recovery_point(tmp_path):
    directory = str(tmp_path / "t-0")
    log = write_log(directory, [(2, 200)] * 40)
    log.flush(log.segments[-2].base_offset)
    rp = log.recovery_point
    paths = [s.path() for s in log.segments]
    bases = [s.base_offset for s in log.segments]
    del log
    with open(paths[0], "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 4)
    os.truncate(paths[-1], os.path.getsize(paths[-1]) - 1)
    recovered = Log.open(directory, CONFIG, now_ms=NOW, recovery_point=rp)
    assert os.path.getsize(paths[0]) > 100
    assert recovered.log_end_offset == 78
    assert [s.base_offset for s in recovered.segments] == bases and rp == bases[-2]


def test_missing_or_torn_index_files_are_rebuilt(tmp_path):
    directory = str(tmp_path / "t-0")
    log = write_log(directory, [(3, 100)] * 60)
    end = log.log_end_offset
    expected = all_bytes(log)
    log.close()
    first = log.segments[0]
    os.unlink(first.path(".index"))
    with open(log.segments[1].path(".timeindex"), "ab") as f:
        f.write(b"\x01\x02\x03")
    again = Log.open(directory, CONFIG, now_ms=NOW, recovery_point=end, had_clean_shutdown=True)
    assert os.path.exists(first.path(".index"))
    assert all_bytes(again) == expected
    for target in range(0, end, 7):
        assert again.read(target, 1).first_offset <= target
    assert again.fetch_offset_by_timestamp(NOW + 30).offset == 28 * 3 + 2


def test_unclean_reopen_of_an_empty_directory_and_of_an_empty_active_segment(tmp_path):
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, CONFIG, now_ms=NOW)
    del log
    log = Log.open(directory, CONFIG, now_ms=NOW)
    assert log.log_end_offset == 0
    for _ in range(30):
        log.append(batch(1, 200, NOW), leader_epoch=0, now_ms=NOW)
    log.roll(now_ms=NOW)
    end = log.log_end_offset
    del log
    log = Log.open(directory, CONFIG, now_ms=NOW)
    assert log.log_end_offset == end and log.active_segment.size == 0
    assert log.append(batch(1, 1, NOW), leader_epoch=0, now_ms=NOW).first_offset == end
