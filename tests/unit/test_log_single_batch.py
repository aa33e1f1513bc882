"""Log.append's single-batch path against its general loop.

`Log._append_single_batch` serves the one-batch client append in a handful of calls; the general loop in
`Log.append` serves everything. Two logs get the same random appends, one with the single-batch path
switched off, and must answer alike (the same AppendInfo, or the same error and message) and leave the
same state: files byte for byte (logs, indexes, producer snapshots after a roll), offsets, leader epochs
and producer state. The appends mix what the single-batch path must get right and what it must hand back:
idempotent and transactional producers with in-order, duplicate, out-of-order and fenced batches, new
epochs, unknown producers, corrupt CRCs, control batches, timestamps out of range and absent, batches over
max.message.bytes, multi-batch appends, rolls (small segments, full indexes, segment.ms) and flush.messages;
transaction markers, and appends presenting a verification guard, the SENTINEL or none (KIP-890).
"""

from __future__ import annotations

import os
import random

import pytest

from odradek.protocol.records import ABORT, ATTR_CONTROL, COMMIT, build_batch, build_control_batch, read_batch_header
from odradek.storage.config import LogConfig
from odradek.storage.log import AppendInfo, Log
from odradek.storage.producer_state import SENTINEL, AppendOrigin

NOW = 1_700_000_000_000

CONFIGS = {
    "default": LogConfig(),
    "small segments": LogConfig(segment_bytes=3000, index_interval_bytes=150, segment_index_bytes=96),
    "segment.ms": LogConfig(segment_ms=50, index_interval_bytes=0, max_message_bytes=2000),
    "timestamps and flush": LogConfig(message_timestamp_before_max_ms=10_000, message_timestamp_after_max_ms=5_000,
                                      flush_messages=7),
}


def _general_only(log: Log) -> Log:
    log._append_single_batch = lambda buf, leader_epoch, now_ms, verification_guard: None  # the general loop for every append
    return log


