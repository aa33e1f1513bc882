"""KIP-890 part 1: a partition leader asks the transaction coordinator before a transaction's first write.

A transactional Produce to a partition where the producer has no open transaction yet, and a
TxnOffsetCommit, are verified with the transactional id's coordinator (AddPartitionsToTxn v4,
verify_only) before anything is written, so that a write arriving after its transaction ended (a late
retry, a zombie producer) cannot open a transaction that no coordinator will ever close. The coordinator is
this broker's own (asked in process) or another node's (asked over the inter-broker listener through the
transaction coordinator's marker sender, which holds this broker's connections for transactions).

Transactions V2 (KIP-890 part 2): a client speaking it (Produce v12+, TxnOffsetCommit v5) never sends
AddPartitionsToTxn itself; the partition leader asks its coordinator to ADD the partition (AddPartitionsToTxn
v5, verify_only false: `confirm_in_transaction(add=True)`), which also marks the transaction as a version 2
one (its end bumps the epoch). Right after an EndTxn the client's next transaction may reach a partition
while the previous one's markers are still being written: the coordinator answers CONCURRENT_TRANSACTIONS,
and the leader asks again after a short backoff (Kafka's add.partitions.to.txn.retry.backoff.ms, 20 ms,
doubling, for at most add.partitions.to.txn.retry.backoff.max.ms, 100 ms, in all) rather than fail the
write; each new ask takes a new verification guard first, since the marker that lands meanwhile spends the
old one. An answer that arrives with its guard spent is asked again the same way.

The request handlers (handlers/produce.py, handlers/transactions.py) use this module; it needs only the
handlers' `BrokerServices`, never the broker's wiring.
"""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING

import structlog

from odradek.coordinator.group.group_coordinator import error_code_of
from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC, partition_for
from odradek.coordinator.runtime import CoordinatorError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import AddPartitionsToTxnRequest
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.names import TopicPartition
from odradek.storage.producer_state import SENTINEL

if TYPE_CHECKING:
    from .services import BrokerServices

log = structlog.get_logger("odradek.txn_markers")

_TRANSACTIONAL_BIT = 0x10  # attributes bit 4 (the low byte of the int16 at offset 21 of a batch)
_PID = struct.Struct(">qh")  # producerId int64, producerEpoch int16 at offset 43 of a batch


def transactional_producer(records: bytes | bytearray | memoryview | None) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch, or None: read off the first batch's header only."""
    if records is None or len(records) < 61 or not records[22] & _TRANSACTIONAL_BIT:
        return None
    return _PID.unpack_from(records, 43)


def _verify_error(code: ErrorCode, produce_version: int) -> ErrorCode:
    """What the producer is told for a partition the coordinator did not verify (Kafka's
    AddPartitionsToTxnManager and ReplicaManager: retriable coordinator trouble is NOT_ENOUGH_REPLICAS)."""
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code is ErrorCode.TRANSACTION_ABORTABLE:  # Produce v11 added it (Kafka: genericError above v10)
        return ErrorCode.TRANSACTION_ABORTABLE if produce_version >= 11 else ErrorCode.INVALID_TXN_STATE
    if code in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION):
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


def offsets_verify_error(code: ErrorCode, txn_offset_commit_version: int) -> ErrorCode:
    """What a TxnOffsetCommit is told when the coordinator did not verify the group's `__consumer_offsets`
    partition (Kafka 4.x: AddPartitionsToTxnManager's conversions for the version's
    TransactionSupportedOperation, then the group coordinator's handleOperationException).

    TRANSACTION_ABORTABLE (the partition is not in an Ongoing transaction: no AddOffsetsToTxn, or the
    transaction ended) is INVALID_TXN_STATE below v4, which does not know the code
    (txnOffsetCommitRequestVersionToTransactionSupportedOperation: DEFAULT_ERROR up to v3); a fenced producer
    is INVALID_PRODUCER_EPOCH; an unreachable coordinator (NETWORK_EXCEPTION) is COORDINATOR_LOAD_IN_PROGRESS,
    which every client retries without a coordinator lookup; the rest as any group write's error."""
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code is ErrorCode.TRANSACTION_ABORTABLE and txn_offset_commit_version < 4:
        return ErrorCode.INVALID_TXN_STATE
    if code is ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return error_code_of(CoordinatorError("", code))


