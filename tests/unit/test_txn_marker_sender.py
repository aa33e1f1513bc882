"""The marker sender's last step: the Complete state, written again while `__transaction_state` cannot take
it (Kafka's TransactionMarkerChannelManager.tryAppendToLog retries COORDINATOR_NOT_AVAILABLE), so a
transaction in PrepareCommit/PrepareAbort completes once the ISR is back; NOT_COORDINATOR ends the job
(the partition's new leader completes it)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from odradek.broker.services import BrokerServices
from odradek.broker.txn_wiring import MarkerSender
from odradek.purgatory.deferred import Deferred
from odradek.coordinator.transaction.shard import MarkerJob
from odradek.protocol.errors import ErrorCode

JOB = MarkerJob(txn_partition=0, coordinator_epoch=0, transactional_id="t", producer_id=5, producer_epoch=0,
                committed=True, partitions=frozenset())  # no partition left to mark: straight to completion


class Coordinator:
    def __init__(self, answers) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.waiting = asyncio.Event()  # set when a try returns a write still in flight

    def on_markers_written(self, job, now_ms):
        assert job is JOB
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Deferred):
            self.waiting.set()
            return answer
        return Deferred.completed(answer)


def sender(coordinator) -> MarkerSender:
    broker = SimpleNamespace(metadata=SimpleNamespace(image=SimpleNamespace(topics_by_name={})), now_ms=lambda: 0,
                             after_state_change=lambda: None,
                             services=SimpleNamespace(future_from=BrokerServices.future_from))
    s = MarkerSender(broker)
    s.coordinator = coordinator
    return s


async def test_completion_is_retried_while_the_log_refuses_it():
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    later = Deferred()
    coordinator = Coordinator([unavailable, unavailable, later, ErrorCode.NONE])
    run = asyncio.ensure_future(sender(coordinator)._run(JOB))
    await asyncio.wait_for(coordinator.waiting.wait(), 30)
    assert coordinator.calls == 3 and not run.done()  # the third try waits for its write to be replicated
    later.complete(unavailable)  # ... which timed out: once more
    await asyncio.wait_for(run, 30)
    assert coordinator.calls == 4 and coordinator.answers == []


async def test_completion_stops_when_the_partition_moved():
    coordinator = Coordinator([ErrorCode.NOT_COORDINATOR])
    await asyncio.wait_for(sender(coordinator)._run(JOB), 30)
    assert coordinator.calls == 1
