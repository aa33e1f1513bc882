"""The exactly-once streaming sink: a replayed micro-batch publishes nothing twice.

Spark's contract (see the reference notes) is that a micro-batch whose commit Spark did not record is
run again after a restart with the same batch id and the same offsets, and that a failed task is run
again; its own Kafka sink is therefore at-least-once. Without transactions in the broker, this sink gets
exactly-once from two kinds of records, kept in a compacted topic (option `sink.commitTopic`, default
`_odradek-spark-sink-commits`, created on first use with one partition) and from a header on every
record it publishes.

* The **commit marker** `q/<queryId>` = `{"batch": N}`: batch N of the query is fully published. The
  driver writes it in `commit(messages, batchId)`. A task of batch M <= N publishes nothing; as Spark
  runs batches strictly in order, "committed through N" is one number per query, and compaction keeps
  only the latest.
* The **intent** `i/<queryId>/<batchId>/<task>/<topic>` = `{"offsets": {"0": 17, ...}}`: written and
  acknowledged by a task *before* it publishes its first record to `topic`, holding that topic's end
  offsets at the time. Every record the task publishes carries the header
  `odradek.sink = <queryId>:<batchId>:<task>[/<partition asked for>]`.

When a task of batch N finds intents of its own (an earlier attempt, or the run that crashed before
the commit marker), it reads each such topic from the intent's offsets to the end, picks out the records
carrying its tag, and counts a digest of each (key, value, headers, partition asked for). It then skips
one matching row per counted record and publishes the rest. Counting digests rather than positions
makes the check independent of row order, which a shuffle need not keep between attempts. The driver's
commit writes the marker and tombstones the batch's intents (their keys come back in the commit
messages), so the commit topic stays small once compacted.

Why a compacted topic and not only the headers: the marker answers "was batch N committed?" with one
small read per task, where headers alone would need a scan of every target partition for every task;
the headers are what makes a *partial* publish (a crash between records) recoverable without transactions.

Limits: speculative execution (`spark.speculation`, off by default) could run two attempts of one task
at once, both before either intent exists: leave it off with this sink. A replay must present the same
rows per task (Spark's deterministic replay of a deterministic query guarantees it; a non-deterministic
expression such as rand() or current_timestamp() in the written columns defeats any dedup). Once the
broker has transactions, `write()` can stage records in a transaction per task and `commit()` can
commit them, and the intents and scans go away.

Everything here talks to Kafka through a small `SinkIO` interface, so the protocol is unit-tested
against an in-memory fake; `KafkaSinkIO` is the real one.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Protocol

from .offsets import OffsetRange

TAG_HEADER = "odradek.sink"
CHUNK = 2_000

Row = tuple  # (topic, partition or None, key, value, headers)

__all__ = ["KafkaSinkIO", "MarkerLog", "SinkIO", "TaskOutcome", "commit_batch", "publish_task", "row_digest"]


class SinkIO(Protocol):
    """What the protocol needs from Kafka; all calls block."""

    def partitions(self, topic: str) -> list[int]: ...

    def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]: ...

    def scan(self, topic: str, partition: int, start: int, end: int) -> Iterable[Any]:
        """Records with .key, .value, .headers of [start, end)."""

    def send(self, rows: list[Row]) -> None: ...

    def flush(self) -> None: ...

    def marker_partitions(self) -> int:
        """Partitions of the commit topic, creating it (compacted) when missing."""

    def marker_topic(self) -> str: ...


def commit_key(query_id: str) -> str:
    return f"q/{query_id}"


def intent_key(query_id: str, batch_id: int, task: int, topic: str) -> str:
    return f"i/{query_id}/{batch_id}/{task}/{topic}"


def task_tag(query_id: str, batch_id: int, task: int) -> str:
    return f"{query_id}:{batch_id}:{task}"


def row_digest(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]],
               partition: int | None) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in (key, value):
        if part is None:
            h.update(b"\xff\xff\xff\xff")
        else:
            h.update(len(part).to_bytes(4, "big"))
            h.update(part)
    for k, v in headers:
        kb = k.encode("utf-8", "surrogateescape") if isinstance(k, str) else bytes(k)
        h.update(b"h" + len(kb).to_bytes(4, "big") + kb)
        h.update(b"\xff\xff\xff\xff" if v is None else len(v).to_bytes(4, "big") + v)
    h.update(b"p" + str(-1 if partition is None else partition).encode())
    return h.digest()


# ---------------------------------------------------------------------------------------- marker log

_marker_cache: dict[tuple, tuple[int, dict[str, bytes]]] = {}


class MarkerLog:
    """The commit topic as a key -> value map, read incrementally (cached per process and partition)."""

    def __init__(self, io: SinkIO, cache_key: Any = None):
        self.io = io
        self.cache_key = cache_key

    def partition_for(self, query_id: str) -> int:
        return zlib.crc32(query_id.encode()) % self.io.marker_partitions()

    def load(self, partition: int) -> dict[str, bytes]:
        topic = self.io.marker_topic()
        key = (self.cache_key, topic, partition)
        next_offset, entries = _marker_cache.get(key, (0, {}))
        end = self.io.end_offsets(topic, [partition]).get(partition, 0)
        if end < next_offset:  # the topic was recreated: start over
            next_offset, entries = 0, {}
        if end > next_offset:
            entries = dict(entries)
            for record in self.io.scan(topic, partition, next_offset, end):
                k = record.key.decode("utf-8", "replace") if record.key is not None else ""
                if record.value is None:
                    entries.pop(k, None)
                else:
                    entries[k] = record.value
            next_offset = end
        if self.cache_key is not None:
            _marker_cache[key] = (next_offset, entries)
        return entries

    def write(self, partition: int, items: list[tuple[str, dict | None]]) -> None:
        topic = self.io.marker_topic()
        self.io.send([(topic, partition, k.encode(), None if v is None else json.dumps(v).encode(), [])
                      for k, v in items])
        self.io.flush()


def committed_batch(entries: dict[str, bytes], query_id: str) -> int | None:
    raw = entries.get(commit_key(query_id))
    return None if raw is None else int(json.loads(raw)["batch"])


def task_intents(entries: dict[str, bytes], query_id: str, batch_id: int, task: int) -> dict[str, dict[int, int]]:
    prefix = f"i/{query_id}/{batch_id}/{task}/"
    out = {}
    for k, raw in entries.items():
        if k.startswith(prefix):
            offsets = json.loads(raw)["offsets"]
            out[k[len(prefix):]] = {int(p): int(o) for p, o in offsets.items()}
    return out


# ---------------------------------------------------------------------------------------- the protocol


@dataclass
class TaskOutcome:
    """What a task reports to the driver (inside its WriterCommitMessage)."""

    query_id: str
    batch_id: int
    task: int
    published: int = 0
    duplicates: int = 0  # rows found already published by an earlier attempt or run
    batch_was_committed: bool = False
    intent_keys: list[str] = field(default_factory=list)


def _published_digests(io: SinkIO, topic: str, since: dict[int, int], tag: str) -> Counter:
    """Digests of the records tagged `tag` in `topic` from the intent's offsets to the end."""
    counts: Counter = Counter()
    partitions = io.partitions(topic)
    ends = io.end_offsets(topic, partitions)
    for p in partitions:
        start, end = since.get(p, 0), ends.get(p, 0)
        if end <= start:
            continue
        for record in io.scan(topic, p, start, end):
            asked: int | None = None
            user_headers = []
            mine = False
            for hk, hv in record.headers:
                if hk == TAG_HEADER and hv is not None:
                    text = hv.decode("utf-8", "replace")
                    base, _, part = text.partition("/")
                    if base == tag:
                        mine = True
                        asked = int(part) if part else None
                else:
                    user_headers.append((hk, hv))
            if mine:
                counts[row_digest(record.key, record.value, user_headers, asked)] += 1
    return counts


