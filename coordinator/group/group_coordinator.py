"""The group coordinator: one method per API, over the shards of `__consumer_offsets` this broker leads.

Theory of operation
-------------------
A group lives in partition `partition_for(group_id)` of `__consumer_offsets`; the broker that leads that
partition coordinates the group. `GroupCoordinator` routes each request to its partition's shard through
the runtime (runtime.py), translates between the wire messages of every version and the shard's terms,
and answers NOT_COORDINATOR for groups of partitions it does not hold.

Methods take the decoded request, its API version and `now_ms` (nothing here reads a clock), and return
the response message, or a `Deferred` of it for the APIs that write (their response waits until the
records are durable, or until `offsets.commit.timeout.ms`: then COORDINATOR_NOT_AVAILABLE) and for the long polls (JoinGroup and SyncGroup wait for the rebalance). A Deferred
never fails: errors are answered in the response, as Kafka answers them.

Timers (session expiry, rebalance and initial delays, offset retention) are tasks on the shared timing
wheel passed in as `timer`; the broker advances it. The broker tells the coordinator which partitions it
leads (`on_elected` / `on_resigned`); how far they are committed (`on_committed`) comes from the writer,
whose high-watermark listener the runtime registers for each partition it loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
)
from odradek.purgatory.timing_wheel import Timer

from .classic import join_error, sync_response
from .classic_group import ClassicGroup, ClassicGroupState
from .config import GroupCoordinatorConfig
from .consumer import ALL_GROUP_OPERATIONS
from .offsets import PartitionCommit
from .records import deserialize, serialize
from .share import validate_heartbeat as validate_share_heartbeat
from ..partitioning import (
    CONSUMER_OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    partition_for,
)
from ..runtime import (
    Batch,
    CoordinatorError,
    CoordinatorRuntime,
    Deferred,
    PartitionWriter,
    Result,
    gather,
)
from .shard import GroupCoordinatorShard
from .share_group import ShareGroup
from .share_state import Initialization
from ..topics import TopicsView

__all__ = ["CoordinatorLocation", "GroupCoordinator"]

INT32_MIN = -(1 << 31)

# (node_id, host, port) of the leader of an internal topic's partition, or None if it has none.
CoordinatorLocation = tuple[int, str, int]
Locate = Callable[[str, int], "CoordinatorLocation | None"]

_ERROR_MESSAGES = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.INVALID_REQUEST: "Unknown coordinator key type.",
}


def error_code_of(error: BaseException) -> ErrorCode:
    """The code a failed write is answered with (Kafka's GroupCoordinatorService.handleOperationException)."""
    if not isinstance(error, KafkaApiError):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    try:
        code = ErrorCode(error.error_code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class GroupCoordinator:
    def __init__(self, writer: PartitionWriter, timer: Timer, config: GroupCoordinatorConfig | None = None,
                 topics: TopicsView | None = None, *, under_min_isr: Callable[[int], bool] | None = None) -> None:
        """`under_min_isr(partition)`: whether a __consumer_offsets partition's ISR is below its
        min.insync.replicas now; a write released then is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND
        (coordinator/runtime.py), which OffsetCommit and the group APIs answer COORDINATOR_NOT_AVAILABLE."""
        self.config = config if config is not None else GroupCoordinatorConfig()
        self.topics = topics
        self.timer = timer
        # The broker's persister, for share groups (share_state.py): called with each Initialization once
        # its records are durable; None (unit tests of membership alone): nothing is initialized.
        self.share_state_initializer: Callable[[Initialization], None] | None = None
        # A group's dynamic GROUP configs (the broker reads them from the metadata image); none by default.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard] = CoordinatorRuntime(
            writer, self._new_shard, timer, serialize=serialize, deserialize=deserialize, under_min_isr=under_min_isr,
            on_shard_committed=lambda shard, offset: shard.on_committed(offset))

    def _new_shard(self, partition: int) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(partition, self.config, self.runtime, self.topics)
        shard.share_state_hook = self._initialize_share_state
        shard.share_state_wired = lambda: self.share_state_initializer is not None
        shard.group_configs = lambda group_id: self.group_configs(group_id)
        return shard

    def _initialize_share_state(self, initialization: Initialization) -> None:
        if self.share_state_initializer is not None:
            self.share_state_initializer(initialization)

    # ------------------------------------------------------------------------------------------------
    # Partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def on_elected(self, partition: int, now_ms: int) -> None:
        """This broker now leads `partition` of __consumer_offsets: load its groups from the log."""
        self.runtime.load(partition, now_ms)

    def on_resigned(self, partition: int) -> None:
        self.runtime.unload(partition)

    def startup(self, now_ms: int, partitions: list[int] | None = None) -> None:
        """Load `partitions` (default: all of them, as the only broker of a cluster does)."""
        for p in range(self.config.offsets_topic_num_partitions) if partitions is None else partitions:
            self.on_elected(p, now_ms)

    def shutdown(self) -> None:
        for p in self.runtime.partitions:
            self.on_resigned(p)

    def on_committed(self, partition: int, committed_offset: int) -> None:
        """The partition's high watermark reached `committed_offset`. The writer's listener calls the runtime's
        `on_committed` directly; this is the same entry for callers holding the coordinator."""
        self.runtime.on_committed(partition, committed_offset)

    def shard_for(self, group_id: str) -> GroupCoordinatorShard:
        return self.runtime.shard(self.partition_for(group_id))

    def _write(self, group_id: str, op: Callable[[GroupCoordinatorShard], Result], now_ms: int) -> Deferred:
        return self._write_partition(self.partition_for(group_id), op, now_ms)

    def _write_partition(self, partition: int, op: Callable[[GroupCoordinatorShard], Result], now_ms: int) -> Deferred:
        """Every group write is bounded by `offsets.commit.timeout.ms`, as each scheduleWriteOperation of Kafka's
        GroupCoordinatorService is: not replicated by then, it fails with REQUEST_TIMED_OUT, which
        `error_code_of` answers COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again and
        retries). The records stay written and take effect if replicated later (runtime.py, `_bounded`)."""
        return self.runtime.write(partition, op, now_ms, timeout_ms=self.config.offsets_commit_timeout_ms)

    # ------------------------------------------------------------------------------------------------
    # FindCoordinator (10)

    def find_coordinator(self, request, version: int, locate: Locate) -> FindCoordinatorResponse:
        """`locate(topic, partition)` is the broker's answer to "who leads this internal partition"."""
        keys = list(request.coordinator_keys) if version >= 4 else [request.key]
        found = [self._locate(request.key_type, key, locate) for key in keys]
        if version >= 4:
            return FindCoordinatorResponse(coordinators=[
                FindCoordinatorResponse.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error,
                                                    error_message=_ERROR_MESSAGES.get(error))
                for key, (error, node_id, host, port) in zip(keys, found)
            ])
        error, node_id, host, port = found[0]
        return FindCoordinatorResponse(error_code=error, error_message=_ERROR_MESSAGES.get(error) if version >= 1 else None,
                                       node_id=node_id, host=host, port=port)

    def _locate(self, key_type: int, key: str, locate: Locate) -> tuple[ErrorCode, int, str, int]:
        if key_type == 0:
            topic, partition = CONSUMER_OFFSETS_TOPIC, self.partition_for(key)
        elif key_type == 1:
            topic = TRANSACTION_STATE_TOPIC
            partition = partition_for(key, self.config.transaction_state_log_num_partitions)
        else:  # key type 2 (SHARE) is the share coordinator's (broker/handlers/share_state.py)
            return ErrorCode.INVALID_REQUEST, -1, "", -1
        location = locate(topic, partition)
        if location is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        node_id, host, port = location
        return ErrorCode.NONE, node_id, host, port

    # ------------------------------------------------------------------------------------------------
    # JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13)

    def join_group(self, request, version: int, now_ms: int, client_id: str = "",
                   client_host: str = "") -> Deferred[JoinGroupResponse]:
        if version == 0:
            request.rebalance_timeout_ms = request.session_timeout_ms
        response: Deferred[JoinGroupResponse] = Deferred()
        if not request.group_id:
            response.complete(join_error(request.member_id, ErrorCode.INVALID_GROUP_ID))
        elif not (self.config.group_min_session_timeout_ms <= request.session_timeout_ms
                  <= self.config.group_max_session_timeout_ms):
            response.complete(join_error(request.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
        else:
            written = self._write(request.group_id, lambda shard: shard.classic.join(
                request, version, client_id, client_host, response, now_ms), now_ms)
            _answer_failure(written, response, lambda code: join_error(request.member_id, code))
        return response.then(lambda r: _join_for_version(r, version))

    def sync_group(self, request, version: int, now_ms: int) -> Deferred[SyncGroupResponse]:
        response: Deferred[SyncGroupResponse] = Deferred()
        if not request.group_id:
            response.complete(sync_response(ErrorCode.INVALID_GROUP_ID))
            return response
        written = self._write(request.group_id, lambda shard: shard.classic.sync(request, version, response, now_ms),
                              now_ms)
        _answer_failure(written, response, sync_response)
        return response

    def heartbeat(self, request, version: int, now_ms: int) -> Deferred[HeartbeatResponse]:
        if not request.group_id:
            return Deferred.completed(HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID))
        written = self._write(request.group_id, lambda shard: shard.classic.heartbeat(request, now_ms), now_ms)
        return written.then(lambda code: HeartbeatResponse(error_code=code),
                            lambda e: HeartbeatResponse(error_code=error_code_of(e)))

    def leave_group(self, request, version: int, now_ms: int) -> Deferred[LeaveGroupResponse]:
        identities: list[tuple[str, str | None]]
        if version <= 2:
            identities = [(request.member_id, None)]
        else:
            identities = [(m.member_id, m.group_instance_id) for m in request.members]
        if not request.group_id:
            return Deferred.completed(_leave_response(version, ErrorCode.INVALID_GROUP_ID, []))
        written = self._write(request.group_id, lambda shard: shard.classic.leave(request.group_id, identities, now_ms),
                              now_ms)
        return written.then(lambda r: _leave_response(version, *r),
                            lambda e: _leave_response(version, error_code_of(e), []))

    # ------------------------------------------------------------------------------------------------
    # OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)

    def offset_commit(self, request, version: int, now_ms: int) -> Deferred[OffsetCommitResponse]:
        partitions = [
            PartitionCommit(topic.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                            p.committed_metadata)
            for topic in request.topics for p in topic.partitions
        ]

        def respond(errors: list[ErrorCode]) -> OffsetCommitResponse:
            it = iter(errors)
            return OffsetCommitResponse(topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, partitions=[
                    OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=next(it))
                    for p in topic.partitions
                ])
                for topic in request.topics
            ])

        if not request.group_id:
            return Deferred.completed(respond([ErrorCode.INVALID_GROUP_ID] * len(partitions)))
        retention_time_ms = request.retention_time_ms if 2 <= version <= 4 else -1
        written = self._write(request.group_id, lambda shard: shard.offset_manager.commit(
            request.group_id, request.member_id, request.group_instance_id, request.generation_id_or_member_epoch,
            retention_time_ms, partitions, version, now_ms), now_ms)
        return written.then(respond, lambda e: respond([error_code_of(e)] * len(partitions)))

    def offset_fetch(self, request, version: int, now_ms: int) -> OffsetFetchResponse | Deferred[OffsetFetchResponse]:
        """Committed offsets. Without `require_stable` the answer is read now. With it (v7+, KIP-447, sent by
        read_committed consumers) Kafka's GroupCoordinatorService schedules the fetch as a write with no
        records: a partition with a pending transactional offset answers UNSTABLE_OFFSET_COMMIT, and the
        answer waits until everything written to the group's partition before it is committed (the high
        watermark), so a stable fetch never returns an offset a change of leader could still take back.
        A Deferred then; failed (not replicated within offsets.commit.timeout.ms, the partition moved), the
        group's entry carries the error the client retries on (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)."""
        require_stable = version >= 7 and request.require_stable
        if version <= 7:
            topics = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
            error, results = self._fetch_group(request.group_id, None, -1, topics, require_stable)
            response = _fetch_response_v1_to_v7(version, error, results, topics)
            if not require_stable:
                return response
            self._mark_unstable(request.group_id, response.topics)

            def failed_v7(e: BaseException) -> OffsetFetchResponse:
                return _fetch_response_v1_to_v7(version, error_code_of(e), [], topics)

            return self._when_committed(request.group_id, now_ms).then(lambda _: response, failed_v7)
        groups = []
        waits = []
        for group in request.groups:
            topics = None if group.topics is None else [(t.name, list(t.partition_indexes)) for t in group.topics]
            error, results = self._fetch_group(group.group_id, group.member_id, group.member_epoch, topics,
                                               require_stable)
            groups.append(_fetch_group_response(group.group_id, error, results))
            if require_stable:
                self._mark_unstable(group.group_id, groups[-1].topics)
                waits.append(self._when_committed(group.group_id, now_ms).then(
                    lambda _, answer=groups[-1]: answer,
                    lambda e, group_id=group.group_id: _fetch_group_response(group_id, error_code_of(e), [])))
        if not require_stable:
            return OffsetFetchResponse(groups=groups)
        return gather(waits).then(lambda answers: OffsetFetchResponse(groups=answers))

    def _when_committed(self, group_id: str, now_ms: int) -> Deferred:
        """Completes once everything written to the group's partition so far is committed (an empty write)."""
        if not group_id:
            return Deferred.completed(None)
        return self._write(group_id, lambda shard: Batch().result(None), now_ms)

    def _mark_unstable(self, group_id: str, topics) -> None:
        """require_stable (KIP-447): a partition with an offset in an open transaction answers
        UNSTABLE_OFFSET_COMMIT, which the consumer retries until the transaction ends."""
        try:
            offsets = self.shard_for(group_id).offset_manager
        except CoordinatorError:
            return
        if not offsets.shard.pending_txn_offsets:
            return
        for topic in topics:
            for p in topic.partitions:
                if offsets.has_pending(group_id, topic.name, p.partition_index):
                    p.error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
                    p.committed_offset = -1

    # -- TxnOffsetCommit (28), and the markers that end its transactions

    def txn_offset_commit(self, request, version: int, now_ms: int) -> Deferred[TxnOffsetCommitResponse]:
        partitions = [
            PartitionCommit(topic.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                            p.committed_metadata)
            for topic in request.topics for p in topic.partitions
        ]
        Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic

        def respond(errors: list[ErrorCode]) -> TxnOffsetCommitResponse:
            it = iter(errors)
            return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
                Topic(name=topic.name, partitions=[
                    Topic.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=next(it))
                    for p in topic.partitions])
                for topic in request.topics
            ])

        if not request.group_id:
            return Deferred.completed(respond([ErrorCode.INVALID_GROUP_ID] * len(partitions)))
        written = self._write(request.group_id, lambda shard: shard.offset_manager.txn_commit(
            request.group_id, request.member_id if version >= 3 else "",
            request.group_instance_id if version >= 3 else None, request.generation_id if version >= 3 else -1,
            request.producer_id, request.producer_epoch, partitions, version, now_ms), now_ms)
        return written.then(respond, lambda e: respond([error_code_of(e)] * len(partitions)))

    def on_transaction_completed(self, producer_id: int, partitions, committed: bool) -> None:
        """The WriteTxnMarkers handler's hook: markers of `producer_id` written to these partitions of
        __consumer_offsets (TopicPartitions)."""
        for tp in partitions:
            self.complete_transaction(tp.partition, producer_id, committed)

    def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` was written to `partition` of __consumer_offsets (the
        partition's WriteTxnMarkers calls this after the append): its pending offsets take effect or go."""
        if self.runtime.is_loaded(partition):
            self.runtime.complete_transaction(partition, producer_id, committed)

    def _fetch_group(self, group_id: str, member_id: str | None, member_epoch: int, topics, require_stable: bool):
        try:
            shard = self.shard_for(group_id)
        except CoordinatorError as e:
            return e.error_code, []
        return shard.offset_manager.fetch(group_id, member_id, member_epoch, topics, latest=require_stable)

    def offset_delete(self, request, version: int, now_ms: int) -> Deferred[OffsetDeleteResponse]:
        topics = [(t.name, [p.partition_index for p in t.partitions]) for t in request.topics]

        def respond(result) -> OffsetDeleteResponse:
            error, results = result
            topic_cls = OffsetDeleteResponse.OffsetDeleteResponseTopic
            return OffsetDeleteResponse(error_code=error, topics=[
                topic_cls(name=topic, partitions=[
                    topic_cls.OffsetDeleteResponsePartition(partition_index=p, error_code=code) for p, code in parts])
                for topic, parts in results
            ])

        if not request.group_id:
            return Deferred.completed(respond((ErrorCode.INVALID_GROUP_ID, [])))
        written = self._write(request.group_id, lambda shard: shard.offset_manager.delete(request.group_id, topics),
                              now_ms)
        return written.then(respond, lambda e: respond((error_code_of(e), [])))

    # ------------------------------------------------------------------------------------------------
    # DescribeGroups (15), ListGroups (16), DeleteGroups (42)

    def describe_groups(self, request, version: int, now_ms: int) -> DescribeGroupsResponse:
        include_ops = version >= 3 and request.include_authorized_operations
        return DescribeGroupsResponse(groups=[self._describe_group(g, version, include_ops) for g in request.groups])

    def _describe_group(self, group_id: str, version: int, include_ops: bool):
        described_cls = DescribeGroupsResponse.DescribedGroup
        if not group_id:
            return described_cls(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id)
        try:
            shard = self.shard_for(group_id)
        except CoordinatorError as e:
            return described_cls(error_code=e.error_code, group_id=group_id)
        group = shard.group(group_id)
        if not isinstance(group, ClassicGroup) or group.is_in(ClassicGroupState.DEAD):
            if version >= 6:
                # Kafka 4.4 (KIP-1043) answers a consumer or share group id "not a classic group", in the
                # Dead state, so a client can tell it from an unknown group.
                other = group is not None and not isinstance(group, ClassicGroup)
                return described_cls(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id,
                                     group_state=str(ClassicGroupState.DEAD),
                                     error_message=(f"Group {group_id} is not a classic group." if other
                                                    else f"Group {group_id} not found."))
            return described_cls(error_code=ErrorCode.NONE, group_id=group_id, group_state=str(ClassicGroupState.DEAD))
        stable = group.is_in(ClassicGroupState.STABLE)
        member_cls = described_cls.DescribedGroupMember
        members = [
            member_cls(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ]
        return described_cls(
            error_code=ErrorCode.NONE,
            group_id=group_id,
            group_state=str(group.state),
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
            authorized_operations=ALL_GROUP_OPERATIONS if include_ops else INT32_MIN,
        )

    def list_groups(self, request, version: int, now_ms: int) -> ListGroupsResponse:
        states = {s.lower() for s in request.states_filter} if version >= 4 else set()
        types = {t.lower() for t in request.types_filter} if version >= 5 else set()
        groups = []
        for partition in self.runtime.partitions:
            for group_id, protocol_type, state, group_type in self.runtime.shard(partition).list_groups():
                if states and state.lower() not in states:
                    continue
                if types and group_type not in types:
                    continue
                groups.append(ListGroupsResponse.ListedGroup(group_id=group_id, protocol_type=protocol_type,
                                                             group_state=state, group_type=group_type))
        return ListGroupsResponse(error_code=ErrorCode.NONE, groups=groups)

    def delete_groups(self, request, version: int, now_ms: int) -> Deferred[DeleteGroupsResponse]:
        by_partition: dict[int, list[str]] = {}
        for group_id in dict.fromkeys(request.groups_names):
            if group_id:
                by_partition.setdefault(self.partition_for(group_id), []).append(group_id)

        def delete_on(partition: int, ids: list[str]) -> Deferred:
            written = self._write_partition(partition, lambda shard: shard.delete_groups(ids, now_ms), now_ms)
            return written.then(lambda results: results, lambda e: [(g, error_code_of(e)) for g in ids])

        parts = [delete_on(partition, group_ids) for partition, group_ids in by_partition.items()]

        def respond(per_partition: list[list[tuple[str, ErrorCode]]]) -> DeleteGroupsResponse:
            codes = {group_id: code for results in per_partition for group_id, code in results}
            return DeleteGroupsResponse(results=[
                DeleteGroupsResponse.DeletableGroupResult(
                    group_id=group_id, error_code=codes.get(group_id, ErrorCode.INVALID_GROUP_ID))
                for group_id in request.groups_names
            ])

        return gather(parts).then(respond)

    # ------------------------------------------------------------------------------------------------
    # ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69)

    def consumer_group_heartbeat(self, request, version: int, now_ms: int, client_id: str = "",
                                 client_host: str = "") -> Deferred[ConsumerGroupHeartbeatResponse]:
        if not request.group_id:
            return Deferred.completed(ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.INVALID_REQUEST, error_message="GroupId can't be empty."))
        written = self._write(request.group_id, lambda shard: shard.consumer.heartbeat(
            request, version, client_id, client_host, now_ms), now_ms)
        return written.then(lambda r: r, lambda e: ConsumerGroupHeartbeatResponse(error_code=error_code_of(e)))

    def consumer_group_describe(self, request, version: int, now_ms: int) -> ConsumerGroupDescribeResponse:
        described_cls = ConsumerGroupDescribeResponse.DescribedGroup
        groups = []
        for group_id in request.group_ids:
            if not group_id:
                groups.append(described_cls(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id))
                continue
            try:
                shard = self.shard_for(group_id)
            except CoordinatorError as e:
                groups.append(described_cls(error_code=e.error_code, group_id=group_id))
                continue
            groups.append(shard.consumer.describe(group_id, request.include_authorized_operations, version))
        return ConsumerGroupDescribeResponse(groups=groups)

    # -- share groups (KIP-932; share.py) --

    def share_group_heartbeat(self, request, now_ms: int, client_id: str = "",
                              client_host: str = "") -> Deferred[ShareGroupHeartbeatResponse]:
        try:
            validate_share_heartbeat(request)  # before routing: Kafka validates before it looks anything up
        except CoordinatorError as e:
            return Deferred.completed(ShareGroupHeartbeatResponse(error_code=e.error_code, error_message=str(e)))
        if not request.group_id:
            return Deferred.completed(ShareGroupHeartbeatResponse(
                error_code=ErrorCode.INVALID_REQUEST, error_message="GroupId can't be empty."))
        written = self._write(request.group_id, lambda shard: shard.share.heartbeat(
            request, client_id, client_host, now_ms), now_ms)
        return written.then(lambda r: r, lambda e: ShareGroupHeartbeatResponse(error_code=error_code_of(e)))

    def share_state_initialized(self, initialization: Initialization, failed: dict, now_ms: int) -> Deferred:
        """The broker's persister answered `initialization`; `failed` maps (topic id, partition) to the error
        of each partition it could not initialize."""
        return self._write(initialization.group_id,
                           lambda shard: shard.share.state_initialized(initialization, failed), now_ms)

    def share_state_deleted(self, group_id: str, partitions: dict, now_ms: int) -> Deferred:
        return self._write(group_id, lambda shard: shard.share.state_deleted(group_id, partitions), now_ms)

    def share_state_partitions(self, group_id: str) -> tuple[ErrorCode, ShareGroup | None]:
        """A share group (to read its members and state partitions), or why there is none: NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, GROUP_ID_NOT_FOUND (no such group, or one of another type)."""
        try:
            shard = self.shard_for(group_id)
        except CoordinatorError as e:
            return e.error_code, None
        group = shard.share_groups.get(group_id)
        return (ErrorCode.NONE, group) if group is not None else (ErrorCode.GROUP_ID_NOT_FOUND, None)

    def alter_share_group_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]],
                                  now_ms: int) -> Deferred:
        """AlterShareGroupOffsets' coordinator part (share.py `alter_offsets`); a failed write answers every
        partition with the write's error."""
        written = self._write(group_id, lambda shard: shard.share.alter_offsets(group_id, topics, now_ms), now_ms)
        return written.then(lambda r: r, lambda e: (error_code_of(e), None, {}, None))

    def share_offsets_to_delete(self, group_id: str, topic_names: list[str]):
        try:
            shard = self.shard_for(group_id)
        except CoordinatorError as e:
            return e.error_code, None, {}
        return shard.share.offsets_to_delete(group_id, topic_names)

    def share_groups(self) -> list[ShareGroup]:
        """The share groups of every partition this coordinator has loaded (metrics)."""
        return [g for p in self.runtime.partitions for g in self.runtime.shard(p).share_groups.values()]

    def share_group_describe(self, request, now_ms: int) -> ShareGroupDescribeResponse:
        described_cls = ShareGroupDescribeResponse.DescribedGroup
        groups = []
        for group_id in request.group_ids:
            if not group_id:
                groups.append(described_cls(error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id))
                continue
            try:
                shard = self.shard_for(group_id)
            except CoordinatorError as e:
                groups.append(described_cls(error_code=e.error_code, group_id=group_id))
                continue
            groups.append(shard.share.describe(group_id, request.include_authorized_operations))
        return ShareGroupDescribeResponse(groups=groups)


def _answer_failure(written: Deferred, response: Deferred, error_response: Callable[[ErrorCode], object]) -> None:
    """A long poll whose write failed (not coordinator, append error) is answered with the error."""

    def on_written(d: Deferred) -> None:
        if d.failed_with is not None:
            response.complete(error_response(error_code_of(d.failed_with)))

    written.add_callback(on_written)


# ---------------------------------------------------------------------------------------------------
# Version shaping


def _join_for_version(response: JoinGroupResponse, version: int) -> JoinGroupResponse:
    if version < 7 and response.protocol_name is None:
        response.protocol_name = ""
    if version < 9:
        response.skip_assignment = False
    return response


def _leave_response(version: int, error: ErrorCode, results) -> LeaveGroupResponse:
    if version <= 2:
        if error is ErrorCode.NONE and results:
            error = results[0][2]
        return LeaveGroupResponse(error_code=error)
    return LeaveGroupResponse(error_code=error, members=[
        LeaveGroupResponse.MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=code)
        for member_id, instance_id, code in results
    ])


def _fetch_group_response(group_id: str, error: ErrorCode, results):
    group_cls = OffsetFetchResponse.OffsetFetchResponseGroup
    topic_cls = group_cls.OffsetFetchResponseTopics
    partition_cls = topic_cls.OffsetFetchResponsePartitions
    return group_cls(group_id=group_id, error_code=error, topics=[
        topic_cls(name=topic, partitions=[
            partition_cls(
                partition_index=p,
                committed_offset=o.committed_offset if o is not None else -1,
                committed_leader_epoch=o.leader_epoch if o is not None else -1,
                metadata=o.metadata if o is not None else "",
                error_code=ErrorCode.NONE,
            )
            for p, o in parts
        ])
        for topic, parts in results
    ])


def _fetch_response_v1_to_v7(version: int, error: ErrorCode, results, requested) -> OffsetFetchResponse:
    topic_cls = OffsetFetchResponse.OffsetFetchResponseTopic
    partition_cls = topic_cls.OffsetFetchResponsePartition
    if error is not ErrorCode.NONE:
        # v1 has no top-level error: every requested partition carries it.
        results = [(topic, [(p, None) for p in parts]) for topic, parts in (requested or [])] if version < 2 else []
    topics = [
        topic_cls(name=topic, partitions=[
            partition_cls(
                partition_index=p,
                committed_offset=o.committed_offset if o is not None else -1,
                committed_leader_epoch=o.leader_epoch if o is not None and version >= 5 else -1,
                metadata=o.metadata if o is not None else "",
                error_code=error if version < 2 else ErrorCode.NONE,
            )
            for p, o in parts
        ])
        for topic, parts in results
    ]
    return OffsetFetchResponse(topics=topics, error_code=error if version >= 2 else ErrorCode.NONE)
