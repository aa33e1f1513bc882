"""Share groups on the partition leader (KIP-932): the share-partition state machine.

`partition.SharePartition` is pure: it takes time as an argument, owns no timer and no I/O. The broker
layer will own the share sessions, the ShareFetch/ShareAcknowledge handlers, the lock timer (driven by
`SharePartition.next_deadline()`) and the calls to the share coordinator that persist `snapshot()`.
"""

from .partition import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionError,
    ShareSnapshot,
    StateBatch,
)

__all__ = [
    "AcknowledgeType",
    "AcquiredRange",
    "RecordState",
    "SharePartition",
    "SharePartitionError",
    "ShareSnapshot",
    "StateBatch",
]
