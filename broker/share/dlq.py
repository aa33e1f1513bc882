"""Dead-letter queues for share groups (KIP-1191, Kafka 4.4): the share-partition leader's copy of the records
it archives for a dead-letter cause onto the group's DLQ topic.

What goes, and where
--------------------
A share group names its DLQ topic with the GROUP config `errors.deadletterqueue.topic.name` (blank, the
default: no DLQ). Records archived because a member REJECTed them, or because their delivery count reached
the limit (`share.delivery.count.limit`), are written there; gaps never are (replication/share/partition.py
notes them as `DeadLetter` ranges). As Kafka 4.4's ShareGroupDLQStateManager writes them, each archived
offset becomes one DLQ record:

* headers (all UTF-8 text): `__dlq.errors.topic` (the source topic), `__dlq.errors.partition`,
  `__dlq.errors.offset` and `__dlq.errors.delivery.count` (decimal), `__dlq.errors.group` (the group id)
  and `__dlq.errors.message` ("Offset rejected by client." or "Offset delivery count exceeded the
  threshold.");
* the source record's key and value when the group sets `errors.deadletterqueue.copy.record.enable=true`
  (default false: headers only; an offset the log no longer holds gets headers only too). Its own headers
  and timestamp are not copied; the DLQ record's timestamp is the time of the copy (CreateTime);
* partition: the source partition modulo the DLQ topic's partition count, so one source partition's dead
  letters stay in order on one DLQ partition.

Which topic may be one (Kafka's rules, in its order; a refusal is logged with Kafka's text and counted):
the name must not start with `__` (internal topics; the group config refuses it already); an existing topic
must carry the topic config `errors.deadletterqueue.group.enable=true` (its owner opts in); a missing topic
is created when `errors.deadletterqueue.auto.create.topics.enable=true` (default false), with the cluster's
default partitions and replication factor, that opt-in and CreateTime set, as Kafka creates it, and is
otherwise refused ("DLQ topic does not exist"); and the name must start with the broker's
`errors.deadletterqueue.topic.name.prefix` (default `dlq.`; "" lifts the rule). The broker writes as itself (its inter-broker principal),
as Kafka's broker does: the group's members need no WRITE on the DLQ topic, which is why the topic-side
opt-in and the name prefix exist (KIP-1191's security section).

The order of the writes, and what a crash does
----------------------------------------------
The share-partition manager (manager.py `_persist`) takes the dead letters of a state change and writes
them here BEFORE it persists the state that archives them: the state write that makes a record ARCHIVED
for good never precedes its DLQ copy. A crash between the two leaves the record unarchived in the persisted
state (acquired or available with its old count), so the next leader delivers it again, and if it is
rejected again or reaches the limit again it is copied again: at least once, never lost. Kafka 4.4 is at
least once too (its DLQ write is a plain Produce with no producer id, retried; a record waits for it in the
ARCHIVING state, RecordState 3), so a DLQ reader must expect duplicates, which the headers identify (topic,
partition, offset). The copy goes through the broker's own produce path: a ProduceRequest (acks=all,
no compression, no producer id, as Kafka's) to the DLQ partition's leader over the inter-broker listener,
this broker included (one path whoever leads the DLQ partition), so the DLQ partition's min.insync.replicas
and its leader's validation apply as to any write.

A write that cannot succeed (a refused topic, an authorization or size error) or that still fails after
retrying retriable errors for `request.timeout.ms` (Kafka's DLQ manager also gives up after bounded retries:
"Exhausted max retries to produce to DLQ topic") is logged once with its cause and counted, and the records
are archived anyway: holding them until the DLQ works would let a broken DLQ stall the group's partition
(the head-of-line concern of KIP-1316), which share groups exist to avoid. Nothing acknowledged is at
stake: these are records the group gave up on, and the log still holds them until retention.

Batch level: only the archived offsets' batches are read (and decoded) and only when a copy is asked for;
without a copy nothing is read from the log at all.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from odradek.metadata.image import MetadataImage
from odradek.metadata.records import ConfigResourceType
from odradek.protocol.errors import ErrorCode, error_code_of
from odradek.protocol.messages import ProduceRequest
from odradek.protocol.records import Record, build_batch, iter_batches, iter_records
from odradek.replication.share import DeadLetter
from odradek.storage.names import TopicPartition

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..controller_channel import ControllerChannel
    from ..txn_wiring import MarkerSender
    from odradek.metadata.publisher import MetadataPublisher

__all__ = [
    "DLQ_HEADERS", "DeadLetterQueue", "share_dead_letter_queue", "DlqResult", "dead_letter_records", "dlq_partition", "dlq_topic_problem",
    "read_source_records",
]

log = structlog.get_logger("odradek.share.dlq")

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
DLQ_HEADERS = (HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET, HEADER_GROUP, HEADER_DELIVERY_COUNT, HEADER_MESSAGE)

TOPIC_ENABLE_CONFIG = "errors.deadletterqueue.group.enable"
PRODUCE_VERSION = 12  # the last Produce version naming topics by name (13 names them by id)
_RECORD_OVERHEAD = 64  # bytes a DLQ record costs besides its key, value and header text (varints, lengths)
_MAX_UNCOMPRESSED = 64 * 1024 * 1024
CREATE_RETRY_MS = 5000  # a DLQ topic's creation is asked again at most this often while it does not appear

Send = Callable[[int, Any, int], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class DlqResult:
    """What one write did: records written, and the cause when it failed (None when it succeeded)."""

    written: int
    error: str | None = None


def dlq_topic_problem(group_id: str, topic: str, image: MetadataImage, prefix: str,
                      auto_create: bool) -> str | None:
    """Why `topic` cannot be `group_id`'s DLQ topic now, in Kafka's words and order
    (ShareGroupDLQStateManager.validateDlqTopic); None when it can (it may still have to be created)."""
    if not topic:
        return f"Configured DLQ topic name in share group: {group_id} is empty."
    if topic.startswith("__"):
        return f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {topic}."
    if topic in image.topics_by_name:
        enabled = image.configs.get((ConfigResourceType.TOPIC, topic), {}).get(TOPIC_ENABLE_CONFIG, "false")
        if enabled.strip().lower() != "true":
            return f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, topic: {topic}."
    elif not auto_create:
        return (f"DLQ topic does not exist and auto create is disabled on cluster for share group: {group_id}, "
                f"topic: {topic}.")
    if prefix and not topic.startswith(prefix):
        return (f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group_id}, "
                f"topic: {topic}, prefix: {prefix}.")
    return None


def dlq_partition(source_partition: int, dlq_partitions: int) -> int:
    """The DLQ partition a source partition's dead letters go to (Kafka's: the source partition modulo the
    DLQ topic's partition count), so they keep their order."""
    return source_partition % dlq_partitions


