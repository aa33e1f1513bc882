"""Browsing records: where to start, how far to read, what to show, and the bound on the work.

A browse reads one topic's partitions (all, or the one chosen) with the bundled consumer, assigned and
without a group (nothing is committed, no group is created), from a start that is an offset, a timestamp
(ListOffsets by time) or "the latest N" (each partition's high watermark minus N). It stops at the first
of: `limit` records shown, `max_scan` records read, the high watermarks seen when it began (records
produced during the browse are left for the next one), or `max_seconds`. Whatever stopped it is said on
the page with the offsets to continue from, so a bound is never a silent truncation.

The filter (filter.py) runs here, in the console process, on each record read: only the matches travel to
the browser, and the broker never runs anything a user typed. The work of one request is bounded by
`max_scan` records (and the consumer's fetch sizes), whatever the filter.

Display: keys, values and headers are shown as UTF-8 text (invalid bytes replaced), JSON (pretty, when
the bytes parse) or hex; "auto" picks JSON when it parses, else text when the bytes are valid UTF-8,
else hex. Export writes what the browse returned (the shown records, not the whole log) as JSON or CSV.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import csv
import io
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from odradek.client.config import ClientConfig
from odradek.client.consumer import EARLIEST, FETCH, LATEST, ConsumerRecord, list_offsets
from odradek.client.cluster import KafkaClient, TopicPartition
from odradek.client.errors import KafkaConnectionError, KafkaError
from odradek.protocol.errors import ErrorCode, ProtocolError
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import BatchHeader, iter_batches

from .filter import RecordFilter
from .scan import LazyRecord, batch_records

MAX_LIMIT = 1000  # records shown by one browse
DEFAULT_LIMIT = 100
MAX_SCAN = 1_000_000  # the most records one browse may read, whatever the form asks
DEFAULT_SCAN = 100_000
DEFAULT_SECONDS = 30.0  # the time bound of one browse (the console's --browse-seconds)
FORMATS = ("auto", "text", "json", "hex")


class BrowseError(ValueError):
    """A browse request that cannot be served as asked (bad offset, unknown partition): shown on the page."""


@dataclass
class BrowseRequest:
    topic: str
    partition: int | None = None  # None: every partition
    start: str = "latest"  # "offset", "timestamp", "latest" (the last N), "earliest"
    offset: int = 0
    timestamp_ms: int = 0
    limit: int = DEFAULT_LIMIT
    max_scan: int = DEFAULT_SCAN
    filter: RecordFilter | None = None
    max_seconds: float = DEFAULT_SECONDS

    def __post_init__(self) -> None:
        if self.start not in ("offset", "timestamp", "latest", "earliest"):
            raise BrowseError(f"start must be offset, timestamp, latest or earliest, not {self.start!r}")
        if not 1 <= self.limit <= MAX_LIMIT:
            raise BrowseError(f"limit must be 1 to {MAX_LIMIT}, not {self.limit}")
        if not 1 <= self.max_scan <= MAX_SCAN:
            raise BrowseError(f"the scan bound must be 1 to {MAX_SCAN}, not {self.max_scan}")
        if self.start == "offset" and self.offset < 0:
            raise BrowseError(f"an offset is 0 or more, not {self.offset}")
        if self.partition is not None and self.partition < 0:
            raise BrowseError(f"a partition is 0 or more, not {self.partition}")


@dataclass
class BrowseResult:
    records: list[ConsumerRecord]
    scanned: int
    stopped: str  # "end" (reached the high watermarks), "limit", "scan bound", "time bound"
    next_offsets: dict[int, int] = field(default_factory=dict)  # partition -> where a next browse would start
    ends: dict[int, int] = field(default_factory=dict)  # partition -> high watermark when the browse began

    @property
    def cut(self) -> bool:
        return self.stopped != "end"


async def start_offsets(client: KafkaClient, request: BrowseRequest,
                        partitions: list[TopicPartition]) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(where each partition's read starts, its high watermark now)."""
    ends = {tp: o for tp, (o, _) in (await list_offsets(client, {tp: LATEST for tp in partitions})).items()}
    begins = {tp: o for tp, (o, _) in (await list_offsets(client, {tp: EARLIEST for tp in partitions})).items()}
    if request.start == "earliest":
        return begins, ends
    if request.start == "offset":
        return {tp: min(max(request.offset, begins[tp]), ends[tp]) for tp in partitions}, ends
    if request.start == "timestamp":
        found = await list_offsets(client, {tp: request.timestamp_ms for tp in partitions})
        return {tp: (found[tp][0] if found[tp][0] >= 0 else ends[tp]) for tp in partitions}, ends
    # the latest N of the topic: N from each partition when one is chosen, else spread over the partitions
    per = request.limit if request.partition is not None else max(1, -(-request.limit // max(len(partitions), 1)))
    return {tp: max(begins[tp], ends[tp] - per) for tp in partitions}, ends


async def browse(config: ClientConfig, client: KafkaClient, request: BrowseRequest) -> BrowseResult:
    """Read as BrowseRequest says and return the records shown (matches of the filter, when there is one).

    The records come from the console's own Fetch requests on `client` (scan.py says why not the consumer):
    one request per leader for the partitions still to read, the next one sent as soon as the previous
    answer's batch headers say where it ends, so the cluster reads while the console filters."""
    partitions_of = await client.partitions_for(request.topic, must_exist=True)
    if request.partition is not None and request.partition not in partitions_of:
        raise BrowseError(f"topic {request.topic!r} has no partition {request.partition} "
                          f"(it has {len(partitions_of)})")
    chosen = [TopicPartition(request.topic, p) for p in sorted(partitions_of)
              if request.partition is None or p == request.partition]
    starts, ends = await start_offsets(client, request, chosen)
    positions = dict(starts)  # where the next record to look at is, per partition
    shown: list[ConsumerRecord] = []
    scanned = 0
    stopped = "end"
    matches = request.filter.matches if request.filter is not None else None
    # Small fetches when only a page of records is wanted (a browse without a filter decodes little more than
    # it shows); larger ones when a filter scans.
    fetch_bytes = 1_048_576 if request.filter is not None else 131_072
    deadline = time.monotonic() + request.max_seconds
    fetches = _Fetches(client, request.topic, fetch_bytes)
    asked = {tp: o for tp, o in positions.items() if o < ends[tp]}
    pending: asyncio.Task[tuple[dict[TopicPartition, bytes], dict[TopicPartition, int]]] | None = \
        fetches.start(asked) if asked else None
    try:
        while pending is not None:
            answers, jumps = await pending
            for tp, log_start in jumps.items():  # retention removed what was asked: on from the log start
                positions[tp] = max(positions[tp], min(log_start, ends[tp]))
            # where each partition's next fetch starts: after the last whole batch of this answer
            following = {tp: max(offset, jumps.get(tp, offset)) for tp, offset in asked.items()}
            for tp, records in answers.items():
                for _, header in iter_batches(memoryview(records)):
                    following[tp] = max(following[tp], header.next_offset)
            following = {tp: o for tp, o in following.items() if o < ends[tp]}
            more = following and scanned < request.max_scan and len(shown) < request.limit
            pending = fetches.start(following) if more else None
            asked = following
            for tp, records in answers.items():
                view = memoryview(records)
                end = ends[tp]
                for pos, header in iter_batches(view):
                    if header.next_offset <= positions[tp]:
                        continue
                    if scanned >= request.max_scan or len(shown) >= request.limit:
                        break
                    if time.monotonic() > deadline:
                        stopped = "time bound"
                        return _result(shown, scanned, stopped, positions, chosen, ends)
                    if not header.is_control:
                        try:
                            scanned = _walk_batch(view, pos, header, tp, request, positions, end, scanned, shown, matches)
                        except ProtocolError as e:
                            raise CorruptBatchError(f"the batch at offset {header.base_offset} of {tp.topic}-"
                                                    f"{tp.partition} is corrupt: {e}") from None
                    else:
                        positions[tp] = max(positions[tp], min(header.next_offset, end))
                    await asyncio.sleep(0)  # a batch at a time: other pages are served meanwhile
            if len(shown) >= request.limit and any(positions[tp] < ends[tp] for tp in chosen):
                stopped = "limit"
                break
            if scanned >= request.max_scan and any(positions[tp] < ends[tp] for tp in chosen):
                stopped = "scan bound"
                break
            if pending is not None and time.monotonic() > deadline:
                stopped = "time bound"
                break
    except ProtocolError as e:  # a fetch answer whose batches cannot be walked at all
        raise CorruptBatchError(f"a fetch answer of {request.topic} is corrupt: {e}") from None
    finally:
        await fetches.close()
    return _result(shown, scanned, stopped, positions, chosen, ends)


class CorruptBatchError(BrowseError):
    """A batch the scan read failed its checks: shown with its partition and offset."""


def _walk_batch(view: memoryview, pos: int, header: BatchHeader, tp: TopicPartition, request: BrowseRequest,
                positions: dict[TopicPartition, int], end: int, scanned: int, shown: list[ConsumerRecord],
                matches: Callable[[LazyRecord], bool] | None) -> int:
    """Look at the records of one batch from positions[tp] on, up to `end` and the request's bounds; keep
    the matches in `shown`, move positions[tp]; the count of records looked at so far."""
    for record in batch_records(view, pos, header, tp.partition):
        offset = record.offset
        if offset < positions[tp]:
            continue
        if offset >= end or scanned >= request.max_scan or len(shown) >= request.limit:
            return scanned
        scanned += 1
        positions[tp] = offset + 1
        if matches is None or matches(record):
            key, value = record.key_bytes, record.value_bytes
            shown.append(ConsumerRecord(
                tp.topic, tp.partition, offset, record.timestamp, 1 if header.timestamp_type_log_append else 0,
                key, value, record.read_headers(), -1 if key is None else len(key),
                -1 if value is None else len(value), header.partition_leader_epoch))
    # every record of the batch looked at: past it (past the offsets compaction removed, too)
    positions[tp] = max(positions[tp], min(header.next_offset, end))
    return scanned


def _result(shown: list[ConsumerRecord], scanned: int, stopped: str, positions: dict[TopicPartition, int],
            chosen: list[TopicPartition], ends: dict[TopicPartition, int]) -> BrowseResult:
    shown.sort(key=lambda r: (r.partition, r.offset))
    return BrowseResult(shown, scanned, stopped, {tp.partition: positions[tp] for tp in chosen},
                        {tp.partition: ends[tp] for tp in chosen})


class _Fetches:
    """The browse's Fetch requests: per round, one request per leader for the partitions asked, sent at once
    and gathered as one task (`start`), so that the next round is on the wire while this one is walked.

    Read uncommitted, as a consumer without a group; the records a browse looks at stop at the high
    watermarks seen when it began. A leader that moved is found again (metadata refresh, retried within the
    client's default API timeout); an offset below the log start (retention ran) continues at the log
    start; any other error (an ACL refusal, say) ends the browse with it."""

    def __init__(self, client: KafkaClient, topic: str, partition_bytes: int):
        self.client, self.topic, self.partition_bytes = client, topic, partition_bytes
        self.tasks: list[asyncio.Task] = []

    def start(self, offsets: dict[TopicPartition, int]) -> "asyncio.Task[tuple[dict[TopicPartition, bytes], dict[TopicPartition, int]]]":
        task = asyncio.get_running_loop().create_task(self._round(dict(offsets)))
        self.tasks.append(task)
        return task

    async def close(self) -> None:
        for task in self.tasks:
            if not task.done():
                task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _round(self, offsets: dict[TopicPartition, int]) -> tuple[dict[TopicPartition, bytes], dict[TopicPartition, int]]:
        """(the records answered per partition, the log start of partitions asked below it)."""
        answers: dict[TopicPartition, bytes] = {}
        jumps: dict[TopicPartition, int] = {}
        attempt = 0
        deadline = time.monotonic() + self.client.config.default_api_timeout_ms / 1000
        while offsets:
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            for tp, offset in offsets.items():
                by_leader.setdefault(await self.client.leader_for(tp), {})[tp] = offset
            results = await asyncio.gather(*(self._fetch(node, asked) for node, asked in by_leader.items()),
                                           return_exceptions=True)
            retry: dict[TopicPartition, int] = {}
            for asked, result in zip(by_leader.values(), results):
                if isinstance(result, KafkaConnectionError):
                    retry.update(asked)
                    continue
                if isinstance(result, BaseException):
                    raise result
                got, again, moved = result
                answers.update(got)
                retry.update(again)
                jumps.update(moved)
            if not retry or answers or jumps:
                return answers, jumps  # partitions to retry are asked again in the next round
            attempt += 1
            if time.monotonic() > deadline:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, context=f"Fetch {sorted(retry)}")
            self.client.request_update()
            await asyncio.sleep(self.client.backoff_s(attempt))
            offsets = retry
        return answers, jumps

    async def _fetch(self, node: int, asked: dict[TopicPartition, int]) -> tuple[dict, dict, dict]:
        cls = REQUESTS[FETCH]
        request = cls(
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=max(len(asked), 1) * self.partition_bytes,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[cls.FetchTopic(topic=self.topic, partitions=[
                cls.FetchTopic.FetchPartition(partition=tp.partition, fetch_offset=offset,
                                              partition_max_bytes=self.partition_bytes)
                for tp, offset in asked.items()])])
        response = await self.client.send(node, request, timeout_ms=self.client.config.request_timeout_ms + 100)
        if response.error_code:
            raise KafkaError(response.error_code, context="Fetch")
        got: dict[TopicPartition, bytes] = {}
        again: dict[TopicPartition, int] = {}
        moved: dict[TopicPartition, int] = {}
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(self.topic, p.partition_index)
                if tp not in asked:
                    continue
                code = ErrorCode.for_code(p.error_code)
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    (start, _), = (await list_offsets(self.client, {tp: EARLIEST})).values()
                    if start > asked[tp]:
                        moved[tp] = start
                        continue
                    raise KafkaError(code, f"offset {asked[tp]}", context=str(tp))
                if code != ErrorCode.NONE:
                    if code.invalid_metadata or code.retriable:
                        again[tp] = asked[tp]
                        continue
                    raise KafkaError(code, context=f"Fetch {tp}")
                got[tp] = bytes(p.records or b"")
        return got, again, moved


def _plain(config: ClientConfig) -> dict[str, Any]:
    """The ClientConfig fields of `config`, to build a consumer config of the same connection settings."""
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(ClientConfig)}


