"""CreateTopics (19), DeleteTopics (20), DeleteRecords (21) and CreatePartitions (37).

Topic changes go to the controller (broker/controller_channel.py), all entries of a request in one call
answered once the change is committed; the partition logs follow the published image, not the handler.
These handlers only map requests onto the channel and results back, one result per requested entry
(librdkafka asserts on a missing one). A name given twice in one request fails with INVALID_REQUEST for every entry
of that name, as Kafka does. DeleteRecords moves a partition's log start offset forward (-1 meaning the
high watermark) on its leader and answers the low watermark once every live replica has followed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, TypeAlias

from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
)
from odradek.metadata.image import MetadataError, TopicImage, validate_topic_name
from odradek.storage.names import TopicPartition

from odradek.metadata.acl import AclOperation, ResourceType

from ..authorizer import per_item
from ..config import ConfigError
from ..controller_channel import CreatedTopic, NewPartitions, NewTopic, TopicToDelete
from ..topic_config import describe_topic
from . import BROKER, CONTROLLER, Answer, handles
from .envelope import forwarded

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        CreatePartitionsRequest,
        CreateTopicsRequest,
        DeleteRecordsRequest,
        DeleteTopicsRequest,
    )
    from ..context import RequestContext
    from ..services import BrokerServices

CTResult: TypeAlias = CreateTopicsResponse.CreatableTopicResult
CTConfig = CTResult.CreatableTopicConfigs
DTResult: TypeAlias = DeleteTopicsResponse.DeletableTopicResult
DRTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
DRPartition = DRTopic.DeleteRecordsPartitionResult
CPResult: TypeAlias = CreatePartitionsResponse.CreatePartitionsTopicResult

DUPLICATE_TOPIC = "Found multiple entries for this topic."


def _duplicates(names) -> set:
    return {name for name, n in Counter(names).items() if n > 1}


# ---- CreateTopics


def _assignments(t) -> dict[int, list[int]] | None:
    """The manual assignment of a CreatableTopic, or None; MetadataError on a repeated partition index."""
    if not t.assignments:
        return None
    result: dict[int, list[int]] = {}
    for a in t.assignments:
        if a.partition_index in result:
            raise MetadataError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment names partition {a.partition_index} more than once.",
            )
        result[a.partition_index] = list(a.broker_ids)
    return result


def _created(services: BrokerServices, created: CreatedTopic, version: int, describable: bool = True) -> CTResult:
    result = CTResult(name=created.name, error_code=0, error_message=None)
    if version >= 7:
        result.topic_id = created.topic_id or ZERO_UUID
    if version >= 5 and not describable:
        # Created, but the principal may not DESCRIBE_CONFIGS it: no configs, partitions or replication
        # factor in the answer, TOPIC_AUTHORIZATION_FAILED for them (Kafka's ReplicationControlManager).
        result.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    elif version >= 5:
        result.num_partitions = created.num_partitions
        result.replication_factor = created.replication_factor
        try:
            entries = describe_topic(created.configs, services.config, None, services.metadata.image.broker_configs())
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


def _create_refusal(services: BrokerServices, ctx: RequestContext, t) -> ErrorCode | None:
    if services.authorized(ctx, AclOperation.CREATE, ResourceType.CLUSTER, log_denied=False) or services.authorized(
            ctx, AclOperation.CREATE, ResourceType.TOPIC, t.name):
        return None
    return ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _create_denied(t, code: ErrorCode, version: int) -> CTResult:
    return CTResult(name=t.name, error_code=int(code), error_message="Authorization failed.")


@handles(19, (2, 7), listeners=(BROKER, CONTROLLER))
@forwarded
@per_item("topics", "topics", _create_refusal, _create_denied)
def handle_create_topics(services: BrokerServices, ctx: RequestContext, request: CreateTopicsRequest) -> Answer:
    version = ctx.api_version
    internal = ctx.connection.scope == CONTROLLER  # brokers create internal topics through the controller
    duplicated = _duplicates(t.name for t in request.topics)
    results: list = []  # a CTResult made here, or the index of the topic's item in the controller call
    items: list[NewTopic] = []
    for t in request.topics:
        if t.name in duplicated:
            results.append(CTResult(name=t.name, error_code=int(ErrorCode.INVALID_REQUEST), error_message=DUPLICATE_TOPIC))
            continue
        try:
            validate_topic_name(t.name)
            if services.topic_by_name(t.name) is not None:
                raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
            assignments = _assignments(t)
        except MetadataError as e:
            results.append(CTResult(name=t.name, error_code=int(e.error_code), error_message=e.message))
            continue
        results.append(len(items))
        items.append(NewTopic(
            t.name, t.num_partitions, t.replication_factor, {c.name: c.value for c in t.configs}, assignments,
        ))

    def answer(outcomes: list) -> CreateTopicsResponse:
        topics = []
        for r in results:
            if isinstance(r, int):
                outcome = outcomes[r]
                if isinstance(outcome, MetadataError):
                    r = CTResult(name=items[r].name, error_code=int(outcome.error_code), error_message=outcome.message)
                else:
                    describable = services.authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, outcome.name,
                                                      log_denied=False)
                    r = _created(services, outcome, version, describable)
            topics.append(r)
        return CreateTopicsResponse(throttle_time_ms=0, topics=topics)

    created = services.controller.create_topics(items, validate_only=request.validate_only, internal=internal)
    return services.answer(created, answer)


# ---- DeleteTopics


def _delete_refusal(services: BrokerServices, ctx: RequestContext, t) -> ErrorCode | None:
    """DELETE on the cluster (Kafka's hasClusterAuth: ALL on the cluster grants it), else DELETE on the topic;
    an unknown topic id is the handler's to answer."""
    if services.authorized(ctx, AclOperation.DELETE, ResourceType.CLUSTER, log_denied=False):
        return None
    name: str | None
    if isinstance(t, str):
        name = t
    elif t.name is not None or t.topic_id == ZERO_UUID:
        name = t.name
    else:
        topic = services.topic_by_id(t.topic_id)
        if topic is None:
            return None
        name = topic.name
    if name is None or services.authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, name):
        return None
    return ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _delete_denied(t, code: ErrorCode, version: int) -> DTResult:
    if isinstance(t, str):
        return DTResult(name=t, error_code=int(code))
    # (by id, the name stays unsaid: the client may not know it)
    return DTResult(name=t.name, topic_id=t.topic_id, error_code=int(code))