def dead_letter_records(group_id: str, tp: TopicPartition, letters: Iterable[DeadLetter], now_ms: int,
                        sources: Mapping[int, Record] | None = None) -> list[tuple]:
    """The DLQ records for `letters`, one per archived offset, as (key, value, headers, timestamp) for
    `build_batch`: Kafka's headers, and the source record's key and value when `sources` holds it."""
    out: list[tuple] = []
    topic = tp.topic.encode()
    partition = str(tp.partition).encode()
    group = group_id.encode()
    for letter in letters:
        count = str(letter.delivery_count).encode()
        message = letter.cause.message.encode()
        for offset in range(letter.first_offset, letter.last_offset + 1):
            headers = [(HEADER_TOPIC, topic), (HEADER_PARTITION, partition), (HEADER_OFFSET, str(offset).encode()),
                       (HEADER_GROUP, group), (HEADER_DELIVERY_COUNT, count), (HEADER_MESSAGE, message)]
            source = sources.get(offset) if sources is not None else None
            key, value = (source.key, source.value) if source is not None else (None, None)
            out.append((key, value, headers, now_ms))
    return out


def read_source_records(plog: Any, letters: Sequence[DeadLetter], end_offset: int) -> dict[int, Record]:
    """The source records at the letters' offsets, read from the partition's log (`Log.read`): only the
    batches holding those offsets are read and decoded. Offsets the log no longer holds (retention, a
    compacted record) are left out; the DLQ record then carries the headers only, as Kafka's does."""
    wanted = sorted((letter.first_offset, letter.last_offset) for letter in letters)
    found: dict[int, Record] = {}
    for first, last in wanted:
        offset = max(first, plog.log_start_offset)
        while offset <= last and offset < end_offset:
            info = plog.read(offset, 1, max_offset=end_offset, min_one_message=True)
            if not info.regions:
                break
            region = info.regions[0]
            data = os.pread(region.fd, region.length, region.position)
            next_offset = offset
            for pos, header in iter_batches(data):
                next_offset = header.next_offset
                if header.is_control:
                    continue
                for record in iter_records(memoryview(data)[pos:pos + header.size], max_uncompressed_bytes=_MAX_UNCOMPRESSED):
                    if first <= record.offset <= last:
                        found[record.offset] = record
                break  # one batch per read: the reads stay on the letters' batches
            if next_offset <= offset:
                break
            offset = next_offset
    return found


