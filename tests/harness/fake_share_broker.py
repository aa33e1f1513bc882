"""A scripted share-group broker for the bundled ShareConsumer's unit tests (tests/unit/test_share_client.py).

One node (id 0) on a real loopback socket: the coordinator of every group and the leader of partition 0 of
topic "t" (topic id `TOPIC_ID`). It answers ApiVersions, Metadata, FindCoordinator, ShareGroupHeartbeat,
ShareFetch and ShareAcknowledge, keeps every request it got (`requests`, as (api key, version, request)),
and takes the answers to give from queues a test fills (`heartbeat_errors`, `fetch_errors`,
`fetch_partition_errors`, `ack_errors`, `fetches`); with nothing queued it answers as a quiet broker: the
member at epoch 1 owning t-0, a fetch with no records, acknowledgements accepted. It keeps no share state:
what the client does is the test's subject, and the real broker's behaviour is the integration tests'.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from typing import Any

from odradek.protocol.connection import ApiVersionsUnsupported, ServerConnection
from odradek.protocol.messages import REQUESTS, RESPONSES

TOPIC = "t"
TOPIC_ID = uuid.UUID("8d7c1e0a-7f11-4a8e-9c6a-3b2f6d1e5a42")
LOCK_MS = 15000


class FakeShareBroker:
    def __init__(self) -> None:
        self.supported = {k: REQUESTS[k].VALID_VERSIONS for k in (3, 10, 18, 76, 78, 79)}
        self.requests: list[tuple[int, int, Any]] = []
        self.heartbeat_errors: collections.deque[int] = collections.deque()
        self.fetch_errors: collections.deque[int] = collections.deque()  # top-level ShareFetch errors
        self.fetch_partition_errors: collections.deque[int] = collections.deque()
        self.ack_errors: collections.deque[int] = collections.deque()  # per-partition ShareAcknowledge errors
        # Answers for fetches that may carry records: (records bytes, [(first, last, delivery count)]).
        self.fetches: collections.deque[tuple[bytes, list[tuple[int, int, int]]]] = collections.deque()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def __aenter__(self) -> "FakeShareBroker":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.server is not None
        self.server.close()
        self.drop_connections()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def drop_connections(self) -> None:
        """Close every client connection (a broker restart, a network cut: the share sessions end)."""
        for writer in self.writers:
            writer.close()
        self.writers = []

    def of(self, key: int) -> list[Any]:
        """The requests of one API received so far, oldest first."""
        return [request for k, _, request in self.requests if k == key]

    def versions(self, key: int) -> list[int]:
        return [version for k, version, _ in self.requests if k == key]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        conn = ServerConnection(supported=self.supported)
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, ApiVersionsUnsupported):
                        writer.write(b"".join(bytes(c) for c in conn.send_api_versions_unsupported(event.header, self.supported)))
                        continue
                    key = event.header.api_key
                    self.requests.append((key, event.header.api_version, event.request))
                    response = self._answer(key, event.request)
                    writer.write(b"".join(bytes(c) for c in conn.send_response(event.header, response)))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _answer(self, key: int, request: Any) -> Any:
        cls = RESPONSES[key]
        if key == 18:
            return cls(api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                 for k, (lo, hi) in sorted(self.supported.items())])
        if key == 3:
            part = cls.MetadataResponseTopic.MetadataResponsePartition(
                partition_index=0, leader_id=0, leader_epoch=0, replica_nodes=[0], isr_nodes=[0])
            return cls(brokers=[cls.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
                       cluster_id="fake", controller_id=0,
                       topics=[cls.MetadataResponseTopic(error_code=0, name=TOPIC, topic_id=TOPIC_ID, partitions=[part])])
        if key == 10:
            return cls(coordinators=[cls.Coordinator(key=k, node_id=0, host="127.0.0.1", port=self.port)
                                     for k in request.coordinator_keys])
        if key == 76:
            return self._heartbeat(cls, request)
        if key == 78:
            return self._fetch(cls, request)
        if key == 79:
            return self._acknowledge(cls, request)
        raise AssertionError(f"unexpected api key {key}")

    def _heartbeat(self, cls: Any, request: Any) -> Any:
        if self.heartbeat_errors:
            return cls(error_code=self.heartbeat_errors.popleft(), member_epoch=-1)
        if request.member_epoch == -1:
            return cls(error_code=0, member_id=request.member_id, member_epoch=-1, heartbeat_interval_ms=0)
        response = cls(error_code=0, member_id=request.member_id, member_epoch=max(request.member_epoch, 1),
                       heartbeat_interval_ms=200)
        if request.member_epoch == 0:
            response.assignment = cls.Assignment(topic_partitions=[
                cls.Assignment.TopicPartitions(topic_id=TOPIC_ID, partitions=[0])])
        return response

    def _fetch(self, cls: Any, request: Any) -> Any:
        if self.fetch_errors:
            return cls(error_code=self.fetch_errors.popleft(), responses=[])
        part_cls = cls.ShareFetchableTopicResponse.PartitionData
        part = part_cls(partition_index=0, records=b"")
        acked = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
        if self.fetch_partition_errors:
            part.error_code = self.fetch_partition_errors.popleft()
        elif self.fetches and request.max_records > 0 and request.share_session_epoch != -1:
            records, ranges = self.fetches.popleft()
            part.records = records
            part.acquired_records = [part_cls.AcquiredRecords(first_offset=f, last_offset=last, delivery_count=c)
                                     for f, last, c in ranges]
        elif not acked and request.share_session_epoch != 0:
            return cls(error_code=0, acquisition_lock_timeout_ms=LOCK_MS, responses=[])
        return cls(error_code=0, acquisition_lock_timeout_ms=LOCK_MS,
                   responses=[cls.ShareFetchableTopicResponse(topic_id=TOPIC_ID, partitions=[part])])

    def _acknowledge(self, cls: Any, request: Any) -> Any:
        code = self.ack_errors.popleft() if self.ack_errors else 0
        part_cls = cls.ShareAcknowledgeTopicResponse.PartitionData
        return cls(error_code=0, acquisition_lock_timeout_ms=LOCK_MS * 2, responses=[
            cls.ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=[
                part_cls(partition_index=p.partition_index, error_code=code) for p in t.partitions])
            for t in request.topics])