FIRST_TV2_PRODUCE_VERSION = 12
"""Produce v12+ comes from a Transactions V2 client: the leader adds the partition (Kafka's
produceRequestVersionToTransactionSupportedOperation: addPartition above v11)."""
FIRST_TV2_TXN_OFFSET_COMMIT_VERSION = 5
"""TxnOffsetCommit v5 likewise adds the group's `__consumer_offsets` partition."""
ADD_RETRY_BACKOFF_MS = 20  # Kafka's add.partitions.to.txn.retry.backoff.ms
ADD_RETRY_BACKOFF_MAX_MS = 100  # Kafka's add.partitions.to.txn.retry.backoff.max.ms: the whole wait


async def verify_transaction(services: BrokerServices, transactional_id: str, producer: tuple[int, int],
                             partitions: list[TopicPartition], produce_version: int,
                             guards: dict | None = None, sequences: dict | None = None) -> dict[TopicPartition, ErrorCode]:
    """Produce's verification (KIP-890 part 1), or the add of Transactions V2 (Produce v12+, part 2, with the
    partitions' `guards` and first `sequences` to take new guards by): {tp: the produce error} for the
    partitions (TopicPartitions) the coordinator did not confirm in the producer's open transaction."""
    if produce_version >= FIRST_TV2_PRODUCE_VERSION and guards is not None and sequences is not None:
        errors = await confirm_in_transaction(services, transactional_id, producer, partitions, guards,
                                              sequences, add=True)
    else:
        errors = await ask_transaction_coordinator(services, transactional_id, producer, partitions)
    return {tp: _verify_error(code, produce_version) for tp, code in errors.items() if code is not ErrorCode.NONE}


def guard_holds(services: BrokerServices, tp: TopicPartition, producer_id: int, guard) -> bool:
    """Whether `guard` is still the producer's verification on `tp` (no marker or write of it since)."""
    partition = services.data.get_partition(tp)
    producers = None if partition is None else partition.producer_state
    state = None if producers is None else producers.verification_states.get(producer_id)
    return state is not None and state.guard.verifies(guard)


async def confirm_in_transaction(services: BrokerServices, transactional_id: str, producer: tuple[int, int],
                                 partitions: list[TopicPartition], guards: dict, sequences: dict, *,
                                 add: bool) -> dict[TopicPartition, ErrorCode]:
    """Ask the coordinator to add (or verify) `partitions` (see the module doc), retrying CONCURRENT_TRANSACTIONS
    and spent guards for add.partitions.to.txn.retry.backoff.max.ms with a new guard each time (written into
    `guards`; `sequences[tp]` is the batch's first sequence, which a guard records). {tp: the coordinator's
    code}; NONE only where the guard in `guards` still holds, CONCURRENT_TRANSACTIONS where the wait ran out."""
    out: dict[TopicPartition, ErrorCode] = {}
    pending = list(partitions)
    backoff_ms, waited_ms = ADD_RETRY_BACKOFF_MS, 0
    while True:
        errors = await ask_transaction_coordinator(services, transactional_id, producer, pending, add=add)
        again = []
        for tp in pending:
            code = errors.get(tp, ErrorCode.INVALID_TXN_STATE)
            if code is ErrorCode.NONE and not guard_holds(services, tp, producer[0], guards.get(tp)):
                code = ErrorCode.CONCURRENT_TRANSACTIONS  # a marker landed while asking: ask again, newly guarded
            if code is ErrorCode.CONCURRENT_TRANSACTIONS and waited_ms < ADD_RETRY_BACKOFF_MAX_MS:
                again.append(tp)
            else:
                out[tp] = code
        if not again:
            return out
        await asyncio.sleep(backoff_ms / 1000)
        waited_ms += backoff_ms
        backoff_ms = min(backoff_ms * 2, ADD_RETRY_BACKOFF_MAX_MS)
        pending = []
        for tp in again:
            guard = services.data.maybe_start_transaction_verification(tp, producer[0], sequences[tp], producer[1],
                                                                       services.now_ms())
            if guard is None:  # no longer led here: the append answers why
                out[tp] = ErrorCode.NONE
                guards.pop(tp, None)
            elif guard is SENTINEL:  # the transaction is open here now: nothing to confirm
                out[tp] = ErrorCode.NONE
                guards.pop(tp, None)
            else:
                guards[tp] = guard
                pending.append(tp)
        if not pending:
            return out


