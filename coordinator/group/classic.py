"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup on a shard's live groups.

Theory of operation
-------------------
Every entry point runs inside a runtime write (see runtime.py) and adds what it decides to a `Batch`:
GroupMetadata records, and callbacks to run once those records are durable. JoinGroup and SyncGroup are
long polls: the caller passes a `Deferred` that is completed when the rebalance gets there, maybe by a
later request of another member or by a timer.

Timers (on the runtime's timing wheel, one key per purpose):

- `heartbeat`: per member, its session timeout, re-armed by every heartbeat, join and sync. On expiry
  a member that is not waiting in a rebalance is removed, which starts a rebalance. It also times out
  members that were handed a member id (MEMBER_ID_REQUIRED) and never came back, and new members whose
  JoinGroup waits longer than `new_member_join_timeout_ms`.
- `join`: the end of the join phase, `rebalance_timeout_ms` (the members' largest) after it began; for
  a new group, `group.initial.rebalance.delay.ms` steps, extended while members keep arriving, up to the
  rebalance timeout.
- `sync`: the leader and every member must SyncGroup within the rebalance timeout after the join
  phase; members that did not are removed and the group rebalances again.

The join phase completes early when every member has rejoined and no member id handed out is pending,
except in a new group's first rebalance, which always waits out the initial delay.

Static members (`group.instance.id`) keep their place across restarts: a static member that rejoins
with a new member id takes over its old id's place (a request still holding the old id is answered
FENCED_INSTANCE_ID). In a Stable group whose selected protocol would not change, it does so without a
rebalance: the group is stored with the new member id and the member gets the current generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import JoinGroupResponse, SyncGroupResponse

from .classic_group import ClassicGroup, ClassicGroupMember, ClassicGroupState
from .records import group_metadata_record
from odradek.purgatory.deferred import Deferred

from ..runtime import Batch, CoordinatorError, NotCoordinatorError, Result

if TYPE_CHECKING:
    from .shard import GroupCoordinatorShard

__all__ = ["ClassicGroupManager", "join_error", "sync_response"]

_S = ClassicGroupState


def join_error(member_id: str, error: ErrorCode) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=error, member_id=member_id, generation_id=-1, leader="", members=[])


def sync_response(error: ErrorCode, group: ClassicGroup | None = None, assignment: bytes = b"") -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=error,
        protocol_type=group.protocol_type if group is not None else None,
        protocol_name=group.protocol_name if group is not None else None,
        assignment=assignment,
    )


def _append_error(error: BaseException) -> ErrorCode:
    """The code a client gets when storing the group failed (Kafka's appendGroupMetadataErrorToResponseError)."""
    if isinstance(error, NotCoordinatorError):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


