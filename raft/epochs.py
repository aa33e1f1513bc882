"""Where two logs agree: the replicated log's epoch history, as the Raft core reads it.

Every batch carries the epoch of the leader that appended it, and a log's (epoch, end offset) pairs
name its history: two logs that hold a batch at the same offset in the same epoch agree on everything
below it (Raft's log matching property; KIP-595 checks it per fetch instead of per AppendEntries). So a
follower's Fetch says (fetch offset, last fetched epoch), and the leader answers from these views:

  * `validate_offset_and_epoch` (Kafka's ReplicatedLog.validateOffsetAndEpoch): VALID when the pair is
    a prefix of our log; DIVERGING with the end of that epoch in our log, where the follower must
    truncate to; SNAPSHOT when the follower is below our log start (or before the snapshot's epoch)
    and must load our snapshot instead.
  * `end_offset_for_epoch` (KafkaMetadataLog.endOffsetForEpoch): the leader-epoch cache's answer, with
    the snapshot at the log start standing in for epochs whose batches were removed below it.
  * `truncation_offset`: a follower's side of DIVERGING (ReplicatedLog.truncateToEndOffset).
  * `log_up_to_date`: the vote rule; a voter grants only a candidate whose (last epoch, end offset) is
    at least its own, so a leader always holds every committed record.

All are pure reads of a `RaftLog`.
"""

from __future__ import annotations

from enum import IntEnum

from odradek.raft.log import RaftLog


class Validity(IntEnum):
    VALID = 0
    DIVERGING = 1
    SNAPSHOT = 2


def last_epoch(log: RaftLog) -> int:
    """The epoch of the log's last batch, or of its snapshot when the log holds no batch."""
    epoch = log.latest_epoch
    if epoch >= 0:
        return epoch
    snapshot = log.latest_snapshot_id()
    return snapshot.epoch if snapshot is not None else 0


def end_offset_for_epoch(log: RaftLog, epoch: int) -> tuple[int, int]:
    """(epoch, end offset) of the largest epoch <= `epoch` the log knows, the snapshot at the log start
    standing in for the epochs the log no longer holds."""
    found_epoch, found_offset = log.end_offset_for_epoch(epoch)
    if found_offset < 0:
        return last_epoch(log), log.log_end_offset
    snapshot = log.latest_snapshot_id()
    if (snapshot is not None and snapshot.end_offset == log.log_start_offset
            and found_offset == snapshot.end_offset and found_epoch == epoch):
        return snapshot.epoch, snapshot.end_offset
    return found_epoch, found_offset


def validate_offset_and_epoch(log: RaftLog, offset: int, epoch: int) -> tuple[Validity, int, int]:
    """Is (fetch offset, last fetched epoch) a prefix of our log? With the (offset, epoch) to answer."""
    start = log.log_start_offset
    if start == 0 and offset == 0:
        return Validity.VALID, 0, 0
    snapshot = log.latest_snapshot_id()
    if snapshot is not None and start > 0 and (
        offset < start or (offset == start and epoch != snapshot.epoch) or epoch < snapshot.epoch
    ):
        return Validity.SNAPSHOT, snapshot.end_offset, snapshot.epoch
    end_epoch, end_offset = end_offset_for_epoch(log, epoch)
    if end_epoch != epoch or end_offset < offset:
        return Validity.DIVERGING, end_offset, end_epoch
    return Validity.VALID, offset, epoch


def truncation_offset(log: RaftLog, end_offset: int, epoch: int) -> int:
    """Where a follower cuts its log when the leader says its `epoch` ends at `end_offset`. When we hold
    that epoch, cut where the shorter of the two ends; when we do not, cut at the end of our largest
    epoch below it (a batch boundary of ours) and let the next fetch, asking about that epoch, find the
    rest."""
    if epoch == 0:
        return min(end_offset, log.log_end_offset)
    local_epoch, local_end = end_offset_for_epoch(log, epoch)
    return min(local_end, end_offset) if local_epoch == epoch else local_end


def log_up_to_date(log: RaftLog, candidate_last_epoch: int, candidate_end_offset: int) -> bool:
    """The vote rule: the candidate's log is at least as up to date as ours."""
    return (candidate_last_epoch, candidate_end_offset) >= (last_epoch(log), log.log_end_offset)
