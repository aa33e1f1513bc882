"""The exactly-once sink's task protocol (pipeline/sink.py) against an in-memory transaction coordinator
with Kafka's fencing rules: retries, replays of committed batches, crashes at every step, and attempts of
one task that overlap (speculation, zombies) leave every row committed exactly once."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from odradek.pipeline.sink import TaskOutcome, progress_group, transactional_id, write_task


class Fenced(Exception):
    pass


class Crash(Exception):
    pass


@dataclass
class _Txn:
    epoch: int = -1
    open_rows: list | None = None  # the open transaction's rows, None when there is none
    open_progress: int | None = None


@dataclass
class FakeKafka:
    """Transactional ids with epochs, committed rows, and committed progress offsets per group."""

    txns: dict[str, _Txn] = field(default_factory=dict)
    committed: list = field(default_factory=list)
    progress: dict[str, int] = field(default_factory=dict)
    aborted: int = 0

    def init(self, txn_id: str) -> int:
        txn = self.txns.setdefault(txn_id, _Txn())
        if txn.open_rows is not None:  # the open transaction is aborted, its producer fenced
            self.aborted += len(txn.open_rows)
            txn.open_rows = txn.open_progress = None
        txn.epoch += 1
        return txn.epoch

    def check(self, txn_id: str, epoch: int) -> _Txn:
        txn = self.txns[txn_id]
        if txn.epoch != epoch:
            raise Fenced(f"{txn_id} epoch {epoch} is fenced by {txn.epoch}")
        return txn

    def rows(self) -> Counter:
        return Counter(self.committed)


class FakeTransaction:
    """One attempt's TaskTransaction. `hooks` maps a step name ("init", "next_batch", "send", "commit",
    "committed") to a function run at that point: it may crash this attempt or run another one."""

    def __init__(self, kafka: FakeKafka, query: str, task: int, hooks: dict | None = None):
        self.kafka = kafka
        self.txn_id = transactional_id(query, task)
        self.group = progress_group(query, task)
        self.hooks = hooks or {}
        self.epoch = -1

    def _hook(self, step: str) -> None:
        hook = self.hooks.pop(step, None)
        if hook is not None:
            hook()

    def init(self) -> None:
        self._hook("init")
        self.epoch = self.kafka.init(self.txn_id)

    def next_batch(self) -> int:
        found = self.kafka.progress.get(self.group, 0)
        self._hook("next_batch")  # after the read: what it found may be stale by the time it is used
        return found

    def begin(self) -> None:
        txn = self.kafka.check(self.txn_id, self.epoch)
        txn.open_rows = []

    def send(self, rows: list) -> None:
        self._hook("send")
        txn = self.kafka.check(self.txn_id, self.epoch)
        assert txn.open_rows is not None, "send outside a transaction"
        txn.open_rows.extend(rows)

    def commit(self, next_batch: int) -> None:
        self._hook("commit")
        txn = self.kafka.check(self.txn_id, self.epoch)
        self.kafka.committed.extend(txn.open_rows)
        self.kafka.progress[self.group] = next_batch
        txn.open_rows = None
        self._hook("committed")

    def abort(self) -> None:
        txn = self.kafka.check(self.txn_id, self.epoch)
        if txn.open_rows is not None:
            self.kafka.aborted += len(txn.open_rows)
            txn.open_rows = None


def rows(n: int, *, start: int = 0) -> list[tuple]:
    return [("out", None, b"k%d" % (i % 7), b"v%d" % i, (("h", b"x"),) if i % 3 == 0 else ())
            for i in range(start, start + n)]


def write(kafka: FakeKafka, batch: int, task: int, task_rows: list, hooks: dict | None = None, *,
          query: str = "q") -> TaskOutcome:
    return write_task(FakeTransaction(kafka, query, task, hooks), query, batch, task, iter(task_rows))


def crash() -> None:
    raise Crash("the task's process died")


def test_batches_publish_every_row_once_and_record_progress():
    kafka = FakeKafka()
    b0 = {0: rows(10), 1: rows(5, start=10)}
    outcomes = [write(kafka, 0, t, r) for t, r in b0.items()]
    assert [o.published for o in outcomes] == [10, 5]
    b1 = rows(4, start=100)
    write(kafka, 1, 0, b1)
    assert kafka.rows() == Counter(b0[0] + b0[1] + b1)
    assert kafka.progress == {progress_group("q", 0): 2, progress_group("q", 1): 1}


def test_a_task_without_rows_takes_no_transaction():
    kafka = FakeKafka()
    assert write(kafka, 0, 0, []) == TaskOutcome("q", 0, 0)
    assert kafka.txns == {}


def test_replay_of_a_committed_task_publishes_nothing():
    kafka = FakeKafka()
    b0 = rows(10)
    write(kafka, 0, 0, b0)
    again = write(kafka, 0, 0, b0)  # Spark crashed before writing commits/0: the batch runs again
    assert again.published == 0 and again.skipped == 10
    assert kafka.rows() == Counter(b0)


@pytest.mark.parametrize("step", ["init", "next_batch", "send", "commit", "committed"])
def test_a_crash_at_any_step_then_a_retry_publishes_every_row_once(step):
    kafka = FakeKafka()
    task_rows = rows(5000)  # more than one chunk
    with pytest.raises(Crash):
        write(kafka, 0, 0, task_rows, {step: crash})
    retry = write(kafka, 0, 0, task_rows)
    assert kafka.rows() == Counter(task_rows)
    assert (retry.skipped, retry.published) == ((5000, 0) if step == "committed" else (0, 5000))


def test_a_failed_attempt_aborts_its_transaction():
    kafka = FakeKafka()
    with pytest.raises(Crash):
        write(kafka, 0, 0, rows(3000), {"commit": crash})
    assert kafka.aborted == 3000 and kafka.txns[transactional_id("q", 0)].open_rows is None


def test_a_speculative_attempt_fences_the_original_which_then_fails():
    kafka = FakeKafka()
    task_rows = rows(3000)
    second: list[TaskOutcome] = []
    # The original has sent its first chunk when the speculative copy starts and runs to the end.
    with pytest.raises(Fenced):
        write(kafka, 0, 0, task_rows, {"send": lambda: second.append(write(kafka, 0, 0, task_rows))})
    assert second[0].published == 3000
    assert kafka.rows() == Counter(task_rows)


def test_a_copy_started_after_the_original_committed_skips():
    kafka = FakeKafka()
    task_rows = rows(10)
    second: list[TaskOutcome] = []
    first = write(kafka, 0, 0, task_rows, {"committed": lambda: second.append(write(kafka, 0, 0, task_rows))})
    assert first.published == 10 and second[0].skipped == 10
    assert kafka.rows() == Counter(task_rows)


def test_a_copy_that_initialises_between_the_originals_progress_read_and_its_writes_wins():
    kafka = FakeKafka()
    task_rows = rows(10)
    second: list[TaskOutcome] = []
    with pytest.raises(Fenced):  # the original read "not written yet", then lost the id before begin()
        write(kafka, 0, 0, task_rows, {"next_batch": lambda: second.append(write(kafka, 0, 0, task_rows))})
    assert second[0].published == 10
    assert kafka.rows() == Counter(task_rows)


def test_a_zombie_of_an_old_batch_publishes_nothing_once_the_next_batch_ran():
    kafka = FakeKafka()
    b0, b1 = rows(10), rows(10, start=10)
    write(kafka, 0, 0, b0)
    write(kafka, 1, 0, b1)
    zombie = write(kafka, 0, 0, b0)  # an attempt of batch 0 that only now gets to run
    assert zombie.skipped == 10
    assert kafka.rows() == Counter(b0 + b1)


def test_queries_and_tasks_have_their_own_transactional_ids_and_progress():
    assert transactional_id("q", 3) == "odradek-spark-sink.q.3" != transactional_id("q", 4)
    assert progress_group("q", 3) != progress_group("r", 3)
    kafka = FakeKafka()
    write(kafka, 5, 0, rows(3), query="q")
    assert write(kafka, 0, 0, rows(3, start=3), query="r").published == 3  # query r's batch 0 is its own
