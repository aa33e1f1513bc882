"""The null sink: the ceiling a Python asyncio Kafka server can reach on this machine.

A minimal server that answers ApiVersions, Metadata (every topic asked for exists, with N partitions led
by itself), InitProducerId and Produce. Produce is answered from the record batch headers only: it walks
the batches to count records and hand out offsets, and stores nothing. It uses the same codec
(`odradek.protocol`) and the same event loop (uvloop) as the broker, so the gap between the two is what
the broker does beyond decoding a request and encoding a response: the network pipeline, handlers,
validation, storage.

With `--canned` it is the latency section's floor instead: after answering a Produce version once, it
answers every later Produce request of that version with the same response bytes, only the correlation id
changed, without decoding anything. The answer is wrong (every request gets the first one's offsets), so
it serves only a non-idempotent producer measuring latency; what it measures is what the client, the
loopback network and waking an idle server core cost before any server does any work.

With `--store DIR` it also writes what it is sent: each partition's records are appended to a file of
its own in DIR with one `pwrite` per partition and request, and the page cache of all but the last 32 MiB
of each file is handed back as it grows (the broker's default `log.cache.window.bytes`, whose reason is
in storage/log_manager.py). No CRC check, no index, no producer state: the ceiling of a server that
stores its log in files on this machine, beside the plain sink that stores nothing (bench/PROFILE.md,
issue 30 round three: storing is most of what separates the broker from the plain sink in the 100-byte
produce cells).

Run it on its own:

    python -m bench.null_sink --port 0 --partitions 8 [--canned | --store DIR]

It prints `null sink listening on PLAINTEXT://127.0.0.1:<port>` and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import struct
import sys
import uuid

from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.connection import DEFAULT_MAX_FRAME_BYTES, ApiVersionsUnsupported, ServerConnection
from odradek.protocol.errors import ProtocolError
from odradek.protocol.messages import (
    ApiVersionsResponse,
    InitProducerIdResponse,
    MetadataResponse,
    ProduceResponse,
)

API_PRODUCE, API_METADATA, API_API_VERSIONS, API_INIT_PRODUCER_ID = 0, 3, 18, 22

API_FETCH, API_FIND_COORDINATOR = 1, 10

# What the sink accepts, and what it advertises: the same ranges as the broker, so that librdkafka picks
# the same request versions and the same features against both. librdkafka enables features from the
# ApiVersions table alone: record batches (magic 2) need Produce v3 *and Fetch v4*, LZ4 needs
# FindCoordinator. Without those two in the table it falls back to magic-0 message sets and no LZ4, which
# would make the "ceiling" measure a different wire format. So they are advertised, though not served:
# such a request closes the connection (the benchmark's producers never send one).
ACCEPTED = {API_PRODUCE: (3, 13), API_METADATA: (0, 13), API_API_VERSIONS: (0, 4), API_INIT_PRODUCER_ID: (0, 5)}
ADVERTISED = {**ACCEPTED, API_PRODUCE: (0, 13), API_FETCH: (4, 18), API_FIND_COORDINATOR: (0, 6)}

_BATCH_LEN = struct.Struct(">i")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
INT32_MIN = -(2**31)
CORRUPT_MESSAGE = 2
CLUSTER_ID = "odradek-null-sink"
NODE_ID = 1

TopicResponse = ProduceResponse.TopicProduceResponse
PartitionResponse = TopicResponse.PartitionProduceResponse
MBroker = MetadataResponse.MetadataResponseBroker
MTopic = MetadataResponse.MetadataResponseTopic
MPartition = MTopic.MetadataResponsePartition


class LegacyFormatError(ProtocolError):
    pass


def count_records(records) -> int:
    """Records in a run of magic-2 batches, from the headers only (lastOffsetDelta + 1 per batch)."""
    n = 0
    pos = 0
    end = len(records)
    while end - pos >= 61:
        if records[pos + 16] != 2:
            raise LegacyFormatError(f"record batch magic {records[pos + 16]}: only magic 2 is taken")
        (batch_length,) = _BATCH_LEN.unpack_from(records, pos + 8)
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + 23)
        n += last_delta + 1
        pos += batch_length + 12
    return n


WINDOW_BYTES = 32 * 1024 * 1024  # the broker's default log.cache.window.bytes


class _Store:
    """`--store`: one append-only file per partition, written with `pwrite`, its page cache kept to the
    last WINDOW_BYTES as the broker keeps a segment's (Log._maybe_release_cache)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.files: dict[tuple[str, int], list[int]] = {}  # partition -> [fd, size, released up to]

    def append(self, key: tuple[str, int], records) -> None:
        entry = self.files.get(key)
        if entry is None:
            path = os.path.join(self.directory, f"{key[0]}-{key[1]}.log")
            entry = self.files[key] = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644), 0, 0]
        fd, size, released = entry
        view = memoryview(records)
        while view:
            written = os.pwrite(fd, view, size)
            view = view[written:]
            size += written
        entry[1] = size
        if size - released > 2 * WINDOW_BYTES:
            entry[2] = (size - WINDOW_BYTES) & ~4095
            os.posix_fadvise(fd, 0, entry[2], os.POSIX_FADV_DONTNEED)


