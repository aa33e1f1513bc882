"""ShareFetch / ShareAcknowledge against a real broker process (odradek.share.enabled=true), sent by hand
over the bundled client's connection: share sessions, several members on one partition, RELEASE, REJECT,
lock expiry, the delivery-count limit, long polls and the errors Kafka answers for bad acknowledgements
and session epochs. No ShareGroupHeartbeat is needed: as in Kafka, the leader does not check membership.

One broker for the module; each test uses its own topic and group. The lock is 2 s (the floor is 1 s) and
the delivery-count limit 2 (Kafka's floor), so expiry and archiving are reached quickly.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import ApiVersionsRequest
from tests.brokerproc import BrokerProcess
from tests.harness.groups import create_topic, name, produce, wait_for
from tests.harness.processes import free_port_block
from tests.harness.share import (
    ACCEPT,
    REJECT,
    RELEASE,
    RENEW,
    ShareMember,
    acquired,
    acquired_offsets,
    connect,
    offsets_in,
    topic_id,
)

pytestmark = pytest.mark.timeout(180)
LOCK_MS = 2000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("share-data"), "odradek.share.enabled=true",
                         f"group.share.record.lock.duration.ms={LOCK_MS}", "group.share.min.record.lock.duration.ms=1000",
                         "group.share.delivery.count.limit=2",
                         f"metrics.port={free_port_block(1)}", "metrics.host=127.0.0.1").start()
    yield proc
    proc.stop()


async def _setup(broker, members: int = 1):
    """A new one-partition topic, its id, and `members` members of a new group with open sessions (the
    group starts at `latest`, so the sessions are opened before anything is produced)."""
    topic = create_topic(broker.bootstrap, 1, prefix="share")
    conn = await connect(broker.bootstrap)
    tid = await topic_id(conn, topic)
    group = name("sg")
    out = []
    for _ in range(members):
        member = ShareMember(await connect(broker.bootstrap), group, tid)
        opened = await member.fetch()
        assert opened.error_code == 0, opened
        assert opened.acquisition_lock_timeout_ms == LOCK_MS
        out.append(member)
    await conn.close()
    return topic, out


async def _close(*members):
    for m in members:
        await m.conn.close()


async def _fetch_until(member: ShareMember, want: int, timeout_s: float = 30, **kw):
    """Fetch until `want` records were acquired in all (long polls of 1 s); returns the responses."""
    responses, got = [], 0
    deadline = time.monotonic() + timeout_s
    while got < want:
        assert time.monotonic() < deadline, f"only {got} of {want} records acquired"
        r = await member.fetch(max_wait_ms=1000, **kw)
        assert r.error_code == 0, r
        responses.append(r)
        got += len(acquired_offsets(r))
    return responses


def test_share_apis_advertised_when_enabled(broker):
    async def run():
        conn = await connect(broker.bootstrap)
        versions = {k.api_key: (k.min_version, k.max_version) for k in (await conn.send(ApiVersionsRequest(), version=3)).api_keys}
        await conn.close()
        return versions
    versions = asyncio.run(run())
    assert versions[78] == (1, 2) and versions[79] == (1, 2)


def test_members_get_disjoint_records(broker):
    async def run():
        topic, members = await _setup(broker, 3)
        produce(broker.bootstrap, topic, {0: 30})
        seen: dict[str, list[int]] = {}
        for m in members:  # record-limit mode: exactly 5 each, whatever the batches
            r = (await _fetch_until(m, 5, max_records=5, mode=1))
            offsets = [o for x in r for o in acquired_offsets(x)]
            assert len(offsets) == 5, offsets
            for x in r:  # the records sent hold every acquired offset
                assert set(acquired_offsets(x)) <= set(offsets_in(x.responses[0].partitions[0].records))
            seen[m.member_id] = offsets
        everything = [o for v in seen.values() for o in v]
        assert len(set(everything)) == 15, seen
        # The rest goes to whoever asks next, never to two members; accepted records never come back.
        for m in members:
            await m.acknowledge([(o, o, [ACCEPT]) for o in sorted(seen[m.member_id])][:1])
        rest = await _fetch_until(members[0], 15)
        rest_offsets = [o for x in rest for o in acquired_offsets(x)]
        assert sorted(set(rest_offsets) | set(everything)) == list(range(30))
        assert not set(rest_offsets) & set(everything)
        await _close(*members)
    asyncio.run(run())


def test_release_redelivers_reject_never_returns_and_limit_archives(broker):
    async def run():
        topic, (a, b) = await _setup(broker, 2)
        produce(broker.bootstrap, topic, {0: 4})
        first = await _fetch_until(a, 4)
        assert [(f, l_, c) for x in first for f, l_, c in acquired(x)][0][2] == 1
        # RELEASE 0-1, REJECT 2, ACCEPT 3 (one type per offset).
        r = await a.acknowledge([(0, 3, [RELEASE, RELEASE, REJECT, ACCEPT])])
        assert r.responses[0].partitions[0].error_code == 0, r
        again = await _fetch_until(b, 2)
        assert [x for r_ in again for x in acquired(r_)] == [(0, 1, 2)]  # at once, delivery count 2
        # Released at the limit (2): archived, never delivered again; 2 was rejected, 3 accepted.
        ack = await b.acknowledge([(0, 1, [RELEASE])])
        assert ack.responses[0].partitions[0].error_code == 0, ack
        nothing = await a.fetch(max_wait_ms=300)
        assert acquired(nothing) == []
        await _close(a, b)
    asyncio.run(run())


def test_lock_expiry_redelivers_and_renew_extends(broker):
    async def run():
        topic, (a, b) = await _setup(broker, 2)
        produce(broker.bootstrap, topic, {0: 3})
        got = [x for r in await _fetch_until(a, 3) for x in acquired(r)]
        assert got[0][0] == 0 and got[-1][1] == 2
        # a keeps offset 2 by renewing it (KIP-1222) while b waits; 0-1 expire (≈2 s) and go to b with
        # delivery count 2. Each RENEW answer says how long the lock now lasts.
        redelivered: list = []
        deadline = time.monotonic() + 30
        while not redelivered:
            assert time.monotonic() < deadline, "a's expired records never reached b"
            renewed = await a.acknowledge([(2, 2, [RENEW])])
            assert renewed.error_code == 0 and renewed.responses[0].partitions[0].error_code == 0, renewed
            assert renewed.acquisition_lock_timeout_ms == LOCK_MS
            redelivered = acquired(await b.fetch(max_wait_ms=300))
        assert redelivered == [(0, 1, 2)], redelivered
        kept = await a.acknowledge([(2, 2, [ACCEPT])])
        assert kept.responses[0].partitions[0].error_code == 0, kept
        # a's acknowledgement of the expired records fails: it no longer holds them.
        late = await a.acknowledge([(0, 1, [ACCEPT])])
        assert late.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE, late
        await _close(a, b)
    asyncio.run(run())


def test_bad_acknowledgements(broker):
    async def run():
        topic, (a, b) = await _setup(broker, 2)
        produce(broker.bootstrap, topic, {0: 5})
        await _fetch_until(a, 5)

        def ack_error(response):
            return response.responses[0].partitions[0].error_code
        # Another member's records, offsets never fetched, and malformed ranges.
        assert ack_error(await b.acknowledge([(0, 0, [ACCEPT])])) == ErrorCode.INVALID_RECORD_STATE
        assert ack_error(await a.acknowledge([(7, 9, [ACCEPT])])) == ErrorCode.INVALID_RECORD_STATE
        assert ack_error(await a.acknowledge([(2, 3, [ACCEPT]), (3, 4, [ACCEPT])])) == ErrorCode.INVALID_REQUEST
        assert ack_error(await a.acknowledge([(3, 4, [ACCEPT]), (0, 1, [ACCEPT])])) == ErrorCode.INVALID_REQUEST
        assert ack_error(await a.acknowledge([(0, 2, [ACCEPT, ACCEPT])])) == ErrorCode.INVALID_REQUEST
        # Nothing of a refused acknowledgement was applied: a still holds all five.
        assert ack_error(await a.acknowledge([(0, 4, [ACCEPT])])) == 0
        assert ack_error(await a.acknowledge([(0, 0, [ACCEPT])])) == ErrorCode.INVALID_RECORD_STATE  # twice
        # RENEW is version 2's.
        old = await a.acknowledge([(0, 0, [RENEW])], version=1)
        assert old.error_code == ErrorCode.INVALID_REQUEST
        await _close(a, b)
    asyncio.run(run())


def test_session_epochs(broker):
    async def run():
        topic, (a, b) = await _setup(broker, 2)
        assert (await a.fetch(epoch=5)).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert (await a.acknowledge([], epoch=0)).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        stranger = ShareMember(a.conn, a.group, a.topic_id)
        assert (await stranger.fetch(epoch=1)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert (await stranger.fetch(epoch=-1)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        opening_with_acks = await stranger.fetch([(0, 0, [ACCEPT])], epoch=0)
        assert opening_with_acks.error_code == ErrorCode.INVALID_REQUEST
        # Closing the session (epoch -1) releases what the member holds at once, for b to take.
        produce(broker.bootstrap, topic, {0: 3})
        await _fetch_until(a, 3)
        closed = await a.close()
        assert closed.error_code == 0
        assert [x for r in await _fetch_until(b, 3) for x in acquired(r)][0][2] == 2
        assert (await a.fetch(epoch=a.epoch)).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        await _close(a, b)
    asyncio.run(run())


def test_disconnect_releases_and_long_poll_wakes(broker):
    async def run():
        topic, (a, b) = await _setup(broker, 2)
        # b waits (long poll) while nothing is there; a's records come back when a's connection closes.
        produce(broker.bootstrap, topic, {0: 2})
        await _fetch_until(a, 2)
        waiting = asyncio.create_task(b.fetch(max_wait_ms=20_000))
        await asyncio.sleep(0)  # (lets the request go out first)
        await a.conn.close()
        r = await waiting
        assert [x[2] for x in acquired(r)] == [2], r
        # A long poll that waits for new records is answered when they are produced.
        waiting = asyncio.create_task(b.fetch(max_wait_ms=20_000))
        await asyncio.to_thread(produce, broker.bootstrap, topic, {0: 1})
        r = await waiting
        assert acquired(r) == [(2, 2, 1)], r
        await _close(b)
    asyncio.run(run())


def test_batch_size_cuts_acquired_ranges_and_bad_acquire_mode(broker):
    async def run():
        topic, (a,) = await _setup(broker, 1)
        produce(broker.bootstrap, topic, {0: 7})
        responses = await _fetch_until(a, 7, batch_size=2)
        ranges = [x for r in responses for x in acquired(r)]
        assert all(last - first < 2 for first, last, _ in ranges), ranges  # at most batch_size records each
        assert [o for first, last, _ in ranges for o in range(first, last + 1)] == list(range(7))
        bad = await a.fetch(mode=5)
        assert bad.error_code == ErrorCode.INVALID_REQUEST and bad.acquisition_lock_timeout_ms == 0
        await _close(a)
    asyncio.run(run())


def test_max_records_zero_acknowledges_without_fetching_or_waiting(broker):
    """librdkafka sends its acknowledgements alone in a ShareFetch with max_records 0."""
    async def run():
        topic, (a,) = await _setup(broker, 1)
        produce(broker.bootstrap, topic, {0: 4})
        got = [x for r in await _fetch_until(a, 4) for x in acquired(r)]
        assert got[0][0] == 0 and got[-1][1] == 3
        produce(broker.bootstrap, topic, {0: 2})  # there to take: a fetch would have acquired them
        r = await a.fetch([(0, 3, [ACCEPT])], max_records=0, max_wait_ms=30_000)
        part = r.responses[0].partitions[0]
        assert (part.acknowledge_error_code, acquired(r), part.records) == (0, [], b""), r
        assert acquired(await a.fetch()) == [(4, 5, 1)]
        await _close(a)
    asyncio.run(run())


def test_unknown_topic_id(broker):
    async def run():
        import uuid
        conn = await connect(broker.bootstrap)
        member = ShareMember(conn, name("sg"), uuid.uuid4())
        r = await member.fetch()
        assert r.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID, r
        await conn.close()
    asyncio.run(run())


def test_metrics_and_log_lines(broker):
    """What share members do shows in the share metrics and the broker's log (counters at least what this
    test did; the tests before it in the module add to them)."""
    async def run():
        topic, (a, b) = await _setup(broker, 2)
        produce(broker.bootstrap, topic, {0: 2})
        await _fetch_until(a, 2)
        await a.acknowledge([(0, 1, [ACCEPT, RELEASE])])
        assert acquired(await b.fetch()) == [(1, 1, 2)]
        await b.acknowledge([(1, 1, [ACCEPT])])
        await _close(a, b)
    asyncio.run(run())
    port = next(o.split("=")[1] for o in broker.overrides if o.startswith("metrics.port="))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()

    def value(series: str) -> float:
        m = re.search(rf"^{re.escape(series)} ([0-9.e+]+)$", text, re.M)
        assert m, f"{series} not in the metrics"
        return float(m.group(1))
    assert value('odradek_share_acknowledgements_total{type="accept"}') >= 2
    assert value('odradek_share_acknowledgements_total{type="release"}') >= 1
    assert value("odradek_share_redeliveries_total") >= 1
    for series in ("odradek_share_lock_expiries_total", "odradek_share_archived_at_limit_total",
                   "odradek_share_partitions", "odradek_share_sessions", "odradek_share_records_in_flight"):
        assert value(series) >= 0
    wait_for(lambda: "share session ended with its connection" in broker.log_text(), 20, "the session's end logged")
    assert "share partition loaded" in broker.log_text()