class _Producers:
    """Idempotent producers whose next batches are mostly right and sometimes not; `accepted` tells them
    which batch the log took, so that most of what follows is in sequence again."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.state = {pid: [0, 0] for pid in (1000, 1001, 1002)}  # pid -> [epoch, next sequence]
        self.sent: list[bytearray] = []

    def batch(self, records) -> bytearray:
        rnd = self.rnd
        if self.sent and rnd.random() < 0.12:
            return bytearray(rnd.choice(self.sent[-6:]))  # a retry (a duplicate while it is among the last five)
        pid = rnd.choice(list(self.state))
        epoch, seq = self.state[pid]
        roll = rnd.random()
        if roll < 0.05:
            seq += rnd.choice((1, 5, -3))  # out of order
        elif roll < 0.08:
            epoch, seq = epoch + 1, 0  # a new epoch
        elif roll < 0.10 and epoch > 0:
            epoch -= 1  # fenced
        elif roll < 0.12:
            pid, epoch, seq = rnd.randrange(2000, 2010), 0, rnd.choice((0, 3))  # a producer the log has not seen
        data = bytearray(build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                     transactional=pid == 1002))
        self.sent.append(data)
        return data

    def accepted(self, header) -> None:
        if header.producer_id in self.state:
            self.state[header.producer_id] = [header.producer_epoch, header.base_sequence + header.records_count]


def _append(rnd: random.Random, producers: _Producers, now: int, epoch: int) -> bytearray:
    n = rnd.choice((1, 1, 2, 5, 20))
    skew = rnd.choice((0, 0, 0, 0, 0, 0, -20_000, 9_000, None))  # None: records without timestamps (-1)
    records = [(b"k%d" % i if rnd.random() < 0.8 else None, b"v" * rnd.choice((5, 60, 400)), None,
                -1 if skew is None else now + skew + i) for i in range(n)]
    kind = rnd.random()
    if kind < 0.55:
        return producers.batch(records)
    if kind < 0.85:
        return bytearray(build_batch(records))
    if kind < 0.92:
        return bytearray(build_batch(records)) + bytearray(build_batch(records[:1]))  # two batches
    data = bytearray(build_batch(records, control=kind > 0.97))  # a well-formed control batch
    if kind < 0.95:
        data[-1] ^= 0x01  # the CRC no longer matches
    elif kind < 0.97:
        data[22] |= ATTR_CONTROL  # attributes' low byte (the CRC is checked first, so this is corrupt too)
    return data


def _outcome(log: Log, data: bytearray, epoch: int, now: int, guard="none"):
    """`guard`: "none" (unchecked), "sentinel", or "verified" (a verification begun for the batch's producer)."""
    if guard == "verified":
        header = read_batch_header(data)
        guard = log.maybe_start_transaction_verification(header.producer_id, header.base_sequence,
                                                         header.producer_epoch, now)
    else:
        guard = SENTINEL if guard == "sentinel" else None
    try:
        return log.append(data, leader_epoch=epoch, now_ms=now, verification_guard=guard)
    except Exception as e:  # noqa: BLE001 - the comparison is of which error, with which message
        return type(e).__name__, str(e), list(getattr(e, "record_errors", ()))  # (KIP-467's per-record errors)


def _files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def _state(log: Log):
    producers = log.producer_state
    return (log.log_start_offset, log.log_end_offset, log._last_now_ms, log.leader_epoch_entries, log.recovery_point,
            [s.base_offset for s in log.segments], producers.map_end_offset, dict(producers.producers),
            log.first_unstable_offset,
            {pid: (v.timestamp_ms, v.lowest_sequence, v.epoch) for pid, v in producers.verification_states.items()})


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_single_batch_path_matches_the_general_loop(tmp_path, config_name, seed):
    config = CONFIGS[config_name]
    fast = Log.open(str(tmp_path / "fast"), config, now_ms=NOW)
    general = _general_only(Log.open(str(tmp_path / "general"), config, now_ms=NOW))
    rnd = random.Random(seed)
    producers = _Producers(rnd)
    now, epoch = NOW, 3
    outcomes = {"ok": 0, "duplicate": 0, "error": 0}
    for i in range(300):
        now += rnd.choice((0, 1, 7, 40))
        epoch += rnd.random() < 0.03
        if rnd.random() < 0.03:  # the transactional producer's transaction ends (its verification is spent)
            txn_epoch, kind = producers.state[1002][0], rnd.choice((ABORT, COMMIT))
            for log in (fast, general):
                log.append(bytearray(build_control_batch(kind, 1002, txn_epoch, 0, now)),
                           leader_epoch=epoch, now_ms=now, origin=AppendOrigin.COORDINATOR)
        data = _append(rnd, producers, now, epoch)
        guard = rnd.choice(("none", "none", "sentinel", "verified", "verified"))
        a = _outcome(fast, bytearray(data), epoch, now, guard)
        b = _outcome(general, bytearray(data), epoch, now, guard)
        assert a == b, f"append {i}"
        assert _state(fast) == _state(general), f"after append {i}"
        outcomes["error" if not isinstance(a, AppendInfo) else "duplicate" if a.duplicate else "ok"] += 1
        if isinstance(a, AppendInfo) and not a.duplicate:
            producers.accepted(read_batch_header(data))
    for log in (fast, general):
        log.close()
    assert _files(fast.directory) == _files(general.directory)
    # The mix reached every kind of outcome.
    assert min(outcomes.values()) > 0, outcomes


def test_the_single_batch_path_serves_one_batch_and_hands_back_the_rest(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000), now_ms=NOW)
    taken = []
    inner = log._append_single_batch

    def spy(buf, leader_epoch, now_ms, verification_guard):
        info = inner(buf, leader_epoch, now_ms, verification_guard)
        taken.append(info is not None)
        return info

    log._append_single_batch = spy
    one = bytearray(build_batch([(b"k", b"v" * 300, None, NOW)]))
    log.append(bytearray(one), leader_epoch=0, now_ms=NOW)
    log.append(bytearray(one), leader_epoch=0, now_ms=NOW)
    log.append(bytearray(one), leader_epoch=0, now_ms=NOW)  # would not fit: rolls through the general loop
    log.append(bytearray(one) + bytearray(one), leader_epoch=0, now_ms=NOW)  # two batches: not offered at all
    assert taken == [True, True, False]
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    assert log.log_end_offset == 5
