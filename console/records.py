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
import csv
import io
import json
import time
from dataclasses import dataclass, field
from typing import Any

from odradek.client.config import ClientConfig, ConsumerConfig
from odradek.client.consumer import EARLIEST, LATEST, Consumer, ConsumerRecord, list_offsets
from odradek.client.cluster import KafkaClient, TopicPartition

from .filter import RecordFilter, RecordView

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
    """Read as BrowseRequest says and return the records shown (matches of the filter, when there is one)."""
    partitions_of = await client.partitions_for(request.topic, must_exist=True)
    if request.partition is not None and request.partition not in partitions_of:
        raise BrowseError(f"topic {request.topic!r} has no partition {request.partition} "
                          f"(it has {len(partitions_of)})")
    chosen = [TopicPartition(request.topic, p) for p in sorted(partitions_of)
              if request.partition is None or p == request.partition]
    starts, ends = await start_offsets(client, request, chosen)
    pending = {tp for tp in chosen if starts[tp] < ends[tp]}
    shown: list[ConsumerRecord] = []
    scanned = 0
    positions = dict(starts)
    stopped = "end"
    if pending:
        # Small fetches when only a page of records is wanted (a browse without a filter decodes little more
        # than it shows); larger ones when a filter scans.
        fetch_bytes = 1_048_576 if request.filter is not None else 131_072
        consumer_config = ConsumerConfig(**{**_plain(config), "group_id": None, "enable_auto_commit": False,
                                            "auto_offset_reset": "earliest", "max_poll_records": 2000,
                                            "max_partition_fetch_bytes": fetch_bytes, "prefetch_bytes": 2 * fetch_bytes,
                                            "client_id": f"{config.client_id}-browse"})
        consumer = Consumer(config=consumer_config)
        try:
            consumer.assign(sorted(pending))
            for tp in pending:
                consumer.seek(tp, starts[tp])
            deadline = time.monotonic() + request.max_seconds
            while pending:
                if scanned >= request.max_scan:
                    stopped = "scan bound"
                    break
                if len(shown) >= request.limit:
                    stopped = "limit"
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    stopped = "time bound"
                    break
                batch = await consumer.getmany(timeout_ms=int(min(remaining, 1.0) * 1000),
                                               max_records=min(2000, request.max_scan - scanned))
                for tp, records in batch.items():
                    for record in records:
                        if tp not in pending or record.offset >= ends[tp]:
                            pending.discard(tp)
                            break
                        if scanned >= request.max_scan or len(shown) >= request.limit:
                            break
                        scanned += 1
                        positions[tp] = record.offset + 1
                        if request.filter is None or request.filter.matches(_view(record)):
                            shown.append(record)
                        if positions[tp] >= ends[tp]:
                            pending.discard(tp)
                            break
                if scanned >= request.max_scan or len(shown) >= request.limit:
                    continue  # the bound is said at the top of the loop; nothing past it was looked at
                for tp in list(pending):
                    # past the records: the position moves over control batches and aborted data too
                    position = await consumer.position(tp)
                    if position >= ends[tp]:
                        positions[tp] = ends[tp]
                        pending.discard(tp)
        finally:
            await consumer.close(autocommit=False)
    shown.sort(key=lambda r: (r.partition, r.offset))
    return BrowseResult(shown, scanned, stopped, {tp.partition: positions[tp] for tp in chosen},
                        {tp.partition: ends[tp] for tp in chosen})


def _plain(config: ClientConfig) -> dict[str, Any]:
    """The ClientConfig fields of `config`, to build a consumer config of the same connection settings."""
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(ClientConfig)}


def _view(record: ConsumerRecord) -> RecordView:
    return RecordView(record.key, record.value, record.headers, record.offset, record.partition, record.timestamp)


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