def render(data: bytes | None, fmt: str) -> tuple[str, str]:
    """(the text to show, the format it is shown in) for a key, value or header."""
    if data is None:
        return "null", "null"
    if fmt in ("auto", "json"):
        try:
            return json.dumps(json.loads(data), indent=2, ensure_ascii=False), "json"
        except (ValueError, UnicodeDecodeError):
            if fmt == "json":
                return data.decode("utf-8", "replace"), "text"
    if fmt in ("auto", "text"):
        try:
            return data.decode("utf-8"), "text"
        except UnicodeDecodeError:
            if fmt == "text":
                return data.decode("utf-8", "replace"), "text"
    return " ".join(f"{b:02x}" for b in data[:4096]) + (" …" if len(data) > 4096 else ""), "hex"


def _exported(data: bytes | None) -> Any:
    """A key or value as export writes it: text when it is UTF-8, else {"base64": ...}."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def export_json(records: list[ConsumerRecord]) -> str:
    return json.dumps([{"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                        "key": _exported(r.key), "value": _exported(r.value),
                        "headers": [[k, _exported(v)] for k, v in r.headers]} for r in records], indent=1)


def export_csv(records: list[ConsumerRecord]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["topic", "partition", "offset", "timestamp", "key", "value", "headers"])
    for r in records:
        key, value = _exported(r.key), _exported(r.value)
        writer.writerow([r.topic, r.partition, r.offset, r.timestamp,
                         "" if key is None else json.dumps(key) if isinstance(key, dict) else key,
                         "" if value is None else json.dumps(value) if isinstance(value, dict) else value,
                         json.dumps([[k, _exported(v)] for k, v in r.headers]) if r.headers else ""])
    return out.getvalue()


async def produce_one(config: ClientConfig, topic: str, partition: int | None, key: bytes | None,
                      value: bytes | None, headers: list[tuple[str, bytes | None]]) -> tuple[int, int]:
    """Produce one record (acks=all) and return (partition, offset) it was written at."""
    from odradek.client.config import ProducerConfig
    from odradek.client.producer import Producer

    # Not idempotent: one record per form, and an idempotent producer would need IDEMPOTENT_WRITE on the
    # cluster besides WRITE on the topic, which a principal allowed to write one topic rarely has.
    producer_config = ProducerConfig(**{**_plain(config), "acks": "all", "enable_idempotence": False,
                                        "client_id": f"{config.client_id}-produce", "allow_auto_create_topics": False})
    async with Producer(producer_config) as producer:
        metadata = await asyncio.wait_for(producer.send_and_wait(topic, value=value, key=key, partition=partition,
                                                                 headers=headers), 30)
    return metadata.partition, metadata.offset
