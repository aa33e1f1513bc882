"""Produce (0): batches go to the partition logs untouched but for the offsets stamped in place.

Versions 0-2 are advertised, as Kafka 4 does (KAFKA-18659: old librdkafka disables compression unless
the range starts at 0), but refused: the connection closes as for any unsupported version.

Two ways in, one set of rules. `handle_produce` serves any request the codec decoded. `serve_produce_frame`
is the fast path for the common case (protocol.fast_produce: a v3-v13 frame read directly, answered with
packed bytes): it serves a request only when acks is 1 or -1 and nothing in it would be refused or treated
apart, and otherwise hands it back untouched (DECLINED), before anything is appended, so that
`handle_produce` answers it, errors included. Each rule is written once and asked by both paths: the
partition's checks (`_partition_error`), authorization (`write_refusal`), one producer per transactional
id (`_one_producer`), the transaction verification (`_in_open_transaction`, the log's rule) and the client
quotas (`ClientQuotas.metered`). A partition this broker does not lead is such an error: `handle_produce`
answers it with the leader the image names (`current_leader`, v10+) and that leader's endpoint
(`node_endpoints`), which the packed response cannot carry. Who may send a request at all (the SASL
session) was settled once before the fork, by the network layer (broker/network.py, "admission").

Transactions (KIP-890 part 1): a producer's first transactional write to a partition is verified with
its transaction coordinator (was the partition added to the open transaction?) before it is appended, so
that a zombie or a late retry cannot open a transaction nobody will end. The fast path hands such a
request to `handle_produce` (one byte of the batch header says "transactional"; the common case pays
nothing more), which awaits the verification and refuses what it did not confirm. Writes to a partition
where the producer's transaction is open already are not verified again (as Kafka).

The answer can be stale by the time it arrives: the coordinator may have aborted the transaction (its
marker written here) while the question was on its way, and the write would then open a new transaction
that nobody ends. So, as Kafka's ReplicaManager does, the handler takes a verification guard from the
partition's log before asking, and appends presenting it: a marker written in between spends the guard
and the write is refused with INVALID_TXN_STATE at the log, atomically with the append
(storage/producer_state.py, "Verification"). Every other client append presents the SENTINEL, which
verifies nothing: a transactional batch that would open a transaction without a verification is refused
the same way. `transaction.partition.verification.enable=false` turns both off, as in Kafka.

Transactional batches in a request that names no transactional id are refused whole with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, with or without an authorizer (Kafka's handleProduceRequest), and
transactional batches of more than one producer (id and epoch) in one request with
INVALID_PRODUCER_ID_MAPPING (Kafka's handleProduceAppend): a transactional id stands for one producer.

Produce v12+ comes from a Transactions V2 client (KIP-890 part 2; the Java client, once the cluster
finalizes `transaction.version` 2): it sends no AddPartitionsToTxn, so the first write to a partition has the
coordinator ADD the partition instead of verifying it (txn_verification.confirm_in_transaction), under the
same guard, and also with `transaction.partition.verification.enable=false` (without the add the partition
would hold a transaction its coordinator does not know). Older versions are verified as above, whatever the
feature (Kafka decides by the version too).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_produce import ProduceFrame, encode_produce_response
from odradek.protocol.messages import ProduceResponse
from odradek.protocol.records import ATTR_TRANSACTIONAL
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.storage.producer_state import SENTINEL
from odradek.storage.names import TopicPartition

from ..context import DECLINED, ConnectionContext, EagerAnswer, Packed
from ..txn_verification import FIRST_TV2_PRODUCE_VERSION, transactional_producer, verify_transaction
from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import ProduceRequest
    from ..context import RequestContext
    from ..services import BrokerServices

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse
RecordError = PartitionResponse.BatchIndexAndErrorMessage
_MAGIC_OFFSET = 16  # baseOffset int64 | length int32 | epoch (v2) or CRC (v0/v1) int32 | magic int8


def _partition_error(services: BrokerServices, version: int, acks: int, image, name: str, index: int,
                     records) -> ErrorCode | None:
    """Why a partition's data is refused before any append, or None."""
    if acks not in (-1, 0, 1):
        return ErrorCode.INVALID_REQUIRED_ACKS
    if image is None:
        return ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    partition = image.partitions.get(index)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if partition.leader != services.node_id:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE
    if len(records) > _MAGIC_OFFSET and records[_MAGIC_OFFSET] != 2:
        # Kafka's ProduceRequest.validateRecords: v3+ carries record batch v2 only (magic 0/1 message
        # sets are refused with INVALID_RECORD, not CORRUPT_MESSAGE).
        return ErrorCode.INVALID_RECORD
    if name.startswith("__") and not services.allows_internal_writes(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return None


def _topic(services: BrokerServices, version: int, key):
    """The topic image a request names (by id from v13, by name before) and the name to append under."""
    if version >= 13:
        image = services.topic_by_id(key)
        return image, image.name if image is not None else ""
    return services.topic_by_name(key), key


def _append_and_answer(services: BrokerServices, entries: dict, acks: int, timeout_ms: int, answer: Callable,
                       guards: dict | None = None):
    """Append `entries` and return `answer(results)` when the append answers at once (acks=1, or acks=all
    with the leader the only in-sync replica), else a future of it completed when the replicas catch up.
    acks=0: None. `guards`: the verification guards to present (see the module doc; None checks nothing)."""
    at_once: list = []
    future: asyncio.Future | None = None

    def respond(results) -> None:
        if acks == 0:
            return
        if future is None:
            at_once.append(answer(results))
        elif not future.done():
            future.set_result(answer(results))

    services.data.append_records(entries, required_acks=acks, timeout_ms=timeout_ms, now_ms=services.now_ms(),
                                 respond=respond, verification_guards=guards)
    if acks == 0:
        return None
    if at_once:
        return at_once[0]
    future = EagerAnswer()  # written as soon as the replicas catch up (see EagerAnswer)
    return future


@handles(0, (3, 13), advertise_min=0)
def handle_produce(services: BrokerServices, ctx: RequestContext, request: ProduceRequest) -> Answer:
    version = ctx.api_version
    acks = request.acks
    entries: dict[TopicPartition, memoryview | bytes] = {}
    # Per topic, per partition: the TopicPartition appended to, or the error response made here.
    plan: list[tuple[Any, list]] = []  # (the request's topic entry, its partitions)
    # A partition named more than once is appended and answered once, as its last entry says, in the place
    # of its first (Kafka keeps the last entry of its per-partition map and answers from that map).
    slots: dict[tuple, tuple[list, int]] = {}
    topic_names: dict[int, str] = {}
    endpoints: dict[int, object] = {}
    denied = write_refusal(services, ctx, request.transactional_id, _any_transactional(request),
                           (_topic(services, version, t.topic_id if version >= 13 else t.name)[1] for t in request.topic_data))
    services.quotas.record_produce(ctx.connection, ctx.client_id, ctx.frame_size)  # (the throttle goes in the response)
    for topic in request.topic_data:
        image, name = _topic(services, version, topic.topic_id if version >= 13 else topic.name)
        topic_names[id(topic)] = name
        parts: list = []
        plan.append((topic, parts))
        for p in topic.partition_data:
            records = p.records
            error = _partition_error(services, version, acks, image, name, p.index, records)
            if denied is True or (isinstance(denied, set) and name and name in denied):  # ("": an unknown topic id)
                error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if denied is True else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            tp = TopicPartition(name, p.index)
            outcome = tp if error is None else PartitionResponse(index=p.index, error_code=int(error), base_offset=-1)
            if error is None:
                entries[tp] = records
            else:
                entries.pop(tp, None)  # a bad last entry: nothing is written for this partition
            slot = slots.get(tp)
            if slot is None:
                slots[tp] = (parts, len(parts))
                parts.append(outcome)
            else:
                slot[0][slot[1]] = outcome

    def answer(results) -> ProduceResponse:
        out = []
        for topic, parts in plan:
            responses = []
            for part in parts:
                if type(part) is TopicPartition:
                    res = results[part]
                    part = PartitionResponse(
                        index=part.partition, error_code=res.error_code, base_offset=res.base_offset,
                        log_append_time_ms=res.log_append_time_ms, log_start_offset=res.log_start_offset,
                        error_message=res.error_message if res.error_code else None,
                        record_errors=[RecordError(batch_index=i, batch_index_error_message=m)
                                       for i, m in res.record_errors],
                    )
                if version >= 10 and part.error_code in _LEADER_HINT_ERRORS:
                    _leader_hint(services, part, topic_names[id(topic)], ctx.listener, endpoints)
                responses.append(part)
            if responses or not topic.partition_data:  # (a topic whose every entry was a repeat is left out)
                out.append(TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=responses))
        response = ProduceResponse(responses=out, throttle_time_ms=0)
        if version >= 10:
            response.node_endpoints = list(endpoints.values())
        return response

    # The SENTINEL for every partition not verified below (None: verification is off, nothing is checked).
    # Transactions V2 (v12+) needs the leader's add whatever the setting: its client adds nothing itself.
    guards: dict | None = {} if (services.config.transaction_partition_verification_enable
                                 or version >= FIRST_TV2_PRODUCE_VERSION) else None
    if request.transactional_id is not None:  # (without one, transactional batches were refused above)
        producers = {p for p in map(transactional_producer, entries.values()) if p is not None}
        if not _one_producer(producers):
            # One transactional id, one producer: Kafka refuses the whole request before any append.
            for tp in entries:
                parts, i = slots[tp]
                parts[i] = PartitionResponse(index=tp.partition, error_code=int(ErrorCode.INVALID_PRODUCER_ID_MAPPING),
                                             base_offset=-1)
            return answer({}) if acks != 0 else None
        if producers and guards is not None:
            unverified = _start_verification(services, entries, guards)
            if unverified:
                return _verify_then_append(services, request, version, entries, unverified, slots, answer, guards)
    return _append_and_answer(services, entries, acks, request.timeout_ms, answer, guards)


