"""A transaction coordinator on a manual clock and an in-memory log, with its outgoing markers collected."""

from __future__ import annotations

from odradek.coordinator.runtime import InMemoryPartitionWriter
from odradek.coordinator.transaction.config import TransactionCoordinatorConfig
from odradek.coordinator.transaction.coordinator import TransactionCoordinator
from odradek.coordinator.transaction.metadata import TransactionState
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest
from odradek.purgatory.timing_wheel import Timer


S = TransactionState
TXN = "txn-a"
TIMEOUT_MS = 60_000


class Sink:
    def __init__(self) -> None:
        self.jobs = []
        self.cancelled = []

    def send(self, job) -> None:
        self.jobs.append(job)

    def cancel(self, partition: int) -> None:
        self.cancelled.append(partition)


class Harness:
    def __init__(self, **config) -> None:
        self.config = TransactionCoordinatorConfig(transaction_state_log_num_partitions=3, **config)
        self.writer = InMemoryPartitionWriter()
        self.now = 1_000
        self.timer = Timer(start_ms=self.now)
        self.next_id = 1000
        self.sink = Sink()
        self.topics = TopicsImage()
        self.topics.add("t", 4)
        self.tc = self._coordinator(self.timer)

    def _next_producer_id(self):
        self.next_id += 1
        return self.next_id

    def _coordinator(self, timer):
        tc = TransactionCoordinator(self.writer, timer, self.config, next_producer_id=self._next_producer_id,
                                    markers=self.sink, topics=self.topics, offsets_topic_num_partitions=5)
        tc.startup(self.now)
        return tc

    def advance(self, ms: int) -> None:
        self.now += ms
        self.timer.advance_clock(self.now)
        while (deadline := self.timer.next_expiration_ms()) is not None and deadline <= self.now:
            self.timer.advance_clock(self.now)

    def reload(self):
        self.tc.shutdown()
        self.timer = Timer(start_ms=self.now)
        self.tc = self._coordinator(self.timer)
        return self.tc

    def init(self, txn=TXN, timeout_ms=TIMEOUT_MS, producer_id=-1, producer_epoch=-1, version=4):
        r = InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=timeout_ms, producer_id=producer_id,
                                  producer_epoch=producer_epoch)
        return self.tc.init_producer_id(r, version, self.now).result()

    def add(self, pid, epoch, partitions=((("t", 0)),), txn=TXN, version=3):
        by_topic = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
        r = AddPartitionsToTxnRequest(v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                                      v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)
        resp = self.tc.add_partitions_to_txn(r, version, self.now).result()
        return {(t.name, p.partition_index): p.partition_error_code
                for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}

    def verify(self, pid, epoch, partitions, txn=TXN):
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=[p]) for t, p in partitions]
        r = AddPartitionsToTxnRequest(transactions=[T(transactional_id=txn, producer_id=pid, producer_epoch=epoch,
                                                      verify_only=True, topics=topics)])
        resp = self.tc.add_partitions_to_txn(r, 4, self.now).result()
        (result,) = resp.results_by_transaction
        return {(t.name, p.partition_index): p.partition_error_code for t in result.topic_results
                for p in t.results_by_partition}

    def broker_add(self, pid, epoch, partitions=((("t", 0)),), txn=TXN, version=5):
        """A partition leader's AddPartitionsToTxn (v5, not verify-only: Produce v12+ of a TV2 client)."""
        T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        topics = [AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=[p]) for t, p in partitions]
        r = AddPartitionsToTxnRequest(transactions=[T(transactional_id=txn, producer_id=pid, producer_epoch=epoch,
                                                      verify_only=False, topics=topics)])
        (result,) = self.tc.add_partitions_to_txn(r, version, self.now).result().results_by_transaction
        return {(t.name, p.partition_index): p.partition_error_code for t in result.topic_results
                for p in t.results_by_partition}

    def end(self, pid, epoch, commit=True, txn=TXN, version=3):
        r = EndTxnRequest(transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit)
        return self.tc.end_txn(r, version, self.now).result()

    def state(self, txn=TXN):
        return self.tc.shard_for(txn).transactions[txn]

    def finish_markers(self):
        jobs, self.sink.jobs = self.sink.jobs, []
        for job in jobs:
            assert self.tc.on_markers_written(job, self.now).result() is ErrorCode.NONE
        return jobs