class SinkState:
    def __init__(self, partitions: int, host: str, store: str | None = None):
        self.store = _Store(store) if store else None
        self.partitions = partitions
        self.host = host
        self.port = 0
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.names_by_id: dict[uuid.UUID, str] = {}
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.next_producer_id = 1000
        self.records = 0
        self.warned = False
        self.api_versions = ApiVersionsResponse(
            error_code=0, throttle_time_ms=0,
            api_keys=[ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(ADVERTISED.items())],
        )

    def topic_id(self, name: str) -> uuid.UUID:
        tid = self.topic_ids.get(name)
        if tid is None:
            tid = uuid.uuid5(uuid.NAMESPACE_URL, "odradek-null-sink/" + name)
            self.topic_ids[name] = tid
            self.names_by_id[tid] = name
        return tid

    def metadata_topic(self, name: str) -> MTopic:
        parts = [
            MPartition(error_code=0, partition_index=i, leader_id=NODE_ID, leader_epoch=0,
                       replica_nodes=[NODE_ID], isr_nodes=[NODE_ID], offline_replicas=[])
            for i in range(self.partitions)
        ]
        return MTopic(error_code=0, name=name, topic_id=self.topic_id(name), is_internal=False, partitions=parts,
                      topic_authorized_operations=INT32_MIN)

    def handle(self, api_key: int, version: int, request):
        if api_key == API_PRODUCE:
            return self.produce(version, request)
        if api_key == API_METADATA:
            if request.topics is None or (version == 0 and not request.topics):
                names = sorted(self.topic_ids)
            else:
                names = [t.name if t.name is not None else self.names_by_id.get(t.topic_id, "") for t in request.topics]
            return MetadataResponse(
                throttle_time_ms=0, brokers=[MBroker(node_id=NODE_ID, host=self.host, port=self.port, rack=None)],
                cluster_id=CLUSTER_ID, controller_id=NODE_ID, topics=[self.metadata_topic(n) for n in names if n],
                cluster_authorized_operations=INT32_MIN, error_code=0,
            )
        if api_key == API_API_VERSIONS:
            return self.api_versions
        if api_key == API_INIT_PRODUCER_ID:
            pid = self.next_producer_id
            self.next_producer_id += 1
            return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
        raise ProtocolError(f"api key {api_key} is not served by the null sink")

    def produce(self, version: int, request):
        out = []
        offsets = self.next_offsets
        for topic in request.topic_data:
            name = self.names_by_id.get(topic.topic_id, "") if version >= 13 else topic.name
            parts = []
            for p in topic.partition_data:
                key = (name, p.index)
                base = offsets.get(key, 0)
                try:
                    n = count_records(p.records) if p.records is not None else 0
                except LegacyFormatError as e:  # as the broker: magic 0/1 is refused
                    if not self.warned:
                        print(f"null sink: {e}", file=sys.stderr, flush=True)
                        self.warned = True
                    parts.append(PartitionResponse(index=p.index, error_code=CORRUPT_MESSAGE, base_offset=-1))
                    continue
                offsets[key] = base + n
                self.records += n
                if self.store is not None and n:
                    self.store.append(key, p.records)
                parts.append(PartitionResponse(index=p.index, error_code=0, base_offset=base, log_append_time_ms=-1, log_start_offset=0))
            out.append(TopicResponse(name=topic.name, topic_id=topic.topic_id if version >= 13 else ZERO_UUID, partition_responses=parts))
        if request.acks == 0:
            return None
        return ProduceResponse(responses=out, throttle_time_ms=0)


