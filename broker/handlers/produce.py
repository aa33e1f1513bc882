"""Produce (0): batches go to the partition logs untouched but for the offsets stamped in place.

Versions 0-2 are advertised, as Kafka 4 does (KAFKA-18659: old librdkafka disables compression unless
the range starts at 0), but refused: the connection closes as for any unsupported version.

Two ways in, one set of rules. `handle_produce` serves any request the codec decoded. `serve_produce_frame`
is the fast path for the common case (protocol.fast_produce: a v3-v13 frame read directly, answered with
packed bytes): it serves a request only when every partition in it passes the same checks
(`_partition_error`) and acks is 1 or -1, and otherwise hands it back untouched, before anything is
appended, so that `handle_produce` answers it, errors included. A partition this broker does not lead
is such an error: `handle_produce` answers it with the leader the image names (`current_leader`, v10+)
and that leader's endpoint (`node_endpoints`), which the packed response cannot carry.

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

Produce v12 (Transaction Version 2, KIP-890 part 2) would have the broker add the partition to the
transaction itself; this broker never finalizes the `transaction.version` feature, so clients stay on
version 1 (the Java client then sends Produce v11 at most for transactions) and every version is verified.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_produce import ProduceFrame, encode_produce_response
from odradek.protocol.messages import ProduceResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.storage.producer_state import SENTINEL
from odradek.storage.names import TopicPartition

from ..context import ConnectionContext, Packed
from ..txn_verification import needs_verification, transactional_producer, verify_transaction
from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import ProduceRequest
    from ..context import RequestContext
    from ..authorizer import Authorizer
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
    future = asyncio.get_running_loop().create_future()
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
    denied = _denied(services, ctx, request, version) if services.authorizer is not None else (
        request.transactional_id is None and _any_transactional(request) or None)
    services.quotas.record_produce(ctx.connection, ctx.client_id, ctx.frame_size)  # (the throttle goes in the response)
    for topic in request.topic_data:
        image, name = _topic(services, version, topic.topic_id if version >= 13 else topic.name)
        topic_names[id(topic)] = name
        parts: list = []
        plan.append((topic, parts))
        for p in topic.partition_data:
            records = p.records
            error = _partition_error(services, version, acks, image, name, p.index, records)
            if denied is not None and (denied is True or (name and name in denied)):  # ("": an unknown topic id)
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
    guards: dict | None = {} if services.config.transaction_partition_verification_enable else None
    if request.transactional_id is not None:  # (without one, transactional batches were refused above)
        producers = {p for p in map(transactional_producer, entries.values()) if p is not None}
        if len(producers) > 1:
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
    refused = await verify_transaction(services, request.transactional_id, producer, unverified, version)
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
    followers), or None to hand the request to `handle_produce` (nothing has been appended then).
    `connection` says who asks (listener, principal) for the checks the security issue adds."""
    acks = request.acks
    if acks != 1 and acks != -1:
        return None
    if services.authorizer is not None and not _fast_path_authorized(services, services.authorizer, connection, request):
        return None
    if services.metadata.image.client_quotas:  # quotas are per client id, which the fast path does not read
        return None
    version = request.api_version
    entries: dict[TopicPartition, object] = {}
    plan: list[tuple[bytes, list[TopicPartition]]] = []
    first_producer = None  # of the transactional batches
    for key, raw, parts in request.topics:
        image, name = _topic(services, version, key)
        tps = []
        for index, records in parts:
            if _partition_error(services, version, acks, image, name, index, records) is not None:
                return None
            tp = TopicPartition(name, index)
            producer = transactional_producer(records)
            if producer is not None:
                # A transactional batch: the fast path serves it only inside its producer's open transaction,
                # for the producer of the request's transactional id (handle_produce answers the rest).
                if (not request.has_transactional_id or (first_producer is not None and producer != first_producer)
                        or needs_verification(services.data, tp, producer)):
                    return None
                first_producer = producer
            if tp in entries:  # the same partition twice: handle_produce answers it once, as the last entry says
                return None
            entries[tp] = records
            tps.append(tp)
        plan.append((raw, tps))

    def answer(results) -> Packed:
        topics = []
        for raw, tps in plan:
            responses = []
            for tp in tps:
                res = results[tp]
                responses.append((tp.partition, res.error_code, res.base_offset, res.log_append_time_ms,
                                  res.log_start_offset, res.error_message if res.error_code else None,
                                  res.record_errors))
            topics.append((raw, responses))
        return Packed([encode_produce_response(request.correlation_id, topics, version)])

    # The SENTINEL for every partition: a transactional batch here is in its open transaction, which the log
    # checks at the write (and refuses any other transactional batch, e.g. past the first of a partition's).
    guards: dict | None = {} if services.config.transaction_partition_verification_enable else None
    return _append_and_answer(services, entries, acks, request.timeout_ms, answer, guards)


def _base_sequence(records) -> int:
    return _BASE_SEQUENCE.unpack_from(records, 53)[0]


_BASE_SEQUENCE = struct.Struct(">i")  # baseSequence int32 at offset 53 of a batch


# -- authorization (Kafka's handleProduceRequest): WRITE on the transactional id for transactional records,
# WRITE on each topic. Unauthorized topics answer TOPIC_AUTHORIZATION_FAILED whether they exist or not.

_ATTRIBUTES_LOW_BYTE = 22  # the batch attributes' low byte; 0x10 marks a transactional batch


def _transactional(records) -> bool:
    """Whether a partition's records are transactional, read off the first batch's header as the fast path
    reads them (Kafka looks at every batch; a later transactional batch that would open a transaction is
    refused by the log all the same, INVALID_TXN_STATE, which is what both paths answer then)."""
    return (records is not None and len(records) > _ATTRIBUTES_LOW_BYTE and records[_MAGIC_OFFSET] == 2
            and bool(records[_ATTRIBUTES_LOW_BYTE] & 0x10))  # (a v0/v1 message set has no such bit: INVALID_RECORD)


def _denied(services: BrokerServices, ctx: RequestContext, request: ProduceRequest, version: int):
    """True when the whole request is refused (transactional records without WRITE on the transactional
    id), else the set of topic names the principal may not write."""
    if any(_transactional(p.records) for t in request.topic_data for p in t.partition_data):
        if request.transactional_id is None or not services.authorized(
            ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):
            return True
    names = {_topic(services, version, t.topic_id if version >= 13 else t.name)[1] for t in request.topic_data}
    return names - services.authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)


def _fast_path_authorized(services: BrokerServices, authorizer: Authorizer, connection: ConnectionContext,
                          request: ProduceFrame) -> bool:
    """Whether the fast path may serve the frame: WRITE on every topic and no transactional batch (its
    transactional id is checked by handle_produce)."""
    for key, _, parts in request.topics:
        _, name = _topic(services, request.api_version, key)
        if not authorizer.authorize(connection, AclOperation.WRITE, ResourceType.TOPIC, name):
            return False
        if any(_transactional(records) for _, records in parts):
            return False
    return True


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
