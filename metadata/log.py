"""The metadata log: `__cluster_metadata-0` as records, replayed into the image, appended durably.

`MetadataLog` owns the committed image. `load()` replays the log into one delta from the empty image (a
restart publishes that delta as any live change: one road); `append(records, now_ms)` replays the
records into a delta first (a record the image cannot take must never reach the log, where it would
break every later load), writes them as one batch (an operation is in the log whole or not at all),
flushes the log to disk, and only then takes the new image: whoever answers a request after append()
answers about durable state. Producer-id blocks go the same way, so a block is on disk before any id in
it is used, and blocks never repeat across restarts.

No node runs its metadata this way any longer: every node, a lone one included (the only voter of its
quorum), appends through Raft (broker/quorum.py) and publishes what is committed through
`metadata.loader.MetadataLoader`. `MetadataLog` remains as the small replay harness the controller's and
the image's tests drive (tests/unit/test_metadata_log.py) and should move onto the loader with them.
`metadata_log_config` is the storage settings of `__cluster_metadata-0`, which every node uses.

The log is reached through `MetadataStorage` (five members), so that tests run on an in-memory log or a
storage `Log`. A metadata log is flushed on every append, so its recovery point is its end; opening it
after a crash cuts only a torn last batch, which no caller was ever told about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, iter_batches, iter_records
from odradek.metadata.image import (
    METADATA_MAX_BATCH_BYTES,
    MetadataDelta,
    MetadataError,
    MetadataImage,
    MetadataReplayError,
)
from odradek.metadata.records import decode_metadata_record, encode_metadata_record
from odradek.storage.config import LogConfig

_READ_BYTES = 1 << 20

class MetadataStorage(Protocol):
    """What MetadataLog needs of the partition log holding `__cluster_metadata-0`. Offsets are Kafka's:
    `log_end_offset` is exclusive, the offset the next record gets."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append(self, batch: bytearray, *, leader_epoch: int, now_ms: int) -> None:
        """Append one batch; the log assigns its offsets."""

    def read(self, offset: int, max_bytes: int):
        """Whole batches from the one holding `offset`, about `max_bytes` of them but at least one; empty
        at the log end."""

    def flush(self) -> None:
        """Make everything appended durable (fsync)."""


def metadata_log_config() -> LogConfig:
    """Settings for the log holding `__cluster_metadata-0`: nothing is deleted by retention (until
    snapshots exist, the log is the only copy of the metadata), and one operation's batch always fits."""
    return LogConfig(retention_ms=-1, retention_bytes=-1, max_message_bytes=METADATA_MAX_BATCH_BYTES)


class MetadataLog:
    """The metadata log and its committed image; see the module doc. `leader_epoch` (the quorum's epoch)
    is stamped on appended batches."""

    def __init__(self, storage: MetadataStorage, *, leader_epoch: int = 0) -> None:
        self.storage = storage
        self.leader_epoch = leader_epoch
        self.image = MetadataImage()
        self._failed: Exception | None = None

    @property
    def log_end_offset(self) -> int:
        return self.storage.log_end_offset

    def load(self) -> MetadataDelta:
        """Replay the whole log into a fresh image, which becomes the current one, and return the delta
        from the empty image to it (what a restart publishes). A record that does not decode
        (RemoteProtocolError) or replay (MetadataReplayError) stops the load: a node must not start on
        metadata it cannot read whole."""
        storage = self.storage
        delta = MetadataDelta(MetadataImage())
        offset = storage.log_start_offset
        while offset < storage.log_end_offset:
            data = storage.read(offset, _READ_BYTES)
            start = offset
            for pos, header in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                if not header.is_control:  # control batches carry the quorum's own records
                    batch = memoryview(data)[pos : pos + header.size]
                    for record in iter_records(batch, max_uncompressed_bytes=METADATA_MAX_BATCH_BYTES):
                        if record.value is None:
                            raise MetadataReplayError(f"metadata record at offset {record.offset} has no value")
                        delta.replay(decode_metadata_record(record.value))
                offset = header.next_offset
            if offset == start:
                raise MetadataReplayError(f"the metadata log returned no whole batch at offset {offset}")
        self.image = delta.apply()
        return delta

    def append(self, records: Sequence, now_ms: int) -> MetadataDelta:
        """Write `records` as one batch, make it durable, then publish the image they lead to. Returns
        the applied delta. A record the current image cannot take raises MetadataReplayError and writes
        nothing; a storage failure leaves the log refusing further appends (the broker must stop)."""
        if self._failed is not None:
            raise MetadataError(ErrorCode.KAFKA_STORAGE_ERROR, f"the metadata log failed: {self._failed}")
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        image = delta.apply()
        if not records:
            return delta
        batch = build_batch(
            [(None, encode_metadata_record(r), None, now_ms) for r in records],
            partition_leader_epoch=self.leader_epoch,
        )
        if len(batch) > METADATA_MAX_BATCH_BYTES:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"The operation needs {len(batch)} bytes of metadata records; a metadata batch holds at most "
                f"{METADATA_MAX_BATCH_BYTES}.",
            )
        try:
            self.storage.append(bytearray(batch), leader_epoch=self.leader_epoch, now_ms=now_ms)
            self.storage.flush()
        except Exception as e:
            self._failed = e
            raise
        self.image = image
        return delta
