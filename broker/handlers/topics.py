"""CreateTopics (19), DeleteTopics (20), DeleteRecords (21) and CreatePartitions (37).

Topic changes go through the TopicManager (a metadata-log write whose delta opens or drops the logs);
these handlers only map requests onto it and errors back, one result per requested entry (librdkafka
asserts on a missing one). A name given twice in one request fails with INVALID_REQUEST for every entry
of that name, as Kafka does. DeleteRecords moves a partition's log start offset forward (-1 meaning the
high watermark) and answers the new low watermark.
"""

from __future__ import annotations

from collections import Counter

from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
)
from odradek.replication.errors import ReplicationError
from odradek.replication.metadata import MetadataError, validate_topic_name
from odradek.storage.errors import StorageError
from odradek.storage.names import TopicPartition

from ..config import ConfigError
from ..topic_config import describe_topic
from ..topics import TopicError
from . import handles

CTResult = CreateTopicsResponse.CreatableTopicResult
CTConfig = CTResult.CreatableTopicConfigs
DTResult = DeleteTopicsResponse.DeletableTopicResult
DRTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
DRPartition = DRTopic.DeleteRecordsPartitionResult
CPResult = CreatePartitionsResponse.CreatePartitionsTopicResult

HIGH_WATERMARK = -1
DUPLICATE_TOPIC = "Found multiple entries for this topic."


def _duplicates(names) -> set:
    return {name for name, n in Counter(names).items() if n > 1}


# ---- CreateTopics


def _assignments(t) -> dict[int, list[int]] | None:
    """The manual assignment of a CreatableTopic, or None; TopicError on a repeated partition index."""
    if not t.assignments:
        return None
    result: dict[int, list[int]] = {}
    for a in t.assignments:
        if a.partition_index in result:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment names partition {a.partition_index} more than once.",
            )
        result[a.partition_index] = list(a.broker_ids)
    return result


def _create_one(broker, t, validate_only: bool, version: int) -> CTResult:
    name = t.name
    try:
        validate_topic_name(name)
    except MetadataError as e:
        return CTResult(name=name, error_code=int(e.error_code), error_message=e.message)
    if broker.topic_by_name(name) is not None:
        return CTResult(
            name=name, error_code=int(ErrorCode.TOPIC_ALREADY_EXISTS), error_message=f"Topic '{name}' already exists."
        )
    configs: dict[str, str | None] = {c.name: c.value for c in t.configs}
    try:
        assignments = _assignments(t)
        broker.topics.create(
            name, t.num_partitions, t.replication_factor, configs,
            assignments=assignments, validate_only=validate_only,
        )
    except TopicError as e:
        return CTResult(name=name, error_code=e.error_code, error_message=e.message)
    result = CTResult(name=name, error_code=0, error_message=None)
    if validate_only:
        topic_id = ZERO_UUID
        overrides = configs
        if assignments is not None:
            partitions, replication = len(assignments), len(assignments[0])
        else:
            cfg = broker.config
            partitions = cfg.num_partitions if t.num_partitions == -1 else t.num_partitions
            replication = cfg.default_replication_factor if t.replication_factor == -1 else t.replication_factor
    else:
        image = broker.metadata.image
        topic = image.topics_by_name[name]
        topic_id = topic.topic_id
        overrides = dict(image.topic_configs(name))
        partitions = len(topic.partitions)
        replication = len(topic.partitions[0].replicas) if 0 in topic.partitions else -1
    if version >= 7:
        result.topic_id = topic_id
    if version >= 5:
        result.num_partitions = partitions
        result.replication_factor = replication
        try:
            entries = describe_topic(overrides, broker.config)
        except ConfigError as e:  # cannot happen for validated configs; report rather than fail
            result.topic_config_error_code = int(ErrorCode.INVALID_CONFIG)
            result.error_message = str(e)
            entries = []
        result.configs = [
            CTConfig(
                name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                is_sensitive=e.is_sensitive,
            )
            for e in entries
        ]
    return result