def publish_task(io: SinkIO, query_id: str, batch_id: int, task: int, rows: Iterable[Row], *,
                 markers: MarkerLog | None = None) -> TaskOutcome:
    """Publish one task's rows of micro-batch `batch_id` so that a rerun publishes nothing twice."""
    markers = markers or MarkerLog(io)
    marker_partition = markers.partition_for(query_id)
    entries = markers.load(marker_partition)
    outcome = TaskOutcome(query_id, batch_id, task)
    intents = task_intents(entries, query_id, batch_id, task)
    outcome.intent_keys = [intent_key(query_id, batch_id, task, t) for t in sorted(intents)]
    done = committed_batch(entries, query_id)
    if done is not None and done >= batch_id:
        outcome.batch_was_committed = True
        for _ in rows:  # drain: Spark expects the input consumed
            outcome.duplicates += 1
        return outcome

    tag = task_tag(query_id, batch_id, task)
    already: dict[str, Counter | None] = {}

    def prepare(topic: str) -> Counter | None:
        if topic in intents:
            counts = _published_digests(io, topic, intents[topic], tag)
            return counts or None
        partitions = io.partitions(topic)
        offsets = io.end_offsets(topic, partitions) if partitions else {}
        # The intent must be durable before the first record of this topic is sent; flushing it also
        # flushes this task's queued records of other topics, which is harmless.
        markers.write(marker_partition, [(intent_key(query_id, batch_id, task, topic),
                                          {"offsets": {str(p): o for p, o in sorted(offsets.items())}})])
        outcome.intent_keys.append(intent_key(query_id, batch_id, task, topic))
        return None

    chunk: list[Row] = []
    for topic, partition, key, value, headers in rows:
        if topic not in already:
            if chunk:  # keep order simple: everything before a new topic goes out first
                io.send(chunk)
                chunk = []
            already[topic] = prepare(topic)
        counts = already[topic]
        if counts:
            d = row_digest(key, value, headers, partition)
            if counts[d] > 0:
                counts[d] -= 1
                outcome.duplicates += 1
                continue
        tag_value = tag if partition is None else f"{tag}/{partition}"
        chunk.append((topic, partition, key, value, list(headers) + [(TAG_HEADER, tag_value.encode())]))
        outcome.published += 1
        if len(chunk) >= CHUNK:
            io.send(chunk)
            chunk = []
    if chunk:
        io.send(chunk)
    io.flush()
    return outcome


