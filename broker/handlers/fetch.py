"""Fetch (1): sessionless long poll, answered from file regions sent by sendfile.

Every partition carries its high watermark, last stable offset and log start offset, error paths
included, and records are never null (librdkafka fails on a null record set). Sessions (KIP-227) are not
kept: the response always carries session id 0, which clients treat as "full fetch every time".
"""

from __future__ import annotations

import asyncio

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import FetchResponse
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import FetchRequestPartition, FetchResult
from odradek.storage.names import TopicPartition

from . import handles

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData


@handles(1)
def handle_fetch(broker, ctx, request):
    version = ctx.api_version
    now_ms = broker.now_ms()
    isolation = FetchIsolation.TXN_COMMITTED if request.isolation_level == 1 else FetchIsolation.HIGH_WATERMARK
    wanted: list[FetchRequestPartition] = []
    layout = []  # (topic name or None, topic id, [(partition index, tp or error code)])
    for topic in request.topics:
        image = broker.topic_by_id(topic.topic_id) if version >= 13 else broker.topic_by_name(topic.topic)
        parts = []
        for p in topic.partitions:
            if image is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append((p.partition, int(code)))
                continue
            tp = TopicPartition(image.name, p.partition)
            wanted.append(FetchRequestPartition(tp, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch))
            parts.append((p.partition, tp))
        layout.append((topic.topic, topic.topic_id, parts))

    future = asyncio.get_running_loop().create_future()

    def respond(results: dict[TopicPartition, FetchResult]) -> None:
        if future.done():
            return
        responses = []
        for name, topic_id, parts in layout:
            out = []
            for index, tp in parts:
                if isinstance(tp, int):
                    out.append(PartitionData(partition_index=index, error_code=tp, high_watermark=-1, records=b""))
                    continue
                r = results[tp]
                out.append(PartitionData(
                    partition_index=index, error_code=r.error_code, high_watermark=r.high_watermark,
                    last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                    aborted_transactions=None if isolation is FetchIsolation.HIGH_WATERMARK else [],
                    records=r.records or b"",  # file regions, sent with sendfile
                ))
            responses.append(TopicResponse(topic=name, topic_id=topic_id, partitions=out))
        future.set_result(FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses))

    broker.data.fetch_records(
        wanted, max_bytes=request.max_bytes, min_bytes=request.min_bytes, max_wait_ms=request.max_wait_ms,
        isolation=isolation, now_ms=now_ms, respond=respond,
    )
    return future.result() if future.done() else future
