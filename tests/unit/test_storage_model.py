"""Property test: the log against a simple in-memory model.

A Hypothesis state machine appends, rolls, truncates (at batch boundaries, as replication does), applies
retention and DeleteRecords, reopens cleanly or after a crash, and checks reads, offset lookups and
timestamp lookups against the model (a list of batches) and a linear scan.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from odradek.protocol.records import build_batch, iter_batches
from odradek.storage.config import LogConfig
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.log import Log

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=120, segment_index_bytes=160, retention_ms=-1)


@dataclass
class ModelBatch:
    base: int
    timestamps: list[int]
    size: int

    @property
    def last(self) -> int:
        return self.base + len(self.timestamps) - 1


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.directory = os.path.join(self.root, "t-0")
        self.log = Log.open(self.directory, CONFIG, now_ms=NOW)
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.log_end = 0
        self.clock = NOW

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _readable(self) -> list[ModelBatch]:
        return [b for b in self.batches if b.last >= self.log_start]

    @rule(deltas=st.lists(st.integers(-50, 50), min_size=1, max_size=5), size=st.integers(0, 200),
          tick=st.integers(0, 100))
    def append(self, deltas, size, tick):
        self.clock += tick
        timestamps = [self.clock + d for d in deltas]
        buf = bytearray(build_batch([(b"k", b"x" * size, None, t) for t in timestamps]))
        info = self.log.append(buf, leader_epoch=0, now_ms=self.clock)
        assert info.first_offset == self.log_end
        self.batches.append(ModelBatch(self.log_end, timestamps, len(buf)))
        self.log_end += len(timestamps)

    @rule()
    def roll(self):
        self.log.roll(now_ms=self.clock)

    @rule(data=st.data())
    def truncate_at_a_batch_boundary(self, data):
        readable = self._readable()
        target = data.draw(st.sampled_from([b.base for b in readable] + [self.log_end]))
        if target < self.log_start:
            return
        self.log.truncate_to(target)
        self.batches = [b for b in self.batches if b.last < target]
        self.log_end = target

    @rule(data=st.data())
    def delete_records(self, data):
        target = data.draw(st.integers(self.log_start, self.log_end))
        assert self.log.delete_records_before(target, now_ms=self.clock) == max(self.log_start, target)
        self.log_start = max(self.log_start, target)

    @rule(limit=st.integers(0, 4000), age=st.integers(0, 3000))
    def retention(self, limit, age):
        before = self.log.segments
        self.log.update_config(CONFIG.with_overrides(retention_bytes=limit, retention_ms=age))
        self.log.delete_old_segments(self.clock)
        self.log.update_config(CONFIG)
        after = self.log.segments
        gone = [s for s in before if all(s is not a for a in after)]
        assert list(before[: len(gone)]) == gone
        if after[0].base_offset > self.log_start:
            self.log_start = after[0].base_offset
        assert self.log.log_start_offset == self.log_start

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
        recovery_point = self.log.recovery_point
        self.log = Log.open(self.directory, CONFIG, now_ms=self.clock, recovery_point=recovery_point,
                            log_start_offset=self.log.log_start_offset, had_clean_shutdown=clean)

    @rule(data=st.data(), max_bytes=st.integers(0, 2000), min_one=st.booleans())
    def read(self, data, max_bytes, min_one):
        offset = data.draw(st.integers(max(0, self.log_start - 2), self.log_end + 1))
        max_offset = data.draw(st.integers(self.log_start, self.log_end))
        if offset < self.log_start or offset > self.log_end:
            try:
                self.log.read(offset, max_bytes, max_offset=max_offset)
            except OffsetOutOfRangeError:
                return
            raise AssertionError("expected OffsetOutOfRangeError")
        read = self.log.read(offset, max_bytes, max_offset=max_offset, min_one_message=min_one)
        chunk = b"".join(os.pread(r.fd, r.length, r.position) for r in read.regions)
        got = [(h.base_offset, h.last_offset) for _, h in iter_batches(chunk)]
        candidates = [b for b in self._readable() if b.last >= offset and b.last < max_offset]
        if not candidates or offset >= max_offset:
            assert got == []
            return
        expected = [(b.base, b.last) for b in candidates]
        assert got == expected[: len(got)]
        if got:
            assert read.first_offset == got[0][0]
            assert len(chunk) <= max_bytes or len(got) == 1
        if len(got) < len(expected):
            following = candidates[len(got)]
            bases = [seg.base_offset for seg in self.log.segments]
            crosses = max(x for x in bases if x <= following.base) > max(x for x in bases if x <= candidates[0].base)
            too_big = len(chunk) + following.size > max_bytes and (got or not min_one)
            assert too_big or crosses, (got, expected)

    @rule(data=st.data())
    def time_lookup(self, data):
        target = data.draw(st.integers(NOW - 60, self.clock + 60))
        flat = [(b.base + i, t) for b in self._readable() for i, t in enumerate(b.timestamps)
                if b.base + i >= self.log_start]
        expected = next(((o, t) for o, t in flat if t >= target), None)
        found = self.log.fetch_offset_by_timestamp(target)
        assert (None if found is None else (found.offset, found.timestamp)) == expected

    @invariant()
    def offsets_agree(self):
        assert self.log.log_end_offset == self.log_end
        assert self.log.log_start_offset == self.log_start
        present = [(t, b.base + i) for b in self.batches if b.base >= self.log.segments[0].base_offset
                   for i, t in enumerate(b.timestamps)]
        top = self.log.fetch_offset_of_max_timestamp()
        if not present:
            assert top is None
            return
        best = max(t for t, _ in present)
        assert (top.timestamp, top.offset) == (best, min(o for t, o in present if t == best))


LogMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestLogModel = LogMachine.TestCase
