"""Fetch (1): sessionless long poll, answered from file regions sent by sendfile.

Every partition carries its high watermark, last stable offset and log start offset, error paths
included, and records are never null (librdkafka fails on a null record set). Sessions (KIP-227) are not
kept: the response always carries session id 0, which clients treat as "full fetch every time".
"""

from __future__ import annotations

import asyncio

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_fetch import encode_fetch_response
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import FetchRequestPartition, FetchResult
from odradek.storage.names import TopicPartition

from . import handles

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

    aborted = None if isolation is FetchIsolation.HIGH_WATERMARK else []

    def respond(results: dict[TopicPartition, FetchResult]) -> None:
        if future.done():
            return
        topics = []
        for name, topic_id, parts in layout:
            out = []
            for index, tp in parts:
                if isinstance(tp, int):  # (aborted transactions: an empty list, as Kafka's error entries)
                    out.append((index, tp, -1, -1, -1, [], ()))
                    continue
                r = results[tp]
                out.append((index, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, aborted,
                            r.records or ()))  # file regions: small ones go out with the rest, large ones by sendfile
            topics.append((topic_id.bytes if version >= 13 else name, out))
        future.set_result(encode_fetch_response(ctx.header.correlation_id, topics, version))

    broker.data.fetch_records(
        wanted, max_bytes=request.max_bytes, min_bytes=request.min_bytes, max_wait_ms=request.max_wait_ms,
        isolation=isolation, now_ms=now_ms, respond=respond,
    )
    return future.result() if future.done() else future
