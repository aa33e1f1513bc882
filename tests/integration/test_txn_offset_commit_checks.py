"""TxnOffsetCommit is verified with the transaction coordinator (KIP-890 part 1, Kafka's
GroupCoordinatorService.commitTransactionalOffsets) on a live in-process broker, with raw requests: a
commit for a transaction that never sent AddOffsetsToTxn, or that has ended, is refused and writes nothing
(a require_stable fetch finds no pending offset); inside the transaction it is accepted, also a second time
(the partition's open transaction makes the round trip unnecessary); a fenced producer is refused; and a
commit whose transaction is aborted between the coordinator's answer and the write is refused by the
verification guard instead of opening a transaction nobody ends in __consumer_offsets."""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.broker.handlers import transactions as transactions_handler
from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AddOffsetsToTxnRequest,
    FindCoordinatorRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)

from tests.harness.txn_requests import abort_and_await_marker, create, end, init

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 30
T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def find_group_coordinator(client: RawClient, group: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:  # bounded: COORDINATOR_NOT_AVAILABLE while __consumer_offsets is created
        r = client.request(FindCoordinatorRequest(key=group, key_type=0), 3)
        if r.error_code == 0 or time.monotonic() > deadline:
            assert r.error_code == 0, r
            return
        time.sleep(0.05)


def add_offsets(client: RawClient, txn_id: str, producer: tuple[int, int], group: str) -> None:
    r = client.request(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=producer[0],
                                              producer_epoch=producer[1], group_id=group), 3)
    assert r.error_code == 0, r


def txn_commit(client: RawClient, txn_id: str, producer: tuple[int, int], group: str, offset: int,
               version: int = 3) -> int:
    r = client.request(TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=producer[0], producer_epoch=producer[1],
        generation_id=-1, member_id="", group_instance_id=None, topics=[T(name="in", partitions=[
            T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                              committed_metadata="")])]), version)
    (code,) = [p.error_code for t in r.topics for p in t.partitions]
    return code


def stable_fetch(client: RawClient, group: str) -> tuple[int, int]:
    r = client.request(OffsetFetchRequest(group_id=group, require_stable=True, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="in", partition_indexes=[0])]), 7)
    (p,) = r.topics[0].partitions
    return p.error_code, p.committed_offset


def until_stable(client: RawClient, group: str) -> tuple[int, int]:
    """The fetch once no transaction holds the group's offset (bounded: the markers are written async)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = stable_fetch(client, group)
        if answer[0] != ErrorCode.UNSTABLE_OFFSET_COMMIT or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("txn-offsets")) as running:
        with RawClient(running.bootstrap) as client:
            create(client, "in", 1)  # the group coordinator commits offsets of topics that exist
        yield running


def test_a_commit_outside_the_transaction_is_refused_and_writes_nothing(broker):
    with RawClient(broker.bootstrap) as client:
        txn_id, group = name("txn"), name("group")
        find_group_coordinator(client, group)
        producer = init(client, txn_id)
        # No AddOffsetsToTxn: v3 clients are told INVALID_TXN_STATE, v4 ones TRANSACTION_ABORTABLE (KIP-890).
        assert txn_commit(client, txn_id, producer, group, 5, version=3) == ErrorCode.INVALID_TXN_STATE
        assert txn_commit(client, txn_id, producer, group, 5, version=4) == ErrorCode.TRANSACTION_ABORTABLE
        assert stable_fetch(client, group) == (ErrorCode.NONE, -1)

        add_offsets(client, txn_id, producer, group)
        assert txn_commit(client, txn_id, producer, group, 7) == ErrorCode.NONE
        assert txn_commit(client, txn_id, producer, group, 8) == ErrorCode.NONE  # the transaction is open there
        assert stable_fetch(client, group) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
        assert end(client, txn_id, producer, commit=False) == 0
        assert until_stable(client, group) == (ErrorCode.NONE, -1)

        # The transaction has ended: its offsets partition is no longer verified (before, it would have been
        # written as pending offsets of a transaction nobody ends).
        assert txn_commit(client, txn_id, producer, group, 9) == ErrorCode.INVALID_TXN_STATE
        assert stable_fetch(client, group) == (ErrorCode.NONE, -1)


def test_a_fenced_producer_is_refused(broker):
    with RawClient(broker.bootstrap) as client:
        txn_id, group = name("txn"), name("group")
        find_group_coordinator(client, group)
        old = init(client, txn_id)
        new = init(client, txn_id)
        assert new[1] > old[1]
        assert txn_commit(client, txn_id, old, group, 5) == ErrorCode.INVALID_PRODUCER_EPOCH
        add_offsets(client, txn_id, new, group)
        assert txn_commit(client, txn_id, new, group, 6) == ErrorCode.NONE
        assert end(client, txn_id, new, commit=True) == 0
        assert until_stable(client, group) == (ErrorCode.NONE, 6)


def test_an_abort_between_the_verification_and_the_write_is_refused(broker, monkeypatch):
    services = broker.broker.services
    txn_id, group = name("race"), name("group")
    with RawClient(broker.bootstrap) as client:
        find_group_coordinator(client, group)
        producer = init(client, txn_id)
        add_offsets(client, txn_id, producer, group)
        real_ask = transactions_handler.ask_transaction_coordinator
        seen: list[dict] = []

        async def ask_then_abort(services, transactional_id, producer_, partitions):
            errors = await real_ask(services, transactional_id, producer_, partitions)
            seen.append(errors)
            # The coordinator said yes; the transaction is aborted before the commit is written: EndTxn through
            # the coordinator, whose marker sender writes the ABORT marker to the offsets partition.
            (tp,) = partitions
            await abort_and_await_marker(services, tp, transactional_id, producer_)
            return errors

        monkeypatch.setattr(transactions_handler, "ask_transaction_coordinator", ask_then_abort)
        assert txn_commit(client, txn_id, producer, group, 5) == ErrorCode.INVALID_TXN_STATE
        monkeypatch.undo()
        assert [list(e.values()) for e in seen] == [[ErrorCode.NONE]]  # verified: the guard refused the write
        tp = next(iter(seen[0]))
        log = services.data.get_partition(tp).log
        # The marker spent this producer's guard and nothing opened a transaction. Only this producer's entry is
        # looked at: the partition is shared with other groups, and a refused verification of another producer
        # (the first test's commits outside a transaction) leaves its entry until producer.id.expiration.ms, as
        # Kafka's (UnifiedLog.updateProducers clears an entry only on that producer's transactional write or marker).
        assert producer[0] not in log.producer_state.ongoing.values()
        assert producer[0] not in log.producer_state.verification_states
        assert stable_fetch(client, group) == (ErrorCode.NONE, -1)

        # The next transaction commits its offsets normally.
        add_offsets(client, txn_id, producer, group)
        assert txn_commit(client, txn_id, producer, group, 6) == ErrorCode.NONE
        assert end(client, txn_id, producer, commit=True) == 0
        assert until_stable(client, group) == (ErrorCode.NONE, 6)
