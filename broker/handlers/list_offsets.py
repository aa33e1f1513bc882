"""ListOffsets (2) and OffsetForLeaderEpoch (23): where a consumer may start, and where epochs end.

Per replica as in Kafka: the leader answers (a follower only the debugging replica id -2; see `_list_one`).
ListOffsets timestamps: -1 latest (the high watermark, or the last stable offset for read_committed),
-2 earliest, -3 the record with the largest timestamp (v7+), -4 earliest local (v8+; all data is local, so
the log start), -5 earliest pending upload (v9+; nothing is tiered: not found); any other value finds the
first record whose timestamp is at or after it, if below what the reader may fetch (the high watermark,
or the last stable offset for read_committed, as Kafka's lastFetchableOffset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, cast

from odradek.protocol.errors import ErrorCode, error_code_of
from odradek.protocol.messages import ListOffsetsResponse, OffsetForLeaderEpochResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.replication.errors import ReplicationError
from odradek.replication.partition import Partition
from odradek.storage.errors import StorageError
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest
    from ..context import RequestContext
    from ..services import BrokerServices

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2

LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
LPartition: TypeAlias = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse


class _OffsetNotAvailable(Exception):
    pass


def _log(partition: Partition) -> Log:
    """A hosted partition's log, which is a storage Log (Partition types its log only by the two offsets it
    reads itself, so that the replication simulation can give it an in-memory one)."""
    return cast(Log, partition.log)


def _list_one(services: BrokerServices, tp: TopicPartition, p, replica_id: int, isolation_level: int,
              version: int) -> LPartition:
    """As Kafka's Partition.fetchOffsetForTimestamp: only the leader answers, except to the debugging replica
    id (-2), which any replica answers; a consumer (-1) reads up to the high watermark (the last stable offset
    under read_committed), anyone else up to the log end. A leader whose high watermark has not yet reached
    the start of its epoch (just elected) answers OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5) for
    "latest" and for a found offset it cannot vouch for yet."""
    partition = services.data.get_partition(tp)
    if partition is None:
        if tp in services.data.offline_partitions:
            code = ErrorCode.KAFKA_STORAGE_ERROR
        elif services.partition_leader(tp.topic, tp.partition) is not None:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER  # in the image, not hosted here: as Kafka, not "unknown"
        else:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return LPartition(partition_index=p.partition_index, error_code=int(code))
    try:
        snap = partition.fetch_offset_snapshot(p.current_leader_epoch,
                                               fetch_only_from_leader=replica_id != DEBUGGING_REPLICA_ID)
    except (StorageError, ReplicationError) as e:
        return LPartition(partition_index=p.partition_index, error_code=error_code_of(e))
    log = _log(partition)
    if replica_id == CONSUMER_REPLICA_ID:
        last_fetchable = snap.last_stable_offset if isolation_level == 1 else snap.high_watermark
    else:
        last_fetchable = snap.log_end_offset
    try:
        ts, offset, epoch = -1, -1, -1
        if p.timestamp == LATEST:
            _check_available(partition, replica_id, snap)
            offset, epoch = last_fetchable, partition.leader_epoch
        elif p.timestamp in (EARLIEST, EARLIEST_LOCAL):
            offset = snap.log_start_offset
        elif p.timestamp == EARLIEST_PENDING_UPLOAD:
            offset = -1  # nothing is tiered
        else:
            found = log.fetch_offset_of_max_timestamp() if p.timestamp == MAX_TIMESTAMP else log.fetch_offset_by_timestamp(p.timestamp)
            if found is not None:
                if found.offset < last_fetchable:
                    ts, offset, epoch = found.timestamp, found.offset, found.leader_epoch
                else:
                    _check_available(partition, replica_id, snap)
        if offset >= 0 and epoch < 0 and p.timestamp != LATEST:
            epoch = log.epoch_for_offset(offset) if offset < snap.log_end_offset else partition.leader_epoch
    except _OffsetNotAvailable:
        code = ErrorCode.OFFSET_NOT_AVAILABLE if version >= 5 else ErrorCode.LEADER_NOT_AVAILABLE
        return LPartition(partition_index=p.partition_index, error_code=int(code))
    return LPartition(
        partition_index=p.partition_index, error_code=0,
        timestamp=ts, offset=offset, leader_epoch=epoch if version >= 4 else -1,
    )


def _check_available(partition, replica_id: int, snap) -> None:
    """A new leader's high watermark below the start of its epoch: what the previous leader had
    committed is not known here yet (Kafka's leaderEpochStartOffsetOpt check, for client requests)."""
    if replica_id != CONSUMER_REPLICA_ID or not partition.is_leader:
        return
    epoch_start = snap.log_end_offset  # no batch in this epoch yet: it starts at the log end
    for epoch, start in reversed(partition.log.leader_epoch_entries):
        if epoch == partition.leader_epoch:
            epoch_start = start
            break
        if epoch < partition.leader_epoch:
            break
    if epoch_start > snap.high_watermark:
        raise _OffsetNotAvailable


@handles(2)
def handle_list_offsets(services: BrokerServices, ctx: RequestContext, request: ListOffsetsRequest) -> Answer:
    topics = []
    allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in request.topics])
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if t.name not in allowed:
                parts.append(LPartition(partition_index=p.partition_index, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            elif services.topic_by_name(t.name) is None:
                parts.append(LPartition(partition_index=p.partition_index, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
            else:
                parts.append(_list_one(services, TopicPartition(t.name, p.partition_index), p, request.replica_id,
                                       request.isolation_level, ctx.api_version))
        topics.append(LTopic(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EPartition = ETopic.EpochEndOffset


@handles(23)
def handle_offset_for_leader_epoch(services: BrokerServices, ctx: RequestContext,
                                   request: OffsetForLeaderEpochRequest) -> Answer:
    topics = []
    allowed = (set(t.topic for t in request.topics)
               if services.authorized(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, log_denied=False)
               else services.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, [t.topic for t in request.topics]))
    for t in request.topics:
        parts = []
        for p in t.partitions:
            partition = services.data.get_partition(TopicPartition(t.topic, p.partition))
            if t.topic not in allowed:
                parts.append(EPartition(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), partition=p.partition))
                continue
            if partition is None:
                parts.append(EPartition(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), partition=p.partition))
                continue
            try:
                partition.check_leader_epoch(p.current_leader_epoch)
            except (StorageError, ReplicationError) as e:
                parts.append(EPartition(error_code=error_code_of(e), partition=p.partition))
                continue
            epoch, end_offset = _log(partition).end_offset_for_epoch(p.leader_epoch)
            parts.append(EPartition(error_code=0, partition=p.partition, leader_epoch=epoch, end_offset=end_offset))
        topics.append(ETopic(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
