"""How a share-partition spreads one partition's records over the members of a share group.

`SharePartition.acquire` takes whole log batches (Kafka's batch alignment), except that while more than one
member fetches the share-partition, a batch that alone holds more records than the member's request asked
for is cut at the request's max_records, and the rest of it stays available for the next member. The seeded
simulation below drives the pure state machine as the broker's fetch loop does (one log batch at a time,
from `next_fetch_offset()`, within the in-flight cap), with members fetching and accepting in a random order, and checks that each record is accepted exactly
once and that every member gets a share when the producer's batches are much larger than max_records.
"""

from __future__ import annotations

import bisect
import random

import pytest

from odradek.replication.share import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    ShareSnapshot,
    StateBatch,
)

ACCEPT = AcknowledgeType.ACCEPT
RELEASE = AcknowledgeType.RELEASE


def test_a_batch_within_the_request_is_taken_whole_past_the_limit():
    sp = SharePartition(0)
    assert sp.acquire("a", 0, 9, 500, now=0) == [AcquiredRange(0, 9, 1)]
    # 495 left of a 500-record request: the next 10-record batch is still taken whole (batch alignment).
    assert sp.acquire("a", 10, 19, 5, now=0, request_max_records=500) == [AcquiredRange(10, 19, 1)]


def test_a_member_alone_takes_whole_batches_up_to_the_in_flight_cap():
    sp = SharePartition(0, max_record_locks=2000)
    assert sp.acquire("a", 0, 999, 500, now=0) == [AcquiredRange(0, 999, 1)]
    assert sp.acquire("a", 1000, 9999, 500, now=0) == [AcquiredRange(1000, 1999, 1)]
    assert not sp.shared


def test_a_batch_larger_than_the_request_is_cut_and_the_rest_goes_to_the_next_member():
    sp = SharePartition(0)
    sp.note_fetch("b", now=0)  # another member fetches this share-partition: it is shared
    assert sp.acquire("a", 0, 9999, 500, now=0) == [AcquiredRange(0, 499, 1)]
    assert sp.next_fetch_offset() == 500
    assert sp.acquire("b", 0, 9999, 500, now=0) == [AcquiredRange(500, 999, 1)]
    # What is left of a request is honoured too: 200 left of 500, the 10,000-record batch is cut at 200.
    assert sp.acquire("c", 0, 9999, 200, now=0, request_max_records=500) == [AcquiredRange(1000, 1199, 1)]
    assert [(f, l, s, m) for f, l, s, _, m in sp.states()] == [
        (0, 499, RecordState.ACQUIRED, "a"), (500, 999, RecordState.ACQUIRED, "b"),
        (1000, 1199, RecordState.ACQUIRED, "c")]


def test_a_member_fetching_alone_again_takes_whole_batches_again():
    sp = SharePartition(0, record_lock_duration_ms=1000)
    sp.note_fetch("b", now=0)
    assert sp.acquire("a", 0, 999, 500, now=500) == [AcquiredRange(0, 499, 1)]
    # b has not fetched for a lock duration: a is alone again.
    assert sp.acquire("a", 0, 999, 500, now=1000) == [AcquiredRange(500, 999, 1)]
    assert not sp.shared


def test_a_released_part_of_a_large_batch_is_cut_as_well():
    sp = SharePartition(0)
    sp.note_fetch("b", now=0)
    sp.acquire("a", 0, 999, 1000, now=0)
    sp.acknowledge("a", [(0, 999, [RELEASE])], now=1)
    assert sp.acquire("b", 0, 999, 300, now=1) == [AcquiredRange(0, 299, 2)]
    assert sp.acquire("c", 0, 999, 300, now=1) == [AcquiredRange(300, 599, 2)]


def test_record_limit_mode_is_exact_whatever_the_batch():
    sp = SharePartition(0)
    assert sp.acquire("a", 0, 9, 3, now=0, record_limit=True, request_max_records=500) == [AcquiredRange(0, 2, 1)]