def _chunks(records: list[tuple], max_bytes: int) -> list[list[tuple]]:
    """The records cut into batches of at most about `max_bytes` (the DLQ topic's max.message.bytes), at
    least one record each (a single record over the limit is the leader's to refuse: RECORD_TOO_LARGE)."""
    chunks: list[list[tuple]] = []
    current: list[tuple] = []
    size = 0
    for record in records:
        key, value, headers, _ = record
        n = _RECORD_OVERHEAD + len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers)
        if current and size + n > max_bytes:
            chunks.append(current)
            current, size = [], 0
        current.append(record)
        size += n
    if current:
        chunks.append(current)
    return chunks


class DeadLetterQueue:
    """Writes share-partitions' dead letters to their groups' DLQ topics (see the module docstring).

    `image` is the broker's metadata image, `send(node_id, request, version)` a request over the inter-broker
    listener, `create_topic(name)` asks the controller for a DLQ topic (auto-create), `clock` the broker's
    now_ms. Figures: `records_written`, `failures`."""

    def __init__(self, *, image: Callable[[], MetadataImage], send: Send, clock: Callable[[], int],
                 prefix: str = "dlq.", auto_create: bool = False,
                 create_topic: Callable[[str], None] | None = None, deadline_ms: int = 30_000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000) -> None:
        self._image = image
        self._send = send
        self._clock = clock
        self.prefix = prefix
        self.auto_create = auto_create
        self._create_topic = create_topic
        self.deadline_ms = deadline_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.records_written = 0
        self.failures = 0
        self._missing_logged: set[tuple[str, str]] = set()
        self._create_asked: dict[str, int] = {}  # DLQ topic -> when its creation was last asked

    async def write(self, group_id: str, tp: TopicPartition, letters: Sequence[DeadLetter], dlq_topic: str,
                    *, copy_record: bool = False, log_reader: Callable[[], tuple[Any, int] | None] | None = None) -> DlqResult:
        """Copy `letters` (of `group_id` on `tp`) to `dlq_topic`; with `copy_record`, `log_reader()` gives the
        source partition's log and the offset to read below (its high watermark). Never raises: a failure
        is logged once with its cause, counted, and answered in the result."""
        count = sum(letter.last_offset - letter.first_offset + 1 for letter in letters)
        if not count:
            return DlqResult(0)
        try:
            return await self._write(group_id, tp, letters, dlq_topic, count, copy_record, log_reader)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug or an unexpected answer: logged, never a crash
            return self._failed(group_id, tp, dlq_topic, count, f"unexpected error: {e!r}")

    async def _write(self, group_id: str, tp: TopicPartition, letters: Sequence[DeadLetter], dlq_topic: str,
                     count: int, copy_record: bool, log_reader) -> DlqResult:
        deadline = self._clock() + self.deadline_ms
        problem = dlq_topic_problem(group_id, dlq_topic, self._image(), self.prefix, self.auto_create)
        if problem is not None:
            if dlq_topic not in self._image().topics_by_name and (group_id, dlq_topic) not in self._missing_logged:
                self._missing_logged.add((group_id, dlq_topic))
                log.warning("share group DLQ topic is missing", group_id=group_id, dlq_topic=dlq_topic,
                            auto_create=self.auto_create)
            return self._failed(group_id, tp, dlq_topic, count, problem)
        sources: dict[int, Record] | None = None
        if copy_record and log_reader is not None:
            where = log_reader()
            if where is not None:
                try:
                    sources = read_source_records(where[0], letters, where[1])
                except Exception as e:  # noqa: BLE001 - a record unreadable: headers only, as Kafka does
                    log.warning("share DLQ: source records unreadable; writing the headers only", group_id=group_id,
                                topic=tp.topic, partition=tp.partition, error=repr(e))
        records = dead_letter_records(group_id, tp, letters, self._clock(), sources)
        backoff = self.retry_backoff_ms
        last_cause = "no attempt"
        sent = 0
        while True:
            image = self._image()
            topic = image.topics_by_name.get(dlq_topic)
            if topic is None:
                if (group_id, dlq_topic) not in self._missing_logged:
                    self._missing_logged.add((group_id, dlq_topic))
                    log.warning("share group DLQ topic is missing; creating it", group_id=group_id,
                                dlq_topic=dlq_topic)
                now = self._clock()
                if self._create_topic is not None and now - self._create_asked.get(dlq_topic, -CREATE_RETRY_MS) >= CREATE_RETRY_MS:
                    self._create_asked[dlq_topic] = now
                    self._create_topic(dlq_topic)
                last_cause = f"DLQ topic {dlq_topic} does not exist yet"
            elif not topic.partitions:
                last_cause = f"DLQ topic {dlq_topic} has no partitions"
            else:
                index = dlq_partition(tp.partition, len(topic.partitions))
                leader = topic.partitions[index].leader
                if leader < 0:
                    last_cause = f"DLQ topic partition {dlq_topic}-{index} has no leader"
                else:
                    max_bytes = int(image.configs.get((ConfigResourceType.TOPIC, dlq_topic), {}).get(
                        "max.message.bytes", 1048588))
                    code, cause = await self._produce(leader, dlq_topic, index, records[sent:], max_bytes)
                    sent += code[1]
                    if code[0] == ErrorCode.NONE:
                        self.records_written += count
                        log.info("share records dead-lettered", group_id=group_id, topic=tp.topic,
                                 partition=tp.partition, dlq_topic=dlq_topic, dlq_partition=index, records=count,
                                 cause=sorted({letter.cause.name.lower() for letter in letters}))
                        return DlqResult(count)
                    if not code[0].retriable and code[0] != ErrorCode.NETWORK_EXCEPTION:
                        return self._failed(group_id, tp, dlq_topic, count, cause)
                    last_cause = cause
            if self._clock() + backoff > deadline:
                return self._failed(group_id, tp, dlq_topic, count, f"gave up after retrying: {last_cause}")
            await asyncio.sleep(backoff / 1000)
            backoff = min(backoff * 2, self.retry_backoff_max_ms)

    async def _produce(self, leader: int, dlq_topic: str, index: int, records: list[tuple],
                       max_bytes: int) -> tuple[tuple[ErrorCode, int], str]:
        """Send `records` in batches of at most `max_bytes` to the DLQ partition's leader, in order, one
        request at a time: ((code, records acknowledged), cause). A retried write resends only what was not
        acknowledged."""
        done = 0
        for chunk in _chunks(records, max_bytes):
            batch = build_batch(chunk)
            T = ProduceRequest.TopicProduceData
            request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=self.deadline_ms, topic_data=[
                T(name=dlq_topic, partition_data=[T.PartitionProduceData(index=index, records=batch)])])
            try:
                response = await self._send(leader, request, PRODUCE_VERSION)
            except Exception as e:  # noqa: BLE001 - the leader unreachable: retried
                return (ErrorCode.NETWORK_EXCEPTION, done), f"node {leader} unreachable: {e}"
            try:
                answer = response.responses[0].partition_responses[0]
                code = ErrorCode(answer.error_code)
            except (IndexError, AttributeError, ValueError):
                return (ErrorCode.UNKNOWN_SERVER_ERROR, done), f"node {leader} answered no result for {dlq_topic}-{index}"
            if code != ErrorCode.NONE:
                detail = f": {answer.error_message}" if answer.error_message else ""
                return (code, done), f"node {leader} answered {code.name} for {dlq_topic}-{index}{detail}"
            done += len(chunk)
        return (ErrorCode.NONE, done), ""

    def _failed(self, group_id: str, tp: TopicPartition, dlq_topic: str, count: int, cause: str) -> DlqResult:
        self.failures += 1
        log.warning("share DLQ write failed; the records are archived without a DLQ copy", group_id=group_id,
                    topic=tp.topic, partition=tp.partition, dlq_topic=dlq_topic, records=count, cause=cause)
        return DlqResult(0, cause)


