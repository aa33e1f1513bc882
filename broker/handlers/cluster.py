"""DescribeCluster (60) and DescribeLogDirs (35).

DescribeCluster answers from the metadata image, as Metadata does: every registered broker at its endpoint
for the listener the request came in on (fenced ones too from v2, flagged, as Kafka lists them), the
cluster id, and the controller id clients are given (a live broker, which forwards controller requests). DescribeLogDirs reports the one data directory: the size of each
hosted partition's log (offset lag 0: every replica here is the leader, nothing is a future replica)
and, from v4, the file system's total and usable bytes.
"""

from __future__ import annotations

import os

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import DescribeClusterResponse, DescribeLogDirsResponse
from odradek.replication.acl import AclOperation, ResourceType

from ..authorizer import requires
from . import handles
from .metadata import ALL_CLUSTER_OPERATIONS, INT32_MIN

CBroker = DescribeClusterResponse.DescribeClusterBroker
LResult = DescribeLogDirsResponse.DescribeLogDirsResult
LTopic = LResult.DescribeLogDirsTopic
LPartition = LTopic.DescribeLogDirsPartition

ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS = 1, 2


@handles(60, (0, 2))
def handle_describe_cluster(services, ctx, request):
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
            if services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER) else INT32_MIN)
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
def handle_describe_log_dirs(services, ctx, request):
    version = ctx.api_version
    wanted = _partitions_wanted(request)
    by_topic: dict[str, list] = {}
    for tp, partition in sorted(services.data.partitions.items(), key=lambda item: (item[0].topic, item[0].partition)):
        if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
            continue
        by_topic.setdefault(tp.topic, []).append(
            LPartition(
                partition_index=tp.partition, partition_size=partition.log.size_bytes, offset_lag=0,
                is_future_key=False,
            )
        )
    log_dir = services.log_manager.log_dir
    result = LResult(
        error_code=0, log_dir=log_dir,
        topics=[LTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
    )
    if version >= 4:
        try:
            st = os.statvfs(log_dir)
        except OSError:
            result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        else:
            result.total_bytes = st.f_blocks * st.f_frsize
            result.usable_bytes = st.f_bavail * st.f_frsize
    response = DescribeLogDirsResponse(throttle_time_ms=0, results=[result])
    if version >= 3:
        response.error_code = 0
    return response