def _any_transactional(request) -> bool:
    return any(_transactional(p.records) for t in request.topic_data for p in t.partition_data)


def _start_verification(services: BrokerServices, entries: dict, guards: dict) -> list:
    """The partitions whose transactional batch would open its producer's transaction here: each gets a
    verification guard (in `guards`) before the coordinator is asked."""
    unverified = []
    now_ms = services.now_ms()
    data = services.data
    for tp, records in entries.items():
        producer = transactional_producer(records)
        if producer is None:
            continue
        guard = data.maybe_start_transaction_verification(tp, producer[0], _base_sequence(records), producer[1], now_ms)
        if guard is not None and guard is not SENTINEL:
            guards[tp] = guard
            unverified.append(tp)
    return unverified


async def _verify_then_append(services: BrokerServices, request: ProduceRequest, version: int, entries: dict,
                              unverified: list, slots: dict, answer, guards: dict):
    producer = transactional_producer(entries[unverified[0]])
    assert producer is not None  # (unverified: partitions of transactional batches only)
    sequences = {tp: _base_sequence(entries[tp]) for tp in unverified}
    refused = await verify_transaction(services, request.transactional_id, producer, unverified, version, guards, sequences)
    for tp, code in refused.items():
        entries.pop(tp, None)
        guards.pop(tp, None)
        parts, i = slots[tp]
        parts[i] = PartitionResponse(index=tp.partition, error_code=int(code), base_offset=-1)
    # What the coordinator confirmed is appended with the guard taken before asking: a marker written here
    # meanwhile (the transaction aborted) has spent it, and the log refuses the write (INVALID_TXN_STATE).
    result = _append_and_answer(services, entries, request.acks, request.timeout_ms, answer, guards)
    return await result if isinstance(result, asyncio.Future) else result


