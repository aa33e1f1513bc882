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

`logged_cluster_id` reads the cluster id a metadata log names, for a lone node that starts on a data
directory written before it ran Raft (broker/components.py).
"""

from __future__ import annotations

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
                 snapshot_max_interval_ms: int = 3_600_000) -> None:
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

    def attach(self, raft: RaftNode) -> None:
        """The Raft node this loader listens to (made after the loader, which it is given)."""
        self.raft = raft

    def on_commit(self, listener: Callable[[CommittedBatch], None]) -> None:
        self._commit_listeners.append(listener)

    def on_leader_change(self, listener: Callable[[int, int], None]) -> None:
        self._leader_listeners.append(listener)

    def handle_commit(self, batch: CommittedBatch) -> None:
        if batch.records:
            delta = MetadataDelta(self.image)
            for value in batch.records:
                delta.replay(decode_metadata_record(value))
            image = delta.apply()
            previous, self.image = self.image, image
            self.applied_end_offset = batch.last_offset + 1
            self.publisher.publish(MetadataUpdate.from_delta(delta, image, self.applied_end_offset))
            self._bytes_since_snapshot += sum(len(r) for r in batch.records)
        else:
            self.applied_end_offset = batch.last_offset + 1
        for listener in list(self._commit_listeners):
            listener(batch)

    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
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
