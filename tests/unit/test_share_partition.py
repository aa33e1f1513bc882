"""The share-partition state machine (replication/share/partition.py): Kafka's SharePartition rules on a
manual clock, then a seeded property test of its invariants over random acquire / acknowledge / expire /
leave sequences."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode
from odradek.replication.share import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionError,
    ShareSnapshot,
    StateBatch,
)

ACCEPT, RELEASE, REJECT, RENEW, GAP = (int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE),
                                       int(AcknowledgeType.REJECT), int(AcknowledgeType.RENEW), int(AcknowledgeType.GAP))
LOCK = 30_000


def _sp(**kw) -> SharePartition:
    kw.setdefault("record_lock_duration_ms", LOCK)
    return SharePartition(**kw)


def _code(exc: pytest.ExceptionInfo[SharePartitionError]) -> int:
    return int(exc.value.error_code)


def test_new_batch_is_one_range_and_nothing_else_has_state():
    sp = _sp()
    assert sp.acquire("a", 0, 9, 500, now=0) == [AcquiredRange(0, 9, 1)]
    assert sp.states() == [(0, 9, RecordState.ACQUIRED, 1, "a")]
    assert (sp.start_offset, sp.end_offset, sp.next_deadline()) == (0, 10, LOCK)
    # A second member fetching the same batch gets nothing: everything is acquired.
    assert sp.acquire("b", 0, 9, 500, now=1) == []
    # The next batch goes to whoever fetches it.
    assert sp.acquire("b", 10, 19, 500, now=1) == [AcquiredRange(10, 19, 1)]


def test_accept_advances_the_start_and_drops_the_state():
    sp = _sp()
    sp.acquire("a", 0, 9, 500, now=0)
    sp.acknowledge("a", [(0, 9, [ACCEPT])], now=1)
    assert (sp.start_offset, sp.end_offset, sp.states()) == (10, 10, [])


def test_partial_acknowledgement_splits_only_where_needed():
    sp = _sp()
    sp.acquire("a", 0, 9, 500, now=0)
    sp.acknowledge("a", [(3, 4, [ACCEPT]), (6, 6, [REJECT])], now=1)
    assert sp.states() == [
        (0, 2, RecordState.ACQUIRED, 1, "a"),
        (3, 4, RecordState.ACKNOWLEDGED, 1, None),
        (5, 5, RecordState.ACQUIRED, 1, "a"),
        (6, 6, RecordState.ARCHIVED, 1, None),
        (7, 9, RecordState.ACQUIRED, 1, "a"),
    ]
    sp.acknowledge("a", [(0, 2, [ACCEPT])], now=2)
    assert sp.start_offset == 5  # past 0-4; 5 still acquired


def test_per_offset_types_and_release_redelivers_at_once():
    sp = _sp()
    sp.acquire("a", 0, 3, 500, now=0)
    sp.acknowledge("a", [(0, 3, [RELEASE, ACCEPT, RELEASE, REJECT])], now=1)
    assert sp.start_offset == 0
    assert sp.acquire("b", 0, 3, 500, now=2) == [AcquiredRange(0, 0, 2), AcquiredRange(2, 2, 2)]
    assert sp.redeliveries == 2


def test_release_every_time_archives_at_the_delivery_limit():
    sp = _sp(delivery_count_limit=3)
    for delivery in (1, 2, 3):
        assert sp.acquire("a", 0, 0, 500, now=delivery) == [AcquiredRange(0, 0, delivery)]
        sp.acknowledge("a", [(0, 0, [RELEASE])], now=delivery)
    # The third release finds the count at the limit: archived, never delivered again.
    assert sp.acquire("a", 0, 0, 500, now=10) == []
    assert (sp.start_offset, sp.archived_at_limit) == (1, 1)


def test_lock_expires_at_the_deadline_not_before():
    sp = _sp()
    sp.acquire("a", 0, 4, 500, now=1000)
    assert sp.expire(1000 + LOCK - 1) == []
    assert sp.expire(1000 + LOCK) == [AcquiredRange(0, 4, 1)]
    assert sp.lock_expiries == 5
    assert sp.next_deadline() is None
    # Another member gets them, delivery count 2.
    assert sp.acquire("b", 0, 4, 500, now=1000 + LOCK) == [AcquiredRange(0, 4, 2)]


def test_acknowledging_after_the_lock_expired_is_invalid_record_state():
    sp = _sp()
    sp.acquire("a", 0, 4, 500, now=0)
    with pytest.raises(SharePartitionError) as exc:
        sp.acknowledge("a", [(0, 4, [ACCEPT])], now=LOCK)  # expired at this very instant
    assert _code(exc) == ErrorCode.INVALID_RECORD_STATE
    assert sp.states() == [(0, 4, RecordState.AVAILABLE, 1, None)]


def test_renew_extends_the_lock():
    sp = _sp()
    sp.acquire("a", 0, 4, 500, now=0)
    sp.acknowledge("a", [(0, 1, [RENEW])], now=LOCK - 1)
    assert sp.expire(LOCK) == [AcquiredRange(2, 4, 1)]
    assert sp.next_deadline() == 2 * LOCK - 1
    sp.acknowledge("a", [(0, 1, [ACCEPT])], now=2 * LOCK - 2)
    assert sp.start_offset == 2


@pytest.mark.parametrize("batches,why", [
    ([(5, 4, [ACCEPT])], "empty range"),
    ([(0, 4, [ACCEPT]), (4, 6, [ACCEPT])], "overlapping"),
    ([(5, 6, [ACCEPT]), (0, 1, [ACCEPT])], "unordered"),
    ([(0, 4, [ACCEPT, ACCEPT])], "types neither one nor one per offset"),
    ([(0, 0, [9])], "unknown type"),
])
def test_malformed_acknowledgements_are_invalid_request(batches, why):
    sp = _sp()
    sp.acquire("a", 0, 9, 500, now=0)
    before = sp.states()
    with pytest.raises(SharePartitionError) as exc:
        sp.acknowledge("a", batches, now=1)
    assert _code(exc) == ErrorCode.INVALID_REQUEST, why
    assert sp.states() == before


def test_only_the_acquiring_member_may_acknowledge_and_it_is_all_or_nothing():
    sp = _sp()
    sp.acquire("a", 0, 4, 500, now=0)
    sp.acquire("b", 5, 9, 500, now=0)
    before = sp.states()
    for member, batches in [
        ("b", [(0, 0, [ACCEPT])]),                    # a's record
        ("a", [(0, 1, [ACCEPT]), (5, 5, [ACCEPT])]),  # the second range is b's: nothing applied
        ("a", [(10, 10, [ACCEPT])]),                  # never fetched
    ]:
        with pytest.raises(SharePartitionError) as exc:
            sp.acknowledge(member, batches, now=1)
        assert _code(exc) == ErrorCode.INVALID_RECORD_STATE
        assert sp.states() == before
    sp.acknowledge("a", [(0, 4, [ACCEPT])], now=1)
    with pytest.raises(SharePartitionError) as exc:  # already acknowledged (and before the start now)
        sp.acknowledge("a", [(0, 0, [ACCEPT])], now=1)
    assert _code(exc) == ErrorCode.INVALID_RECORD_STATE


def test_max_records_batch_aligned_or_exact():
    sp = _sp()
    # Batch-optimized: a whole new batch even past what is left of max_records, when the batch holds no more
    # than the request asked for (batch alignment); a batch larger than the whole request is cut.
    assert sp.acquire("a", 0, 9, 3, now=0, request_max_records=10) == [AcquiredRange(0, 9, 1)]
    # Record-limit (KIP-1206): exactly max_records.
    assert sp.acquire("a", 10, 19, 3, now=0, record_limit=True) == [AcquiredRange(10, 12, 1)]
    assert sp.end_offset == 13
    sp.acknowledge("a", [(0, 9, [RELEASE])], now=1)
    assert sp.acquire("b", 0, 9, 4, now=1, record_limit=True) == [AcquiredRange(0, 3, 2)]


def test_max_record_locks_caps_records_in_flight():
    sp = _sp(max_record_locks=10)
    assert sp.acquire("a", 0, 7, 500, now=0) == [AcquiredRange(0, 7, 1)]
    assert sp.acquire("a", 8, 19, 500, now=0) == [AcquiredRange(8, 9, 1)]
    assert sp.acquire("b", 10, 19, 500, now=0) == []
    sp.acknowledge("a", [(0, 4, [ACCEPT])], now=1)  # the start moves: room for five more
    assert sp.acquire("b", 10, 19, 500, now=1) == [AcquiredRange(10, 14, 1)]
    assert sp.in_flight == 10


def test_gap_in_the_log_is_archived_and_gap_acks_archive():
    sp = _sp()
    sp.acquire("a", 0, 2, 500, now=0)
    assert sp.acquire("a", 5, 6, 500, now=0) == [AcquiredRange(5, 6, 1)]
    assert sp.states()[1] == (3, 4, RecordState.ARCHIVED, 0, None)
    sp.acknowledge("a", [(0, 2, [ACCEPT, GAP, ACCEPT])], now=1)
    assert sp.start_offset == 5


def test_member_leaving_releases_its_records():
    sp = _sp()
    sp.acquire("a", 0, 4, 500, now=0)
    sp.acquire("b", 5, 9, 500, now=0)
    assert sp.release_member("a") == [AcquiredRange(0, 4, 1)]
    assert sp.acquire("c", 0, 9, 500, now=1) == [AcquiredRange(0, 4, 2)]


def test_snapshot_and_restore():
    sp = _sp(state_epoch=3)
    sp.acquire("a", 100, 109, 500, now=0)
    sp.acknowledge("a", [(100, 101, [ACCEPT]), (103, 103, [ACCEPT]), (104, 104, [REJECT]), (105, 105, [RELEASE])],
                   now=1)
    snap = sp.snapshot()
    assert snap == ShareSnapshot(3, 102, (
        StateBatch(102, 102, RecordState.AVAILABLE, 1),  # still acquired: persisted as available
        StateBatch(103, 103, RecordState.ACKNOWLEDGED, 1),
        StateBatch(104, 104, RecordState.ARCHIVED, 1),
        StateBatch(105, 109, RecordState.AVAILABLE, 1),
    ))
    new_leader = SharePartition.restore(snap)
    assert new_leader.snapshot() == snap
    # Unacknowledged records come back with their count; the acknowledged and archived never do.
    assert new_leader.acquire("b", 100, 109, 500, now=5) == [AcquiredRange(102, 102, 2), AcquiredRange(105, 109, 2)]


def test_restore_fills_holes_trims_and_archives_at_limit():
    snap = ShareSnapshot(0, 10, (
        StateBatch(5, 11, RecordState.ACKNOWLEDGED, 1),   # partly before the start
        StateBatch(14, 14, RecordState.AVAILABLE, 5),     # at the limit: archived
        StateBatch(15, 15, RecordState.AVAILABLE, 2),
    ))
    sp = SharePartition.restore(snap, delivery_count_limit=5)
    assert sp.start_offset == 12
    assert sp.states() == [
        (12, 13, RecordState.AVAILABLE, 0, None),
        (14, 14, RecordState.ARCHIVED, 5, None),
        (15, 15, RecordState.AVAILABLE, 2, None),
    ]
    with pytest.raises(ValueError):
        SharePartition.restore(ShareSnapshot(0, 0, (StateBatch(0, 5, RecordState.ACKNOWLEDGED, 1),
                                                    StateBatch(3, 6, RecordState.ACKNOWLEDGED, 1))))
    with pytest.raises(ValueError):
        SharePartition.restore(ShareSnapshot(0, 0, (StateBatch(0, 5, RecordState.ACQUIRED, 1),)))


# ---- property test ---------------------------------------------------------------------------------

MEMBERS = ["m0", "m1", "m2"]
LIMIT = 3


def _ops(draw_data: st.DataObject, n: int) -> list[tuple]:
    ops: list[tuple] = []
    for _ in range(n):
        kind = draw_data.draw(st.sampled_from(["fetch", "fetch", "ack", "ack", "tick", "leave"]))
        member = draw_data.draw(st.sampled_from(MEMBERS))
        if kind == "fetch":
            first = draw_data.draw(st.integers(0, 40))
            ops.append(("fetch", member, first, first + draw_data.draw(st.integers(0, 8)),
                        draw_data.draw(st.integers(1, 12)), draw_data.draw(st.booleans())))
        elif kind == "ack":
            batches = []
            cursor = draw_data.draw(st.integers(0, 30))
            for _ in range(draw_data.draw(st.integers(1, 3))):
                first = cursor + draw_data.draw(st.integers(0, 3))
                last = first + draw_data.draw(st.integers(0, 4))
                kinds = st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW, GAP])
                types = draw_data.draw(st.one_of(
                    st.lists(kinds, min_size=1, max_size=1),
                    st.lists(kinds, min_size=last - first + 1, max_size=last - first + 1)))
                batches.append((first, last, types))
                cursor = last + 1
            ops.append(("ack", member, batches))
        elif kind == "tick":
            ops.append(("tick", draw_data.draw(st.integers(0, LOCK))))
        else:
            ops.append(("leave", member))
    return ops


def _run(sp: SharePartition, ops: list[tuple], now: int) -> tuple[list, int]:
    """Apply ops; return each op's answer (acquired ranges, error code, released ranges)."""
    answers: list = []
    for op in ops:
        if op[0] == "fetch":
            _, member, first, last, max_records, exact = op
            answers.append(sp.acquire(member, first, last, max_records, now, record_limit=exact))
        elif op[0] == "ack":
            try:
                sp.acknowledge(op[1], op[2], now)
                answers.append(None)
            except SharePartitionError as e:
                answers.append(int(e.error_code))
        elif op[0] == "tick":
            now += op[1]
            answers.append(sp.expire(now))
        else:
            answers.append(sp.release_member(op[1]))
    return answers, now