def serve_produce_frame(services: BrokerServices, request: ProduceFrame, connection: ConnectionContext):
    """The fast path (see the module docstring): the packed response, a future of it (acks=-1 waiting on
    followers), or DECLINED to hand the request to `handle_produce` (nothing has been appended then). It
    declines by the same predicates `handle_produce` applies (`_partition_error`, `write_refusal`,
    `_one_producer`, `_in_open_transaction`, `ClientQuotas.metered`): whatever one of them would refuse or
    treat apart is answered by the general path."""
    acks = request.acks
    if acks != 1 and acks != -1:
        return DECLINED
    if services.quotas.metered:  # the general path measures the request per client id, which the frame lacks
        return DECLINED
    version = request.api_version
    entries: dict[TopicPartition, object] = {}
    plan: list[tuple[bytes, list[TopicPartition]]] = []
    producers: set | None = None  # of the transactional batches, if any
    for key, raw, parts in request.topics:
        image, name = _topic(services, version, key)
        tps = []
        for index, records in parts:
            if _partition_error(services, version, acks, image, name, index, records) is not None:
                return DECLINED
            tp = TopicPartition(name, index)
            if tp in entries:  # the same partition twice: handle_produce answers it once, as the last entry says
                return DECLINED
            if len(records) > _ATTRIBUTES_LOW_BYTE and records[_ATTRIBUTES_LOW_BYTE] & _TRANSACTIONAL_BIT:
                # `_transactional(records)`, read inline (a call per partition is ~1 % of this path; the records
                # and their magic were checked by `_partition_error`). Served only inside its producer's open
                # transaction here: a first write is verified first.
                producer = transactional_producer(records)
                if producer is None or not _in_open_transaction(services, tp, producer):
                    return DECLINED
                if producers is None:
                    producers = {producer}
                else:
                    producers.add(producer)
            entries[tp] = records
            tps.append(tp)
        plan.append((raw, tps))
    if producers is not None or services.authorizer is not None:  # (else neither rule can refuse anything)
        if producers is not None and not _one_producer(producers):
            return DECLINED
        # Last, so that a request served has its decisions audited once (the general path audits a refusal).
        if write_refusal(services, connection, request.transactional_id, producers is not None,
                         (_topic(services, version, key)[1] for key, _, _ in request.topics), log_denied=False):
            return DECLINED

    def answer(results) -> Packed:
        topics = []
        errors: list[int] | None = None  # the partitions' non-zero codes, for the request error counts
        for raw, tps in plan:
            responses = []
            for tp in tps:
                res = results[tp]
                code = res.error_code
                if code:
                    if errors is None:
                        errors = [code]
                    else:
                        errors.append(code)
                responses.append((tp.partition, code, res.base_offset, res.log_append_time_ms,
                                  res.log_start_offset, res.error_message if code else None,
                                  res.record_errors))
            topics.append((raw, responses))
        return Packed([encode_produce_response(request.correlation_id, topics, version)], errors)

    # The SENTINEL for every partition: a transactional batch here is in its open transaction, which the log
    # checks at the write (and refuses any other transactional batch, e.g. past the first of a partition's).
    guards: dict | None = {} if services.config.transaction_partition_verification_enable else None
    return _append_and_answer(services, entries, acks, request.timeout_ms, answer, guards)