@handles(20, (1, 6), listeners=(BROKER, CONTROLLER))
@forwarded
@per_item(lambda version: "topics" if version >= 6 else "topic_names", "responses", _delete_refusal, _delete_denied)
def handle_delete_topics(services: BrokerServices, ctx: RequestContext, request: DeleteTopicsRequest) -> Answer:
    version = ctx.api_version
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    dup_names = _duplicates(name for name, tid in wanted if name is not None and tid == ZERO_UUID)
    dup_ids = _duplicates(tid for name, tid in wanted if name is None and tid != ZERO_UUID)
    responses = []
    items: list[TopicToDelete] = []
    pending: list[tuple[DTResult, int, TopicImage | None]] = []  # (result, item index, topic image or None)
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
            topic = services.topic_by_id(topic_id) if by_id else services.topic_by_name(name)
            pending.append((result, len(items), topic))
            items.append(TopicToDelete(None, topic_id) if by_id else TopicToDelete(name, None))
        responses.append(result)

    def answer(outcomes: list) -> DeleteTopicsResponse:
        for result, index, topic in pending:
            outcome = outcomes[index]
            if isinstance(outcome, MetadataError):
                result.error_code, result.error_message = int(outcome.error_code), outcome.message
                if items[index].topic_id is not None and topic is not None:
                    result.name = topic.name  # known but not deletable (internal, deletion disabled)
            else:
                result.name = outcome
                if version >= 6 and topic is not None:
                    result.topic_id = topic.topic_id
        if version < 5:
            for result in responses:
                result.error_message = None
        return DeleteTopicsResponse(throttle_time_ms=0, responses=responses)

    return services.answer(services.controller.delete_topics(items), answer)


