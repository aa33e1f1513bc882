"""Property test: transactions in the log against a simple model.

A Hypothesis state machine appends transactional batches of a few producers, plain batches and
COMMIT/ABORT markers, rolls, truncates at batch boundaries, and reopens cleanly, after a crash, or with
every producer snapshot lost; after each step the aborted-transaction index (every segment's entries in
order), the open transactions, the first unstable offset and `collect_aborted_transactions` over a random
range must equal what a plain walk over the model's batches says.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from odradek.protocol.records import ABORT, COMMIT, build_batch, build_control_batch
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import AppendOrigin
from odradek.storage.txn_index import AbortedTxn

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=120, segment_index_bytes=160, retention_ms=-1)
PRODUCERS = (1, 2, 3)


@dataclass
class ModelBatch:
    base: int
    last: int
    kind: str  # "data", "plain", "commit", "abort"
    producer_id: int


def walk(batches: list[ModelBatch]) -> tuple[list[AbortedTxn], dict[int, int]]:
    """The index entries and the open transactions (first offset -> producer) the batches leave."""
    ongoing: dict[int, int] = {}  # producer -> first offset
    entries = []
    for b in batches:
        if b.kind == "data":
            ongoing.setdefault(b.producer_id, b.base)
        elif b.kind in ("commit", "abort") and b.producer_id in ongoing:
            others = [first for pid, first in ongoing.items() if pid != b.producer_id]
            first = ongoing.pop(b.producer_id)
            if b.kind == "abort":
                entries.append(AbortedTxn(b.producer_id, first, b.base, min(others) if others else b.base + 1))
    return entries, {first: pid for pid, first in ongoing.items()}


class TxnLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.directory = os.path.join(self.root, "t-0")
        self.log = Log.open(self.directory, CONFIG, now_ms=NOW)
        self.batches: list[ModelBatch] = []

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log_end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    def _next_sequence(self, pid: int) -> int:
        return sum(b.last - b.base + 1 for b in self.batches if b.producer_id == pid and b.kind == "data")

    @rule(pid=st.sampled_from(PRODUCERS), n=st.integers(1, 4))
    def transactional_data(self, pid, n):
        buf = bytearray(build_batch([(b"k", b"v" * 20, None, NOW)] * n, producer_id=pid, producer_epoch=0,
                                    base_sequence=self._next_sequence(pid), transactional=True))
        info = self.log.append(buf, leader_epoch=0, now_ms=NOW)
        assert info.first_offset == self.log_end
        self.batches.append(ModelBatch(info.first_offset, info.last_offset, "data", pid))

    @rule(n=st.integers(1, 3))
    def plain_data(self, n):
        info = self.log.append(bytearray(build_batch([(b"k", b"p", None, NOW)] * n)), leader_epoch=0, now_ms=NOW)
        self.batches.append(ModelBatch(info.first_offset, info.last_offset, "plain", -1))

    @rule(pid=st.sampled_from(PRODUCERS), commit=st.booleans())
    def marker(self, pid, commit):
        buf = bytearray(build_control_batch(COMMIT if commit else ABORT, pid, 0, 0, NOW))
        info = self.log.append(buf, leader_epoch=0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
        self.batches.append(ModelBatch(info.first_offset, info.last_offset, "commit" if commit else "abort", pid))

    @rule()
    def roll(self):
        self.log.roll(now_ms=NOW)

    @rule(data=st.data())
    def truncate_at_a_batch_boundary(self, data):
        target = data.draw(st.sampled_from([b.base for b in self.batches] + [self.log_end]))
        self.log.truncate_to(target)
        self.batches = [b for b in self.batches if b.last < target]

    @rule(how=st.sampled_from(["clean", "crash", "crash without snapshots"]))
    def reopen(self, how):
        recovery_point = self.log.recovery_point
        if how == "clean":
            self.log.close()
        else:
            if how == "crash without snapshots":
                recovery_point = 0
                for name in os.listdir(self.directory):
                    if name.endswith(".snapshot"):
                        os.unlink(os.path.join(self.directory, name))
            # What was not flushed may be lost: the indexes of the segments recovery will replay.
            bases = [s.base_offset for s in self.log.segments]
            first_unflushed = max([b for b in bases if b <= recovery_point], default=0)
            for segment in self.log.segments:
                if segment.base_offset >= first_unflushed and os.path.exists(segment.txn_index.path):
                    os.unlink(segment.txn_index.path)
        self.log = Log.open(self.directory, CONFIG, now_ms=NOW, recovery_point=recovery_point,
                            had_clean_shutdown=how == "clean")

    @rule(data=st.data())
    def collect(self, data):
        start = data.draw(st.integers(0, self.log_end))
        upper = data.draw(st.integers(start, self.log_end + 1))
        entries, _ = walk(self.batches)
        expected = [t for t in entries if t.last_offset >= start and t.first_offset < upper]
        assert self.log.collect_aborted_transactions(start, upper) == expected

    @invariant()
    def transaction_state_agrees(self):
        entries, ongoing = walk(self.batches)
        assert [t for s in self.log.segments for t in s.txn_index.entries] == entries
        assert self.log.producer_state.ongoing == ongoing
        self.log.producer_state.on_high_watermark_updated(self.log.log_end_offset)
        assert self.log.first_unstable_offset == (min(ongoing) if ongoing else None)


# A bounded slice by default; ODRADEK_LONG=1 runs ten times as many (about 20 s).
TxnLogMachine.TestCase.settings = settings(max_examples=400 if os.environ.get("ODRADEK_LONG") else 40,
                                           stateful_step_count=50, deadline=None)
TestTxnLogModel = TxnLogMachine.TestCase
