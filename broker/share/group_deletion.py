"""DeleteGroups of share groups: their share-partition state is deleted first (handlers/groups.py calls this).

Kafka's GroupCoordinatorService.deleteGroups does the same: the state of each initialized or initializing
partition of an empty share group goes through `SharePersister.delete` before the group's records are
tombstoned, and a group whose state the persister could not delete is answered with the persister's error
and kept (deleting it would orphan state the share coordinator still holds, and a new group of the same id
would find it). A share group with members is left to the coordinator, which answers NON_EMPTY_GROUP.
(Kafka also moves the partitions to `deleting_topics` in a write before it calls the persister; here the
tombstone of the group's records follows the persister's answer at once, and a broker that stops in between
leaves the group, with its state gone, to be deleted again.)
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import DeleteGroupsResponse
from odradek.purgatory.deferred import Deferred

if TYPE_CHECKING:
    from odradek.protocol.messages import DeleteGroupsRequest

    from ..services import BrokerServices

__all__ = ["delete_groups_with_share_state"]

log = structlog.get_logger("odradek.broker.share")


def _answer(services: BrokerServices, result: Deferred) -> Any:
    if result.done:
        return result.result()
    return services.future_from(result)


def delete_groups_with_share_state(services: BrokerServices, request: DeleteGroupsRequest, version: int) -> Any:
    """DeleteGroups' answer (a message, a future or a coroutine), share groups' state deleted first."""
    pending: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for group_id in dict.fromkeys(request.groups_names):
        if not group_id:
            continue
        _, group = services.groups.share_state_partitions(group_id)
        if group is not None and group.is_empty:
            partitions = group.state_partitions.all_partitions()
            if partitions:
                pending[group_id] = [(t, p) for t, ps in sorted(partitions.items()) for p in sorted(ps)]
    if not pending:
        return _answer(services, services.groups.delete_groups(request, version, services.now_ms()))
    return _delete_after_state(services, request, version, pending)


async def _delete_after_state(services: BrokerServices, request: DeleteGroupsRequest, version: int,
                              pending: dict[str, list[tuple[uuid.UUID, int]]]) -> DeleteGroupsResponse:
    failed: dict[str, ErrorCode] = {}
    for group_id, partitions in pending.items():
        try:
            results = await services.share_persister.delete(group_id, partitions)
            errors = sorted({ErrorCode(c) for c in results.values()} - {ErrorCode.NONE})
        except Exception as exc:  # a persister that raised: answered like an unreachable share coordinator
            log.warning("share state delete raised", group=group_id, error=repr(exc))
            errors = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        if errors:
            failed[group_id] = errors[0]
            log.warning("share group not deleted: its state could not be deleted", group=group_id,
                        error=errors[0].name)
        else:
            log.info("share group state deleted", group=group_id, partitions=len(partitions))
    names = list(request.groups_names)
    request.groups_names = [g for g in names if g not in failed]
    answer = _answer(services, services.groups.delete_groups(request, version, services.now_ms()))
    response = await answer if isinstance(answer, asyncio.Future) else answer
    results = {r.group_id: r for r in response.results}
    response.results = [results.get(g) or DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=int(failed[g]))
                        for g in dict.fromkeys(names)]
    return response
