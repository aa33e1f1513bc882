"""Kafka's error codes: the numbers are wire facts, and the retriable / refresh-metadata flags drive retries."""

from __future__ import annotations

import pytest

from odradek.protocol.errors import INVALID_METADATA_ERRORS, RETRIABLE_ERRORS, ErrorCode


@pytest.mark.parametrize(
    "name,code",
    [
        ("UNKNOWN_SERVER_ERROR", -1),
        ("NONE", 0),
        ("OFFSET_OUT_OF_RANGE", 1),
        ("CORRUPT_MESSAGE", 2),
        ("UNKNOWN_TOPIC_OR_PARTITION", 3),
        ("NOT_LEADER_OR_FOLLOWER", 6),
        ("REQUEST_TIMED_OUT", 7),
        ("MESSAGE_TOO_LARGE", 10),
        ("NOT_COORDINATOR", 16),
        ("REBALANCE_IN_PROGRESS", 27),
        ("UNSUPPORTED_VERSION", 35),
        ("INVALID_REQUEST", 42),
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45),
        ("KAFKA_STORAGE_ERROR", 56),
        ("UNKNOWN_PRODUCER_ID", 59),
        ("FENCED_LEADER_EPOCH", 74),
        ("MEMBER_ID_REQUIRED", 79),
        ("PRODUCER_FENCED", 90),
        ("UNKNOWN_TOPIC_ID", 100),
        ("FENCED_MEMBER_EPOCH", 110),
        ("TRANSACTION_ABORTABLE", 120),
        ("VOTER_NOT_FOUND", 127),
        ("REBOOTSTRAP_REQUIRED", 129),
        ("SHARE_SESSION_LIMIT_REACHED", 133),
    ],
)
def test_well_known_numbers(name, code):
    assert ErrorCode[name] == code
    assert ErrorCode(code).name == name


def test_codes_are_dense_from_minus_one_to_133():
    assert sorted(int(e) for e in ErrorCode) == list(range(-1, 134))


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.SHARE_SESSION_LIMIT_REACHED,
    ],
)
def test_retriable(error):
    assert error.retriable


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.NONE,
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.FENCED_MEMBER_EPOCH,
        ErrorCode.TRANSACTION_ABORTABLE,
        ErrorCode.REBOOTSTRAP_REQUIRED,
    ],
)
def test_not_retriable(error):
    assert not error.retriable


def test_invalid_metadata():
    for error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
    ):
        assert error.invalid_metadata, error
    for error in (ErrorCode.NONE, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_COORDINATOR):
        assert not error.invalid_metadata, error


def test_sets_on_the_class():
    assert ErrorCode.retriable == RETRIABLE_ERRORS
    assert ErrorCode.invalid_metadata == INVALID_METADATA_ERRORS
    # Refreshing metadata is a way of retrying: every such code is also retriable.
    assert INVALID_METADATA_ERRORS <= RETRIABLE_ERRORS
    assert "retriable" not in ErrorCode.__members__


def test_for_code_maps_unknown_codes_to_unknown_server_error():
    assert ErrorCode.for_code(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ErrorCode.for_code(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