def _fetch(sp: SharePartition, batches: list[tuple[int, int]], member: str, max_records: int, now: int,
           high_watermark: int) -> list[AcquiredRange]:
    """The broker's fetch loop (broker/share/manager.py) over an in-memory log of `batches`."""
    starts = [b[0] for b in batches]
    got: list[AcquiredRange] = []
    budget = max_records
    offset = sp.next_fetch_offset()
    i = max(0, bisect.bisect_right(starts, offset) - 1)
    while budget > 0 and i < len(batches) and batches[i][0] < high_watermark:
        first, last = batches[i]
        i += 1
        if last < offset:
            continue
        if first >= sp.end_offset and sp.at_lock_cap():
            break
        taken = sp.acquire(member, first, last, budget, now, request_max_records=max_records)
        got += taken
        budget -= sum(r.last_offset - r.first_offset + 1 for r in taken)
    return got


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("members,batch_records", [(4, 10_000), (16, 10_000), (16, 1_000), (4, 100)])
def test_members_on_one_partition_share_it_and_each_record_is_accepted_once(seed, members, batch_records):
    rng = random.Random(seed * 1000 + members + batch_records)
    total = 100_000
    batches = [(o, min(o + batch_records, total) - 1) for o in range(0, total, batch_records)]
    sp = SharePartition(0, max_record_locks=2000, record_lock_duration_ms=30_000)
    names = [f"m{k}" for k in range(members)]
    holding: dict[str, list[AcquiredRange]] = {m: [] for m in names}
    received = {m: 0 for m in names}
    accepted: set[int] = set()
    now = 0
    # Rounds in which every member fetches once, in a new random order each round (a member that got
    # nothing because the in-flight cap was reached waits for the next round, as a long poll would).
    order = [m for _ in range(2_000) for m in rng.sample(names, len(names))]
    for member in order:
        if sp.start_offset >= total:
            break
        now += rng.randint(0, 3)
        if holding[member]:  # implicit acknowledgement: what it got last time is accepted with the next fetch
            acks = [(r.first_offset, r.last_offset, [ACCEPT]) for r in holding[member]]
            sp.acknowledge(member, acks, now)
            for r in holding[member]:
                span = set(range(r.first_offset, r.last_offset + 1))
                assert not span & accepted, f"seed {seed}: accepted twice"
                accepted |= span
            holding[member] = []
        got = _fetch(sp, batches, member, 500, now, total)
        holding[member] = got
        received[member] += sum(r.last_offset - r.first_offset + 1 for r in got)
        assert all(r.delivery_count == 1 for r in got), f"seed {seed}: a record delivered twice without a release"
    for member, ranges in holding.items():  # the members close: what they hold is accepted
        if ranges:
            sp.acknowledge(member, [(r.first_offset, r.last_offset, [ACCEPT]) for r in ranges], now)
            for r in ranges:
                accepted |= set(range(r.first_offset, r.last_offset + 1))
    assert accepted == set(range(total)), f"seed {seed}: {total - len(accepted)} records never accepted"
    assert sp.start_offset == total
    # Every member got a share: none got less than a fifth of the mean (once two members fetch, each fetch
    # takes at most one request's worth, or one batch of at most that many past it).
    mean = total / members
    assert min(received.values()) >= mean / 5, f"seed {seed}: {sorted(received.values())}"


# ---- isolating records delivered many times (Kafka 4.4's throttled delivery) ----------------------------


def _delivered(first: int, last: int, count: int, limit: int) -> SharePartition:
    """A share-partition (as a new leader loads it) whose records [first, last] are available again after
    `count` deliveries."""
    return SharePartition.restore(ShareSnapshot(0, first, (StateBatch(first, last, RecordState.AVAILABLE, count),)),
                                  delivery_count_limit=limit)


def test_a_batch_delivered_half_the_limit_times_goes_out_in_halves():
    sp = _delivered(0, 99, 3, limit=6)  # throttled from count 3 on
    assert sp.throttle_delivery_count == 3
    assert sp.acquire("a", 0, 99, 500, now=1) == [AcquiredRange(0, 49, 4)]  # 100 >> 1
    assert sp.isolating
    sp.acknowledge("a", [(0, 49, [RELEASE])], now=1)
    assert sp.acquire("a", 0, 99, 500, now=1) == [AcquiredRange(0, 24, 5)]  # count 4: 100 >> 2


def test_a_record_on_its_last_delivery_goes_out_alone_and_stops_the_request():
    sp = _delivered(0, 9, 4, limit=5)  # count 4 = limit - 1: the next delivery is the last
    sp.acquire("a", 10, 19, 500, now=1)  # (records past them, never delivered)
    assert sp.acquire("b", 0, 9, 500, now=1) == [AcquiredRange(0, 0, 5)]
    assert sp.isolating
    # Nothing else of the batch, and a request that already acquired something here takes none of them.
    assert sp.acquire("c", 0, 9, 500, now=1, acquired_before=True) == []
    assert sp.acquire("c", 0, 9, 500, now=1) == [AcquiredRange(1, 1, 5)]


def test_records_below_the_throttle_go_out_as_usual():
    sp = _delivered(0, 9, 2, limit=5)  # count 2 < 3
    assert sp.acquire("a", 0, 9, 500, now=1) == [AcquiredRange(0, 9, 3)]
    assert not sp.isolating
