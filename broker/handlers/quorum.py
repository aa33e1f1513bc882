"""The controller listener's APIs: the Raft quorum's RPCs, and the brokers' RPCs to the active controller.

Vote (52), BeginQuorumEpoch (53), EndQuorumEpoch (54), FetchSnapshot (59) and Fetch (1) of
`__cluster_metadata` go to the node's Raft core (broker/quorum.py), which answers them, a parked Fetch
later. DescribeQuorum (55) is served on both listeners, as Kafka's admin clients send it to any broker: the
leader answers from its core and any other node forwards it to the leader; a lone node is the leader of
its quorum of one and answers for itself.

BrokerRegistration (62), BrokerHeartbeat (63), UnregisterBroker (64), AlterPartition (56),
AssignReplicasToDirs (73) and AllocateProducerIds (67) are answered by the active controller only (metadata/controller.py decides,
the records are committed, then the response goes out); elsewhere NOT_CONTROLLER, which brokers take as
"look for the controller again". ElectLeaders (43), AlterPartitionReassignments (45) and
ListPartitionReassignments (46) are admin requests: any broker takes them and forwards them whole to the
active controller in an Envelope (broker/handlers/envelope.py), which authorizes the client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode, error_code_of
from odradek.protocol.messages import (
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    AssignReplicasToDirsResponse,
    ElectLeadersResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    DescribeQuorumResponse,
    FetchResponse,
    UnregisterBrokerResponse,
)
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import Endpoint, MetadataError
from odradek.raft import METADATA_TOPIC, METADATA_TOPIC_ID


from ..authorizer import requires
from . import BROKER, CONTROLLER, Answer, handles
from .envelope import error_response, forward_for_client, forwarded

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        AllocateProducerIdsRequest,
        AlterPartitionReassignmentsRequest,
        AlterPartitionRequest,
        AssignReplicasToDirsRequest,
        BeginQuorumEpochRequest,
        BrokerHeartbeatRequest,
        BrokerRegistrationRequest,
        DescribeQuorumRequest,
        ElectLeadersRequest,
        EndQuorumEpochRequest,
        FetchRequest,
        FetchSnapshotRequest,
        ListPartitionReassignmentsRequest,
        UnregisterBrokerRequest,
        VoteRequest,
    )
    from ..context import RequestContext
    from ..services import BrokerServices

QTopic = DescribeQuorumResponse.TopicData
QPartition = QTopic.PartitionData


def _quorum(services: BrokerServices):
    if services.quorum is None:
        raise MetadataError(ErrorCode.UNSUPPORTED_VERSION, "this node runs no controller quorum")
    return services.quorum


@handles(52, (0, 2), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_vote(services: BrokerServices, ctx: RequestContext, request: VoteRequest) -> Answer:
    return _quorum(services).handle_request(request)


@handles(53, (0, 1), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_begin_quorum_epoch(services: BrokerServices, ctx: RequestContext,
                              request: BeginQuorumEpochRequest) -> Answer:
    return _quorum(services).handle_request(request)


@handles(54, (0, 1), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_end_quorum_epoch(services: BrokerServices, ctx: RequestContext, request: EndQuorumEpochRequest) -> Answer:
    return _quorum(services).handle_request(request)


@handles(59, (0, 1), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_fetch_snapshot(services: BrokerServices, ctx: RequestContext, request: FetchSnapshotRequest) -> Answer:
    return _quorum(services).handle_request(request)


@handles(1, (4, 18), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_metadata_fetch(services: BrokerServices, ctx: RequestContext, request: FetchRequest) -> Answer:
    """Fetch on the controller listener: only `__cluster_metadata-0`, by the quorum's voters and observers."""
    topic = request.topics[0] if len(request.topics) == 1 else None
    ours = topic is not None and (topic.topic_id == METADATA_TOPIC_ID if ctx.api_version >= 13 else topic.topic == METADATA_TOPIC)
    if not ours:
        return FetchResponse(throttle_time_ms=0, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), session_id=0, responses=[])
    return _quorum(services).handle_request(request)