def share_dead_letter_queue(cfg: BrokerConfig, publisher: MetadataPublisher, markers: MarkerSender,
                            controller: ControllerChannel, clock: Callable[[], int]) -> DeadLetterQueue:
    """The broker's DeadLetterQueue: Produce requests over the inter-broker connections the transaction
    markers and the share persister use (to this broker too: one path for every DLQ leader), and DLQ topics
    created through the controller as a CreateTopics would, with Kafka's configs for them."""
    from odradek.metadata.image import MetadataError

    from ..controller_channel import NewTopic

    async def send(node_id: int, request: Any, version: int) -> Any:
        return await markers.request(node_id, request, version, purpose="share-dlq",
                                     timeout_s=cfg.request_timeout_ms / 1000)

    def create_topic(name: str) -> None:
        created = controller.create_topics([NewTopic(name, -1, -1, {
            TOPIC_ENABLE_CONFIG: "true", "message.timestamp.type": "CreateTime"})])

        def check(d: Any) -> None:
            error = d.failed_with
            if error is None:
                (outcome,) = d.result()
                error = outcome if isinstance(outcome, MetadataError) else None
            if error is not None and error_code_of(error) != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("share group DLQ topic not created", dlq_topic=name, error=str(error))
            elif error is None:
                log.info("share group DLQ topic created", dlq_topic=name)

        created.add_callback(check)

    return DeadLetterQueue(image=lambda: publisher.image, send=send, clock=clock,
                           prefix=cfg.errors_dlq_topic_name_prefix,
                           auto_create=cfg.errors_dlq_auto_create_topics_enable, create_topic=create_topic,
                           deadline_ms=cfg.request_timeout_ms)