def _per_offset(sp: SharePartition) -> dict[int, tuple[RecordState, int, str | None]]:
    out = {}
    for first, last, state, count, member in sp.states():
        for o in range(first, last + 1):
            assert o not in out, f"offset {o} in two ranges"
            out[o] = (state, count, member)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_invariants_hold_over_random_operations(data):
    sp = _sp(delivery_count_limit=LIMIT, max_record_locks=25)
    acknowledged: set[int] = set()
    counts: dict[int, int] = {}
    now = 0
    for op in _ops(data, data.draw(st.integers(1, 40))):
        before = _per_offset(sp)
        deadline_before = sp.next_deadline()
        answers, now2 = _run(sp, [op], now)
        after = _per_offset(sp)
        # Every offset in [SPSO, SPEO) is in exactly one state, and no state exists outside it.
        assert set(after) == set(range(sp.start_offset, sp.end_offset))
        assert sp.in_flight <= 25
        for o, (state, count, member) in after.items():
            # Delivery counts never decrease, and an acquirable record is below the limit.
            assert count >= counts.get(o, 0)
            counts[o] = count
            if state == RecordState.AVAILABLE:
                assert count < LIMIT
            assert count <= LIMIT
            assert (member is not None) == (state == RecordState.ACQUIRED)
            # An acknowledged record is never acquired again.
            if o in acknowledged:
                assert state == RecordState.ACKNOWLEDGED
            if state == RecordState.ACKNOWLEDGED:
                acknowledged.add(o)
        # Offsets behind the start never come back.
        assert not any(o < sp.start_offset for o in after)
        if op[0] == "fetch":
            for r in answers[0]:
                for o in range(r.first_offset, r.last_offset + 1):
                    assert after[o] == (RecordState.ACQUIRED, r.delivery_count, op[1])
                    assert o not in acknowledged
        if op[0] == "tick":
            # Locks expire only at or after their deadline.
            if answers[0]:
                assert deadline_before is not None and deadline_before <= now2
            if deadline_before is not None and deadline_before > now2:
                assert after == before
        if op[0] == "ack" and answers[0] is not None:
            assert after == before  # a refused acknowledgement changes nothing
        now = now2


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_snapshot_restore_gives_the_same_answers(data):
    """After every lock is gone (a leader change drops them), a restored partition answers every later
    operation exactly as the original does."""
    sp = _sp(delivery_count_limit=LIMIT, max_record_locks=25)
    _, now = _run(sp, _ops(data, data.draw(st.integers(0, 30))), 0)
    now += LOCK
    sp.expire(now)
    restored = SharePartition.restore(sp.snapshot(), delivery_count_limit=LIMIT, record_lock_duration_ms=LOCK,
                                      max_record_locks=25)
    assert restored.snapshot() == sp.snapshot()
    assert (restored.start_offset, restored.end_offset) == (sp.start_offset, sp.end_offset)
    later = _ops(data, data.draw(st.integers(1, 20)))
    assert _run(restored, later, now)[0] == _run(sp, later, now)[0]