@handles(19, (2, 7))
def handle_create_topics(broker, ctx, request):
    version = ctx.api_version
    duplicated = _duplicates(t.name for t in request.topics)
    results = []
    for t in request.topics:
        if t.name in duplicated:
            code = int(ErrorCode.INVALID_REQUEST)
            results.append(CTResult(name=t.name, error_code=code, error_message=DUPLICATE_TOPIC))
        else:
            results.append(_create_one(broker, t, request.validate_only, version))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


# ---- DeleteTopics


@handles(20, (1, 6))
def handle_delete_topics(broker, ctx, request):
    version = ctx.api_version
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    dup_names = _duplicates(name for name, tid in wanted if name is not None and tid == ZERO_UUID)
    dup_ids = _duplicates(tid for name, tid in wanted if name is None and tid != ZERO_UUID)
    responses = []
    for name, topic_id in wanted:
        by_id = topic_id != ZERO_UUID
        result = DTResult(name=name, error_code=0)
        if version >= 6:
            result.topic_id = topic_id
        invalid = None
        if name is None and not by_id:
            invalid = "Neither topic name nor id were specified."
        elif name is not None and by_id:
            invalid = "You may not specify both topic name and topic id."
        elif name in dup_names:
            invalid = "Duplicate topic name."
        elif by_id and topic_id in dup_ids:
            invalid = "Duplicate topic id."
        if invalid is not None:
            result.error_code, result.error_message = int(ErrorCode.INVALID_REQUEST), invalid
        else:
            topic = broker.topic_by_id(topic_id) if by_id else broker.topic_by_name(name)
            try:
                deleted = broker.topics.delete(None if by_id else name, topic_id=topic_id if by_id else None)
            except TopicError as e:
                result.error_code, result.error_message = e.error_code, e.message
                if by_id and topic is not None:
                    result.name = topic.name  # known but not deletable (internal, deletion disabled)
            else:
                result.name = deleted
                if version >= 6 and topic is not None:
                    result.topic_id = topic.topic_id
        if version < 5:
            result.error_message = None
        responses.append(result)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=responses)


# ---- CreatePartitions


@handles(37, (0, 3))
def handle_create_partitions(broker, ctx, request):
    duplicated = _duplicates(t.name for t in request.topics)
    results = []
    for t in request.topics:
        if t.name in duplicated:
            results.append(
                CPResult(name=t.name, error_code=int(ErrorCode.INVALID_REQUEST), error_message="Duplicate topic name.")
            )
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        try:
            broker.topics.create_partitions(t.name, t.count, assignments, validate_only=request.validate_only)
        except TopicError as e:
            results.append(CPResult(name=t.name, error_code=e.error_code, error_message=e.message))
        else:
            results.append(CPResult(name=t.name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


# ---- DeleteRecords


def _delete_records_one(broker, name: str, index: int, offset: int) -> DRPartition:
    def failed(code: ErrorCode) -> DRPartition:
        return DRPartition(partition_index=index, low_watermark=-1, error_code=int(code))

    topic = broker.topic_by_name(name)
    if topic is None or index not in topic.partitions:
        return failed(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    partition = broker.data.get_partition(TopicPartition(name, index))
    if partition is None or not partition.is_leader:
        return failed(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    log = partition.log
    if not log.config.delete:
        # Kafka: records of a compacted-only topic cannot be deleted (PolicyViolationException).
        return failed(ErrorCode.POLICY_VIOLATION)
    target = partition.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > partition.high_watermark:
        return failed(ErrorCode.OFFSET_OUT_OF_RANGE)
    try:
        low = log.delete_records_before(target, now_ms=broker.now_ms())
    except (StorageError, ReplicationError) as e:
        return failed(getattr(e, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
    return DRPartition(partition_index=index, low_watermark=low, error_code=0)


@handles(21, (0, 2))
def handle_delete_records(broker, ctx, request):
    topics = []
    for t in request.topics:
        parts = [_delete_records_one(broker, t.name, p.partition_index, p.offset) for p in t.partitions]
        topics.append(DRTopic(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
