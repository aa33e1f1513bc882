"""Share sessions (replication/share/session.py): Kafka's epoch rules, incremental partition lists, the
session limit and the end of a session with its connection."""

from __future__ import annotations

import uuid

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.replication.share import ShareSessionCache, ShareSessionError, next_epoch

T = uuid.uuid4()


def code(fn, *args) -> ErrorCode:
    with pytest.raises(ShareSessionError) as e:
        fn(*args)
    return e.value.error_code


def test_epochs_open_advance_and_close():
    cache = ShareSessionCache(10)
    session, replaced = cache.open("g", "m", [(T, 0), (T, 1)], "c1", 0)
    assert replaced is None and session.epoch == 1 and list(session.partitions) == [(T, 0), (T, 1)]
    cache.update("g", "m", 1, [(T, 2)], [(T, 0)], 5)
    assert list(session.partitions) == [(T, 1), (T, 2)] and session.epoch == 2 and session.last_used_ms == 5
    assert code(cache.update, "g", "m", 1, [], [], 6) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert code(cache.update, "g", "other", 1, [], [], 6) == ErrorCode.SHARE_SESSION_NOT_FOUND
    cache.acknowledged("g", "m", 2, 7)  # ShareAcknowledge moves the epoch on as well
    assert session.epoch == 3
    assert code(cache.acknowledged, "g", "m", 0, 7) == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert cache.acknowledged("g", "m", -1, 7) is session and session.epoch == 3  # final: checked, not moved
    assert cache.close("g", "m") is session and cache.get("g", "m") is None
    assert code(cache.expect_open, "g", "m") == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_epoch_wraps_to_one():
    assert next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1 and next_epoch(4) == 5


def test_reopen_replaces_and_limit():
    cache = ShareSessionCache(2)
    first, _ = cache.open("g", "a", [(T, 0)], "c1", 0)
    cache.open("g", "b", [(T, 0)], "c1", 0)
    assert code(cache.open, "g", "c", [], "c2", 0) == ErrorCode.SHARE_SESSION_LIMIT_REACHED
    again, replaced = cache.open("g", "a", [(T, 1)], "c2", 1)  # a member already here never counts twice
    assert replaced is first and len(cache) == 2 and cache.partition_count == 2


def test_sessions_end_with_their_connection():
    cache = ShareSessionCache(10)
    cache.open("g", "a", [(T, 0)], "c1", 0)
    cache.open("g", "b", [(T, 0)], "c1", 0)
    cache.open("g", "c", [(T, 0)], "c2", 0)
    cache.open("g", "b", [(T, 0)], "c3", 0)  # b moved to another connection: c1 closing leaves it alone
    assert [s.member_id for s in cache.disconnected("c1")] == ["a"]
    assert cache.evictions == 1 and {s.member_id for s in cache.sessions()} == {"b", "c"}
    assert cache.disconnected("c1") == []