# ---- what the leader's manager adds (broker/share/manager.py) --------------------------------------


def test_next_fetch_offset_is_the_first_available_record_else_the_end():
    sp = SharePartition(0)
    sp.acquire("a", 0, 9, 100, now=0)
    assert sp.next_fetch_offset() == 10
    sp.acknowledge("a", [(3, 4, [2])], now=1)  # RELEASE 3-4
    assert sp.next_fetch_offset() == 3


def test_mark_gap_archives_only_what_is_past_the_end():
    sp = SharePartition(0)
    sp.acquire("a", 0, 4, 100, now=0)
    assert not sp.mark_gap(2, 4)  # in flight already: left alone
    assert sp.mark_gap(5, 5)  # a control batch after it
    assert sp.end_offset == 6 and sp.states()[-1][:4] == (5, 5, RecordState.ARCHIVED, 0)
    sp.acknowledge("a", [(0, 4, [1])], now=1)
    assert sp.start_offset == 6 and sp.in_flight == 0
    assert sp.mark_gap(8, 9)  # a gap before it too: all archived
    assert sp.start_offset == 10


def test_move_start_drops_what_the_log_no_longer_holds():
    sp = SharePartition(0)
    sp.acquire("a", 0, 9, 100, now=0)
    assert sp.move_start(4) and sp.start_offset == 4
    assert sp.states() == [(4, 9, RecordState.ACQUIRED, 1, "a")]
    assert not sp.move_start(2)
    assert sp.move_start(20) and sp.end_offset == 20 and sp.in_flight == 0
