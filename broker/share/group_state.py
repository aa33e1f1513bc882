"""The group coordinator's share-partition state requests, carried out through the broker's persister.

The group coordinator decides, in its records, which share-partitions need a state with the share
coordinator (coordinator/group/share_state.py); it cannot await anything. This is its broker-side half,
Kafka's GroupCoordinatorService.persisterInitialize: each `Initialization` the coordinator hands over (once
its `initializing` record is durable) becomes one InitializeShareGroupState per partition through the
`SharePersister`, and the answers go back to the coordinator as one write, which moves the partitions to
`initialized` or, on an error, out of `initializing` so that the next heartbeat asks again (after
`group.share.initialize.retry.interval.ms` if the answer is lost altogether, e.g. the broker stopped).

A member's heartbeat is answered as soon as its own records are durable, without waiting for the
persister, as in Kafka (the initialization runs "async with respect to the heartbeat"); the
share-partition leader reads the state when it first serves the partition and finds it initialized, or
uninitialized (start offset -1), which it treats the same way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import structlog

from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.share_state import Initialization
from odradek.protocol.errors import ErrorCode

from .persister import SharePartitionKey, SharePersister

__all__ = ["ShareStateInitializer"]

log = structlog.get_logger("odradek.broker.share")


class ShareStateInitializer:
    """Sends the group coordinator's Initializations through the persister (see the module doc)."""

    def __init__(self, groups: GroupCoordinator, persister: SharePersister, clock: Callable[[], int]) -> None:
        self.groups = groups
        self.persister = persister
        self.clock = clock
        self._tasks: set[asyncio.Task] = set()
        self.initialized = 0  # share-partitions initialized, and failed, since start (metrics, tests)
        self.failed = 0

    def __call__(self, initialization: Initialization) -> None:
        task = asyncio.get_running_loop().create_task(self.initialize(initialization))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def initialize(self, initialization: Initialization) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Initialize every partition of `initialization`; tell the coordinator; the failures."""
        keys = initialization.keys()
        answers = await asyncio.gather(*(
            self._initialize_one(initialization, topic_id, partition) for topic_id, partition in keys))
        failed: dict[tuple[uuid.UUID, int], ErrorCode] = {
            key: code for key, code in zip(keys, answers) if code is not ErrorCode.NONE}
        self.initialized += len(keys) - len(failed)
        self.failed += len(failed)
        if failed:
            log.warning("share state initialization failed", group=initialization.group_id,
                        partitions=len(failed), error=sorted({c.name for c in failed.values()})[0])
        self.groups.share_state_initialized(initialization, failed, self.clock())
        return failed

    async def _initialize_one(self, initialization: Initialization, topic_id: uuid.UUID, partition: int) -> ErrorCode:
        key = SharePartitionKey(initialization.group_id, topic_id, partition)
        try:
            return ErrorCode(await self.persister.initialize(
                key, initialization.state_epoch, initialization.start_offset(topic_id, partition)))
        except Exception as exc:  # a persister that raised: answered like an unreachable share coordinator
            log.warning("share state initialization raised", group=initialization.group_id, error=repr(exc))
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    async def settle(self) -> None:
        """Wait for the initializations in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
