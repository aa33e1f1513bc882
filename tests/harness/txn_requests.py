"""Transactional requests by hand (RawClient): a topic, InitProducerId, EndTxn, and an abort whose marker is
awaited."""

from __future__ import annotations

import asyncio
import time
from odradek.broker.testing import RawClient
from odradek.protocol.messages import (
    CreateTopicsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
)
from odradek.storage.names import TopicPartition


DEADLINE_S = 30


def create(client: RawClient, topic: str, partitions: int = 2) -> None:
    response = client.request(CreateTopicsRequest(timeout_ms=10_000, validate_only=False, topics=[
        CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1, assignments=[],
                                           configs=[])]), 5)
    assert response.topics[0].error_code == 0


def init(client: RawClient, txn_id: str | None) -> tuple[int, int]:
    if txn_id is not None:
        assert client.request(FindCoordinatorRequest(key=txn_id, key_type=1), 3).error_code == 0
    deadline = time.monotonic() + DEADLINE_S
    while True:  # bounded: COORDINATOR_LOAD_IN_PROGRESS while the coordinator loads or an id block arrives
        r = client.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60_000), 4)
        if r.error_code == 0 or time.monotonic() > deadline:
            assert r.error_code == 0, r
            return r.producer_id, r.producer_epoch
        time.sleep(0.05)


def end(client: RawClient, txn_id: str, producer: tuple[int, int], commit: bool) -> int:
    return client.request(EndTxnRequest(transactional_id=txn_id, producer_id=producer[0], producer_epoch=producer[1],
                                        committed=commit), 3).error_code


async def abort_and_await_marker(services, tp: TopicPartition, transactional_id: str, producer_: tuple[int, int]) -> None:
    """Abort the producer's transaction through the coordinator (EndTxn) and wait, bounded, until the
    coordinator has completed the abort (CompleteAbort: its marker sender's WriteTxnMarkers to `tp` was
    answered, so the ABORT marker is in the log and applied to the partition's producer state): the step a
    race test puts between the coordinator's yes and the write. (Waiting for `tp`'s log end offset to move is
    not enough: any other write to the partition, such as another group's commit on a shared
    `__consumer_offsets` partition, moves it too.)"""
    log = services.data.get_partition(tp).log
    before = log.log_end_offset
    services.transactions.end_txn(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_[0],
                                                producer_epoch=producer_[1], committed=False),
                                  3, services.now_ms())
    describe = DescribeTransactionsRequest(transactional_ids=[transactional_id])
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        (state,) = services.transactions.describe_transactions(describe, 0, services.now_ms()).transaction_states
        if state.transaction_state == "CompleteAbort":
            break
        await asyncio.sleep(0.01)  # bounded poll: the marker is written and acknowledged by other tasks
    assert state.transaction_state == "CompleteAbort", f"the abort of {transactional_id} never completed: {state}"
    assert log.log_end_offset > before, f"the abort marker never reached {tp}"