def commit_batch(io: SinkIO, query_id: str, batch_id: int, outcomes: Iterable[TaskOutcome], *,
                 markers: MarkerLog | None = None) -> None:
    """The driver's commit: mark the batch published, then drop its intents. Idempotent."""
    markers = markers or MarkerLog(io)
    keys = sorted({k for o in outcomes for k in o.intent_keys})
    items: list[tuple[str, dict | None]] = [(commit_key(query_id), {"batch": batch_id})]
    items.extend((k, None) for k in keys)
    markers.write(markers.partition_for(query_id), items)


# ---------------------------------------------------------------------------------------- over Kafka


class KafkaSinkIO:
    """SinkIO on the bundled client, with the per-process cached admin, consumer and producer."""

    def __init__(self, client: Any, commit_topic: str):
        from . import _kafka

        self._kafka = _kafka
        self.client = client
        self.commit_topic = commit_topic
        self.admin = _kafka.admin_for(client)
        self.producer = _kafka.producer_for(client)

    def marker_topic(self) -> str:
        return self.commit_topic

    def marker_partitions(self) -> int:
        found = _marker_partitions.get((self.client.key, self.commit_topic))
        if found is None:
            partitions = self._kafka.topic_partitions_or_none(self.admin, self.commit_topic)
            if not partitions:
                self._kafka.ensure_topic(self.admin, self.commit_topic, partitions=1,
                                         configs={"cleanup.policy": "compact"})
                partitions = self._kafka.topic_partitions_or_none(self.admin, self.commit_topic)
            found = _marker_partitions[(self.client.key, self.commit_topic)] = len(partitions)
        return found

    def partitions(self, topic: str) -> list[int]:
        return self._kafka.topic_partitions_or_none(self.admin, topic)

    def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        from odradek.client.cluster import TopicPartition

        if not partitions:
            return {}
        found = self.admin.end_offsets([TopicPartition(topic, p) for p in partitions])
        return {tp[1]: o for tp, o in found.items()}

    def scan(self, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
        for records in self._kafka.read_range(self.client, OffsetRange(topic, partition, start, end),
                                              fail_on_data_loss=False, poll_timeout_ms=60_000,
                                              kind="sink-consumer"):
            yield from records

    def send(self, rows: list[Row]) -> None:
        self.producer.send(rows)

    def flush(self) -> None:
        self.producer.flush()


_marker_partitions: dict[tuple, int] = {}
