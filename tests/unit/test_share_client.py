"""The bundled ShareConsumer's protocol handling, against a scripted broker (tests/harness/fake_share_broker.py):
acknowledgement batches, acquired ranges, GAP for offsets without a record, the session epochs (0 opens,
then one up per request, -1 closes; reset after SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH or
a new connection), rejoining at epoch 0 after FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, a metadata refresh
after NOT_LEADER_OR_FOLLOWER, INVALID_RECORD_STATE returned by commit(), RENEW with the lock duration it
answers, and leaving on close. Waits are loops on a condition with a deadline; nothing is timed."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.client import AcknowledgeType, ShareConsumer, ShareConsumerConfig, ShareStateError, TopicPartition
from odradek.client.errors import ConfigError, KafkaError
from odradek.client.share import RecordDeserializationError, ack_batches, new_member_id
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import COMMIT, build_batch, build_control_batch
from tests.harness.fake_share_broker import LOCK_MS, TOPIC, FakeShareBroker

pytestmark = pytest.mark.timeout(60)
TP = TopicPartition(TOPIC, 0)
HEARTBEAT, FETCH, ACK, METADATA = 76, 78, 79, 3


def records(first: int, count: int) -> bytes:
    return build_batch([(None, f"v{first + i}".encode(), [], 1000 + i) for i in range(count)], base_offset=first)


async def until(condition, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def poll_until(c: ShareConsumer, count: int, **kw) -> list:
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < count:
        assert time.monotonic() < deadline, f"timed out: {[(r.offset, r.delivery_count) for r in got]}"
        got += await c.poll(timeout_ms=50, **kw)
    return got


def consumer(broker: FakeShareBroker, **kw) -> ShareConsumer:
    return ShareConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id="g", retry_backoff_ms=10,
                         fetch_max_wait_ms=0, **kw)


def test_ack_batches_are_ascending_runs_with_one_type_or_one_per_offset():
    assert ack_batches({}) == []
    assert ack_batches({7: AcknowledgeType.ACCEPT}) == [(7, 7, [1])]
    assert ack_batches({3: 1, 5: 1, 6: 1, 7: 2, 9: 3, 10: 3}) == [(3, 3, [1]), (5, 7, [1, 1, 2]), (9, 10, [3])]


def test_member_ids_are_kafka_shaped_and_config_is_checked():
    ids = {new_member_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 22 and "=" not in i for i in ids)
    with pytest.raises(ConfigError):
        ShareConsumerConfig()  # no group id
    with pytest.raises(ConfigError):
        ShareConsumerConfig(group_id="g", share_acknowledgement_mode="auto")
    config = ShareConsumerConfig.from_dict({"group.id": "g", "share.acknowledgement.mode": "explicit"})
    assert config.explicit


async def test_acquired_ranges_delivery_counts_gaps_and_session_epochs():
    async with FakeShareBroker() as broker:
        # Offsets 0-9 in one batch, of which 2-4 (first delivery) and 7 (third) are acquired; a commit
        # marker at 10, acquired: no record, so a GAP.
        broker.fetches.append((records(0, 10) + build_control_batch(COMMIT, 5, 0, 0, 2000, base_offset=10),
                               [(2, 4, 1), (7, 7, 3), (10, 10, 1)]))
        async with consumer(broker) as c:
            got = await poll_until(c, 4)
            assert [(r.offset, r.value, r.delivery_count) for r in got] == [
                (2, b"v2", 1), (3, b"v3", 1), (4, b"v4", 1), (7, b"v7", 3)]
            assert c.assignment() == {TP}
            assert c.acquisition_lock_timeout_ms == LOCK_MS
            await c.poll(timeout_ms=0)  # implicit mode: the four are accepted, with the GAP
            await until(lambda: any(p.acknowledgement_batches for r in broker.of(FETCH) + broker.of(ACK)
                                    for t in r.topics for p in t.partitions), "the acknowledgements sent")
        sent = sorted((b.first_offset, b.last_offset, list(b.acknowledge_types))
                      for r in broker.of(FETCH) + broker.of(ACK) for t in r.topics for p in t.partitions
                      for b in p.acknowledgement_batches)
        assert sent == [(2, 4, [1]), (7, 7, [1]), (10, 10, [0])]  # the GAP goes at once, the rest on the poll
        epochs = [r.share_session_epoch for k, _, r in broker.requests if k in (FETCH, ACK)]
        # 0 opens the session, then one up per request (ShareFetch or ShareAcknowledge), -1 closes it.
        assert epochs == [*range(len(epochs) - 1), -1], epochs
        assert broker.of(FETCH)[0].topics[0].partitions[0].partition_index == 0
        assert all(not r.topics or r.topics[0].partitions[0].acknowledgement_batches for r in broker.of(FETCH)[1:])
        # close(): the session ends with -1, then the member leaves with epoch -1.
        assert broker.of(ACK)[-1].share_session_epoch == -1
        heartbeats = broker.of(HEARTBEAT)
        assert heartbeats[0].member_epoch == 0 and heartbeats[0].subscribed_topic_names == [TOPIC]
        assert heartbeats[-1].member_epoch == -1
        assert {h.member_id for h in heartbeats} == {heartbeats[0].member_id}


async def test_a_lost_session_is_opened_again_at_epoch_0():
    async with FakeShareBroker() as broker:
        async with consumer(broker) as c:
            await until(lambda: len(broker.of(FETCH)) >= 3, "a few fetches")
            broker.fetch_errors.append(int(ErrorCode.SHARE_SESSION_NOT_FOUND))
            seen = len(broker.of(FETCH))
            await until(lambda: len(broker.of(FETCH)) >= seen + 3, "fetches after the error")
            epochs = [r.share_session_epoch for r in broker.of(FETCH)]
            refused = epochs[seen]
            assert refused > 0 and epochs[seen + 1] == 0 and epochs[seen + 2] == 1, epochs
            reopened = broker.of(FETCH)[seen + 1]
            assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in reopened.topics] != []
            broker.fetch_errors.append(int(ErrorCode.INVALID_SHARE_SESSION_EPOCH))
            seen = len(broker.of(FETCH))
            await until(lambda: len(broker.of(FETCH)) >= seen + 2, "fetches after the epoch error")
            assert broker.of(FETCH)[seen + 1].share_session_epoch == 0
            # A new connection: the broker ended the session with the old one, so a new session opens.
            broker.drop_connections()
            seen = len(broker.of(FETCH))
            await until(lambda: len(broker.of(FETCH)) >= seen + 2, "fetches on the new connection")
            assert broker.of(FETCH)[seen].share_session_epoch == 0
            assert await c.poll(timeout_ms=0) == []


async def test_fenced_and_unknown_members_join_again_at_epoch_0_with_their_id():
    async with FakeShareBroker() as broker:
        async with consumer(broker) as c:
            await until(lambda: c.assignment() == {TP}, "the assignment")
            member = c.member_id
            for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                broker.heartbeat_errors.append(int(code))
                seen = len(broker.of(HEARTBEAT))
                await until(lambda: len(broker.of(HEARTBEAT)) >= seen + 2, f"a heartbeat after {code.name}")
                rejoin = broker.of(HEARTBEAT)[seen + 1]
                assert (rejoin.member_id, rejoin.member_epoch, rejoin.subscribed_topic_names) == (member, 0, [TOPIC])
                await until(lambda: c.assignment() == {TP}, "the assignment again")
            # An error the member cannot fix reaches the caller.
            broker.heartbeat_errors.append(int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            with pytest.raises(KafkaError) as raised:
                while True:
                    await c.poll(timeout_ms=50)
            assert raised.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


async def test_not_leader_refreshes_metadata():
    async with FakeShareBroker() as broker:
        async with consumer(broker) as c:
            await until(lambda: len(broker.of(FETCH)) >= 1, "a fetch")
            seen = len(broker.of(METADATA))
            broker.fetch_partition_errors.append(int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            await until(lambda: len(broker.of(METADATA)) > seen, "a metadata refresh")
            assert await c.poll(timeout_ms=0) == []


async def test_explicit_commit_returns_invalid_record_state_and_renew_returns_the_lock():
    async with FakeShareBroker() as broker:
        broker.fetches.append((records(0, 3), [(0, 2, 1)]))
        async with consumer(broker, share_acknowledgement_mode="explicit") as c:
            got = await poll_until(c, 3)
            with pytest.raises(ShareStateError):
                await c.poll(timeout_ms=0)  # explicit: unacknowledged records
            c.acknowledge(got[0], AcknowledgeType.ACCEPT)
            c.acknowledge(got[1], AcknowledgeType.RENEW)
            c.acknowledge(got[2], AcknowledgeType.REJECT)
            with pytest.raises(ShareStateError):
                c.acknowledge(got[0])  # already acknowledged
            broker.ack_errors.append(int(ErrorCode.INVALID_RECORD_STATE))
            result = await c.commit()
            assert list(result) == [TP] and result[TP].code == ErrorCode.INVALID_RECORD_STATE
            renewing = [r for r in broker.of(ACK) if r.topics]
            assert renewing[-1].is_renew_ack and broker.versions(ACK)[-1] == 2
            assert c.acquisition_lock_timeout_ms == LOCK_MS * 2  # as the ShareAcknowledge answered
            # The failed RENEW dropped the record from this member's hands: it cannot be acknowledged.
            with pytest.raises(ShareStateError):
                c.acknowledge(got[1])
            assert await c.poll(timeout_ms=0) == []


async def test_a_renewed_record_stays_in_hand_until_acknowledged():
    async with FakeShareBroker() as broker:
        broker.fetches.append((records(0, 1), [(0, 0, 1)]))
        async with consumer(broker, share_acknowledgement_mode="explicit") as c:
            [record] = await poll_until(c, 1)
            c.acknowledge(record, AcknowledgeType.RENEW)
            assert await c.commit() == {TP: None}
            assert await c.poll(timeout_ms=0) == []  # a renewed record does not hold the next poll
            c.acknowledge(record, AcknowledgeType.ACCEPT)
            assert await c.commit() == {TP: None}
            sent = [(b.first_offset, list(b.acknowledge_types)) for r in broker.of(ACK) for t in r.topics
                    for p in t.partitions for b in p.acknowledgement_batches]
            assert sent == [(0, [4]), (0, [1])]
        with pytest.raises(ShareStateError):
            ShareConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id="g").acknowledge(record)


async def test_cut_batches_and_refused_records_are_released_never_gapped():
    """An acquired offset past the last whole batch (a cut or corrupt batch) is released, not acknowledged as
    a GAP (which would archive it unseen); a record the value deserializer refuses is released and poll()
    raises the deserializer's error."""
    def strict(value):
        if value == b"v1":
            raise ValueError("not a number")
        return value

    async with FakeShareBroker() as broker:
        broker.fetches.append((records(0, 3) + records(3, 3)[:-5], [(0, 5, 1)]))
        async with consumer(broker, value_deserializer=strict) as c:
            with pytest.raises(RecordDeserializationError) as raised:
                await poll_until(c, 2)
            assert raised.value.offset == 1 and isinstance(raised.value.__cause__, ValueError)
            got = await poll_until(c, 2)
            assert [(r.offset, r.value) for r in got] == [(0, b"v0"), (2, b"v2")]

            def sent() -> list:
                return sorted((b.first_offset, b.last_offset, list(b.acknowledge_types))
                              for r in broker.of(FETCH) + broker.of(ACK) for t in r.topics for p in t.partitions
                              for b in p.acknowledgement_batches)
            await until(lambda: len(sent()) >= 2, "the releases sent")
            assert sent() == [(1, 1, [2]), (3, 5, [2])]