class SinkProtocol(asyncio.Protocol):
    def __init__(self, state: SinkState):
        self.state = state
        self.conn = ServerConnection(supported=ACCEPTED)
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
            for event in events:
                if isinstance(event, ApiVersionsUnsupported):
                    self.transport.writelines(self.conn.send_api_versions_unsupported(event.header, ADVERTISED))
                    continue
                header = event.header
                response = self.state.handle(header.api_key, header.api_version, event.request)
                if response is not None:
                    self.answered(header, self.conn.send_response(header, response))
        except ProtocolError:
            self.transport.close()

    def answered(self, header, chunks: list) -> None:
        self.transport.writelines(chunks)


_CORRELATION = slice(8, 12)  # in a request frame: size int32, api key int16, version int16, correlation id int32


class CannedProtocol(SinkProtocol):
    """The floor (`--canned`): a Produce request of a version answered once before gets that answer's bytes
    back with its own correlation id; everything else goes through the null sink. Frames are cut here, so
    that a canned request is never decoded."""

    def __init__(self, state: SinkState):
        super().__init__(state)
        self.pending = bytearray()
        self.canned: dict[int, bytearray] = {}  # Produce version -> a whole response frame

    def data_received(self, data: bytes) -> None:
        pending = self.pending
        pending += data
        start = 0
        while len(pending) - start >= 12:
            (size,) = _SIZE.unpack_from(pending, start)
            if not 8 <= size <= DEFAULT_MAX_FRAME_BYTES:
                self.transport.close()
                return
            end = start + 4 + size
            if end > len(pending):
                break
            api_key, version = _KEY_VERSION.unpack_from(pending, start + 4)
            reply = self.canned.get(version) if api_key == API_PRODUCE else None
            if reply is None:
                super().data_received(bytes(pending[start:end]))
            else:
                reply[4:8] = pending[start + 8 : start + 12]
                self.transport.write(bytes(reply))
            start = end
        del pending[:start]

    def answered(self, header, chunks: list) -> None:
        if header.api_key == API_PRODUCE:
            self.canned[header.api_version] = bytearray(b"".join(chunks))
        super().answered(header, chunks)


async def serve(host: str, port: int, partitions: int, ready=None, canned: bool = False, store: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    state = SinkState(partitions, host, store)
    protocol = CannedProtocol if canned else SinkProtocol
    server = await loop.create_server(lambda: protocol(state), host, port, reuse_address=True, backlog=512)
    state.port = server.sockets[0].getsockname()[1]
    if ready is not None:
        ready(state.port)
    else:
        print(f"null sink listening on PLAINTEXT://{host}:{state.port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    try:
        await stop.wait()
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.null_sink", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--canned", action="store_true", help="the latency floor: repeat the first Produce answer (see above)")
    parser.add_argument("--store", metavar="DIR", help="also append every partition's records to a file in DIR (see above)")
    args = parser.parse_args(argv)
    if args.canned and args.store:
        parser.error("--canned answers without reading: it cannot --store")
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    try:
        runner(serve(args.host, args.port, args.partitions, canned=args.canned, store=args.store))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
