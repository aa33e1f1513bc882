"""Transaction APIs, handed to the transaction coordinator (`services.transactions`,
coordinator/transaction/coordinator.py): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
DescribeTransactions (65), ListTransactions (66); and TxnOffsetCommit (28), which the group coordinator
serves (pending offsets made visible by the commit marker). InitProducerId is in producer_ids.py and
WriteTxnMarkers, the partitions' side, in its own module.

EndTxn stops at v4: v5 is Transaction Version 2 (KIP-890 part 2, an epoch bump per transaction), which
clients use only when the broker finalizes the `transaction.version` feature at 2; this broker does not,
and none of the clients tested here (librdkafka, aiokafka, kafka-python) sends v5. Not advertising either
keeps the Java client on version 1 too (it then sends EndTxn v4, Produce v11 and TxnOffsetCommit v4 at
most in a transaction), whose partitions are verified, not added, by the partition leader
(handlers/produce.py); tests/integration/test_txn_produce_checks.py pins what ApiVersions says.
AddPartitionsToTxn v5 and TxnOffsetCommit v5 are advertised as Kafka does whatever the feature: v5 of the
first only adds the TRANSACTION_ABORTABLE error, and a client sends v5 of the second only with TV2.

TxnOffsetCommit is verified (KIP-890 part 1) before the group coordinator writes it: the transaction
coordinator must have the group's `__consumer_offsets` partition in the producer's Ongoing transaction
(AddOffsetsToTxn put it there), asked with the same AddPartitionsToTxn verify_only client the produce path
uses (txn_wiring.ask_transaction_coordinator). A commit for a transaction that never added the offsets, or
that has ended, is refused (INVALID_TXN_STATE below v4, TRANSACTION_ABORTABLE from v4) and writes nothing.
v5 is verified as v4 here: with Transaction Version 2 Kafka would add the partition instead, and this broker
does not finalize TV2.
"""

from __future__ import annotations

import asyncio

from odradek.coordinator.partitioning import CONSUMER_OFFSETS_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
)
from odradek.replication.acl import AclOperation, ResourceType
from odradek.storage.names import TopicPartition

from ..authorizer import per_item, transaction_refusal
from ..txn_wiring import ask_transaction_coordinator, needs_verification, offsets_verify_error
from .groups import respond
from . import handles

READ, WRITE, TOPIC, GROUP = AclOperation.READ, AclOperation.WRITE, ResourceType.TOPIC, ResourceType.GROUP


@handles(24, (0, 5))
def handle_add_partitions_to_txn(services, ctx, request):
    if services.authorizer is not None and (refused := _add_partitions_refused(services, ctx, request)) is not None:
        return refused
    return respond(services, services.transactions.add_partitions_to_txn(request, ctx.api_version, services.now_ms()))


@handles(25, (0, 4))
def handle_add_offsets_to_txn(services, ctx, request):
    refused = transaction_refusal(services, ctx, request.transactional_id) or (
        None if services.authorized(ctx, READ, GROUP, request.group_id) else ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if refused is not None:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=int(refused))
    return respond(services, services.transactions.add_offsets_to_txn(request, ctx.api_version, services.now_ms()))


@handles(26, (0, 4))  # not v5: Transaction Version 2 (see the module doc)
def handle_end_txn(services, ctx, request):
    if (refused := transaction_refusal(services, ctx, request.transactional_id)) is not None:
        return EndTxnResponse(throttle_time_ms=0, error_code=int(refused))
    return respond(services, services.transactions.end_txn(request, ctx.api_version, services.now_ms()))


@handles(28, (0, 5))
def handle_txn_offset_commit(services, ctx, request):
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
def _txn_offset_commit(services, ctx, request):
    version = ctx.api_version
    tp = _offsets_partition_to_verify(services, request)
    if tp is None:
        return respond(services, services.groups.txn_offset_commit(request, version, services.now_ms()))
    return _verify_then_commit(services, request, version, tp)


def _offsets_partition_to_verify(services, request):
    """The group's `__consumer_offsets` partition if the commit must first be verified with the transaction
    coordinator (KIP-890 part 1, Kafka's GroupCoordinatorService.commitTransactionalOffsets): not when
    verification is off, not for a request the group coordinator refuses anyway (no group id, a group it
    does not coordinate), and not when the partition already holds this producer's open transaction
    (a second commit of the transaction, as Kafka skips the round trip then)."""
    if not services.config.transaction_partition_verification_enable or not request.group_id:
        return None
    groups = services.groups
    partition = groups.partition_for(request.group_id)
    if not groups.runtime.is_loaded(partition):
        return None
    tp = TopicPartition(CONSUMER_OFFSETS_TOPIC, partition)
    return tp if needs_verification(services.data, tp, (request.producer_id, request.producer_epoch)) else None


async def _verify_then_commit(services, request, version: int, tp):
    """Ask the coordinator whether the group's offsets partition is in the producer's open transaction (it is
    once AddOffsetsToTxn was answered); refused, the commit writes nothing and every partition is answered
    the error (txn_wiring.offsets_verify_error has the mapping)."""
    errors = await ask_transaction_coordinator(services, request.transactional_id,
                                               (request.producer_id, request.producer_epoch), [tp])
    code = errors.get(tp, ErrorCode.INVALID_TXN_STATE)
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
def handle_describe_transactions(services, ctx, request):
    return services.transactions.describe_transactions(request, ctx.api_version, services.now_ms())


@handles(66, (0, 2))
def handle_list_transactions(services, ctx, request):
    response = services.transactions.list_transactions(request, ctx.api_version, services.now_ms())
    if services.authorizer is not None:  # only the transactional ids the principal may describe
        allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                            [t.transactional_id for t in response.transaction_states], log_denied=False)
        response.transaction_states = [t for t in response.transaction_states if t.transactional_id in allowed]
    return response


def _add_partitions_refused(services, ctx, request):
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
