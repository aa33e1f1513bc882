"""The leader-epoch cache: which leader epoch began at which offset, persisted to leader-epoch-checkpoint.

Entries `(epoch, start_offset)` ascend in both fields. The log assigns an entry when it appends a batch
whose partitionLeaderEpoch is newer than the latest one; truncation trims entries from the end, and an
advancing log start offset trims them from the start. `end_offset_for(epoch)` answers OffsetsForLeaderEpoch
with Kafka's semantics: the end offset of an epoch is the start offset of the next higher epoch, the log
end offset for the latest epoch, and `(-1, -1)` for an unknown or future epoch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from .checkpoints import LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, checkpoint: LeaderEpochCheckpointFile, *, durable: Callable[[], bool] | None = None,
                 read: bool = True) -> None:
        """`durable` says whether a change must reach the disk now (written and fsynced, as Kafka's assign
        does); when it says no, the checkpoint is written without fsync and the owner makes it durable
        later (the log: with its first flush that covers data, see Log.flush). None: always. `read` False:
        the owner knows there is no checkpoint yet (a log directory it just made)."""
        self._checkpoint = checkpoint
        self._durable = durable
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in checkpoint.read() if read else ():
            self._epochs.append(epoch)
            self._offsets.append(offset)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def _flush(self) -> None:
        if self._durable is None:  # (raft's in-memory log hands a checkpoint stand-in without the fsync choice)
            self._checkpoint.write(self.entries)
        else:
            self._checkpoint.write(self.entries, fsync=self._durable())

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`. Entries that contradict it (an epoch not below it,
        a start offset not below it) are removed. Returns whether anything changed."""
        if epoch < 0:
            return False
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._offsets[-1]:
            return False
        keep = 0
        while keep < len(self._epochs) and self._epochs[keep] < epoch and self._offsets[keep] < start_offset:
            keep += 1
        del self._epochs[keep:], self._offsets[keep:]
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._flush()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds `offset` (-1 if the offset precedes every entry)."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after `end_offset` (the log was truncated there)."""
        i = bisect.bisect_left(self._offsets, end_offset)
        if i < len(self._offsets):
            del self._epochs[i:], self._offsets[i:]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop entries wholly below it and move the one spanning it."""
        i = bisect.bisect_right(self._offsets, start_offset)
        if i == 0 or (i == 1 and self._offsets[0] == start_offset):
            return
        epoch = self._epochs[i - 1]
        del self._epochs[:i], self._offsets[:i]
        self._epochs.insert(0, epoch)
        self._offsets.insert(0, start_offset)
        self._flush()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self._flush()
