"""Metadata (3): brokers, topics with ids and leader epochs, automatic topic creation.

Topic ids are stable non-zero UUIDs (librdkafka caches metadata by id). A topic created on demand is
created synchronously, so it is returned complete rather than with LEADER_NOT_AVAILABLE.
"""

from __future__ import annotations

from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import MetadataResponse

from . import handles

Broker_ = MetadataResponse.MetadataResponseBroker
Topic_ = MetadataResponse.MetadataResponseTopic
Partition_ = Topic_.MetadataResponsePartition

INT32_MIN = -(2**31)
# Topic operations a client may perform without an authorizer: READ, WRITE, CREATE, DELETE, ALTER,
# DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (AclOperation codes 3-8, 10, 11).
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# Cluster: CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE.
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))


def topic_response(broker, image, version: int, include_ops: bool) -> Topic_:
    partitions = []
    for index in sorted(image.partitions):
        p = image.partitions[index]
        partitions.append(Partition_(
            error_code=0, partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr), offline_replicas=[],
        ))
    return Topic_(
        error_code=0, name=image.name, topic_id=image.topic_id, is_internal=broker.is_internal_topic(image.name),
        partitions=partitions, topic_authorized_operations=ALL_TOPIC_OPERATIONS if include_ops else INT32_MIN,
    )


@handles(3)
def handle_metadata(broker, ctx, request):
    version = ctx.api_version
    image = broker.metadata.image
    include_ops = version >= 8 and request.include_topic_authorized_operations
    topics = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        for name in sorted(image.topics_by_name):
            topics.append(topic_response(broker, image.topics_by_name[name], version, include_ops))
    else:
        auto_create = request.allow_auto_topic_creation if version >= 4 else True
        for t in requested:
            if t.name is None:
                found = image.topics_by_id.get(t.topic_id) if t.topic_id != ZERO_UUID else None
                if found is None:
                    topics.append(Topic_(error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), name=None, topic_id=t.topic_id))
                else:
                    topics.append(topic_response(broker, found, version, include_ops))
                continue
            found = image.topics_by_name.get(t.name)
            if found is None and auto_create:
                error = broker.topics.auto_create(t.name)
                if error:
                    topics.append(Topic_(error_code=int(error), name=t.name, topic_id=ZERO_UUID))
                    continue
                found = broker.metadata.image.topics_by_name.get(t.name)
            if found is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if broker.topics.is_valid_name(t.name) else ErrorCode.INVALID_TOPIC_EXCEPTION
                topics.append(Topic_(error_code=int(code), name=t.name, topic_id=ZERO_UUID))
            else:
                topics.append(topic_response(broker, found, version, include_ops))
    host, port = broker.advertised_endpoint
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[Broker_(node_id=broker.node_id, host=host, port=port, rack=broker.config.broker_rack)],
        cluster_id=broker.metadata.image.cluster_id,
        controller_id=broker.node_id,
        topics=topics,
        cluster_authorized_operations=(
            ALL_CLUSTER_OPERATIONS if 8 <= version <= 10 and request.include_cluster_authorized_operations else INT32_MIN
        ),
        error_code=0,
    )
