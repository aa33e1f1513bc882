"""Errors raised by the replication layer, each carrying the Kafka error code the broker answers with.

As in storage/errors.py, every exception a caller can answer a client with has an `error_code` class
attribute (a member of protocol's `ErrorCode`), so the broker maps storage and replication errors the same
way. A follower position past the leader's log end raises storage's `OffsetOutOfRangeError`.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode, KafkaApiError

__all__ = [
    "FencedLeaderEpochError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "ReplicationError",
    "UnknownLeaderEpochError",
]


class ReplicationError(KafkaApiError):
    """Base of every replication-layer error."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR


class NotLeaderOrFollowerError(ReplicationError):
    """The partition is not hosted here, or not led here when the request needs the leader."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class NotEnoughReplicasError(ReplicationError):
    """acks=all refused before appending: the ISR is smaller than min.insync.replicas."""

    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class FencedLeaderEpochError(ReplicationError):
    """The request names an older leader epoch than this broker's: the sender's metadata is stale."""

    error_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(ReplicationError):
    """The request names a newer leader epoch than this broker has seen yet."""

    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
