"""Share sessions (KIP-932; Kafka's ShareSession and ShareSessionCache): what a share consumer fetches from
one broker, named once and then changed incrementally.

A share consumer keeps one session per broker it fetches from, keyed by (group id, member id). Its
ShareFetch and ShareAcknowledge requests carry a session epoch:

* 0 opens a session (replacing any the member had here) naming the partitions it fetches. An opening
  ShareFetch may not carry acknowledgements (there is nothing it could have acquired in a session that did
  not exist: INVALID_REQUEST), and a ShareAcknowledge may not open a session (INVALID_SHARE_SESSION_EPOCH).
  When `group.share.max.share.sessions` sessions are open on this broker, a new one is refused with
  SHARE_SESSION_LIMIT_REACHED (the client retries later; a member that already has a session here replaces
  it and so never counts twice).
* every later request carries the epoch after the last one (1, 2, ..., wrapping from 2^31-1 to 1), and may
  add partitions (those it names) or drop them (`forgotten_topics_data`); a ShareFetch then fetches every
  partition of the session, not only the ones it names. An epoch other than the expected one is
  INVALID_SHARE_SESSION_EPOCH; a session this broker does not have is SHARE_SESSION_NOT_FOUND (the client
  opens a new one with epoch 0).
* -1 closes it: the request's acknowledgements are applied, nothing is fetched (a closing ShareFetch that
  asks for partitions is INVALID_REQUEST) and the member's acquired records on this broker are released at
  once rather than at their locks' expiry.

A session also ends when the connection that opened it closes (Kafka 4.1's ShareSessionCache listens to
disconnects): the member's locks are released then too, so a consumer that dies gives its records back as
soon as the broker sees its socket close; one that hangs holds them until the lock duration passes.

The cache is pure: no clock (time is an argument, kept only to show how long a session has been idle), no
I/O; the broker owns one and reacts to what its methods return.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from odradek.protocol.errors import ErrorCode

from ..errors import ReplicationError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 0x7FFFFFFF

SharePartitionId = tuple[uuid.UUID, int]  # (topic id, partition index): how requests name a partition


def next_epoch(epoch: int) -> int:
    """The epoch a session expects after `epoch` (Kafka's ShareRequestMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class ShareSessionError(ReplicationError):
    """A request refused for its session: SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED or INVALID_REQUEST, answered as the request's top-level error."""

    def __init__(self, error_code: ErrorCode, message: str):
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class ShareSession:
    """One member's session on this broker. `epoch` is the epoch its next request must carry."""

    group_id: str
    member_id: str
    connection_id: str
    epoch: int
    created_ms: int
    last_used_ms: int
    # Insertion-ordered: the order the partitions were named in, which is the order they are fetched in.
    partitions: dict[SharePartitionId, None] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return self.group_id, self.member_id


class ShareSessionCache:
    """The share sessions of one broker (see the module docstring), at most `max_sessions` of them."""

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, not {max_sessions}")
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._by_connection: dict[str, set[tuple[str, str]]] = {}
        self.evictions = 0  # sessions ended by their connection closing (Kafka's ShareSessionEvictionsPerSec)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    @property
    def partition_count(self) -> int:
        """Partitions named by all sessions (Kafka's SharePartitionsCount)."""
        return sum(len(s.partitions) for s in self._sessions.values())

    # ---- ShareFetch -----------------------------------------------------------------------------------

    def open(self, group_id: str, member_id: str, partitions: Iterable[SharePartitionId], connection_id: str,
             now_ms: int) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session for the member, replacing the one it had here (returned second, so the
        caller releases what that one held). SHARE_SESSION_LIMIT_REACHED when the cache is full."""
        key = (group_id, member_id)
        replaced = self._sessions.get(key)
        if replaced is None and len(self._sessions) >= self.max_sessions:
            raise ShareSessionError(
                ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                f"this broker has {len(self._sessions)} share sessions, group.share.max.share.sessions")
        if replaced is not None:
            self._forget(replaced)
        session = ShareSession(group_id, member_id, connection_id, next_epoch(INITIAL_EPOCH), now_ms, now_ms,
                               dict.fromkeys(partitions))
        self._sessions[key] = session
        self._by_connection.setdefault(connection_id, set()).add(key)
        return session, replaced

    def update(self, group_id: str, member_id: str, epoch: int, added: Iterable[SharePartitionId],
               forgotten: Iterable[SharePartitionId], now_ms: int) -> ShareSession:
        """A later ShareFetch (epoch > 0): checks the epoch, adds and forgets partitions, moves the epoch on."""
        session = self._expect(group_id, member_id, epoch)
        for p in forgotten:
            session.partitions.pop(p, None)
        for p in added:
            session.partitions.setdefault(p, None)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return session

    # ---- ShareAcknowledge -----------------------------------------------------------------------------

    def acknowledged(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ShareSession:
        """A ShareAcknowledge's epoch (Kafka's acknowledgeSessionUpdate): 0 cannot open a session, -1 needs
        one (the caller closes it after applying the acknowledgements), others must be the next epoch."""
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    "ShareAcknowledge cannot open a share session (epoch 0)")
        if epoch == FINAL_EPOCH:
            session = self._sessions.get((group_id, member_id))
            if session is None:
                raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                        f"no share session for member {member_id} of group {group_id} here")
            return session
        session = self._expect(group_id, member_id, epoch)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return session

    # ---- ending ---------------------------------------------------------------------------------------

    def expect_open(self, group_id: str, member_id: str) -> ShareSession:
        """Epoch -1 on ShareFetch: the session must exist (SHARE_SESSION_NOT_FOUND)."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                    f"no share session for member {member_id} of group {group_id} here")
        return session

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """Remove the member's session (epoch -1, or the member left the group); None when it had none."""
        session = self._sessions.get((group_id, member_id))
        if session is not None:
            self._forget(session)
        return session

    def disconnected(self, connection_id: str) -> list[ShareSession]:
        """The connection closed: the sessions it opened end (their members' locks are to be released)."""
        ended = []
        for key in sorted(self._by_connection.pop(connection_id, ())):
            session = self._sessions.get(key)
            if session is not None and session.connection_id == connection_id:
                del self._sessions[key]
                ended.append(session)
        self.evictions += len(ended)
        return ended

    def _expect(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise ShareSessionError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                                    f"no share session for member {member_id} of group {group_id} here")
        if session.epoch != epoch:
            raise ShareSessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                                    f"share session epoch {epoch}, expected {session.epoch}")
        return session

    def _forget(self, session: ShareSession) -> None:
        del self._sessions[session.key]
        keys = self._by_connection.get(session.connection_id)
        if keys is not None:
            keys.discard(session.key)
            if not keys:
                del self._by_connection[session.connection_id]
