"""The persisted election state, Kafka's `quorum-state` file.

Raft needs three facts to survive a crash: the current epoch, whom this node voted for in it, and the
leader it knows of. Kafka keeps them as JSON in `__cluster_metadata-0/quorum-state` (QuorumStateData):

    {"leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,"currentVoters":[{"voterId":1},...],
     "data_version":0}

Version 1 (KIP-853) drops currentVoters (they live in the log) and adds votedDirectoryId; we write
version 0 because our voter set is static (controller.quorum.voters) and read both.

A store's `write` is durable when it returns: the core persists a vote before it answers the Vote
request, and a new epoch before it acts in it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Protocol

NO_ID = -1


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    leader_epoch: int = 0
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    current_voters: tuple[int, ...] = ()
    cluster_id: str = ""

    def to_json(self) -> str:
        return json.dumps({
            "clusterId": self.cluster_id,
            "leaderId": self.leader_id,
            "leaderEpoch": self.leader_epoch,
            "votedId": self.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self.current_voters],
            "data_version": 0,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> QuorumStateData:
        raw = json.loads(text)
        version = raw.get("data_version", 0)
        if version not in (0, 1):
            raise ValueError(f"unknown quorum-state data_version {version}")
        return cls(
            leader_epoch=int(raw["leaderEpoch"]),
            leader_id=int(raw.get("leaderId", NO_ID)),
            voted_id=int(raw.get("votedId", NO_ID)),
            current_voters=tuple(int(v["voterId"]) for v in raw.get("currentVoters") or ()),
            cluster_id=raw.get("clusterId", "") or "",
        )


class QuorumStateStore(Protocol):
    def read(self) -> QuorumStateData | None: ...
    def write(self, state: QuorumStateData) -> None: ...


class MemoryQuorumStateStore:
    """Holds the last written state; as durable as the object (the simulation keeps it across crashes)."""

    def __init__(self, state: QuorumStateData | None = None) -> None:
        self.state = state
        self.writes = 0

    def read(self) -> QuorumStateData | None:
        return self.state

    def write(self, state: QuorumStateData) -> None:
        self.state = state
        self.writes += 1


class FileQuorumStateStore:
    """`quorum-state` on disk: written to a temporary file, fsynced, renamed over, directory fsynced."""

    FILE_NAME = "quorum-state"

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, self.FILE_NAME)

    def read(self) -> QuorumStateData | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                return QuorumStateData.from_json(f.read())
        except FileNotFoundError:
            return None

    def write(self, state: QuorumStateData) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(state.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