# ---- CreatePartitions


def _alter_refusal(services: BrokerServices, ctx: RequestContext, t) -> ErrorCode | None:
    ok = services.authorized(ctx, AclOperation.ALTER, ResourceType.TOPIC, t.name)
    return None if ok else ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _alter_denied(t, code: ErrorCode, version: int) -> CPResult:
    return CPResult(name=t.name, error_code=int(code), error_message=None)


@handles(37, (0, 3), listeners=(BROKER, CONTROLLER))
@forwarded
@per_item("topics", "results", _alter_refusal, _alter_denied)
def handle_create_partitions(services: BrokerServices, ctx: RequestContext, request: CreatePartitionsRequest) -> Answer:
    duplicated = _duplicates(t.name for t in request.topics)
    results: list = []
    items: list[NewPartitions] = []
    for t in request.topics:
        if t.name in duplicated:
            results.append(
                CPResult(name=t.name, error_code=int(ErrorCode.INVALID_REQUEST), error_message="Duplicate topic name.")
            )
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        results.append(len(items))
        items.append(NewPartitions(t.name, t.count, assignments))

    def answer(outcomes: list) -> CreatePartitionsResponse:
        out = []
        for r in results:
            if isinstance(r, int):
                outcome = outcomes[r]
                if isinstance(outcome, MetadataError):
                    r = CPResult(name=items[r].name, error_code=int(outcome.error_code), error_message=outcome.message)
                else:
                    r = CPResult(name=items[r].name, error_code=0, error_message=None)
            out.append(r)
        return CreatePartitionsResponse(throttle_time_ms=0, results=out)

    return services.answer(services.controller.create_partitions(items, validate_only=request.validate_only), answer)


# ---- DeleteRecords


@handles(21, (0, 2))
def handle_delete_records(services: BrokerServices, ctx: RequestContext, request: DeleteRecordsRequest) -> Answer:
    """As Kafka's: the leader moves each log start offset, and the answer waits (up to the request's
    timeout) until every live replica's has followed (replication/replica_manager.delete_records)."""
    known: list[list[TopicPartition | None]] = []  # per requested topic, per entry: the partition, if it exists
    denied: set[str] = set()  # DELETE on the topic, as Kafka's
    for t in request.topics:
        if not services.authorized(ctx, AclOperation.DELETE, ResourceType.TOPIC, t.name):
            denied.add(t.name)
        topic = services.topic_by_name(t.name) if t.name not in denied else None
        known.append([TopicPartition(t.name, p.partition_index)
                      if topic is not None and p.partition_index in topic.partitions else None for p in t.partitions])
    offsets = [(tp, p.offset) for t, tps in zip(request.topics, known) for p, tp in zip(t.partitions, tps)
               if tp is not None]

    def build(results) -> DeleteRecordsResponse:
        answers = iter(results)
        topics = []
        for t, tps in zip(request.topics, known):
            parts = []
            for p, tp in zip(t.partitions, tps):
                missing = ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.name in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                code, low = next(answers) if tp is not None else (int(missing), -1)
                parts.append(DRPartition(partition_index=p.partition_index, low_watermark=low, error_code=code))
            topics.append(DRTopic(name=t.name, partitions=parts))
        return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

    future = asyncio.get_running_loop().create_future()

    def respond(results) -> None:
        if not future.done():
            future.set_result(build(results))

    services.data.delete_records(offsets, timeout_ms=request.timeout_ms, now_ms=services.now_ms(), respond=respond)
    return future.result() if future.done() else future
