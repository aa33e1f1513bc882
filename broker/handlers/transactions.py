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

TxnOffsetCommit is verified as a produce is (KIP-890 part 1, Kafka's CoordinatorPartitionWriter): unless the
producer's transaction is open on the group's `__consumer_offsets` partition already, the transaction
coordinator must confirm that AddOffsetsToTxn put that partition in the transaction. Otherwise the offsets
would open a transaction there that no marker ever closes: pending offsets forever, and a group whose
read_committed consumers (require_stable) wait on UNSTABLE_OFFSET_COMMIT for good. A refusal is Kafka's:
INVALID_TXN_STATE (TRANSACTION_ABORTABLE from v4), INVALID_PRODUCER_EPOCH for a fenced producer,
COORDINATOR_NOT_AVAILABLE (retried) while the coordinator cannot answer.
"""

from __future__ import annotations

import asyncio

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
from ..txn_wiring import needs_verification, verify_transaction
from .groups import respond
from . import handles

READ, WRITE, TOPIC, GROUP = AclOperation.READ, AclOperation.WRITE, ResourceType.TOPIC, ResourceType.GROUP
OFFSETS_TOPIC = "__consumer_offsets"


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
    if services.config.transaction_partition_verification_enable and request.group_id and request.topics:
        offsets_partition = TopicPartition(OFFSETS_TOPIC, services.groups.partition_for(request.group_id))
        producer = (request.producer_id, request.producer_epoch)
        if needs_verification(services.data, offsets_partition, producer):
            return _verify_then_commit(services, ctx, request, offsets_partition, producer)
    return respond(services, services.groups.txn_offset_commit(request, ctx.api_version, services.now_ms()))


async def _verify_then_commit(services, ctx, request, offsets_partition: TopicPartition, producer: tuple[int, int]):
    # Produce v12 is where TRANSACTION_ABORTABLE reaches producers; TxnOffsetCommit carries it from v4.
    as_produce_version = 12 if ctx.api_version >= 4 else 11
    refused = await verify_transaction(services, request.transactional_id, producer, [offsets_partition],
                                       as_produce_version)
    code = refused.get(offsets_partition)
    if code is not None:
        if code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT):
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE  # the coordinator's trouble, as a group coordinator says it
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[_commit_refused(t, code, 0) for t in request.topics])
    result = respond(services, services.groups.txn_offset_commit(request, ctx.api_version, services.now_ms()))
    return await result if isinstance(result, asyncio.Future) else result


@handles(65, (0, 0))
@per_item("transactional_ids", "transaction_states",
          lambda services, ctx, tid: None if services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
          else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
          lambda tid, code, version: DescribeTransactionsResponse.TransactionState(
              error_code=int(code), transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
              transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[]))
def handle_describe_transactions(services, ctx, request):
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
