"""Share-group requests by hand (ShareFetch / ShareAcknowledge) over the bundled client's connection, for
tests of the share data path that do not need the group coordinator's heartbeats."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from odradek.client.connection import BrokerConnection
from odradek.protocol.messages import (
    MetadataRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
)
from odradek.protocol.records import iter_records

FetchTopic = ShareFetchRequest.FetchTopic
FetchPartition = FetchTopic.FetchPartition
AckTopic = ShareAcknowledgeRequest.AcknowledgeTopic
AckPartition = AckTopic.AcknowledgePartition

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


async def connect(bootstrap: str) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    return await BrokerConnection(host, int(port), node_id=-1, client_id="share-test").connect()


async def topic_id(conn: BrokerConnection, topic: str) -> uuid.UUID:
    response = await conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), version=12)
    return response.topics[0].topic_id


def offsets_in(records: bytes) -> list[int]:
    """The offsets of every record in a response's record batches."""
    out, pos = [], 0
    data = bytes(records or b"")
    while len(data) - pos >= 61:
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        out += [r.offset for r in iter_records(data[pos:pos + 12 + length], max_uncompressed_bytes=1 << 24)]
        pos += 12 + length
    return out


def acquired(response) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of every acquired range in a ShareFetch response."""
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def acquired_offsets(response) -> list[int]:
    return [o for first, last, _ in acquired(response) for o in range(first, last + 1)]


class ShareMember:
    """One member's share session on one broker, for one partition of one topic."""

    def __init__(self, conn: BrokerConnection, group: str, tid: uuid.UUID, partition: int = 0,
                 member_id: str | None = None):
        self.conn, self.group, self.topic_id, self.partition = conn, group, tid, partition
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0

    def _acks(self, acks: Sequence[tuple[int, int, Sequence[int]]], cls):
        return [cls.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=list(t)) for f, last, t in acks]

    async def fetch(self, acks: Sequence[tuple[int, int, Sequence[int]]] = (), *, max_records: int = 500,
                    max_wait_ms: int = 0, mode: int = 0, epoch: int | None = None, version: int = 2,
                    batch_size: int | None = None):
        request = ShareFetchRequest(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, max_records=max_records,
            batch_size=max_records if batch_size is None else batch_size,
            share_acquire_mode=mode,
            topics=[FetchTopic(topic_id=self.topic_id, partitions=[FetchPartition(
                partition_index=self.partition, acknowledgement_batches=self._acks(acks, FetchPartition))])],
            forgotten_topics_data=[],
        )
        response = await self.conn.send(request, version=version, timeout_ms=60_000)
        if response.error_code == 0 and epoch is None:
            self.epoch = -1 if self.epoch == -1 else self.epoch + 1
        return response

    async def acknowledge(self, acks: Sequence[tuple[int, int, Sequence[int]]], *, epoch: int | None = None,
                          version: int = 2):
        request = ShareAcknowledgeRequest(
            group_id=self.group, member_id=self.member_id,
            share_session_epoch=self.epoch if epoch is None else epoch,
            is_renew_ack=version >= 2 and any(RENEW in t for _, _, t in acks),
            topics=[AckTopic(topic_id=self.topic_id, partitions=[AckPartition(
                partition_index=self.partition, acknowledgement_batches=self._acks(acks, AckPartition))])],
        )
        response = await self.conn.send(request, version=version, timeout_ms=60_000)
        if response.error_code == 0 and epoch is None:
            self.epoch += 1
        return response

    async def close(self, acks: Sequence[tuple[int, int, Sequence[int]]] = ()):
        return await self.fetch(acks, epoch=-1)
