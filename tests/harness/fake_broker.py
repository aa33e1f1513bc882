"""A fake broker for the bundled client's tests: it answers the client's requests on a real loopback socket."""

from __future__ import annotations

import asyncio
import collections
from odradek.protocol.connection import ApiVersionsUnsupported, ServerConnection
from odradek.protocol.messages import REQUESTS, RESPONSES


class FakeBroker:
    """One node (id 0) leading partition 0 of topic "t"; `produce_errors` are answered first, in order."""

    def __init__(self, supported: dict[int, tuple[int, int]] | None = None, produce_errors: list[int] | None = None):
        self.supported = supported or {k: REQUESTS[k].VALID_VERSIONS for k in (0, 1, 3, 18, 22)}
        self.produce_errors = collections.deque(produce_errors or [])
        self.calls: collections.Counter = collections.Counter()
        self.versions: dict[int, int] = {}
        self.silent: set[int] = set()
        self.offset = 0
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def __aenter__(self) -> "FakeBroker":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        for task in [t for t in asyncio.all_tasks() if t.get_name().startswith("fake-")]:
            task.cancel()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader, writer) -> None:
        asyncio.current_task().set_name("fake-conn")
        conn = ServerConnection(supported=self.supported)
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, ApiVersionsUnsupported):
                        writer.write(b"".join(bytes(c) for c in conn.send_api_versions_unsupported(event.header, self.supported)))
                        continue
                    key = event.header.api_key
                    self.calls[key] += 1
                    self.versions[key] = event.header.api_version
                    if key in self.silent:
                        continue
                    response = self._answer(key, event.request)
                    if response is not None:
                        writer.write(b"".join(bytes(c) for c in conn.send_response(event.header, response)))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _answer(self, key: int, request):
        cls = RESPONSES[key]
        if key == 18:
            return cls(api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                 for k, (lo, hi) in sorted(self.supported.items())])
        if key == 3:
            part = cls.MetadataResponseTopic.MetadataResponsePartition(
                partition_index=0, leader_id=0, leader_epoch=0, replica_nodes=[0], isr_nodes=[0])
            return cls(brokers=[cls.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)],
                       cluster_id="fake", controller_id=0,
                       topics=[cls.MetadataResponseTopic(error_code=0, name="t", partitions=[part])])
        if key == 22:
            return cls(error_code=0, producer_id=42, producer_epoch=0)
        if key == 0:
            if request.acks == 0:
                return None
            error = self.produce_errors.popleft() if self.produce_errors else 0
            base = self.offset
            if not error:
                self.offset += 1
            pr = cls.TopicProduceResponse.PartitionProduceResponse(index=0, error_code=error, base_offset=base)
            return cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=[pr])])
        raise AssertionError(f"unexpected api key {key}")
