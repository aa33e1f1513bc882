"""The transaction coordinator: one method per API, over the shards of `__transaction_state` this broker leads.

Theory of operation
-------------------
A transactional id lives in partition `partition_for(transactional_id)` of `__transaction_state`; the
broker leading that partition coordinates it, and loads the partition's ids when it becomes leader
(`on_elected`, with the partition's leader epoch as the coordinator epoch the markers carry, so that a
partition leader can refuse markers from a deposed coordinator) and drops them when it stops
(`on_resigned`), exactly as the group coordinator does with `__consumer_offsets`, on the same runtime.

Methods take the decoded request, its version and `now_ms`, and return the response or a `Deferred` of
it (the writes answer once their record is durable, or COORDINATOR_NOT_AVAILABLE if it is not replicated
within `request.timeout.ms`, see `_write`). Errors are answered in the response, as Kafka does,
with its per-version substitutions (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to clients too old for it).

Markers: the shard hands ended transactions to the `MarkerSink`. Given the broker's `MarkerChannel` (the
network), the coordinator's own `TransactionMarkerChannelManager` (markers.py) is that sink and drives
the rest of the walk itself: WriteTxnMarkers to every partition's leader, retries, then
`on_markers_written`, which writes the Complete state, again while the log refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ListTransactionsResponse,
)
from odradek.metadata.image import MetadataImage
from odradek.purgatory.timing_wheel import Timer

from ..group.group_coordinator import error_code_of
from ..partitioning import CONSUMER_OFFSETS_TOPIC, partition_for
from odradek.purgatory.deferred import Deferred

from ..runtime import CoordinatorRuntime, NotCoordinatorError, PartitionWriter
from ..topics import TopicsView
from .config import TransactionCoordinatorConfig
from .markers import MarkerChannel, TransactionMarkerChannelManager
from .metadata import TV_0, TV_2, TransactionState
from .records import deserialize, serialize
from .shard import EndResult, InitResult, MarkerJob, MarkerSink, TransactionCounts, TransactionShard

__all__ = ["TransactionCoordinator"]

TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult  # generated classes are values: annotated Any
TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult


def _fenced_for(version: int, first_version_knowing_fenced: int, code: ErrorCode) -> int:
    if code is ErrorCode.PRODUCER_FENCED and version < first_version_knowing_fenced:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    return int(code)


def _by_topic(partitions) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return list(out.items())


class TransactionCoordinator:
    def __init__(self, writer: PartitionWriter, timer: Timer, config: TransactionCoordinatorConfig | None = None, *,
                 next_producer_id: Callable[[], int | None], markers: MarkerSink | None = None,
                 marker_channel: MarkerChannel | None = None, image: Callable[[], MetadataImage] | None = None,
                 topics: TopicsView | None = None, offsets_partition_for: Callable[[str], int] | None = None,
                 offsets_topic_num_partitions: int = 50) -> None:
        """`offsets_partition_for(group_id)`: the group's `__consumer_offsets` partition as the group coordinator
        places it (its partition_for, over the topic's real partition count); without it (tests), the hash
        over `offsets_topic_num_partitions`. With `marker_channel` (and `image`, the current metadata image)
        the markers are this coordinator's own `TransactionMarkerChannelManager`; else `markers` (tests)."""
        if marker_channel is not None:
            if image is None:
                raise ValueError("a marker channel needs the metadata image: the partitions' leaders are in it")
            markers = TransactionMarkerChannelManager(marker_channel, timer, image=image, complete=self.on_markers_written)
        if markers is None:
            raise ValueError("a transaction coordinator needs a marker channel or a marker sink")
        self.config = config if config is not None else TransactionCoordinatorConfig()
        self.topics = topics
        self.markers = markers
        self.offsets_partition_for: Callable[[str], int] = offsets_partition_for or (
            lambda group_id: partition_for(group_id, offsets_topic_num_partitions))
        self._coordinator_epochs: dict[int, int] = {}
        self.counts = TransactionCounts()  # ended transactions, for the broker's metrics
        self.runtime: CoordinatorRuntime[TransactionShard] = CoordinatorRuntime(
            writer, lambda p: TransactionShard(p, self.config, next_producer_id=next_producer_id, markers=markers,
                                               runtime=self.runtime, coordinator_epoch=self._coordinator_epochs.get(p, 0),
                                               counts=self.counts),
            timer, serialize=serialize, deserialize=deserialize)

    # ------------------------------------------------------------------------------------------------
    # Partitions

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    def on_elected(self, partition: int, now_ms: int, coordinator_epoch: int = 0) -> None:
        self._coordinator_epochs[partition] = coordinator_epoch
        self.runtime.load(partition, now_ms)

    def on_resigned(self, partition: int) -> None:
        self.runtime.unload(partition)
        self._coordinator_epochs.pop(partition, None)

    def startup(self, now_ms: int, partitions: list[int] | None = None) -> None:
        for p in range(self.config.transaction_state_log_num_partitions) if partitions is None else partitions:
            self.on_elected(p, now_ms)

    def shutdown(self) -> None:
        for p in self.runtime.partitions:
            self.on_resigned(p)

    def shard_for(self, transactional_id: str) -> TransactionShard:
        return self.runtime.shard(self.partition_for(transactional_id))

    def _write(self, transactional_id: str, op, now_ms: int) -> Deferred:
        """A write answered REQUEST_TIMED_OUT (COORDINATOR_NOT_AVAILABLE to the client) if its records are not
        replicated within `request_timeout_ms`, as Kafka's appendTransactionToLog: a client is never left
        waiting on a partition whose ISR cannot move. The write stays in the log and may still commit; the
        shard already reflects it, so the client's retry finds its effect (CONCURRENT_TRANSACTIONS while
        markers are written, then the next state)."""
        return self.runtime.write(self.partition_for(transactional_id), op, now_ms,
                                  timeout_ms=self.config.request_timeout_ms)

    # ------------------------------------------------------------------------------------------------
    # InitProducerId (22) with a transactional id

    def init_producer_id(self, request, version: int, now_ms: int) -> Deferred[InitProducerIdResponse]:
        def response(result: InitResult) -> InitProducerIdResponse:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=_fenced_for(version, 4, result.error),
                                          producer_id=result.producer_id, producer_epoch=result.producer_epoch)

        txn_id = request.transactional_id
        if not txn_id:
            return Deferred.completed(response(InitResult(ErrorCode.INVALID_REQUEST)))
        timeout_ms = request.transaction_timeout_ms
        if timeout_ms <= 0 or timeout_ms > self.config.transaction_max_timeout_ms:
            return Deferred.completed(response(InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)))
        expected = None
        if version >= 3 and request.producer_id >= 0:
            expected = (request.producer_id, request.producer_epoch)
        written = self._write(txn_id, lambda shard: shard.init_producer_id(txn_id, timeout_ms, expected, now_ms), now_ms)
        return written.then(response, lambda e: response(InitResult(error_code_of(e))))

    # ------------------------------------------------------------------------------------------------
    # AddPartitionsToTxn (24)

    def add_partitions_to_txn(self, request, version: int, now_ms: int) -> Deferred[AddPartitionsToTxnResponse]:
        if version < 4:
            deferred = self._add_one(request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                                     request.v3_and_below_producer_epoch, request.v3_and_below_topics, False, version,
                                     now_ms)
            return deferred.then(lambda result: AddPartitionsToTxnResponse(
                throttle_time_ms=0, results_by_topic_v3_and_below=result.topic_results))
        results = [self._add_one(t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only, version,
                                 now_ms) for t in request.transactions]
        out: Deferred = Deferred()
        remaining = [len(results)]

        def one_done(_: Deferred) -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                out.complete(AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0,
                                                        results_by_transaction=[d.result() for d in results]))

        if not results:
            out.complete(AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=[]))
        for d in results:
            d.add_callback(one_done)
        return out

    def _add_one(self, txn_id: str, producer_id: int, producer_epoch: int, topics, verify_only: bool, version: int,
                 now_ms: int) -> Deferred[Any]:
        """One transaction's AddPartitionsToTxn; never fails (errors are per partition)."""
        partitions = [(t.name, p) for t in topics for p in t.partitions]

        def result(errors: dict[tuple[str, int], int]) -> Any:
            return TxnResult(transactional_id=txn_id, topic_results=[
                TopicResult(name=topic, results_by_partition=[
                    PartitionResult(partition_index=p, partition_error_code=int(errors[(topic, p)])) for p in ps])
                for topic, ps in _by_topic(errors)])

        def every(code: ErrorCode) -> Any:
            return result({tp: _fenced_for(version, 2, code) for tp in partitions})

        if not txn_id:
            return Deferred.completed(every(ErrorCode.INVALID_REQUEST))
        if verify_only:
            try:
                errors = self.shard_for(txn_id).verify_partitions(txn_id, producer_id, producer_epoch, partitions)
            except NotCoordinatorError:
                return Deferred.completed(every(ErrorCode.NOT_COORDINATOR))
            return Deferred.completed(result({tp: int(code) for tp, code in errors.items()}))
        unknown = {tp for tp in partitions if not self._partition_exists(*tp)}
        if unknown:
            return Deferred.completed(result({tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                                                      else ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}))
        # Kafka's transactionVersionForAddPartitionsToTxn: v5 comes from a partition leader adding a partition
        # for a Transactions V2 client (Produce v12+, TxnOffsetCommit v5); a client's own adds are v3 at most.
        client_version = TV_2 if version >= 5 else TV_0
        written = self._write(txn_id, lambda shard: shard.add_partitions(txn_id, producer_id, producer_epoch,
                                                                         partitions, now_ms, client_version), now_ms)
        return written.then(every, lambda e: every(error_code_of(e)))

    def _partition_exists(self, topic: str, partition: int) -> bool:
        if self.topics is None:
            return True
        metadata = self.topics.topic_by_name(topic)
        return metadata is not None and 0 <= partition < metadata.num_partitions

    # ------------------------------------------------------------------------------------------------
    # AddOffsetsToTxn (25): the group's __consumer_offsets partition joins the transaction

    def add_offsets_to_txn(self, request, version: int, now_ms: int) -> Deferred[AddOffsetsToTxnResponse]:
        def response(code: ErrorCode) -> AddOffsetsToTxnResponse:
            return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_fenced_for(version, 2, code))

        txn_id = request.transactional_id
        if not txn_id:
            return Deferred.completed(response(ErrorCode.INVALID_REQUEST))
        offsets_partition = (CONSUMER_OFFSETS_TOPIC, self.offsets_partition_for(request.group_id))
        written = self._write(txn_id, lambda shard: shard.add_partitions(
            txn_id, request.producer_id, request.producer_epoch, [offsets_partition], now_ms, TV_0), now_ms)
        return written.then(response, lambda e: response(error_code_of(e)))

    # ------------------------------------------------------------------------------------------------
    # EndTxn (26)

    def end_txn(self, request, version: int, now_ms: int) -> Deferred[EndTxnResponse]:
        """EndTxn v5 is Transactions V2 (Kafka's transactionVersionForEndTxn): the end bumps the producer epoch
        and the response carries the producer id and epoch to go on with (shard.end_transaction)."""
        def response(result: EndResult) -> EndTxnResponse:
            return EndTxnResponse(throttle_time_ms=0, error_code=_fenced_for(version, 2, result.error),
                                  producer_id=result.producer_id, producer_epoch=result.producer_epoch)

        txn_id = request.transactional_id
        if not txn_id:
            return Deferred.completed(response(EndResult(ErrorCode.INVALID_REQUEST)))
        written = self._write(txn_id, lambda shard: shard.end_transaction(
            txn_id, request.producer_id, request.producer_epoch, request.committed, now_ms,
            TV_2 if version >= 5 else TV_0), now_ms)
        return written.then(response, lambda e: response(EndResult(error_code_of(e))))

    # ------------------------------------------------------------------------------------------------
    # Markers written (from the marker channel manager), operator aborts

    def on_markers_written(self, job: MarkerJob, now_ms: int) -> Deferred[ErrorCode]:
        """Write CompleteCommit/CompleteAbort; the code Kafka's TransactionMarkerChannelManager.tryAppendToLog
        sees: NONE (written, or nothing left to complete), COORDINATOR_NOT_AVAILABLE (the log could not take
        it: ISR below min.insync.replicas, not replicated in time; the manager retries, the transaction must
        not stay in PrepareCommit/Abort), NOT_COORDINATOR (the partition moved: its new leader completes it)."""
        written = self.runtime.write(job.txn_partition, lambda shard: shard.complete(
            job.transactional_id, job.producer_id, job.producer_epoch, now_ms), now_ms,
            timeout_ms=self.config.request_timeout_ms)
        return written.then(lambda _: ErrorCode.NONE, error_code_of)

    def abort_transaction(self, transactional_id: str, now_ms: int) -> Deferred[ErrorCode]:
        written = self._write(transactional_id, lambda shard: shard.abort(transactional_id, now_ms), now_ms)
        return written.then(lambda code: code, error_code_of)

    # ------------------------------------------------------------------------------------------------
    # DescribeTransactions (65), ListTransactions (66)

    def describe_transactions(self, request, version: int, now_ms: int) -> DescribeTransactionsResponse:
        State = DescribeTransactionsResponse.TransactionState
        states = []
        for txn_id in request.transactional_ids:
            # An id answered with an error keeps the schema's zeros, as Kafka's does (producer id 0, not -1).
            entry = State(error_code=0, transactional_id=txn_id, transaction_state="", transaction_timeout_ms=0,
                          transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[])
            states.append(entry)
            if not txn_id:
                entry.error_code = int(ErrorCode.INVALID_REQUEST)
                continue
            try:
                metadata = self.shard_for(txn_id).describe(txn_id)
            except NotCoordinatorError:
                entry.error_code = int(ErrorCode.NOT_COORDINATOR)
                continue
            if metadata is None or metadata.state is TransactionState.DEAD:
                entry.error_code = int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
                continue
            entry.transaction_state = metadata.state.display_name
            entry.transaction_timeout_ms = metadata.txn_timeout_ms
            entry.transaction_start_time_ms = metadata.txn_start_timestamp_ms
            entry.producer_id = metadata.producer_id
            entry.producer_epoch = metadata.producer_epoch
            entry.topics = [State.TopicData(topic=t, partitions=ps)
                            for t, ps in _by_topic(metadata.partitions)]
        return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)

    def list_transactions(self, request, version: int, now_ms: int) -> ListTransactionsResponse:
        Listed = ListTransactionsResponse.TransactionState
        wanted_states, unknown = set(), []
        for name in request.state_filters:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted_states.add(state)
        producer_ids = set(request.producer_id_filters)
        duration_ms = request.duration_filter if version >= 1 else -1
        pattern = request.transactional_id_pattern if version >= 2 else None
        try:
            regex = re.compile(pattern) if pattern else None
        except re.error:
            return ListTransactionsResponse(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REGULAR_EXPRESSION),
                                            unknown_state_filters=unknown, transaction_states=[])
        listed = []
        for partition in self.runtime.partitions:
            for txn_id, m in sorted(self.runtime.shard(partition).transactions.items()):
                if m.state is TransactionState.DEAD:
                    continue
                if (wanted_states and m.state not in wanted_states) or (producer_ids and m.producer_id not in producer_ids):
                    continue
                if duration_ms >= 0 and now_ms - m.txn_start_timestamp_ms <= duration_ms:
                    continue
                if regex is not None and regex.fullmatch(txn_id) is None:
                    continue
                listed.append(Listed(transactional_id=txn_id, producer_id=m.producer_id,
                                     transaction_state=m.state.display_name))
        return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                        transaction_states=listed)
