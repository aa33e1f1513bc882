"""DescribeCluster (60), DescribeLogDirs (35) and AlterReplicaLogDirs (34).

DescribeCluster answers from the metadata image, as Metadata does: every registered broker at its endpoint
for the listener the request came in on (fenced ones too from v2, flagged, as Kafka lists them), the
cluster id, and the controller id clients are given (a live broker, which forwards controller requests).
DescribeLogDirs reports every log directory of this broker (JBOD) and the replicas in each, future
replicas of a move included; AlterReplicaLogDirs starts such moves (see broker/log_dirs.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import AlterReplicaLogDirsResponse, DescribeClusterResponse, DescribeLogDirsResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.storage.names import TopicPartition

from ..authorizer import requires
from . import Answer, handles
from .metadata import ALL_CLUSTER_OPERATIONS, INT32_MIN

if TYPE_CHECKING:
    from odradek.protocol.messages import AlterReplicaLogDirsRequest, DescribeClusterRequest, DescribeLogDirsRequest
    from ..context import RequestContext
    from ..services import BrokerServices

CBroker = DescribeClusterResponse.DescribeClusterBroker
LResult = DescribeLogDirsResponse.DescribeLogDirsResult
LTopic = LResult.DescribeLogDirsTopic
LPartition = LTopic.DescribeLogDirsPartition

AResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult

ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS = 1, 2
INVALID_OFFSET_LAG = -1  # DescribeLogDirsResponse.INVALID_OFFSET_LAG: a replica not hosted now
METADATA_TOPIC = "__cluster_metadata"


@handles(60, (0, 2))
def handle_describe_cluster(services: BrokerServices, ctx: RequestContext, request: DescribeClusterRequest) -> Answer:
    version = ctx.api_version
    endpoint_type = request.endpoint_type if version >= 1 else ENDPOINT_BROKERS
    include_ops = request.include_cluster_authorized_operations
    response = DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None,
        cluster_id=services.metadata.image.cluster_id, controller_id=services.controller_id(), brokers=[],
        cluster_authorized_operations=ALL_CLUSTER_OPERATIONS if include_ops else INT32_MIN,
    )
    if version >= 1:
        response.endpoint_type = endpoint_type
    if endpoint_type != ENDPOINT_BROKERS:
        response.error_code = int(
            ErrorCode.UNSUPPORTED_ENDPOINT_TYPE if endpoint_type == ENDPOINT_CONTROLLERS else ErrorCode.INVALID_REQUEST
        )
        response.error_message = f"The broker does not support DescribeCluster with endpoint type {endpoint_type}."
        response.cluster_authorized_operations = INT32_MIN
        return response
    brokers = []
    for registration in sorted(services.metadata.image.brokers.values(), key=lambda b: b.broker_id):
        if registration.fenced and version < 2:
            continue
        endpoint = services.endpoint(registration.broker_id, ctx.listener)
        if endpoint is None and registration.broker_id == services.node_id:
            endpoint = registration.endpoints[0]
        if endpoint is None:
            continue
        entry = CBroker(broker_id=registration.broker_id, host=endpoint.host, port=endpoint.port, rack=registration.rack)
        if version >= 2:
            entry.is_fenced = registration.fenced
        brokers.append(entry)
    response.brokers = brokers
    if include_ops and services.authorizer is not None:
        response.cluster_authorized_operations = (
            services.authorizer.authorized_operations(ctx, ResourceType.CLUSTER)
            if services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, log_denied=False) else INT32_MIN)
    return response


def _partitions_wanted(request):
    """None for every partition, else {topic: set of partitions}."""
    if request.topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for t in request.topics:
        wanted.setdefault(t.topic, set()).update(t.partitions)
    return wanted


@handles(35, (1, 4))
@requires(AclOperation.DESCRIBE)
def handle_describe_log_dirs(services: BrokerServices, ctx: RequestContext, request: DescribeLogDirsRequest) -> Answer:
    """One result per log directory, as Kafka's describeLogDirs: an online one lists the replicas in it
    (size; offset lag: for a future replica how far it is behind the current one, else how far the log end
    is below the high watermark, 0 on any replica that keeps up), and from v4 the file system's total and
    usable bytes; an offline one answers KAFKA_STORAGE_ERROR and nothing else. The metadata log is not a
    replica (Kafka's describes it neither)."""
    version = ctx.api_version
    wanted = _partitions_wanted(request)
    manager = services.log_manager
    by_dir: dict[str, dict[str, list]] = {d.path: {} for d in manager.dirs}

    def add(tp, log, d, lag: int, future: bool) -> None:
        if d is None or tp.topic == METADATA_TOPIC:
            return
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            return
        by_dir[d.path].setdefault(tp.topic, []).append(
            LPartition(partition_index=tp.partition, partition_size=log.size_bytes, offset_lag=lag, is_future_key=future)
        )

    for tp, log in sorted(manager.logs.items(), key=lambda item: (item[0].topic, item[0].partition)):
        partition = services.data.get_partition(tp)
        lag = max(partition.high_watermark - log.log_end_offset, 0) if partition is not None else INVALID_OFFSET_LAG
        add(tp, log, manager.dir_of(tp), lag, False)
    for tp, log in sorted(manager.future_logs.items(), key=lambda item: (item[0].topic, item[0].partition)):
        current = manager.get_log(tp)
        lag = current.log_end_offset - log.log_end_offset if current is not None else INVALID_OFFSET_LAG
        add(tp, log, manager.future_dir_of(tp), lag, True)
    results = []
    for d in manager.dirs:
        if not d.online:
            result = LResult(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), log_dir=d.path, topics=[])
            if version >= 4:
                result.total_bytes, result.usable_bytes = -1, -1
            results.append(result)
            continue
        if not d.placement and not any(by_dir[d.path].values()):
            continue  # a separate metadata.log.dir holds no replicas
        result = LResult(error_code=0, log_dir=d.path,
                         topics=[LTopic(name=name, partitions=parts) for name, parts in by_dir[d.path].items()])
        if version >= 4:
            try:
                st = os.statvfs(d.path)
            except OSError:
                result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
                result.total_bytes, result.usable_bytes = -1, -1
            else:
                result.total_bytes = st.f_blocks * st.f_frsize
                result.usable_bytes = st.f_bavail * st.f_frsize
        results.append(result)
    response = DescribeLogDirsResponse(throttle_time_ms=0, results=results)
    if version >= 3:
        response.error_code = 0
    return response


@handles(34, (1, 2))
def handle_alter_replica_log_dirs(services: BrokerServices, ctx: RequestContext,
                                  request: AlterReplicaLogDirsRequest) -> Answer:
    """Move replicas of this broker to other log directories (broker/log_dirs.py); per partition NONE
    (the move has begun, or the replica is there already), LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR (the
    directory or the replica is offline) or REPLICA_NOT_AVAILABLE (no replica here), as Kafka answers.
    With an authorizer it needs ALTER on the cluster; without it every partition answers
    CLUSTER_AUTHORIZATION_FAILED and nothing moves (KafkaApis.handleAlterReplicaLogDirsRequest)."""
    allowed = services.authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER)
    results: dict[str, list] = {}
    for entry in request.dirs:
        for topic in entry.topics:
            out = results.setdefault(topic.name, [])
            for index in topic.partitions:
                code = (services.log_dirs.alter(TopicPartition(topic.name, index), entry.path) if allowed
                        else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                out.append(AResult.AlterReplicaLogDirPartitionResult(partition_index=index, error_code=int(code)))
    return AlterReplicaLogDirsResponse(
        throttle_time_ms=0, results=[AResult(topic_name=name, partitions=parts) for name, parts in results.items()]
    )
