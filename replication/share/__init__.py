"""Share groups on the partition leader (KIP-932): the share-partition state machine.

`partition.SharePartition` and `session.ShareSessionCache` are pure: they take time as an argument, own no
timer and no I/O. The broker layer (broker/share/manager.py) owns one session cache, the ShareFetch/
ShareAcknowledge handlers, the lock timer (driven by `SharePartition.next_deadline()`) and the calls to the
share coordinator that persist `snapshot()`.
"""

from .partition import (
    AcknowledgeType,
    AcquiredRange,
    DeadLetter,
    DeadLetterCause,
    RecordState,
    SharePartition,
    SharePartitionError,
    ShareSnapshot,
    StateBatch,
)
from .session import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, ShareSessionCache, ShareSessionError, next_epoch

__all__ = [
    "AcknowledgeType",
    "AcquiredRange",
    "DeadLetter",
    "DeadLetterCause",
    "RecordState",
    "SharePartition",
    "SharePartitionError",
    "ShareSnapshot",
    "StateBatch",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionError",
    "next_epoch",
]
