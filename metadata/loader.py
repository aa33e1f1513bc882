"""The Raft node's listener on every node: committed metadata batches become published images.

`MetadataLoader` is Kafka's MetadataLoader: each committed batch of `__cluster_metadata-0` is decoded into
metadata records and replayed into a delta of the current image; the image it leads to is published (the
`MetadataPublisher` the partitions, the logs and the coordinators listen to); a snapshot the node loads (at
start, or fetched from the leader) is published as a whole image. It is the only road metadata takes into
a node, a lone node's included: there the node is the quorum's only voter, and what it appends is committed
(and published here) as soon as it is flushed.

It also takes the node's snapshots: every `snapshot_max_bytes` of committed records
(metadata.log.max.record.bytes.between.snapshots), or after `snapshot_max_interval_ms` with anything new
(metadata.log.max.snapshot.interval.ms). Time is a `clock` the caller passes; nothing here has a socket,
a task or a timer (the driver, broker/quorum.py, calls `maybe_snapshot` after each call into the node).

Large batches, replayed in slices
--------------------------------
One batch is one decision of the controller, atomic: a CreateTopics of 10,000 partitions is a batch of
10,001 records. Readers must see all of it or none of it, so its image is published once, whole, when the
last record is replayed. But decoding and replaying 10,001 records in the callback that delivered the
batch held a node's event loop for it (bench/partition_scale.py: about 80 ms of CPU on an idle machine,
several times that on a loaded one). With a `replay_budget`, at most that many records are replayed in
the delivering call; the rest of the batch, and every batch committed after it (in order), wait in a
queue that the driver works off with `replay_pending(limit)` between turns of its loop (`on_pending` says
a queue began). Nothing is published, and `applied_end_offset` does not move, until a batch is whole; the
commit listeners hear each batch after its image is published, as before. Kafka's loader publishes once
per delivered commit too, and never in the middle of a metadata transaction (KIP-868); its controller
writes at most a few thousand records per batch, where ours writes one batch per decision, so it is the
replay, not the batch, that is cut here. Without a budget (the default, and the unit harnesses) a batch
is replayed and published in the call, as it was. A snapshot loaded while batches wait replaces what
they would have built: they are dropped (Raft delivers what follows the snapshot afterwards).

`logged_cluster_id` reads the cluster id a metadata log names, for a lone node that starts on a data
directory written before it ran Raft (broker/components.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import structlog

from odradek.protocol.records import iter_batches, iter_records
from odradek.metadata.image import METADATA_MAX_BATCH_BYTES, MetadataDelta, MetadataImage
from odradek.metadata.publisher import EMPTY_IMAGE, MetadataPublisher, MetadataUpdate
from odradek.metadata.records import ClusterIdRecord, decode_metadata_record
from odradek.metadata.snapshot import decode_snapshot, encode_snapshot
from odradek.raft import CommittedBatch, RaftLog, RaftNode
from odradek.raft.log import SnapshotId

log = structlog.get_logger("odradek.metadata")

_READ_BYTES = 1 << 20


class MetadataLoader:
    """The Raft node's listener: committed metadata published as images (see the module doc)."""

    def __init__(self, publisher: MetadataPublisher, *, clock: Callable[[], int], snapshot_max_bytes: int = 20 << 20,
                 snapshot_max_interval_ms: int = 3_600_000, replay_budget: int | None = None,
                 on_pending: Callable[[], None] | None = None) -> None:
        self.publisher = publisher
        self.clock = clock
        self.snapshot_max_bytes = snapshot_max_bytes
        self.snapshot_max_interval_ms = snapshot_max_interval_ms
        self._last_snapshot_ms = clock()
        self.image: MetadataImage = EMPTY_IMAGE
        self.applied_end_offset = 0
        self.leader_id = -1
        self.epoch = 0
        self.raft: RaftNode | None = None  # set once the node exists (it needs this listener first)
        self._bytes_since_snapshot = 0
        self._commit_listeners: list[Callable[[CommittedBatch], None]] = []
        self._leader_listeners: list[Callable[[int, int], None]] = []
        self.replay_budget = replay_budget  # records replayed in the delivering call (None: all; module doc)
        self.on_pending = on_pending  # told when batches are left for replay_pending
        self._queue: deque[CommittedBatch] = deque()  # committed, not yet published; the head is being replayed
        self._delta: MetadataDelta | None = None  # the head batch's delta, while it is replayed
        self._replayed = 0  # records of the head batch replayed into _delta

    def attach(self, raft: RaftNode) -> None:
        """The Raft node this loader listens to (made after the loader, which it is given)."""
        self.raft = raft

    def on_commit(self, listener: Callable[[CommittedBatch], None]) -> None:
        self._commit_listeners.append(listener)

    def on_leader_change(self, listener: Callable[[int, int], None]) -> None:
        self._leader_listeners.append(listener)

    def handle_commit(self, batch: CommittedBatch) -> None:
        waiting = bool(self._queue)
        self._queue.append(batch)
        if waiting:
            return  # behind batches still being replayed: its turn comes in replay_pending
        if self.replay_pending(self.replay_budget) and self.on_pending is not None:
            self.on_pending()

    @property
    def pending(self) -> int:
        """Committed batches not yet published (the first possibly part-replayed)."""
        return len(self._queue)

    def replay_pending(self, limit: int | None = None) -> int:
        """Replay up to `limit` records (None: all) of the waiting batches, in order, publishing each batch
        that is complete and telling the commit listeners of it; returns how many batches are left."""
        queue = self._queue
        budget = limit
        while queue:
            batch = queue[0]
            records = batch.records
            if records:
                delta = self._delta
                if delta is None:
                    delta = self._delta = MetadataDelta(self.image)
                    self._replayed = 0
                start = self._replayed
                end = len(records) if budget is None else min(len(records), start + budget)
                for i in range(start, end):
                    delta.replay(decode_metadata_record(records[i]))
                self._replayed = end
                if budget is not None:
                    budget -= end - start
                if end < len(records):
                    return len(queue)
                self._delta = None
                image = delta.apply()
                self.image = image
                self.applied_end_offset = batch.last_offset + 1
                self._bytes_since_snapshot += sum(len(r) for r in records)
                queue.popleft()
                self.publisher.publish(MetadataUpdate.from_delta(delta, image, self.applied_end_offset))
            else:
                self.applied_end_offset = batch.last_offset + 1
                queue.popleft()
            for listener in list(self._commit_listeners):
                listener(batch)
            if budget is not None and budget <= 0 and queue:
                return len(queue)
        return 0

    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if self._queue:
            log.info("metadata batches waiting to be replayed are replaced by a snapshot", batches=len(self._queue),
                     snapshot_end_offset=snapshot_id.end_offset)
            self._queue.clear()
            self._delta = None
        image = decode_snapshot(data)
        previous, self.image = self.image, image
        removed = {t: topic for t, topic in previous.topics_by_id.items() if t not in image.topics_by_id}
        self.applied_end_offset = snapshot_id.end_offset
        self._bytes_since_snapshot = 0
        self.publisher.publish(MetadataUpdate(previous, image, frozenset(image.topics_by_id), removed, snapshot_id.end_offset))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader_id, self.epoch = leader_id, epoch
        for listener in list(self._leader_listeners):
            listener(leader_id, epoch)

    def maybe_snapshot(self) -> None:
        """Called by the driver after each call into the node (not from inside handle_commit, where the
        node has not yet counted the batch as applied: a snapshot must hold exactly the offsets below it)."""
        raft = self.raft
        if raft is None or self._bytes_since_snapshot == 0:
            return
        due_by_time = 0 < self.snapshot_max_interval_ms <= self.clock() - self._last_snapshot_ms
        if self._bytes_since_snapshot < self.snapshot_max_bytes and not due_by_time:
            return
        end = self.applied_end_offset
        if end != raft.applied_end_offset or end > raft.high_watermark:
            return
        try:
            raft.create_snapshot(end, encode_snapshot(self.image, self.clock()))
        except ValueError as e:  # nothing new to snapshot (already at or below the log start)
            log.debug("no metadata snapshot", reason=str(e))
            return
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock()
        log.info("metadata snapshot", end_offset=end)


def logged_cluster_id(raft_log: RaftLog) -> str | None:
    """The cluster id the last ClusterIdRecord in `raft_log` names (None when it has none). A directory a
    lone node wrote before it ran Raft has no cluster id in meta.properties, only in its metadata log."""
    found = None
    offset = raft_log.log_start_offset
    while offset < raft_log.log_end_offset:
        data = raft_log.read(offset, _READ_BYTES)
        start = offset
        for pos, header in iter_batches(data):
            if header.next_offset <= offset:
                continue
            if not header.is_control:
                batch = memoryview(data)[pos : pos + header.size]
                for record in iter_records(batch, max_uncompressed_bytes=METADATA_MAX_BATCH_BYTES):
                    if record.value is not None:
                        decoded = decode_metadata_record(record.value)
                        if isinstance(decoded, ClusterIdRecord):
                            found = decoded.cluster_id
            offset = header.next_offset
        if offset == start:
            break
    return found
