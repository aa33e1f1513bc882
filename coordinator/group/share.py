"""The share group protocol (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe on a shard.

Theory of operation
-------------------
A heartbeat is one write, as Kafka 4.4's GroupMetadataManager.shareGroupHeartbeat does it:

1. Validate (INVALID_REQUEST for a malformed request, before anything is looked up). Since v1 (KIP-1082)
   the client generates its member id (a UUID) and sends it from the first heartbeat on.
2. Find the group, or create it on a join (member epoch 0). A group id in use by a classic or consumer
   group is answered GROUP_ID_NOT_FOUND ("Group g is not a share group."), as Kafka answers, and a share
   group id is answered the same way by the other protocols: group ids are one namespace per coordinator.
3. A new member beyond `group.share.max.size` gets GROUP_MAX_SIZE_REACHED (checked first, as Kafka does).
   Then find or create the member: an unknown member with a non-zero epoch gets UNKNOWN_MEMBER_ID; a
   known one whose epoch is neither its current nor its previous one (the response that moved it on may
   have been lost) gets FENCED_MEMBER_EPOCH and must rejoin with epoch 0. A known member heartbeating with
   epoch 0 rejoins: it keeps its id (KIP-1082 ids live as long as the client) and gets its full
   assignment back. Kafka's older code fenced such a rejoin until the session expired; a client that
   lost a response would then spin for a session timeout, which no user wants.
4. A new member, a changed subscription or a change in the subscribed topics' metadata (hash) bumps the
   group epoch; the share assignor (share_assignor.py) then computes the target assignment at that
   epoch, and the members whose target changed get a record.
5. The member takes its target at once (there is no revocation in a share group): its current
   assignment record moves it to the assignment epoch. The response carries the assignment when it
   changed or the member joined.

6. Every partition of a subscribed topic that has no share-partition state yet goes to `initializing`
   (share_state.py), and once the heartbeat's records are durable the broker initializes it through its
   persister. As in Kafka 4.4, only initialized partitions are assigned (`_assignable`): a member's first
   heartbeat may get an empty assignment, and the write that records the initialization bumps the group
   epoch, so the members' next heartbeats bring the partitions. A leader thus never serves, and never
   acknowledges into, a state that the initialization would then overwrite.

The session timeout and heartbeat interval are the group's `share.session.timeout.ms` and
`share.heartbeat.interval.ms` GROUP configs when set (metadata/group_config.py), else the broker's.

Leaving (epoch -1) and a session that expires (`group.share.session.timeout.ms`, re-armed by every
heartbeat, on the runtime's timer, so a manual clock drives it in tests) tombstone the member's records
and bump the group epoch; the remaining members are reassigned on their next heartbeat.

Everything decided is in records; the group objects change only in `replay`. Replaying the log on a new
coordinator (failover) rebuilds the same groups, and the session timers are re-armed on load.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import ShareGroupDescribeResponse, ShareGroupHeartbeatResponse

from .consumer import ALL_GROUP_OPERATIONS, _assignment_from
from .records import (
    CoordinatorRecord,
    RecordType,
    share_current_assignment_record,
    share_group_epoch_record,
    share_group_member_record,
    share_group_tombstones,
    share_target_assignment_epoch_record,
    share_target_assignment_member_record,
)
from .share_assignor import simple_assignor
from .share_group import Assignment, ShareGroup, ShareGroupMember
from .share_state import Initialization, StatePartitions
from ..runtime import Batch, CoordinatorError, Result

if TYPE_CHECKING:
    from .shard import GroupCoordinatorShard

__all__ = ["SHARE_ASSIGNOR", "ShareGroupManager", "validate_heartbeat"]

log = structlog.get_logger("odradek.coordinator.group")

LEAVE_GROUP_MEMBER_EPOCH = -1
SHARE_ASSIGNOR = "simple"  # group.share.assignors: Kafka 4.4 has this one only


class ShareGroupManager:
    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self.shard = shard
        self.config = shard.config

    @property
    def groups(self) -> dict[str, ShareGroup]:
        return self.shard.share_groups

    # ------------------------------------------------------------------------------------------------
    # Replay

    def replay(self, record: CoordinatorRecord) -> None:
        key, value, t = record.key, record.value, record.type
        if t is RecordType.SHARE_GROUP_PARTITION_METADATA:
            return  # Kafka 4.0's record, superseded by the metadata hash
        if t is RecordType.SHARE_GROUP_METADATA:
            if value is None:
                self.groups.pop(key.group_id, None)
            else:
                group = self._get_or_create(key.group_id)
                group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
            return
        group = self.groups.get(key.group_id) if value is None else self._get_or_create(key.group_id)
        if group is None:
            return
        if t is RecordType.SHARE_GROUP_MEMBER_METADATA:
            if value is None:
                group.members.pop(key.member_id, None)
            else:
                member = group.members.get(key.member_id) or ShareGroupMember(key.member_id)
                group.members[key.member_id] = member.replace(
                    rack_id=value.rack_id, client_id=value.client_id, client_host=value.client_host,
                    subscribed_topic_names=tuple(value.subscribed_topic_names))
        elif t is RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = 0 if value is None else value.assignment_epoch
        elif t is RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                group.target_assignment.pop(key.member_id, None)
            else:
                group.target_assignment[key.member_id] = _assignment_from(value.topic_partitions)
        elif t is RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            old = group.members.get(key.member_id)
            if value is None:
                if old is not None:
                    group.members[key.member_id] = old.replace(member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                               previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                               assigned_partitions={})
                return
            base = old if old is not None else ShareGroupMember(key.member_id)
            group.members[key.member_id] = base.replace(
                member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                state=value.state, assigned_partitions=_assignment_from(value.assigned_partitions))
        elif t is RecordType.SHARE_GROUP_STATE_PARTITION_METADATA:
            group.state_partitions = StatePartitions.from_value(value)

    def _get_or_create(self, group_id: str) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    # ------------------------------------------------------------------------------------------------
    # ShareGroupHeartbeat

    def heartbeat(self, request, client_id: str, client_host: str, now_ms: int) -> Result:
        out = Batch()
        try:
            validate_heartbeat(request)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                response = self._leave(request, out)
            else:
                response = self._heartbeat(request, client_id, client_host, out, now_ms)
        except CoordinatorError as e:
            return Result(response=ShareGroupHeartbeatResponse(error_code=e.error_code, error_message=str(e) or None))
        return out.result(response)

    def _heartbeat(self, request, client_id: str, client_host: str, out: Batch, now_ms: int):
        group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
        group = self._get_or_maybe_create_group(group_id, epoch == 0)
        if len(group.members) >= self.config.share_group_max_size and member_id not in group.members:
            raise CoordinatorError(
                f"The share group has reached its maximum capacity of {self.config.share_group_max_size} "
                f"members.", ErrorCode.GROUP_MAX_SIZE_REACHED)
        member = group.members.get(member_id)
        new_member = member is None
        if member is None:
            if epoch != 0:
                raise CoordinatorError(f"Member {member_id} is not a member of group {group_id}.",
                                       ErrorCode.UNKNOWN_MEMBER_ID)
            member = ShareGroupMember(member_id)
        elif epoch != 0:
            _validate_member_epoch(member, epoch)
        updated = member.replace(
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            subscribed_topic_names=(tuple(sorted(set(request.subscribed_topic_names)))
                                    if request.subscribed_topic_names is not None else member.subscribed_topic_names),
            client_id=client_id, client_host=client_host)
        bump = new_member or group.group_epoch == 0
        if new_member or (updated.rack_id, updated.client_id, updated.client_host, updated.subscribed_topic_names) != (
                member.rack_id, member.client_id, member.client_host, member.subscribed_topic_names):
            out.records.append(share_group_member_record(group_id, member_id, updated.rack_id, updated.client_id,
                                                         updated.client_host, updated.subscribed_topic_names))
            bump |= updated.subscribed_topic_names != member.subscribed_topic_names

        members_after = dict(group.members)
        members_after[member_id] = updated
        metadata_hash = self._metadata_hash(members_after.values())
        group_epoch = group.group_epoch
        if bump or metadata_hash != group.metadata_hash:
            group_epoch += 1
            out.records.append(share_group_epoch_record(group_id, group_epoch, metadata_hash))
            log.info("group rebalancing", group=group_id, group_epoch=group_epoch, members=len(members_after),
                     member=member_id, client_id=client_id, type="share")

        if group_epoch > group.assignment_epoch:
            targets = self._update_target_assignment(group, group_epoch, members_after, out)
            target_epoch, target = group_epoch, targets.get(member_id, {})
        else:
            target_epoch, target = group.assignment_epoch, group.target_assignment.get(member_id, {})

        if new_member or updated.member_epoch != target_epoch or updated.assigned_partitions != target:
            out.records.append(share_current_assignment_record(group_id, member_id, target_epoch,
                                                               updated.member_epoch, 0, target))
        self._maybe_initialize_state(group, group_epoch, members_after.values(), out, now_ms)
        self._schedule_session_timeout(group_id, member_id, now_ms)
        response = ShareGroupHeartbeatResponse(error_code=ErrorCode.NONE, member_id=member_id,
                                               member_epoch=target_epoch,
                                               heartbeat_interval_ms=self._heartbeat_interval_ms(group_id))
        if epoch == 0 or target != member.assigned_partitions:
            response_cls = ShareGroupHeartbeatResponse.Assignment
            response.assignment = response_cls(topic_partitions=[
                response_cls.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in sorted(target.items())])
        return response

    def _assignable(self, group: ShareGroup, topic_id: uuid.UUID, num_partitions: int) -> int:
        """How many of a topic's partitions may be assigned: those whose share-partition state is
        initialized, as Kafka 4.4 assigns only initialized partitions (a leader must never serve, and
        acknowledge into, a state the group coordinator's initialization would then overwrite). The
        assignor takes a count per topic, so this is the run of initialized partitions from 0; one after a
        gap (its predecessor's initialization failed) waits until the gap is initialized, which the next
        heartbeat asks for. A coordinator without a persister wired (unit tests of membership alone) has no
        state to wait for: every partition is assignable."""
        if not self.shard.share_state_wired():
            return num_partitions
        done = group.state_partitions.initialized.get(topic_id)
        if done is None:
            return 0
        count = 0
        while count < num_partitions and count in done[1]:
            count += 1
        return count

    def _get_or_maybe_create_group(self, group_id: str, create: bool) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.shard.consumer_groups or self.shard.classic_group(group_id) is not None:
            raise CoordinatorError(f"Group {group_id} is not a share group.", ErrorCode.GROUP_ID_NOT_FOUND)
        if not create:
            raise CoordinatorError(f"Group {group_id} not found.", ErrorCode.GROUP_ID_NOT_FOUND)
        log.info("group created", group=group_id, type="share")
        return ShareGroup(group_id)

    def _update_target_assignment(self, group: ShareGroup, group_epoch: int,
                                  members: dict[str, ShareGroupMember], out: Batch) -> dict[str, Assignment]:
        subscriptions = {m_id: frozenset(self._subscribed_topic_ids(m)) for m_id, m in members.items()}
        partitions: dict[uuid.UUID, int] = {}
        topics = self.shard.topics
        if topics is not None:
            for topic_ids in subscriptions.values():
                for topic_id in topic_ids:
                    info = topics.topic_by_id(topic_id)
                    if info is not None:
                        partitions[topic_id] = self._assignable(group, topic_id, info.num_partitions)
        targets = simple_assignor(subscriptions, partitions, group.target_assignment)
        for member_id in sorted(members):
            new = targets.get(member_id, {})
            if group.target_assignment.get(member_id) != new:
                out.records.append(share_target_assignment_member_record(group.group_id, member_id, new))
        out.records.append(share_target_assignment_epoch_record(group.group_id, group_epoch))
        return targets

    # -- share-partition state (share_state.py) --

    def _maybe_initialize_state(self, group: ShareGroup, group_epoch: int, members, out: Batch, now_ms: int) -> None:
        """Kafka's maybeCreateInitializeShareGroupStateRequest: every partition of every subscribed topic that
        has no state yet (or whose initialization was asked for longer than the retry interval ago) goes to
        `initializing`, and once that is durable the broker is asked to initialize it."""
        topics = self.shard.topics
        if topics is None:
            return
        names: dict[uuid.UUID, str] = {}
        wanted: dict[uuid.UUID, frozenset[int]] = {}
        state = group.state_partitions
        retry_ms = self.config.share_group_initialize_retry_interval_ms
        for name in sorted({n for m in members for n in m.subscribed_topic_names}):
            info = topics.topic_by_name(name)
            if info is None:
                continue
            missing = frozenset(p for p in range(info.num_partitions)
                                if not state.known(info.topic_id, p, now_ms, retry_ms))
            if missing:
                names[info.topic_id], wanted[info.topic_id] = name, missing
        if not wanted:
            return
        out.records.append(state.with_initializing(names, wanted, now_ms).record(group.group_id))
        self.request_initialization(Initialization(group.group_id, group_epoch, wanted), out)

    def request_initialization(self, initialization: Initialization, out: Batch) -> None:
        """Hand `initialization` to the broker once the records of this write are durable."""
        hook = self.shard.share_state_hook

        def written(error: BaseException | None) -> None:
            if error is None and hook is not None:
                hook(initialization)

        out.callbacks.append(written)

    def state_initialized(self, initialization: Initialization,
                          failed: Mapping[tuple[uuid.UUID, int], ErrorCode]) -> Result:
        """The persister's answer to `initialization`: the partitions it initialized move to `initialized`,
        the ones it failed leave `initializing` (the next heartbeat asks again), as Kafka's
        initializeShareGroupState / uninitializeShareGroupState."""
        out = Batch()
        group = self.groups.get(initialization.group_id)
        if group is None:
            return out.result()
        done: dict[uuid.UUID, frozenset[int]] = {}
        lost: dict[uuid.UUID, frozenset[int]] = {}
        for topic_id, partitions in initialization.partitions.items():
            ok = frozenset(p for p in partitions if (topic_id, p) not in failed)
            if ok:
                done[topic_id] = ok
            if partitions - ok:
                lost[topic_id] = partitions - ok
        names = {}
        topics = self.shard.topics
        for topic_id in done:
            info = topics.topic_by_id(topic_id) if topics is not None else None
            names[topic_id] = info.name if info is not None else (group.state_partitions.topic_name(topic_id) or "")
        state = group.state_partitions.with_initialized(done, names).without(lost)
        if state != group.state_partitions:
            out.records.append(state.record(group.group_id))
        if done:
            # As Kafka: a new group epoch, so that the next heartbeat computes a target assignment that
            # includes the partitions now initialized.
            out.records.append(share_group_epoch_record(group.group_id, group.group_epoch + 1, group.metadata_hash))
        if done:
            log.info("share partitions initialized", group=group.group_id, state_epoch=initialization.state_epoch,
                     partitions=sum(len(ps) for ps in done.values()))
        if lost:
            log.warning("share partition initialization failed", group=group.group_id,
                        partitions=sum(len(ps) for ps in lost.values()),
                        error=str(sorted({c.name for c in failed.values()})))
        return out.result()

    def state_deleted(self, group_id: str, partitions: dict[uuid.UUID, frozenset[int]]) -> Result:
        """The persister deleted these partitions' state: forget them."""
        out = Batch()
        group = self.groups.get(group_id)
        if group is not None:
            state = group.state_partitions.without(partitions)
            if state != group.state_partitions:
                out.records.append(state.record(group_id))
        return out.result()

    # -- AlterShareGroupOffsets, DeleteShareGroupOffsets (the state changes go through the broker's persister)

    def alter_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]], now_ms: int) -> Result:
        """Kafka's alterShareGroupOffsets: on an empty share group (created if it does not exist), the
        partitions given restart at the offsets given, at a new state epoch (the group epoch, bumped), so
        that a leader's state from before is fenced. Response: (group error, {(topic name, partition): error},
        Initialization or None) for the broker to initialize through its persister."""
        out = Batch()
        group = self.groups.get(group_id)
        if group is None:
            if group_id in self.shard.consumer_groups or self.shard.classic_group(group_id) is not None:
                return out.result((ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", {}, None))
            group = ShareGroup(group_id)
        if not group.is_empty:
            return out.result((ErrorCode.NON_EMPTY_GROUP, "The group is not empty; stop its members first.", {}, None))
        errors: dict[tuple[str, int], ErrorCode] = {}
        names: dict[uuid.UUID, str] = {}
        partitions: dict[uuid.UUID, set[int]] = {}
        offsets: dict[tuple[uuid.UUID, int], int] = {}
        topics_view = self.shard.topics
        for name, wanted in topics:
            info = topics_view.topic_by_name(name) if topics_view is not None else None
            for partition, offset in wanted:
                if info is None or not 0 <= partition < info.num_partitions:
                    errors[(name, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif offset < 0:
                    errors[(name, partition)] = ErrorCode.INVALID_REQUEST
                else:
                    names[info.topic_id] = name
                    partitions.setdefault(info.topic_id, set()).add(partition)
                    offsets[(info.topic_id, partition)] = offset
                    errors[(name, partition)] = ErrorCode.NONE
        if not partitions:
            return out.result((ErrorCode.NONE, None, errors, None))
        epoch = group.group_epoch + 1
        if group_id not in self.groups:
            log.info("group created", group=group_id, type="share")
        out.records.append(share_group_epoch_record(group_id, epoch, group.metadata_hash))
        frozen = {t: frozenset(ps) for t, ps in partitions.items()}
        out.records.append(group.state_partitions.with_initializing(names, frozen, now_ms).record(group_id))
        log.info("share group offsets altered", group=group_id, state_epoch=epoch, partitions=len(offsets))
        return out.result((ErrorCode.NONE, None, errors, Initialization(group_id, epoch, frozen, offsets)))

    def offsets_to_delete(self, group_id: str, topic_names: list[str]):
        """Kafka's DeleteShareGroupOffsets checks: the group exists, is a share group and is empty; per topic,
        the partitions with state (UNKNOWN_TOPIC_OR_PARTITION for a topic that has none or does not exist).
        Returns (group error, message, {topic name: (topic id, partitions, error)})."""
        group = self.groups.get(group_id)
        if group is None:
            other = group_id in self.shard.consumer_groups or self.shard.classic_group(group_id) is not None
            return (ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Group {group_id} is not a share group." if other else f"Group {group_id} not found.", {})
        if not group.is_empty:
            return ErrorCode.NON_EMPTY_GROUP, "The group is not empty; stop its members first.", {}
        topics_view = self.shard.topics
        found = {}
        for name in dict.fromkeys(topic_names):
            info = topics_view.topic_by_name(name) if topics_view is not None else None
            partitions = (group.state_partitions.all_partitions([info.topic_id]).get(info.topic_id, frozenset())
                          if info is not None else frozenset())
            found[name] = (info.topic_id if info is not None else None, partitions,
                           ErrorCode.NONE if partitions else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return ErrorCode.NONE, None, found

    # -- leaving and fencing --

    def _leave(self, request, out: Batch):
        group = self.groups.get(request.group_id)
        if group is None:
            if request.group_id in self.shard.consumer_groups or self.shard.classic_group(request.group_id):
                raise CoordinatorError(f"Group {request.group_id} is not a share group.",
                                       ErrorCode.GROUP_ID_NOT_FOUND)
            raise CoordinatorError(f"Group {request.group_id} not found.", ErrorCode.GROUP_ID_NOT_FOUND)
        member = group.members.get(request.member_id)
        if member is None:
            raise CoordinatorError(f"Member {request.member_id} is not a member of group {group.group_id}.",
                                   ErrorCode.UNKNOWN_MEMBER_ID)
        self.fence_member(group, member, out, reason="left")
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.NONE, member_id=request.member_id,
                                           member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def fence_member(self, group: ShareGroup, member: ShareGroupMember, out: Batch, reason: str) -> None:
        out.records.extend(share_group_tombstones(group.group_id, member.member_id))
        remaining = [m for m_id, m in group.members.items() if m_id != member.member_id]
        out.records.append(share_group_epoch_record(group.group_id, group.group_epoch + 1,
                                                    self._metadata_hash(remaining)))
        log.info("member removed", group=group.group_id, member=member.member_id, reason=reason,
                 group_epoch=group.group_epoch + 1, members=len(remaining), type="share")
        self.shard.cancel(("share-session", group.group_id, member.member_id))

    def delete_group(self, group_id: str, out: Batch) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        for member_id in group.members:
            out.records.extend(share_group_tombstones(group_id, member_id))
            self.shard.cancel(("share-session", group_id, member_id))
        out.records.extend(share_group_tombstones(group_id))

    # -- timers --

    def _schedule_session_timeout(self, group_id: str, member_id: str, now_ms: int) -> None:
        self.shard.schedule(("share-session", group_id, member_id),
                            now_ms + self._session_timeout_ms(group_id),
                            lambda shard, now: shard.share._on_session_timeout(group_id, member_id))

    def _session_timeout_ms(self, group_id: str) -> int:
        """The group's share.session.timeout.ms (a GROUP config), else group.share.session.timeout.ms."""
        value = self.shard.group_configs(group_id).get("share.session.timeout.ms")
        return int(value) if value is not None else self.config.share_group_session_timeout_ms

    def _heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.shard.group_configs(group_id).get("share.heartbeat.interval.ms")
        return int(value) if value is not None else self.config.share_group_heartbeat_interval_ms

    def _on_session_timeout(self, group_id: str, member_id: str) -> Result:
        out = Batch()
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None:
            self.fence_member(group, member, out, reason="session timeout")
        return out.result()

    def on_loaded(self, now_ms: int) -> None:
        for group in self.groups.values():
            for member_id in group.members:
                self._schedule_session_timeout(group.group_id, member_id, now_ms)

    # -- subscriptions and topic metadata --

    def _subscribed_topic_ids(self, member: ShareGroupMember) -> list[uuid.UUID]:
        topics = self.shard.topics
        if topics is None:
            return []
        ids = []
        for name in member.subscribed_topic_names:
            info = topics.topic_by_name(name)
            if info is not None:
                ids.append(info.topic_id)
        return ids

    def _metadata_hash(self, members) -> int:
        """A hash of the metadata of every topic the members subscribe to (0: none)."""
        names: set[str] = set()
        for member in members:
            names.update(member.subscribed_topic_names)
        topics = self.shard.topics
        digest = hashlib.blake2b(digest_size=8)
        found = False
        for name in sorted(names):
            info = topics.topic_by_name(name) if topics is not None else None
            if info is None:
                continue
            found = True
            digest.update(f"{name}\0{info.topic_id}\0{info.num_partitions}\0".encode())
        return int.from_bytes(digest.digest(), "big", signed=True) if found else 0

    # ------------------------------------------------------------------------------------------------
    # ShareGroupDescribe

    def describe(self, group_id: str, include_authorized_operations: bool):
        described_cls = ShareGroupDescribeResponse.DescribedGroup
        group = self.groups.get(group_id)
        if group is None:
            other = group_id in self.shard.consumer_groups or self.shard.classic_group(group_id) is not None
            # As Kafka: an error row carries no state (the wire default), only the code and the cause.
            return described_cls(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id,
                                 error_message=(f"Group {group_id} is not a share group." if other
                                                else f"Group {group_id} not found."))
        members = [described_cls.Member(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=self._described_assignment(m.assigned_partitions),
        ) for _, m in sorted(group.members.items())]
        return described_cls(
            error_code=ErrorCode.NONE, group_id=group_id, group_state=str(group.state), group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=SHARE_ASSIGNOR, members=members,
            authorized_operations=ALL_GROUP_OPERATIONS if include_authorized_operations else -(1 << 31))

    def _described_assignment(self, assignment: Assignment):
        assignment_cls = ShareGroupDescribeResponse.DescribedGroup.Member.Assignment
        topics = self.shard.topics
        topic_partitions = []
        for topic_id, partitions in sorted(assignment.items()):
            info = topics.topic_by_id(topic_id) if topics is not None else None
            topic_partitions.append(assignment_cls.TopicPartitions(
                topic_id=topic_id, topic_name=info.name if info is not None else "", partitions=sorted(partitions)))
        return assignment_cls(topic_partitions=topic_partitions)


def _validate_member_epoch(member: ShareGroupMember, received: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid: the current epoch, or the previous one (the response
    that moved the member on may have been lost; a share member owns nothing exclusively, so there is no
    owned-partitions condition as for a consumer member)."""
    if received > member.member_epoch:
        raise CoordinatorError(
            f"The share group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            ErrorCode.FENCED_MEMBER_EPOCH)
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise CoordinatorError(
            f"The share group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            ErrorCode.FENCED_MEMBER_EPOCH)


def validate_heartbeat(request) -> None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid (same checks, same order, same messages)."""
    def invalid(message: str) -> CoordinatorError:
        return CoordinatorError(message, ErrorCode.INVALID_REQUEST)

    if request.member_id is not None and not request.member_id.strip():
        raise invalid("MemberId can't be empty.")
    if request.group_id is not None and not request.group_id.strip():
        raise invalid("GroupId can't be empty.")
    if request.rack_id is not None and not request.rack_id.strip():
        raise invalid("RackId can't be empty.")
    epoch = request.member_epoch
    if epoch == 0:
        if not request.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
