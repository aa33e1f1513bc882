"""Produce (0): batches go to the partition logs untouched but for the offsets stamped in place.

Versions 0-2 are advertised, as Kafka 4 does (KAFKA-18659: old librdkafka disables compression unless
the range starts at 0), but refused: the connection closes as for any unsupported version.

Two ways in, one set of rules. `handle_produce` serves any request the codec decoded. `serve_produce_frame`
is the fast path for the common case (protocol.fast_produce: a v3-v13 frame read directly, answered with
packed bytes): it serves a request only when every partition in it passes the same checks
(`_partition_error`) and acks is 1 or -1, and otherwise hands it back untouched, before anything is
appended, so that `handle_produce` answers it, errors included.
"""

from __future__ import annotations

import asyncio

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_produce import ProduceFrame, encode_produce_response
from odradek.protocol.messages import ProduceResponse
from odradek.storage.names import TopicPartition

from . import handles

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse
_MAGIC_OFFSET = 16  # baseOffset int64 | length int32 | epoch (v2) or CRC (v0/v1) int32 | magic int8


def _partition_error(broker, version: int, acks: int, image, name: str, index: int, records) -> ErrorCode | None:
    """Why a partition's data is refused before any append, or None."""
    if acks not in (-1, 0, 1):
        return ErrorCode.INVALID_REQUIRED_ACKS
    if image is None:
        return ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if index not in image.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if records is None or len(records) == 0:
        return ErrorCode.CORRUPT_MESSAGE
    if len(records) > _MAGIC_OFFSET and records[_MAGIC_OFFSET] != 2:
        # Kafka's ProduceRequest.validateRecords: v3+ carries record batch v2 only (magic 0/1 message
        # sets are refused with INVALID_RECORD, not CORRUPT_MESSAGE).
        return ErrorCode.INVALID_RECORD
    if name.startswith("__") and not broker.allows_internal_writes(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return None


@handles(0, (3, 13), advertise_min=0)
def handle_produce(broker, ctx, request):
    version = ctx.api_version
    acks = request.acks
    now_ms = broker.now_ms()
    entries: dict[TopicPartition, object] = {}
    # Per topic, per partition: the TopicPartition appended to, or the error response made here.
    plan: list[tuple[object, list]] = []
    for topic in request.topic_data:
        image = broker.topic_by_id(topic.topic_id) if version >= 13 else broker.topic_by_name(topic.name)
        name = image.name if image is not None else topic.name
        parts: list = []
        plan.append((topic, parts))
        for p in topic.partition_data:
            records = p.records
            error = _partition_error(broker, version, acks, image, name, p.index, records)
            if error is not None:
                parts.append(PartitionResponse(index=p.index, error_code=int(error), base_offset=-1))
            else:
                tp = TopicPartition(name, p.index)
                entries[tp] = records
                parts.append(tp)

    # Most appends are answered at once (acks=0/1, or acks=all with the leader the only in-sync replica):
    # the response is returned directly and a future is made only when the answer has to wait.
    immediate: list[ProduceResponse] = []
    future: asyncio.Future | None = None

    def respond(results) -> None:
        if acks == 0 or (future is not None and future.done()):
            return
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
                    )
                responses.append(part)
            out.append(TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=responses))
        response = ProduceResponse(responses=out, throttle_time_ms=0)
        if future is None:
            immediate.append(response)
        else:
            future.set_result(response)

    broker.data.append_records(entries, required_acks=acks, timeout_ms=request.timeout_ms, now_ms=now_ms, respond=respond)
    if acks == 0:
        return None
    if immediate:
        return immediate[0]
    future = asyncio.get_running_loop().create_future()
    return future


def serve_produce_frame(broker, request: ProduceFrame):
    """The fast path (see the module docstring): the response frame, a future of it (acks=-1 waiting on
    followers), or None to hand the request to `handle_produce` (nothing has been appended then)."""
    acks = request.acks
    if acks != 1 and acks != -1:
        return None
    version = request.api_version
    entries: dict[TopicPartition, object] = {}
    plan: list[tuple[bytes, list[TopicPartition]]] = []
    for key, raw, parts in request.topics:
        if version >= 13:  # topics by id
            image = broker.topic_by_id(key)
            name = image.name if image is not None else ""
        else:
            image, name = broker.topic_by_name(key), key
        tps = []
        for index, records in parts:
            if _partition_error(broker, version, acks, image, name, index, records) is not None:
                return None
            tp = TopicPartition(name, index)
            if tp in entries:  # the same partition twice: handle_produce answers that oddity
                return None
            entries[tp] = records
            tps.append(tp)
        plan.append((raw, tps))

    frame: bytearray | None = None
    future: asyncio.Future | None = None

    def respond(results) -> None:
        nonlocal frame
        if future is not None and future.done():
            return
        topics = []
        for raw, tps in plan:
            responses = []
            for tp in tps:
                res = results[tp]
                responses.append((tp.partition, res.error_code, res.base_offset, res.log_append_time_ms,
                                  res.log_start_offset, res.error_message if res.error_code else None))
            topics.append((raw, responses))
        out = encode_produce_response(request.correlation_id, topics, request.api_version)
        if future is None:
            frame = out
        else:
            future.set_result(out)

    broker.data.append_records(entries, required_acks=acks, timeout_ms=request.timeout_ms, now_ms=broker.now_ms(), respond=respond)
    if frame is not None:
        return frame
    future = asyncio.get_running_loop().create_future()
    return future