async def ask_transaction_coordinator(services: BrokerServices, transactional_id: str, producer: tuple[int, int],
                                      partitions: list[TopicPartition], *, add: bool = False) -> dict[TopicPartition, ErrorCode]:
    """Ask the transactional id's coordinator (AddPartitionsToTxn v4, verify_only) whether `partitions`
    (TopicPartitions) are in the producer's open transaction: {tp: its code as the coordinator answered it},
    NONE for a verified one; NETWORK_EXCEPTION when the coordinator could not be asked (Kafka's
    AddPartitionsToTxnManager on a disconnect), COORDINATOR_NOT_AVAILABLE when it is not known. Produce and
    TxnOffsetCommit each map the codes for their own clients. `add`: AddPartitionsToTxn v5 without
    verify_only, the coordinator adds them (Transactions V2)."""
    def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
        return {tp: code for tp in partitions}

    topic = services.topic_by_name(TRANSACTION_STATE_TOPIC)
    if topic is None:
        return every(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    leader = services.partition_leader(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, len(topic.partitions)))
    if leader is None:
        return every(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    version = 5 if add else 4
    request = AddPartitionsToTxnRequest(transactions=[T(
        transactional_id=transactional_id, producer_id=producer[0], producer_epoch=producer[1], verify_only=not add,
        topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])])
    try:
        if leader[0] == services.node_id:
            deferred = services.transactions.add_partitions_to_txn(request, version, services.now_ms())
            response = deferred.result() if deferred.done else await services.future_from(deferred)
        else:
            # The coordinator's marker channel (broker/txn_wiring.MarkerSender) holds this broker's connections to
            # other nodes for transactions. (`markers` is typed as the shards' MarkerSink, send and cancel; in a
            # broker it is the coordinator's TransactionMarkerChannelManager, whose channel has `request`.)
            response = await services.transactions.markers.channel.request(  # type: ignore[attr-defined]
                leader[0], request, version, purpose="txn-verify")
    except Exception as e:  # noqa: BLE001 - the coordinator is unreachable: the client retries
        log.debug("transaction verification failed", transactional_id=transactional_id, error=repr(e))
        return every(ErrorCode.NETWORK_EXCEPTION)
    if response.error_code:
        # Kafka's AddPartitionsToTxnManager: the client is not told CLUSTER_AUTHORIZATION_FAILED (the broker's
        # own permission), only that the verification did not complete.
        code = ErrorCode(response.error_code)
        return every(ErrorCode.INVALID_TXN_STATE if code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED else code)
    errors = {tp: ErrorCode.INVALID_TXN_STATE for tp in partitions}  # a partition left out of the answer
    for result in response.results_by_transaction:
        for t in result.topic_results:
            for p in t.results_by_partition:
                key = next((tp for tp in partitions if tp.topic == t.name and tp.partition == p.partition_index), None)
                if key is not None:
                    errors[key] = ErrorCode(p.partition_error_code)
    return errors