@handles(55, (0, 2), listeners=(BROKER, CONTROLLER))
def handle_describe_quorum(services: BrokerServices, ctx: RequestContext, request: DescribeQuorumRequest) -> Answer:
    driver = _quorum(services)
    if not driver.raft.is_leader:
        if not driver.leader_watch.leader_known:
            # No leader to forward to (the quorum lost its majority, or is electing): say so at once, as
            # Kafka's raft client answers a non-leader, rather than holding the client for a request timeout.
            return _no_quorum_leader(services, ctx, request)
        # Only the leader knows every voter's lag: it answers, and authorizes the client (KIP-590).
        return forward_for_client(services, ctx, request)
    return _describe_quorum(services, ctx, request)


@requires(AclOperation.DESCRIBE)
def _no_quorum_leader(services: BrokerServices, ctx: RequestContext, request: DescribeQuorumRequest) -> Answer:
    """NOT_LEADER_OR_FOLLOWER for the metadata partition with leader -1 and this node's epoch, and (v2) a
    message naming the last leader this node knew and how long it has known none."""
    driver = _quorum(services)
    watch = driver.leader_watch
    response = driver.raft.describe_quorum()
    partition = response.topics[0].partitions[0]
    partition.leader_id = -1
    partition.error_message = (f"no controller quorum leader: node {services.node_id} (epoch {watch.epoch}) last knew "
                               f"node {watch.last_leader_id}, {watch.seconds_without_leader(services.now_ms()):.0f} s ago")
    return response


@requires(AclOperation.DESCRIBE)
def _describe_quorum(services: BrokerServices, ctx: RequestContext, request: DescribeQuorumRequest) -> Answer:
    answered = _quorum(services).handle_request(request)
    return _with_voter_endpoints(services, answered) if ctx.api_version >= 2 else answered


def _with_voter_endpoints(services: BrokerServices, answered):
    """v2 lists each voter's endpoints (`nodes`): the controller listener of controller.quorum.voters, or on
    a lone node configured with no voters, the listeners it registered (it has no controller listener)."""
    import asyncio

    listener = services.config.controller_listener_names[0].upper()
    nodes = [DescribeQuorumResponse.Node(node_id=v.node_id, listeners=[
        DescribeQuorumResponse.Node.Listener(name=listener, host=v.host, port=v.port)]) for v in services.config.voters()]
    registration = services.metadata.image.brokers.get(services.node_id)
    if not nodes and registration is not None:
        nodes = [DescribeQuorumResponse.Node(node_id=services.node_id, listeners=[
            DescribeQuorumResponse.Node.Listener(name=e.name, host=e.host, port=e.port) for e in registration.endpoints])]
    out = asyncio.get_running_loop().create_future()

    def done(f) -> None:
        if out.done():
            return
        if f.cancelled() or f.exception() is not None:
            out.set_exception(f.exception() or asyncio.CancelledError())
            return
        response = f.result()
        if not response.nodes:
            response.nodes = nodes
        out.set_result(response)

    answered.add_done_callback(done)
    return out


# -- brokers to the active controller


def _not_controller(services: BrokerServices) -> bool:
    return not services.controller.is_active


def _decided(services: BrokerServices, deferred, failed):
    """The controller's response once its records are committed, or `failed(error code, message)`."""

    def answer(d):
        error = d.failed_with
        if error is not None:
            return failed(error_code_of(error), getattr(error, "message", str(error)))
        return d.result()

    return services.settle(deferred, answer)