class ClassicGroupManager:
    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self.shard = shard
        self.config = shard.config

    # ------------------------------------------------------------------------------------------------
    # JoinGroup

    def join(self, request, version: int, client_id: str, client_host: str, response: Deferred, now_ms: int) -> Result:
        out = Batch()
        group_id = request.group_id
        member_id = request.member_id
        group = self.shard.classic_group(group_id)
        if group is None and group_id in self.shard.share_groups:
            # Kafka's classicGroupJoin: a group of another type (share) is INCONSISTENT_GROUP_PROTOCOL.
            response.complete(join_error("", ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return out.result()
        if group is None:
            consumer_group = self.shard.consumer_groups.get(group_id)
            if consumer_group is not None:
                if consumer_group.members:
                    response.complete(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
                    return out.result()
                self.shard.consumer.delete_group(group_id, out)
            if member_id:
                response.complete(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return out.result()
            group = self.shard.create_classic_group(group_id, now_ms)
        if not self._accept_joining_member(group, member_id):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member, ErrorCode.GROUP_MAX_SIZE_REACHED)
            group.pending_members.discard(member_id)
            response.complete(join_error("", ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif not member_id:
            self._join_new_member(group, request, version, client_id, client_host, response, out, now_ms)
        else:
            self._join_existing_member(group, request, version, client_id, client_host, response, out, now_ms)
        self._maybe_complete_join_phase(group, out, now_ms)
        return out.result()

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.is_in(_S.EMPTY, _S.DEAD):
            return True
        if group.is_in(_S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group, request, version, client_id, client_host, response, out, now_ms) -> None:
        if group.is_in(_S.DEAD):
            response.complete(join_error("", ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        protocols = _protocols(request)
        if not group.supports_protocols(request.protocol_type, protocols):
            response.complete(join_error("", ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        instance_id = request.group_instance_id
        new_member_id = self.shard.new_member_id(instance_id if instance_id is not None else client_id)
        if instance_id is not None:
            existing_id = group.static_member_id(instance_id)
            if existing_id is None:
                self._add_member_then_rebalance_or_complete_join(
                    group, new_member_id, request, client_id, client_host, response, out, now_ms)
            else:
                self._update_static_member_then_rebalance_or_complete_join(
                    group, existing_id, new_member_id, request, version, response, out, now_ms)
        elif version >= 4:
            # KIP-394: hand out the member id first, so that a client retrying a JoinGroup whose response
            # was lost comes back as the same member. The id is pending until then, and expires.
            group.pending_members.add(new_member_id)
            self._schedule_heartbeat(group, new_member_id, request.session_timeout_ms, now_ms)
            response.complete(join_error(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_then_rebalance_or_complete_join(
                group, new_member_id, request, client_id, client_host, response, out, now_ms)

    def _join_existing_member(self, group, request, version, client_id, client_host, response, out, now_ms) -> None:
        member_id = request.member_id
        protocols = _protocols(request)
        if group.is_in(_S.DEAD):
            response.complete(join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(request.protocol_type, protocols):
            response.complete(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if member_id in group.pending_members:
            if request.group_instance_id is not None:
                response.complete(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            self._add_member_then_rebalance_or_complete_join(
                group, member_id, request, client_id, client_host, response, out, now_ms)
            return
        try:
            group.validate_member(member_id, request.group_instance_id)
        except CoordinatorError as e:
            response.complete(join_error(member_id, e.error_code))
            return
        member = group.members[member_id]
        if group.is_in(_S.PREPARING_REBALANCE):
            self._update_member_then_rebalance_or_complete_join(group, member, request, response, out, now_ms)
        elif group.is_in(_S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # The member lost the JoinGroup response: give it the current generation again.
                response.complete(self._join_response(group, member, with_members=group.is_leader(member_id)))
            else:
                self._update_member_then_rebalance_or_complete_join(group, member, request, response, out, now_ms)
        elif group.is_in(_S.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining asks for a new assignment (e.g. after a metadata change).
                self._update_member_then_rebalance_or_complete_join(group, member, request, response, out, now_ms)
            else:
                response.complete(self._join_response(group, member, with_members=False))
        else:
            response.complete(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _add_member_then_rebalance_or_complete_join(self, group, member_id, request, client_id, client_host, response,
                                                    out, now_ms) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=_protocols(request),
            is_new=True,
        )
        if group.is_in(_S.PREPARING_REBALANCE) and group.previous_state is _S.EMPTY:
            group.new_member_added = True
        group.add(member, response)
        # A new member cannot heartbeat before it knows its id; bound its wait in the join phase instead.
        self._schedule_heartbeat(group, member_id, self.config.new_member_join_timeout_ms, now_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)

    def _update_member_then_rebalance_or_complete_join(self, group, member, request, response, out, now_ms) -> None:
        displaced = group.update_member(member, _protocols(request), request.rebalance_timeout_ms,
                                        request.session_timeout_ms, response)
        if displaced is not None:
            displaced.complete(join_error(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)

    def _update_static_member_then_rebalance_or_complete_join(self, group, old_member_id, new_member_id, request,
                                                              version, response, out, now_ms) -> None:
        instance_id = request.group_instance_id
        current_leader = group.leader_id
        old, member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self._fence(old, ErrorCode.FENCED_INSTANCE_ID)
        self._cancel_heartbeat(group, old_member_id)
        self._schedule_heartbeat(group, new_member_id, member.session_timeout_ms, now_ms)
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, _protocols(request), request.rebalance_timeout_ms, request.session_timeout_ms, response)
        if group.is_in(_S.STABLE):
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
                return
            # Same protocol: store the group with the new member id, no rebalance.
            generation = group.generation_id
            out.records.append(group_metadata_record(group.group_id, group.metadata_value()))

            def on_stored(error: BaseException | None) -> None:
                if error is not None:
                    # Not stored: the old member id keeps the place.
                    group.update_member(member, old_protocols, old_timeouts[0], old_timeouts[1], None)
                    if group.members.get(new_member_id) is member:
                        _, restored = group.replace_static_member(instance_id, new_member_id, old_member_id)
                        self._cancel_heartbeat(group, new_member_id)
                        self._schedule_heartbeat(group, old_member_id, restored.session_timeout_ms,
                                                 self.shard.now_ms())
                    response.complete(JoinGroupResponse(
                        error_code=_append_error(error), member_id="", generation_id=generation,
                        protocol_type=group.protocol_type, protocol_name=group.protocol_name or "",
                        leader=current_leader or "", members=[]))
                    return
                if version >= 9:
                    is_leader = group.is_leader(new_member_id)
                    reply = self._join_response(group, member, with_members=is_leader)
                    reply.skip_assignment = is_leader
                else:
                    # Older clients must not redo the assignment: tell the member the leader is whoever
                    # it was, which is not this member id, so it only syncs.
                    reply = self._join_response(group, member, with_members=False)
                    reply.leader = current_leader or ""
                self._complete_join(member, reply)

            out.callbacks.append(on_stored)
        elif group.is_in(_S.COMPLETING_REBALANCE):
            # The leader has the old member id: rebalance so that it learns the new one.
            self._prepare_rebalance(group, out, now_ms)
        else:
            self._maybe_complete_join_phase(group, out, now_ms)

    # -- the join phase --

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, out: Batch, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, out, now_ms)
        else:
            self._maybe_complete_join_phase(group, out, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, out: Batch, now_ms: int) -> None:
        if group.is_in(_S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        self.shard.cancel(("sync", group.group_id))
        initial = group.is_in(_S.EMPTY)
        group.transition_to(_S.PREPARING_REBALANCE, now_ms)
        if initial:
            delay_ms = self.config.group_initial_rebalance_delay_ms
            remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._schedule_initial_delay(group.group_id, delay_ms, remaining_ms, now_ms)
        elif group.has_all_members_joined():
            self._complete_join_phase(group, out, now_ms)
        else:
            self._schedule_join_completion(group, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, out: Batch, now_ms: int) -> None:
        if (group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined()
                and group.previous_state is not _S.EMPTY):
            self._complete_join_phase(group, out, now_ms)

    def _schedule_join_completion(self, group: ClassicGroup, now_ms: int) -> None:
        group_id = group.group_id
        self.shard.schedule(("join", group_id), now_ms + group.rebalance_timeout_ms(),
                            lambda shard, now: shard.classic._on_join_timeout(group_id, now))

    def _schedule_initial_delay(self, group_id: str, delay_ms: int, remaining_ms: int, now_ms: int) -> None:
        self.shard.schedule(("join", group_id), now_ms + delay_ms,
                            lambda shard, now: shard.classic._on_initial_delay(group_id, delay_ms, remaining_ms, now))

    def _on_join_timeout(self, group_id: str, now_ms: int) -> Result:
        out = Batch()
        group = self.shard.live_classic_group(group_id)
        if group is not None and group.is_in(_S.PREPARING_REBALANCE):
            self._complete_join_phase(group, out, now_ms)
        return out.result()

    def _on_initial_delay(self, group_id: str, delay_ms: int, remaining_ms: int, now_ms: int) -> Result:
        out = Batch()
        group = self.shard.live_classic_group(group_id)
        if group is None or not group.is_in(_S.PREPARING_REBALANCE):
            return out.result()
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay_ms = min(self.config.group_initial_rebalance_delay_ms, remaining_ms)
            self._schedule_initial_delay(group_id, new_delay_ms, max(remaining_ms - delay_ms, 0), now_ms)
        else:
            self._complete_join_phase(group, out, now_ms)
        return out.result()

    def _complete_join_phase(self, group: ClassicGroup, out: Batch, now_ms: int) -> None:
        self.shard.cancel(("join", group.group_id))
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(_S.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members that did not come back are left): wait for sessions to
            # expire rather than start a generation nobody knows of.
            self._schedule_join_completion(group, now_ms)
            return
        group.init_next_generation(now_ms)
        if group.is_in(_S.EMPTY):
            out.records.append(group_metadata_record(group.group_id, group.metadata_value({})))
            return
        for member in group.members.values():
            self._complete_join(member, self._join_response(group, member, with_members=group.is_leader(member.member_id)))
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation = group.generation_id
        group_id = group.group_id
        self.shard.schedule(("sync", group_id), now_ms + group.rebalance_timeout_ms(),
                            lambda shard, now: shard.classic._on_sync_timeout(group_id, generation, now))

    def _join_response(self, group: ClassicGroup, member: ClassicGroupMember, *, with_members: bool) -> JoinGroupResponse:
        members = []
        if with_members:
            members = [
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=metadata)
                for m, metadata in group.current_members_metadata()
            ]
        return JoinGroupResponse(
            error_code=ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=False,
            member_id=member.member_id,
            members=members,
        )

    @staticmethod
    def _complete_join(member: ClassicGroupMember, response: JoinGroupResponse) -> None:
        deferred, member.join_deferred = member.join_deferred, None
        if deferred is not None:
            deferred.complete(response)

    # ------------------------------------------------------------------------------------------------
    # SyncGroup

    def sync(self, request, version: int, response: Deferred, now_ms: int) -> Result:
        out = Batch()
        group = self.shard.classic_group(request.group_id)
        if group is None:
            response.complete(sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
            return out.result()
        error = self._validate_sync(group, request)
        if error is not ErrorCode.NONE:
            response.complete(sync_response(error))
        elif group.is_in(_S.PREPARING_REBALANCE):
            response.complete(sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_in(_S.COMPLETING_REBALANCE):
            member = group.members[request.member_id]
            displaced, member.sync_deferred = member.sync_deferred, response
            if displaced is not None and displaced is not response:
                displaced.complete(sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
            self._remove_pending_sync_member(group, member.member_id)
            if group.is_leader(member.member_id):
                self._store_assignment(group, request, out)
        elif group.is_in(_S.STABLE):
            self._remove_pending_sync_member(group, request.member_id)
            member = group.members[request.member_id]
            response.complete(sync_response(ErrorCode.NONE, group, member.assignment))
        else:
            response.complete(sync_response(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        return out.result()

    def _validate_sync(self, group: ClassicGroup, request) -> ErrorCode:
        if group.is_in(_S.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(request.member_id, request.group_instance_id)
        except CoordinatorError as e:
            return e.error_code
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(request.protocol_type, group.protocol_type) or _inconsistent(request.protocol_name,
                                                                                       group.protocol_name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _store_assignment(self, group: ClassicGroup, request, out: Batch) -> None:
        assignment = {a.member_id: bytes(a.assignment) for a in request.assignments}
        for member_id in group.members:
            assignment.setdefault(member_id, b"")
        generation = group.generation_id
        out.records.append(group_metadata_record(group.group_id, group.metadata_value(assignment)))

        def on_stored(error: BaseException | None) -> None:
            # The group may have moved on (a member joined) while the record was being written.
            if not (group.is_in(_S.COMPLETING_REBALANCE) and group.generation_id == generation
                    and self.shard.live_classic_group(group.group_id) is group):
                return
            now_ms = self.shard.now_ms()
            if error is not None:
                self._reset_and_propagate_assignment_with_error(group, _append_error(error), now_ms)
                self.shard.submit(lambda shard, now: self._rebalance_after_failed_store(group, now))
                return
            for member_id, member in group.members.items():
                member.assignment = assignment.get(member_id, b"")
            self._propagate_assignment(group, ErrorCode.NONE, now_ms)
            group.transition_to(_S.STABLE, now_ms)

        out.callbacks.append(on_stored)

    def _rebalance_after_failed_store(self, group: ClassicGroup, now_ms: int) -> Result:
        out = Batch()
        if self.shard.live_classic_group(group.group_id) is group:
            self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
        return out.result()

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE) or group.has_received_sync_from_all_members():
            self.shard.cancel(("sync", group.group_id))

    def _on_sync_timeout(self, group_id: str, generation: int, now_ms: int) -> Result:
        out = Batch()
        group = self.shard.live_classic_group(group_id)
        if group is None or group.generation_id != generation:
            return out.result()
        if group.is_in(_S.COMPLETING_REBALANCE, _S.STABLE) and not group.has_received_sync_from_all_members():
            for member_id in list(group.pending_sync_members):
                member = group.members.get(member_id)
                if member is not None:
                    self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
            self._prepare_rebalance(group, out, now_ms)
        return out.result()

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
        for member in group.members.values():
            deferred, member.sync_deferred = member.sync_deferred, None
            if deferred is not None:
                assignment = member.assignment if error is ErrorCode.NONE else b""
                deferred.complete(sync_response(error, group, assignment))
                # A session that expired while the member waited was spared; give it a fresh one.
                self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms, now_ms)

    # ------------------------------------------------------------------------------------------------
    # Heartbeat

    def heartbeat(self, request, now_ms: int) -> Result:
        group = self.shard.classic_group(request.group_id)
        if group is None:
            return Result(response=ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(_S.DEAD):
            return Result(response=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        try:
            group.validate_member(request.member_id, request.group_instance_id)
        except CoordinatorError as e:
            return Result(response=e.error_code)
        if request.generation_id != group.generation_id:
            return Result(response=ErrorCode.ILLEGAL_GENERATION)
        if group.is_in(_S.EMPTY):
            return Result(response=ErrorCode.UNKNOWN_MEMBER_ID)
        member = group.members[request.member_id]
        self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms, now_ms)
        if group.is_in(_S.PREPARING_REBALANCE):
            return Result(response=ErrorCode.REBALANCE_IN_PROGRESS)
        return Result(response=ErrorCode.NONE)

    def _schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int, now_ms: int) -> None:
        group_id = group.group_id
        self.shard.schedule(("heartbeat", group_id, member_id), now_ms + timeout_ms,
                            lambda shard, now: shard.classic._on_heartbeat_expired(group_id, member_id, now))

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.shard.cancel(("heartbeat", group.group_id, member_id))

    def _on_heartbeat_expired(self, group_id: str, member_id: str, now_ms: int) -> Result:
        out = Batch()
        group = self.shard.live_classic_group(group_id)
        if group is None or group.is_in(_S.DEAD):
            return out.result()
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join_phase(group, out, now_ms)
            return out.result()
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_member_and_update_group(group, member, out, now_ms)
        return out.result()

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicGroupMember, out: Batch,
                                        now_ms: int) -> None:
        self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
        elif group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join_phase(group, out, now_ms)

    def _remove_member(self, group: ClassicGroup, member: ClassicGroupMember, error: ErrorCode) -> None:
        """Take a member out, answering its pending JoinGroup/SyncGroup with `error`."""
        self._fence(member, error)
        group.remove(member.member_id)
        self._cancel_heartbeat(group, member.member_id)

    @staticmethod
    def _fence(member: ClassicGroupMember, error: ErrorCode) -> None:
        join, member.join_deferred = member.join_deferred, None
        if join is not None:
            join.complete(join_error(member.member_id if error is ErrorCode.FENCED_INSTANCE_ID else "", error))
        sync, member.sync_deferred = member.sync_deferred, None
        if sync is not None:
            sync.complete(sync_response(error))

    # ------------------------------------------------------------------------------------------------
    # LeaveGroup

    def leave(self, group_id: str, identities: list[tuple[str, str | None]], now_ms: int) -> Result:
        """Response: (top-level error, [(member_id, group_instance_id, error)])."""
        out = Batch()
        group = self.shard.classic_group(group_id)
        if group is None:
            return out.result((ErrorCode.UNKNOWN_MEMBER_ID, []))
        if group.is_in(_S.DEAD):
            return out.result((ErrorCode.COORDINATOR_NOT_AVAILABLE, []))
        results: list[tuple[str, str | None, ErrorCode]] = []
        leaving: dict[str, ClassicGroupMember] = {}
        pending_left = False
        for member_id, instance_id in identities:
            if not member_id and instance_id is not None:
                # An admin removing a static member by instance id.
                static_id = group.static_member_id(instance_id)
                if static_id is None:
                    results.append((member_id, instance_id, ErrorCode.UNKNOWN_MEMBER_ID))
                else:
                    leaving[static_id] = group.members[static_id]
                    results.append((member_id, instance_id, ErrorCode.NONE))
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel_heartbeat(group, member_id)
                pending_left = True
                results.append((member_id, instance_id, ErrorCode.NONE))
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except CoordinatorError as e:
                    results.append((member_id, instance_id, e.error_code))
                    continue
                leaving[member_id] = group.members[member_id]
                results.append((member_id, instance_id, ErrorCode.NONE))
        for member in leaving.values():
            self._remove_member(group, member, ErrorCode.UNKNOWN_MEMBER_ID)
        if leaving and group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, out, now_ms)
        elif (leaving or pending_left) and group.is_in(_S.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join_phase(group, out, now_ms)
        return out.result((ErrorCode.NONE, results))

    # ------------------------------------------------------------------------------------------------
    # Loading, deletion

    def on_loaded(self, group: ClassicGroup, now_ms: int) -> None:
        for member in group.members.values():
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms, now_ms)

    def on_deleted(self, group: ClassicGroup, now_ms: int) -> None:
        for member in list(group.members.values()):
            self._fence(member, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            self._cancel_heartbeat(group, member.member_id)
        for member_id in group.pending_members:
            self._cancel_heartbeat(group, member_id)
        self.shard.cancel(("join", group.group_id))
        self.shard.cancel(("sync", group.group_id))
        group.transition_to(_S.DEAD, now_ms)


def _protocols(request) -> list[tuple[str, bytes]]:
    return [(p.name, bytes(p.metadata)) for p in request.protocols]


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
