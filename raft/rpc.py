"""The quorum's RPCs on the wire: the metadata partition's names, the API versions the core speaks, and
the shapes of the requests and responses it builds.

KRaft's peers speak Kafka's own messages (KIP-595): Vote (with KIP-996's pre_vote flag), Begin- and
EndQuorumEpoch, Fetch and FetchSnapshot on partition 0 of `__cluster_metadata`, and DescribeQuorum.
Each carries one topic with one partition; every response names the responder's leader and epoch,
which is how news of an epoch travels (see `RaftNode._handle_common`). The builders here hold only the
wire shapes; what goes into them (our epoch, the leader we name, our log's end) is the core's to say.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    VoteRequest,
    VoteResponse,
)
from odradek.raft.log import SnapshotId

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
# Kafka's Uuid.METADATA_TOPIC_ID (new Uuid(0L, 1L)): Fetch v13+ names the metadata topic by it.
METADATA_TOPIC_ID = uuid.UUID(int=1)

FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, DESCRIBE_QUORUM, FETCH_SNAPSHOT = 1, 52, 53, 54, 55, 59
# The versions a Kafka 4.x controller sends and accepts (Vote v2 carries PreVote; Fetch v18 carries the
# fetcher's high watermark, KIP-1166, added in 4.1: see `RaftNode._on_fetch_request`).
API_VERSIONS: dict[int, int] = {
    FETCH: 18,
    VOTE: 2,
    BEGIN_QUORUM_EPOCH: 1,
    END_QUORUM_EPOCH: 1,
    DESCRIBE_QUORUM: 2,
    FETCH_SNAPSHOT: 1,
}

# Control record type of Kafka's LeaderChangeMessage (ControlRecordType.LEADER_CHANGE).
LEADER_CHANGE_CONTROL_TYPE = 2


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def leader_change_record(leader_id: int, voters: Sequence[int], granting: Sequence[int]) -> tuple[bytes, bytes]:
    """Key and value of Kafka's LeaderChangeMessage control record (version 0, a flexible struct)."""
    key = (0).to_bytes(2, "big") + LEADER_CHANGE_CONTROL_TYPE.to_bytes(2, "big")
    value = bytearray((0).to_bytes(2, "big"))
    value += leader_id.to_bytes(4, "big", signed=True)
    for ids in (voters, granting):
        value += _uvarint(len(ids) + 1)
        for v in ids:
            value += v.to_bytes(4, "big", signed=True) + b"\x00"
    value += b"\x00"
    return key, bytes(value)


def vote_request(*, cluster_id: str | None, candidate_id: int, epoch: int, last_epoch: int, end_offset: int,
                 voter: int, pre_vote: bool) -> VoteRequest:
    partition = VoteRequest.TopicData.PartitionData(
        partition_index=METADATA_PARTITION,
        replica_epoch=epoch,
        replica_id=candidate_id,
        last_offset_epoch=last_epoch,
        last_offset=end_offset,
        pre_vote=pre_vote,
    )
    return VoteRequest(cluster_id=cluster_id, voter_id=voter,
                       topics=[VoteRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def vote_response(error: ErrorCode, granted: bool, pre_vote: bool, *, leader_id: int, epoch: int,
                  top_error: ErrorCode = ErrorCode.NONE) -> VoteResponse:
    partition = VoteResponse.TopicData.PartitionData(
        partition_index=METADATA_PARTITION, error_code=error, leader_id=leader_id,
        leader_epoch=epoch, vote_granted=granted, pre_vote=pre_vote,
    )
    return VoteResponse(error_code=top_error,
                        topics=[VoteResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def begin_quorum_epoch_request(*, cluster_id: str | None, leader_id: int, epoch: int,
                               voter: int) -> BeginQuorumEpochRequest:
    partition = BeginQuorumEpochRequest.TopicData.PartitionData(
        partition_index=METADATA_PARTITION, leader_id=leader_id, leader_epoch=epoch)
    return BeginQuorumEpochRequest(
        cluster_id=cluster_id, voter_id=voter,
        topics=[BeginQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def end_quorum_epoch_request(*, cluster_id: str | None, leader_id: int, epoch: int,
                             preferred: list[int]) -> EndQuorumEpochRequest:
    P = EndQuorumEpochRequest.TopicData.PartitionData
    partition = P(partition_index=METADATA_PARTITION, leader_id=leader_id, leader_epoch=epoch,
                  # v1 names successors in preferred_candidates; preferred_successors is v0's field.
                  preferred_candidates=[P.ReplicaInfo(candidate_id=v) for v in preferred])
    return EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=[EndQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def epoch_response(cls, error: ErrorCode, *, leader_id: int, epoch: int, top_error: ErrorCode = ErrorCode.NONE):
    """A Begin- or EndQuorumEpochResponse (`cls`): they have the same shape."""
    partition = cls.TopicData.PartitionData(partition_index=METADATA_PARTITION, error_code=error,
                                            leader_id=leader_id, leader_epoch=epoch)
    return cls(error_code=top_error, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])])


def fetch_request(*, cluster_id: str | None, replica_id: int, epoch: int, fetch_offset: int, last_fetched_epoch: int,
                  log_start_offset: int, max_bytes: int, max_wait_ms: int, high_watermark: int) -> FetchRequest:
    """A follower's (or observer's) Fetch. `high_watermark` is the one it knows (KIP-1166's v18 tag): the
    leader answers at once, instead of parking the fetch, when its own is higher."""
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=METADATA_PARTITION,
        current_leader_epoch=epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        log_start_offset=log_start_offset,
        partition_max_bytes=max_bytes,
        high_watermark=high_watermark,
    )
    return FetchRequest(
        cluster_id=cluster_id,
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=max_wait_ms,
        min_bytes=0,
        max_bytes=max_bytes,
        topics=[FetchRequest.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[partition])],
    )


def fetch_error_response(error: ErrorCode, *, leader_id: int, epoch: int,
                         top_error: ErrorCode = ErrorCode.NONE) -> FetchResponse:
    PD = FetchResponse.FetchableTopicResponse.PartitionData
    partition = PD(partition_index=METADATA_PARTITION, error_code=error, high_watermark=-1,
                   current_leader=PD.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=epoch),
                   records=b"")
    return FetchResponse(error_code=top_error, responses=[FetchResponse.FetchableTopicResponse(
        topic_id=METADATA_TOPIC_ID, partitions=[partition])])


def fetch_snapshot_request(*, cluster_id: str | None, replica_id: int, epoch: int, snapshot_id: SnapshotId,
                           position: int, max_bytes: int) -> FetchSnapshotRequest:
    P = FetchSnapshotRequest.TopicSnapshot.PartitionSnapshot
    partition = P(partition=METADATA_PARTITION, current_leader_epoch=epoch,
                  snapshot_id=P.SnapshotId(end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch),
                  position=position)
    return FetchSnapshotRequest(
        cluster_id=cluster_id, replica_id=replica_id, max_bytes=max_bytes,
        topics=[FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[partition])])