def _base_sequence(records) -> int:
    return _BASE_SEQUENCE.unpack_from(records, 53)[0]


_BASE_SEQUENCE = struct.Struct(">i")  # baseSequence int32 at offset 53 of a batch


# -- the rules both paths ask (the fast path declines where one of them would refuse or treat apart)

_ATTRIBUTES_LOW_BYTE = 22  # the batch attributes' low byte, where ATTR_TRANSACTIONAL marks a transactional batch
_TRANSACTIONAL_BIT = ATTR_TRANSACTIONAL


def _transactional(records) -> bool:
    """Whether a partition's records are transactional, read off the first batch's header as the fast path
    reads them (Kafka looks at every batch; a later transactional batch that would open a transaction is
    refused by the log all the same, INVALID_TXN_STATE, which is what both paths answer then)."""
    return bool(records is not None and len(records) > _ATTRIBUTES_LOW_BYTE
                and records[_ATTRIBUTES_LOW_BYTE] & _TRANSACTIONAL_BIT and records[_MAGIC_OFFSET] == 2)  # (a v0/v1 message set has no such bit: INVALID_RECORD)


def write_refusal(services, who, transactional_id: str | None, transactional: bool, names, *,
                  log_denied: bool = True) -> bool | set | None:
    """Authorization (Kafka's handleProduceRequest): True when the whole request is refused (transactional
    records in a request without a transactional id, or without WRITE on it: TRANSACTIONAL_ID_AUTHORIZATION_
    FAILED), else the topic names (of `names`, read only with an authorizer) the principal may not WRITE:
    TOPIC_AUTHORIZATION_FAILED whether they exist or not. None or empty: nothing refused. `who`: a request's
    or, on the fast path, a connection's context. Without an authorizer and transactional records it refuses
    nothing, and the fast path does not call it then."""
    if transactional and (transactional_id is None or not services.authorized(
            who, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id, log_denied=log_denied)):
        return True
    if services.authorizer is None:
        return None
    names = set(names)
    return names - services.authorized_names(who, AclOperation.WRITE, ResourceType.TOPIC, names, log_denied=log_denied)


def _one_producer(producers: set) -> bool:
    """A transactional id stands for one producer: transactional batches of more than one (id and epoch) in a
    request are refused whole, INVALID_PRODUCER_ID_MAPPING (Kafka's handleProduceAppend)."""
    return len(producers) <= 1


def _in_open_transaction(services, tp: TopicPartition, producer: tuple[int, int]) -> bool:
    """Whether the producer's transaction is open on the partition already, so that its write needs no
    verification: the log's rule (`Log.in_open_transaction`), which the general path meets inside
    `maybe_start_transaction_verification`. A partition not hosted here: True (the append answers why)."""
    partition = services.data.get_partition(tp)
    return partition is None or partition.log.in_open_transaction(producer[0], producer[1])


_LEADER_HINT_ERRORS = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH))
NodeEndpoint = ProduceResponse.NodeEndpoint


def _leader_hint(services: BrokerServices, part, name: str, listener: str, endpoints: dict) -> None:
    """KIP-951: tell the client who leads the partition now, and where, so it need not ask Metadata."""
    leader = services.partition_leader(name, part.index)
    if leader is None or leader[0] == services.node_id:
        return
    part.current_leader = PartitionResponse.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
    if leader[0] not in endpoints:
        entry = services.node_endpoint(NodeEndpoint, leader[0], listener)
        if entry is not None:
            endpoints[leader[0]] = entry
