"""Transaction APIs, handed to the transaction coordinator (`services.transactions`,
coordinator/transaction/coordinator.py): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
DescribeTransactions (65), ListTransactions (66); and TxnOffsetCommit (28), which the group coordinator
serves (pending offsets made visible by the commit marker). InitProducerId is in producer_ids.py and
WriteTxnMarkers, the partitions' side, in its own module.

EndTxn v5 and TxnOffsetCommit v5 are Transactions V2 (KIP-890 part 2): clients send them only when the
cluster finalizes `transaction.version` 2 (metadata/controller/feature_control.py; the Java client does,
librdkafka, aiokafka and kafka-python never do). EndTxn v5 bumps the producer epoch on every end and answers
the producer id and epoch to go on with (coordinator/transaction/shard.py); TxnOffsetCommit v5 has the
coordinator add the group's `__consumer_offsets` partition, since a V2 client sends no AddOffsetsToTxn.
Every version is advertised whatever the feature, as Kafka does: the request's version, not the feature,
decides the behaviour, and a client picks the version by the feature.

TxnOffsetCommit is verified (KIP-890 part 1) before the group coordinator writes it: the transaction
coordinator must have the group's `__consumer_offsets` partition in the producer's Ongoing transaction
(AddOffsetsToTxn put it there), asked with the same AddPartitionsToTxn verify_only client the produce path
uses (txn_verification.ask_transaction_coordinator). Otherwise the offsets would open a transaction there that no
marker ever closes: pending offsets for good, and require_stable readers told UNSTABLE_OFFSET_COMMIT
forever. A commit for a transaction that never added the offsets, or that has ended, is refused
(INVALID_TXN_STATE below v4, TRANSACTION_ABORTABLE from v4) and writes nothing; a verification guard taken on the partition first refuses a commit whose transaction ended while the
coordinator was being asked, as the produce path's does.
v5 adds the partition instead of verifying it (txn_verification.confirm_in_transaction, add=True).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from odradek.coordinator.partitioning import CONSUMER_OFFSETS_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
)
from odradek.protocol.records import NO_SEQUENCE
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.storage.names import TopicPartition
from odradek.storage.producer_state import SENTINEL

from ..authorizer import per_item, transaction_refusal
from ..txn_verification import (
    FIRST_TV2_TXN_OFFSET_COMMIT_VERSION,
    ask_transaction_coordinator,
    confirm_in_transaction,
    guard_holds,
    offsets_verify_error,
)
from .groups import respond
from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        DescribeTransactionsRequest,
        EndTxnRequest,
        ListTransactionsRequest,
        TxnOffsetCommitRequest,
    )
    from ..context import RequestContext
    from ..services import BrokerServices

READ, WRITE, TOPIC, GROUP = AclOperation.READ, AclOperation.WRITE, ResourceType.TOPIC, ResourceType.GROUP


@handles(24, (0, 5))
def handle_add_partitions_to_txn(services: BrokerServices, ctx: RequestContext,
                                 request: AddPartitionsToTxnRequest) -> Answer:
    if services.authorizer is not None and (refused := _add_partitions_refused(services, ctx, request)) is not None:
        return refused
    return respond(services, services.transactions.add_partitions_to_txn(request, ctx.api_version, services.now_ms()))


@handles(25, (0, 4))
def handle_add_offsets_to_txn(services: BrokerServices, ctx: RequestContext, request: AddOffsetsToTxnRequest) -> Answer:
    refused = transaction_refusal(services, ctx, request.transactional_id) or (
        None if services.authorized(ctx, READ, GROUP, request.group_id) else ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if refused is not None:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=int(refused))
    return respond(services, services.transactions.add_offsets_to_txn(request, ctx.api_version, services.now_ms()))


@handles(26, (0, 5))
def handle_end_txn(services: BrokerServices, ctx: RequestContext, request: EndTxnRequest) -> Answer:
    if (refused := transaction_refusal(services, ctx, request.transactional_id)) is not None:
        return EndTxnResponse(throttle_time_ms=0, error_code=int(refused))
    return respond(services, services.transactions.end_txn(request, ctx.api_version, services.now_ms()))


@handles(28, (0, 5))
def handle_txn_offset_commit(services: BrokerServices, ctx: RequestContext, request: TxnOffsetCommitRequest) -> Answer:
    refused = transaction_refusal(services, ctx, request.transactional_id) or (
        None if services.authorized(ctx, READ, GROUP, request.group_id) else ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if refused is not None:
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[_commit_refused(t, refused, 0) for t in request.topics])
    return _txn_offset_commit(services, ctx, request)


def _commit_refused(topic, code, version: int):
    cls = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    return cls(name=topic.name, partitions=[cls.TxnOffsetCommitResponsePartition(
        partition_index=p.partition_index, error_code=int(code)) for p in topic.partitions])


@per_item("topics", "topics", lambda services, ctx, t: None if services.authorized(ctx, READ, TOPIC, t.name)
          else ErrorCode.TOPIC_AUTHORIZATION_FAILED, _commit_refused)
def _txn_offset_commit(services: BrokerServices, ctx: RequestContext, request: TxnOffsetCommitRequest) -> Answer:
    version = ctx.api_version
    verification = _start_offsets_verification(services, request, version)
    if verification is None:
        return respond(services, services.groups.txn_offset_commit(request, version, services.now_ms()))
    return _verify_then_commit(services, request, version, *verification)


def _start_offsets_verification(services: BrokerServices, request: TxnOffsetCommitRequest, version: int):
    """(the group's `__consumer_offsets` partition, the verification guard taken on it) if the commit must
    first be verified with the transaction coordinator (KIP-890 part 1, Kafka's
    GroupCoordinatorService.commitTransactionalOffsets), or, v5, the partition added; None when verification is
    off (below v5), for a request the
    group coordinator refuses anyway (no group id, a group it does not coordinate), and when the partition
    holds this producer's open transaction already (the SENTINEL: a later commit of the same transaction,
    as Kafka skips the round trip then)."""
    if not request.group_id or not (services.config.transaction_partition_verification_enable
                                    or version >= FIRST_TV2_TXN_OFFSET_COMMIT_VERSION):  # (v5 must add: see the module doc)
        return None
    groups = services.groups
    partition = groups.partition_for(request.group_id)
    if not groups.runtime.is_loaded(partition):
        return None
    tp = TopicPartition(CONSUMER_OFFSETS_TOPIC, partition)
    # The guard is taken before the coordinator is asked, as the produce path does: a marker of this
    # producer written to the partition meanwhile (the transaction ended) spends it.
    guard = services.data.maybe_start_transaction_verification(tp, request.producer_id, NO_SEQUENCE,
                                                               request.producer_epoch, services.now_ms())
    if guard is None or guard is SENTINEL:
        return None
    return tp, guard


async def _verify_then_commit(services: BrokerServices, request: TxnOffsetCommitRequest, version: int, tp, guard):
    """Ask the coordinator whether the group's offsets partition is in the producer's open transaction (it is
    once AddOffsetsToTxn was answered); refused, the commit writes nothing and every partition is answered
    the error (txn_verification.offsets_verify_error has the mapping). Confirmed, the commit is written at once
    if the guard still holds: from the check to the append nothing yields to the event loop, so no marker
    can land in between. A spent guard (the transaction ended while the coordinator was asked) is
    INVALID_TXN_STATE, as Kafka's log refuses a write whose verification guard no longer matches: written,
    the offsets would sit in a transaction nobody ends, and a later commit of the producer would expose them."""
    producer = (request.producer_id, request.producer_epoch)
    if version >= FIRST_TV2_TXN_OFFSET_COMMIT_VERSION:
        errors = await confirm_in_transaction(services, request.transactional_id, producer, [tp], {tp: guard},
                                              {tp: NO_SEQUENCE}, add=True)
        code = errors.get(tp, ErrorCode.INVALID_TXN_STATE)
    else:
        errors = await ask_transaction_coordinator(services, request.transactional_id, producer, [tp])
        code = errors.get(tp, ErrorCode.INVALID_TXN_STATE)
        if code is ErrorCode.NONE and not guard_holds(services, tp, request.producer_id, guard):
            code = ErrorCode.INVALID_TXN_STATE
    if code is not ErrorCode.NONE:
        refused = offsets_verify_error(code, version)
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[_commit_refused(t, refused, version)
                                                                   for t in request.topics])
    result = respond(services, services.groups.txn_offset_commit(request, version, services.now_ms()))
    return await result if isinstance(result, asyncio.Future) else result


@handles(65, (0, 0))
@per_item("transactional_ids", "transaction_states",
          lambda services, ctx, tid: None if services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
          else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
          lambda tid, code, version: DescribeTransactionsResponse.TransactionState(
              error_code=int(code), transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
              transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[]))
def handle_describe_transactions(services: BrokerServices, ctx: RequestContext,
                                 request: DescribeTransactionsRequest) -> Answer:
    response = services.transactions.describe_transactions(request, ctx.api_version, services.now_ms())
    if services.authorizer is not None:
        # As KafkaApis: a transaction's topics the principal may not DESCRIBE are left out, silently (no
        # audit line: leaving them out is the answer, not a refusal).
        for state in response.transaction_states:
            if state.topics:
                allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, TOPIC, [t.topic for t in state.topics],
                                                    log_denied=False)
                state.topics = [t for t in state.topics if t.topic in allowed]
    return response


@handles(66, (0, 2))
def handle_list_transactions(services: BrokerServices, ctx: RequestContext, request: ListTransactionsRequest) -> Answer:
    response = services.transactions.list_transactions(request, ctx.api_version, services.now_ms())
    if services.authorizer is not None:  # only the transactional ids the principal may describe
        allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                            [t.transactional_id for t in response.transaction_states], log_denied=False)
        response.transaction_states = [t for t in response.transaction_states if t.transactional_id in allowed]
    return response


def _add_partitions_refused(services: BrokerServices, ctx: RequestContext, request: AddPartitionsToTxnRequest):
    """Kafka's handleAddPartitionsToTxnRequest: v4+ comes from brokers (CLUSTER_ACTION); v0-3 needs WRITE on
    the transactional id, then WRITE on each topic, and a refused topic fails the whole transaction
    (OPERATION_NOT_ATTEMPTED for the others). None: go ahead."""
    cls = AddPartitionsToTxnResponse
    if ctx.api_version >= 4:
        if services.authorized(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return None
        return cls(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results_by_transaction=[])
    topics = request.v3_and_below_topics
    names = {t.name for t in topics}
    refused = transaction_refusal(services, ctx, request.v3_and_below_transactional_id)
    if refused is None:
        allowed = services.authorized_names(ctx, WRITE, TOPIC, [n for n in names if not services.is_internal_topic(n)])
        allowed |= {n for n in names if services.is_internal_topic(n)}
        if allowed == names:
            return None
    codes = {n: refused if refused is not None else ErrorCode.TOPIC_AUTHORIZATION_FAILED if n not in allowed
             else ErrorCode.OPERATION_NOT_ATTEMPTED for n in names}
    topic_cls = cls.AddPartitionsToTxnTopicResult
    return cls(throttle_time_ms=0, results_by_topic_v3_and_below=[topic_cls(name=t.name, results_by_partition=[
        topic_cls.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=int(codes[t.name]))
        for p in t.partitions]) for t in topics])
