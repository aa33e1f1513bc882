"""Capture golden request vectors from real Kafka clients.

    python -m tests.capture                      # all clients, into tests/vectors/
    python -m tests.capture --clients aiokafka --out /tmp/v

A throw-away asyncio server on 127.0.0.1 (a free port picked by the OS) records every raw request frame
and answers just well enough to carry a client through its bootstrap, a produce and a fetch:

    ApiVersions     Kafka 4.1's broker table, restricted to the versions our schemas define (Produce
                    still from v0, as real brokers advertise it: KAFKA-18659); KIP-848, telemetry and
                    share-group keys left out, as kafka-protocol.md §1.4 advises
    Metadata        one topic, "vectors", one partition led by this server (node 1), fixed topic id
                    (the drivers also ask for all topics: librdkafka's request for that has trailing bytes)
    InitProducerId  producer id 4242, epoch 0
    Produce         success, base offset 0 (acks=0: no answer)
    ListOffsets     earliest 0, otherwise the log end (the number of records produced)
    Fetch           no records (b"", never null), high watermark = log end, after a short wait
    FindCoordinator this server
    JoinGroup ...   a one-member classic group: KIP-394 (MEMBER_ID_REQUIRED, then the join), the
                    member leads, SyncGroup hands back the leader's own assignment, Heartbeat,
                    OffsetFetch (nothing committed), OffsetCommit and LeaveGroup succeed
    anything else   the response's defaults

Each client (confluent-kafka, aiokafka, kafka-python, and kcat when it is on PATH) gets its own server
and runs, each phase bounded to a few seconds: an idempotent producer sending one small message, a
consumer assigned to partition 0, and a consumer in a group that commits once and leaves (kcat's
balanced consumer is stopped with SIGTERM instead). The frames it sent are saved as

    <out>/<client>/<api>_request_v<N>_<nnn>.bin

one per (api, version) (the first seen; plus the first one with bytes after its body, if any), each a
whole frame: the int32 size, the header and the body.
Responses are encoded with Odradek's own codec; requests are recorded as received, before any parsing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import shutil
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from odradek.protocol.codec import decode_from
from odradek.protocol.connection import ApiVersionsUnsupported, ServerConnection
from odradek.protocol.errors import ProtocolError
from odradek.protocol.headers import read_request_header
from odradek.protocol.messages import BY_KEY, REQUESTS, RESPONSES
from odradek.protocol.schema import snake

log = logging.getLogger("odradek.capture")

HOST = "127.0.0.1"
NODE_ID = 1
TOPIC = "vectors"
TOPIC_ID = uuid.UUID("6f647261-6465-6b2d-7665-63746f727321")  # fixed: vectors must not vary per run
CLUSTER_ID = "odradek-vectors"
PRODUCER_ID = 4242
VECTORS_DIR = pathlib.Path(__file__).resolve().parent / "vectors"

# Kafka 4.1's broker ApiVersions table (kafka-python 3.0.12 broker_version_data.py, (4, 1)).
KAFKA_41 = {
    0: (0, 13), 1: (4, 18), 2: (1, 10), 3: (0, 13), 8: (2, 9), 9: (1, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4),
    13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2),
    22: (0, 5), 23: (2, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 1), 28: (0, 5), 29: (1, 3), 30: (1, 3),
    31: (1, 3), 32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 4), 36: (0, 2), 37: (0, 3), 38: (1, 3), 39: (1, 2),
    40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 48: (0, 1),
    49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2), 57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0),
    66: (0, 2), 68: (0, 1), 69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 1), 79: (1, 1),
    80: (0, 0), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 0), 86: (0, 0), 87: (0, 0), 90: (0, 0), 91: (0, 0),
    92: (0, 0),
}
# KIP-848 group APIs, telemetry and share groups change client behaviour when advertised (§1.4 item 3).
NOT_ADVERTISED = {68, 69, 71, 72, 76, 77, 78, 79}


def version_tables() -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """(advertised, accepted): the 4.1 table cut to our schemas; Produce is advertised from 0."""
    advertised, accepted = {}, {}
    for key, (low, high) in sorted(KAFKA_41.items()):
        cls = REQUESTS.get(key)
        if cls is None or key in NOT_ADVERTISED:
            continue
        lo, hi = max(low, cls.VALID_VERSIONS[0]), min(high, cls.VALID_VERSIONS[1])
        if lo > hi:
            continue
        accepted[key] = (lo, hi)
        advertised[key] = (0 if key == 0 else lo, hi)
    return advertised, accepted


ADVERTISED, ACCEPTED = version_tables()


# ---------------------------------------------------------------------------------------------------
# The capture server


@dataclass
class CaptureServer:
    frames: list[bytes] = field(default_factory=list)  # every request frame, in arrival order
    errors: list[str] = field(default_factory=list)
    log_end_offset: int = 0
    members: int = 0
    port: int = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._server.close()
        for task in list(getattr(self, "_tasks", ())):
            task.cancel()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks = getattr(self, "_tasks", set())
        self._tasks.add(asyncio.current_task())
        conn = ServerConnection(supported=ACCEPTED)
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                if not 0 <= size <= 1 << 20:
                    raise ProtocolError(f"frame size {size}")
                frame = head + await reader.readexactly(size)
                self.frames.append(frame)
                for event in conn.receive_data(frame):
                    if isinstance(event, ApiVersionsUnsupported):
                        chunks = conn.send_api_versions_unsupported(event.header, ADVERTISED)
                    else:
                        response = await self._answer(event.header.api_key, event.header.api_version, event.request)
                        if response is None:
                            continue
                        chunks = conn.send_response(event.header, response)
                    writer.write(b"".join(chunks))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except ProtocolError as e:
            self.errors.append(f"{type(e).__name__}: {e}")
            log.warning("capture server: %s", e)
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())

    async def _answer(self, api_key: int, version: int, req):
        resp_cls = RESPONSES[api_key]
        handler = getattr(self, f"_answer_{snake(BY_KEY[api_key].name)}", None)
        if handler is None:
            return resp_cls()
        result = handler(resp_cls, version, req)
        return await result if asyncio.iscoroutine(result) else result

    def _answer_api_versions(self, cls, version, req):
        keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ADVERTISED.items()]
        return cls(error_code=0, api_keys=keys)

    def _answer_metadata(self, cls, version, req):
        broker = cls.MetadataResponseBroker(node_id=NODE_ID, host=HOST, port=self.port)
        topics = []
        wanted = req.topics
        if wanted is None or (version == 0 and not wanted) or any(
            t.name == TOPIC or t.topic_id == TOPIC_ID for t in wanted
        ):
            partition = cls.MetadataResponseTopic.MetadataResponsePartition(
                partition_index=0, leader_id=NODE_ID, replica_nodes=[NODE_ID], isr_nodes=[NODE_ID]
            )
            topics.append(cls.MetadataResponseTopic(name=TOPIC, topic_id=TOPIC_ID, partitions=[partition]))
        for t in wanted or ():
            if t.name is not None and t.name != TOPIC:
                topics.append(cls.MetadataResponseTopic(error_code=3, name=t.name))  # UNKNOWN_TOPIC_OR_PARTITION
        return cls(brokers=[broker], cluster_id=CLUSTER_ID, controller_id=NODE_ID, topics=topics)

    def _answer_init_producer_id(self, cls, version, req):
        return cls(producer_id=PRODUCER_ID, producer_epoch=0)

    def _answer_produce(self, cls, version, req):
        responses = []
        for t in req.topic_data:
            parts = [
                cls.TopicProduceResponse.PartitionProduceResponse(index=p.index, base_offset=0, log_start_offset=0)
                for p in t.partition_data
            ]
            responses.append(cls.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts))
            self.log_end_offset = max(self.log_end_offset, 1)
        return None if req.acks == 0 else cls(responses=responses)

    def _answer_list_offsets(self, cls, version, req):
        topics = []
        for t in req.topics:
            parts = [
                cls.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                    partition_index=p.partition_index,
                    timestamp=-1,
                    offset=0 if p.timestamp == -2 else self.log_end_offset,
                    old_style_offsets=[0] if version == 0 else [],
                )
                for p in t.partitions
            ]
            topics.append(cls.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return cls(topics=topics)

    async def _answer_fetch(self, cls, version, req):
        # An empty fetch waits as a broker would (a little: captures should be quick), so that a
        # consumer does not spin.
        await asyncio.sleep(min(max(req.max_wait_ms, 0), 200) / 1000)
        responses = []
        for t in req.topics:
            parts = [
                cls.FetchableTopicResponse.PartitionData(
                    partition_index=p.partition,
                    high_watermark=self.log_end_offset,
                    last_stable_offset=self.log_end_offset,
                    log_start_offset=0,
                    aborted_transactions=[],
                    records=b"",
                )
                for p in t.partitions
            ]
            responses.append(cls.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=parts))
        return cls(responses=responses)

    # -- a one-member classic consumer group --

    def _answer_join_group(self, cls, version, req):
        if not req.member_id and version >= 4:
            # KIP-394: the first join gets an id to join again with.
            self.members += 1
            return cls(error_code=79, member_id=f"member-{self.members}", protocol_name="")
        member_id = req.member_id or f"member-{self.members + 1}"
        chosen = req.protocols[0] if req.protocols else None
        member = cls.JoinGroupResponseMember(
            member_id=member_id, group_instance_id=req.group_instance_id, metadata=chosen.metadata if chosen else b""
        )
        return cls(
            generation_id=1, protocol_type=req.protocol_type, protocol_name=chosen.name if chosen else "",
            leader=member_id, member_id=member_id, members=[member],
        )

    def _answer_sync_group(self, cls, version, req):
        mine = [a.assignment for a in req.assignments if a.member_id == req.member_id]
        return cls(protocol_type=req.protocol_type, protocol_name=req.protocol_name, assignment=mine[0] if mine else b"")

    def _answer_heartbeat(self, cls, version, req):
        return cls()

    def _answer_leave_group(self, cls, version, req):
        members = [
            cls.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id) for m in req.members
        ]
        return cls(members=members)

    def _answer_offset_fetch(self, cls, version, req):
        Topic, Group = getattr(cls, "OffsetFetchResponseTopic"), getattr(cls, "OffsetFetchResponseGroup")
        if version <= 7:
            topics = [
                Topic(name=t.name, partitions=[
                    Topic.OffsetFetchResponsePartition(partition_index=i, committed_offset=-1, metadata="")
                    for i in t.partition_indexes
                ])
                for t in req.topics or ()
            ]
            return cls(topics=topics)
        groups = []
        for g in req.groups:
            topics = [
                Group.OffsetFetchResponseTopics(name=t.name, topic_id=t.topic_id, partitions=[
                    Group.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
                        partition_index=i, committed_offset=-1, metadata=""
                    )
                    for i in t.partition_indexes
                ])
                for t in g.topics or ()
            ]
            groups.append(Group(group_id=g.group_id, topics=topics))
        return cls(groups=groups)

    def _answer_offset_commit(self, cls, version, req):
        Topic = cls.OffsetCommitResponseTopic
        topics = [
            Topic(name=t.name, topic_id=t.topic_id, partitions=[
                Topic.OffsetCommitResponsePartition(partition_index=p.partition_index) for p in t.partitions
            ])
            for t in req.topics
        ]
        return cls(topics=topics)

    def _answer_find_coordinator(self, cls, version, req):
        if version <= 3:
            return cls(node_id=NODE_ID, host=HOST, port=self.port)
        coordinators = [cls.Coordinator(key=k, node_id=NODE_ID, host=HOST, port=self.port) for k in req.coordinator_keys]
        return cls(coordinators=coordinators)


class ServerThread:
    """A CaptureServer on its own event loop in a thread, so blocking clients can run beside it."""

    def __init__(self):
        self.server = CaptureServer()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="capture-server", daemon=True)

    def __enter__(self) -> CaptureServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self.server

    def __exit__(self, *exc) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


# ---------------------------------------------------------------------------------------------------
# Client drivers: each produces one small message and consumes briefly; every call is bounded.

PAYLOAD = b"vector-0"
GROUP = "vectors-group"


def drive_confluent_kafka(bootstrap: str, seconds: float) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    common = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000, "log_level": 3}
    producer = Producer({**common, "enable.idempotence": True, "message.timeout.ms": int(seconds * 1000), "linger.ms": 0})
    producer.produce(TOPIC, key=b"k", value=PAYLOAD)
    producer.flush(seconds)
    producer.list_topics(timeout=seconds)  # an all-topics Metadata request
    consumer = Consumer({
        **common, "group.id": "vectors", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
        "auto.offset.reset": "earliest",
    })
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    group = Consumer({
        **common, "group.id": GROUP, "enable.auto.commit": False, "fetch.wait.max.ms": 100,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
    })
    try:
        group.subscribe([TOPIC])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not group.assignment():
            group.poll(0.2)
        if group.assignment():
            group.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        while time.monotonic() < deadline:
            group.poll(0.2)
    finally:
        group.close()


def drive_aiokafka(bootstrap: str, seconds: float) -> None:
    async def run():
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, request_timeout_ms=5000)
        await asyncio.wait_for(producer.start(), seconds)
        try:
            await asyncio.wait_for(producer.send_and_wait(TOPIC, PAYLOAD, key=b"k"), seconds)
        finally:
            await asyncio.wait_for(producer.stop(), seconds)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
            fetch_max_wait_ms=100, request_timeout_ms=5000,
        )
        await asyncio.wait_for(consumer.start(), seconds)
        try:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            await asyncio.wait_for(consumer.seek_to_beginning(tp), seconds)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await consumer.getmany(timeout_ms=200)
        finally:
            await asyncio.wait_for(consumer.stop(), seconds)
        group = AIOKafkaConsumer(
            TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=100, request_timeout_ms=5000,
            session_timeout_ms=6000, heartbeat_interval_ms=300,
        )
        await asyncio.wait_for(group.start(), seconds)
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not group.assignment():
                await group.getmany(timeout_ms=200)
            if group.assignment():
                await asyncio.wait_for(group.commit({TopicPartition(TOPIC, 0): 1}), seconds)
            while time.monotonic() < deadline:
                await group.getmany(timeout_ms=200)
        finally:
            await asyncio.wait_for(group.stop(), seconds)

    asyncio.run(run())


def drive_kafka_python(bootstrap: str, seconds: float) -> None:
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    timeout_ms = int(seconds * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, max_block_ms=timeout_ms)
    try:
        producer.send(TOPIC, key=b"k", value=PAYLOAD).get(timeout=seconds)
    finally:
        producer.close(timeout=seconds)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
        fetch_max_wait_ms=100, request_timeout_ms=timeout_ms,
    )
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    group = KafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, request_timeout_ms=timeout_ms,
        session_timeout_ms=6000, heartbeat_interval_ms=300,
    )
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not group.assignment():
            group.poll(timeout_ms=200)
        if group.assignment():
            group.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)})
        while time.monotonic() < deadline:
            group.poll(timeout_ms=200)
    finally:
        group.close()


def kcat_binary() -> str | None:
    return shutil.which("kcat") or shutil.which("kafkacat")


def drive_kcat(bootstrap: str, seconds: float) -> None:
    kcat = kcat_binary()
    assert kcat is not None
    subprocess.run(
        [kcat, "-b", bootstrap, "-P", "-t", TOPIC, "-p", "0", "-X", "enable.idempotence=true"],
        input=PAYLOAD + b"\n", timeout=seconds + 5, check=False, capture_output=True,
    )
    subprocess.run([kcat, "-b", bootstrap, "-L"], timeout=seconds + 5, check=False, capture_output=True)
    # From the end: the capture server's fetches hold no records, so a consumer starting below the
    # high watermark would never see end-of-partition (-e) and exit.
    subprocess.run(
        [kcat, "-b", bootstrap, "-C", "-t", TOPIC, "-p", "0", "-o", "end", "-e"],
        timeout=seconds + 5, check=False, capture_output=True,
    )
    # A balanced consumer never exits on its own: stop it after `seconds` with SIGTERM, on which kcat
    # commits and leaves the group.
    group = subprocess.Popen(
        [kcat, "-b", bootstrap, "-G", GROUP, "-q", "-X", "heartbeat.interval.ms=300", TOPIC],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        group.wait(seconds)
    except subprocess.TimeoutExpired:
        group.terminate()
        try:
            group.wait(5)
        except subprocess.TimeoutExpired:
            group.kill()
            group.wait()


CLIENTS = {
    "confluent_kafka": drive_confluent_kafka,
    "aiokafka": drive_aiokafka,
    "kafka_python": drive_kafka_python,
    "kcat": drive_kcat,
}


def available_clients() -> list[str]:
    return [c for c in CLIENTS if c != "kcat" or kcat_binary() is not None]


# ---------------------------------------------------------------------------------------------------
# Capture and save


def capture(client: str, seconds: float = 3.0) -> tuple[list[bytes], list[str]]:
    """Run one client against a fresh capture server. Returns (frames, problems)."""
    problems: list[str] = []
    with ServerThread() as server:
        bootstrap = f"{HOST}:{server.port}"
        # A driver that hangs inside a C library cannot be killed from Python: give it its own thread
        # and stop waiting after a bound.
        outcome: list[BaseException] = []

        def run():
            try:
                CLIENTS[client](bootstrap, seconds)
            except BaseException as e:  # reported, not raised: partial captures are still useful
                outcome.append(e)

        worker = threading.Thread(target=run, name=f"capture-{client}", daemon=True)
        worker.start()
        bound = seconds * 6 + 10
        worker.join(bound)
        if worker.is_alive():
            problems.append(f"{client}: did not finish within {bound:.0f}s")
        problems.extend(f"{client}: {type(e).__name__}: {e}" for e in outcome)
        problems.extend(f"{client}: server: {e}" for e in server.errors)
        return list(server.frames), problems


def vector_name(frame: bytes, nnn: int) -> str:
    api_key, version = struct.unpack_from(">hh", frame, 4)
    api = BY_KEY.get(api_key)
    name = snake(api.name) if api is not None else f"api{api_key}"
    return f"{name}_request_v{version}_{nnn:03d}.bin"


def trailing_bytes(frame: bytes) -> bytes:
    """What is left in a request frame after its body (b"" for a well-formed frame)."""
    api_key, version = struct.unpack_from(">hh", frame, 4)
    try:
        _, pos = read_request_header(memoryview(frame)[4:])
        _, end = decode_from(REQUESTS[api_key], memoryview(frame)[4:], version, pos)
    except (ProtocolError, KeyError):
        return b""
    return frame[4 + end :]


def select(frames: list[bytes], per_version: int = 1) -> dict[str, bytes]:
    """Keep the first `per_version` distinct frames of each (api, version), named for saving.

    The first frame of an (api, version) that carries bytes after its body is kept as well: such
    frames are why ServerConnection ignores trailing bytes (librdkafka's all-topics Metadata).
    """
    chosen: dict[tuple[int, int], list[bytes]] = {}
    with_trailing: set[tuple[int, int]] = set()
    for frame in frames:
        key = struct.unpack_from(">hh", frame, 4)
        kept = chosen.setdefault(key, [])
        # Frames differing only in correlation id are the same request.
        if any(k[12:] == frame[12:] for k in kept):
            continue
        if len(kept) < per_version or (key not in with_trailing and trailing_bytes(frame)):
            kept.append(frame)
        if trailing_bytes(frame):
            with_trailing.add(key)
    return {vector_name(f, i): f for frames_ in chosen.values() for i, f in enumerate(frames_)}


def client_version(client: str) -> str:
    if client == "confluent_kafka":
        import confluent_kafka

        return f"confluent-kafka {confluent_kafka.__version__}, librdkafka {confluent_kafka.libversion()[0]}"
    if client == "aiokafka":
        import aiokafka

        return f"aiokafka {aiokafka.__version__}"
    if client == "kafka_python":
        import kafka

        return f"kafka-python {kafka.__version__}"
    kcat = kcat_binary()
    out = subprocess.run([kcat, "-V"], capture_output=True, text=True, timeout=10, check=False) if kcat else None
    lines = [ln for ln in (out.stdout if out else "").splitlines() if ln.startswith("Version")]
    return f"kcat {lines[0].split(' builtin.features')[0].removeprefix('Version ')})" if lines else "kcat"


def save(client: str, vectors: dict[str, bytes], out: pathlib.Path) -> pathlib.Path:
    """Replace the client's vectors; VERSION records which client build sent them."""
    directory = out / client
    if directory.exists():
        for old in directory.glob("*.bin"):
            old.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    for name, frame in sorted(vectors.items()):
        (directory / name).write_bytes(frame)
    (directory / "VERSION").write_text(client_version(client) + "\n")
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=VECTORS_DIR)
    parser.add_argument("--clients", nargs="*", default=None, help=f"default: all available of {list(CLIENTS)}")
    parser.add_argument("--seconds", type=float, default=3.0, help="bound on each client phase")
    parser.add_argument("--per-version", type=int, default=1, help="distinct frames kept per (api, version)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    clients = args.clients or available_clients()
    status = 0
    for client in clients:
        if client == "kcat" and kcat_binary() is None:
            print("kcat: not on PATH, skipped")
            continue
        frames, problems = capture(client, args.seconds)
        vectors = select(frames, args.per_version)
        directory = save(client, vectors, args.out)
        print(f"{client}: {len(frames)} frames, {len(vectors)} vectors in {directory}")
        for name in sorted(vectors):
            print(f"    {name}  ({len(vectors[name])} bytes)")
        for p in problems:
            print(f"    problem: {p}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
