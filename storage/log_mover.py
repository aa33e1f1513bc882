"""Copying a replica's log into its future log in another directory (AlterReplicaLogDirs), step by step.

Theory of operation
-------------------
Kafka moves a replica between the directories of one broker with a "future replica" that fetches from the
current one, as a follower fetches from a leader (ReplicaAlterLogDirsThread). Here one `copy_step` is one
such fetch, without a socket: it reads up to `max_bytes` of whole batches at the future log's end from the
current log and appends them as a follower appends (offsets, leader epochs and producer state kept). The
current log keeps being written meanwhile; the caller runs steps until one says the future log has caught
up, and then swaps it in (LogManager.replace_current_with_future) in the same step of its thread, so no
append falls between the check and the swap.

What the current log does meanwhile is followed:

  * its log start offset moves (retention, DeleteRecords): the future log's follows it;
  * it is truncated (a follower meeting a new leader's history): the future log then holds records the
    current one no longer has, possibly re-written at the same offsets in a newer epoch. The future log's
    last epoch, looked up in the current log's epoch history (as KIP-320 does for followers), ends earlier
    there, or the future log is longer: the copy starts over from the current log start (a truncation is
    rare; starting over is simple and surely right).

When caught up, the epoch history entries the batches do not carry (an epoch begun without a batch yet)
are copied too, so the moved replica answers OffsetForLeaderEpoch as the current one did.
"""

from __future__ import annotations

from .log import Log
from .errors import UnexpectedAppendOffsetError
from .segment import read_regions

__all__ = ["copy_step"]


def _diverged(current: Log, future: Log) -> bool:
    if future.log_end_offset > current.log_end_offset:
        return True
    if future.log_end_offset <= future.log_start_offset:
        return False
    epoch = future.latest_epoch
    if epoch < 0:
        return False
    found_epoch, end_offset = current.end_offset_for_epoch(epoch)
    return found_epoch != epoch or end_offset < future.log_end_offset


def copy_step(current: Log, future: Log, *, max_bytes: int, now_ms: int) -> bool:
    """Copy up to `max_bytes` from `current` into `future`; True when `future` holds all of `current`
    (same log start and end offsets and epoch history), ready to be swapped in."""
    if _diverged(current, future) or future.log_end_offset < current.log_start_offset:
        future.truncate_fully_and_start_at(current.log_start_offset, now_ms=now_ms)
    elif future.log_start_offset < current.log_start_offset:
        future.delete_records_before(current.log_start_offset, now_ms=now_ms)
    end = current.log_end_offset
    if future.log_end_offset < end:
        info = current.read(future.log_end_offset, max_bytes, max_offset=end, min_one_message=True)
        data = read_regions(info.regions)
        if data:
            try:
                future.append_as_follower(bytearray(data), now_ms=now_ms)
            except UnexpectedAppendOffsetError:
                if future.log_end_offset != future.log_start_offset:
                    raise
                # The current log starts inside its first batch (DeleteRecords): the future log starts at
                # that batch, as Kafka's appendRecordsToFollowerOrFutureReplica does, and then follows
                # the log start offset up.
                future.truncate_fully_and_start_at(int.from_bytes(data[:8], "big"), now_ms=now_ms)
                future.append_as_follower(bytearray(data), now_ms=now_ms)
                future.delete_records_before(current.log_start_offset, now_ms=now_ms)
    if future.log_end_offset != end or future.log_start_offset != current.log_start_offset:
        return False
    latest = future.latest_epoch
    for epoch, start_offset in current.leader_epoch_entries:
        if epoch > latest:
            future.assign_epoch_start_offset(epoch, start_offset)
    return True
