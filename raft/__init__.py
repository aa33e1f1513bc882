"""The KRaft controller quorum: a sans-I/O Raft core (`core.RaftNode`) over Kafka's own RPCs, its roles
as one object each with the one table of moves between them (`state`, `leader`), the log's epoch
history (`epochs`), the RPCs' wire shapes (`rpc`), and the log and quorum-state interfaces it is driven
through (`log`, `quorum_state`)."""

from odradek.raft.core import (
    API_VERSIONS,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    CommittedBatch,
    NotLeaderError,
    Outbound,
    OutboundRequest,
    OutboundResponse,
    RaftConfig,
    RaftInvariantError,
    RaftListener,
    RaftNode,
    ReplicaState,
    Role,
)
from odradek.raft.state import TRANSITIONS, IllegalTransitionError, check_transition
from odradek.raft.log import AppendedRange, MemoryRaftLog, RaftLog, SnapshotId
from odradek.raft.storage_log import StorageRaftLog
from odradek.raft.quorum_state import (
    FileQuorumStateStore,
    MemoryQuorumStateStore,
    QuorumStateData,
    QuorumStateStore,
)

__all__ = [
    "API_VERSIONS", "METADATA_TOPIC", "METADATA_TOPIC_ID", "AppendedRange", "CommittedBatch",
    "FileQuorumStateStore", "IllegalTransitionError", "MemoryQuorumStateStore", "MemoryRaftLog", "NotLeaderError", "Outbound",
    "OutboundRequest", "OutboundResponse", "QuorumStateData", "QuorumStateStore", "RaftConfig",
    "RaftInvariantError", "RaftListener", "RaftLog", "RaftNode", "ReplicaState", "Role", "SnapshotId",
    "StorageRaftLog", "TRANSITIONS", "check_transition",
]
