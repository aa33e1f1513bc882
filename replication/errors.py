"""Kafka error codes answered by the replication layer, and the exception that carries one.

Names and numbers are Kafka's (org.apache.kafka.common.protocol.Errors). Only the codes this layer
produces are listed; when the protocol layer's complete table lands, this enum should become an import
of it so that there is one table.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ApiError", "ErrorCode"]


class ErrorCode(IntEnum):
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75


class ApiError(Exception):
    """A request for one partition fails with `error_code` (Kafka's ApiException)."""

    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{error_code.name}: {message}" if message else error_code.name)
        self.error_code = error_code