@handles(62, (0, 5), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_broker_registration(services: BrokerServices, ctx: RequestContext,
                               request: BrokerRegistrationRequest) -> Answer:
    def failed(code, _message):
        return BrokerRegistrationResponse(throttle_time_ms=0, error_code=code, broker_epoch=-1)

    if _not_controller(services):
        return failed(int(ErrorCode.NOT_CONTROLLER), None)
    return _decided(services, services.controller.broker_registration(request), failed)


@handles(63, (0, 2), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_broker_heartbeat(services: BrokerServices, ctx: RequestContext, request: BrokerHeartbeatRequest) -> Answer:
    def failed(code, _message):
        return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=code, is_caught_up=False, is_fenced=True,
                                       should_shut_down=False)

    if _not_controller(services):
        return failed(int(ErrorCode.NOT_CONTROLLER), None)
    # The connection it came on: the active controller fences a broker soon after it closes (broker/quorum.py).
    return _decided(services, services.controller.heartbeat(request, connection=ctx.connection), failed)


@handles(64, (0, 0), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_unregister_broker(services: BrokerServices, ctx: RequestContext, request: UnregisterBrokerRequest) -> Answer:
    def failed(code, message):
        return UnregisterBrokerResponse(throttle_time_ms=0, error_code=code, error_message=message)

    if _not_controller(services):
        return failed(int(ErrorCode.NOT_CONTROLLER), None)
    return _decided(services, services.controller.unregister(request), failed)


@handles(56, (2, 3), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_alter_partition(services: BrokerServices, ctx: RequestContext, request: AlterPartitionRequest) -> Answer:
    def failed(code, _message):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=code, topics=[])

    if _not_controller(services):
        return failed(int(ErrorCode.NOT_CONTROLLER), None)
    return _decided(services, services.controller.alter_partition(request, ctx.api_version), failed)


@handles(73, listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_assign_replicas_to_dirs(services: BrokerServices, ctx: RequestContext,
                                   request: AssignReplicasToDirsRequest) -> Answer:
    def failed(code, _message):
        return AssignReplicasToDirsResponse(throttle_time_ms=0, error_code=code, directories=[])

    if _not_controller(services):
        return failed(int(ErrorCode.NOT_CONTROLLER), None)
    return _decided(services, services.controller.assign_replicas_to_dirs(request), failed)


# -- admin requests the controller answers (forwarded whole by a broker that is not the active controller)


@handles(43, listeners=(BROKER, CONTROLLER))
@forwarded
def handle_elect_leaders(services: BrokerServices, ctx: RequestContext, request: ElectLeadersRequest) -> Answer:
    """ALTER on the cluster. A refusal, like any failure of the whole request, answers every partition named
    (ElectLeadersRequest.getErrorResponse): v0 has no top-level error code to carry it."""
    if not services.authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER):
        return error_response(43, ctx.api_version, request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    def failed(code, message):
        return error_response(43, ctx.api_version, request, ErrorCode(code), message)

    return _decided(services, services.controller.elect_leaders(request), failed)


@handles(45, listeners=(BROKER, CONTROLLER))
@forwarded
@requires(AclOperation.ALTER)
def handle_alter_partition_reassignments(services: BrokerServices, ctx: RequestContext,
                                         request: AlterPartitionReassignmentsRequest) -> Answer:
    def failed(code, message):
        return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=code, error_message=message, responses=[])

    return _decided(services, services.controller.alter_partition_reassignments(request), failed)


@handles(46, listeners=(BROKER, CONTROLLER))
@forwarded
@requires(AclOperation.DESCRIBE)
def handle_list_partition_reassignments(services: BrokerServices, ctx: RequestContext,
                                        request: ListPartitionReassignmentsRequest) -> Answer:
    return services.controller.list_partition_reassignments(request)


@handles(67, (0, 0), listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_allocate_producer_ids(services: BrokerServices, ctx: RequestContext,
                                 request: AllocateProducerIdsRequest) -> Answer:
    if _not_controller(services):
        return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=int(ErrorCode.NOT_CONTROLLER),
                                           producer_id_start=-1, producer_id_len=-1)

    def answer(d):
        error = d.failed_with
        if error is not None:
            return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=error_code_of(error),
                                               producer_id_start=-1, producer_id_len=-1)
        block = d.result()
        return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=block.first_producer_id,
                                           producer_id_len=block.size)

    return services.settle(services.controller.allocate_producer_ids(request.broker_id), answer)
