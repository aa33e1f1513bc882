"""Metadata (3): brokers, topics with ids and leader epochs, automatic topic creation; and
DescribeTopicPartitions (75), the paginated describe with eligible leader replicas (KIP-966).

Everything comes from the metadata image: every live (registered, unfenced) broker, each at its endpoint
for the listener the request arrived on (a client on an internal listener is told internal addresses, one
on an external listener external ones, as Kafka does); each partition's leader, leader epoch, replicas,
ISR and offline replicas (replicas on brokers that are fenced or gone). A partition without a leader
answers LEADER_NOT_AVAILABLE; one whose leader has no endpoint on this listener, LISTENER_NOT_FOUND.

Topic ids are stable non-zero UUIDs (librdkafka caches metadata by id). A topic created on demand goes
through the controller like any other; the answer waits for the creation to commit, so it is returned
complete rather than with LEADER_NOT_AVAILABLE (with a local controller that is at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import structlog

from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_metadata import PartitionRow, TopicRow, band, encode_metadata_response, encode_partitions
from odradek.protocol.messages import DescribeTopicPartitionsResponse, MetadataResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import MetadataError, TopicImage

from ..context import Packed
from ..controller_channel import NewTopic
from ..topics import is_valid_name
from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import DescribeTopicPartitionsRequest, MetadataRequest
    from ..context import RequestContext
    from ..authorizer import Authorizer
    from ..services import BrokerServices

Broker_: TypeAlias = MetadataResponse.MetadataResponseBroker
Topic_: TypeAlias = MetadataResponse.MetadataResponseTopic
Partition_ = Topic_.MetadataResponsePartition
log = structlog.get_logger("odradek.metadata")

INT32_MIN = -(2**31)
# Topic operations a client may perform without an authorizer: READ, WRITE, CREATE, DELETE, ALTER,
# DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS (AclOperation codes 3-8, 10, 11).
ALL_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# Cluster: CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE.
ALL_CLUSTER_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))
_LEADER_NOT_AVAILABLE = int(ErrorCode.LEADER_NOT_AVAILABLE)
_LISTENER_NOT_FOUND = int(ErrorCode.LISTENER_NOT_FOUND)


def partition_rows(services: BrokerServices, topic: TopicImage, listener: str | None = None) -> list[PartitionRow]:
    """Each partition of `topic` as Metadata answers it, in index order: (error code, index, leader, leader
    epoch, replicas, ISR, offline replicas). The last committed image, as it is: a broker that no controller
    answers (the quorum is lost, or this broker is cut off from it) still names the leaders it knows, itself
    included, as Kafka's does. A client that learnt a newer leader epoch elsewhere keeps that one (KIP-320)."""
    brokers = services.metadata.image.brokers
    partitions = topic.partitions
    rows: list[PartitionRow] = []
    for index in sorted(partitions):
        p = partitions[index]
        offline = [r for r in p.replicas if r not in brokers or brokers[r].fenced]
        error = 0
        if p.leader < 0:
            error = _LEADER_NOT_AVAILABLE
        elif listener is not None and services.endpoint(p.leader, listener) is None:
            error = _LISTENER_NOT_FOUND
        rows.append((error, index, p.leader, p.leader_epoch, p.replicas, p.isr, offline))
    return rows


def topic_response(services: BrokerServices, image: TopicImage, version: int, include_ops: bool,
                   listener: str | None = None) -> Topic_:
    partitions = [
        Partition_(error_code=error, partition_index=index, leader_id=leader, leader_epoch=epoch,
                   replica_nodes=list(replicas), isr_nodes=list(isr), offline_replicas=offline)
        for error, index, leader, epoch, replicas, isr, offline in partition_rows(services, image, listener)
    ]
    return Topic_(
        error_code=0, name=image.name, topic_id=image.topic_id, is_internal=services.is_internal_topic(image.name),
        partitions=partitions, topic_authorized_operations=ALL_TOPIC_OPERATIONS if include_ops else INT32_MIN,
    )


class PackedSections:
    """The packed partitions section of each large topic (`encode_partitions`), per version band and
    listener, kept while the topic and the brokers are the very objects it was packed from: the image is
    never mutated, so a topic or broker change is a new object and the section is packed again on the next
    ask. A client polling a topic of 10,000 partitions then costs a node the frame, not 10,000 partitions'
    work (bench/partition_scale.py had each such answer at ~0.15 s of the event loop). Small topics are
    packed on each ask (it is cheap). At most `max_entries` sections are kept, the least recently used
    leaving first; entries hold their topic image, so a deleted topic's section goes with the churn."""

    MIN_PARTITIONS = 64

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._entries: dict[tuple, tuple[TopicImage, Any, bytes, list[int]]] = {}

    def section(self, services: BrokerServices, topic: TopicImage, version: int,
                listener: str | None) -> tuple[bytes, list[int]]:
        """(the packed section, the non-zero partition error codes in it)."""
        count = len(topic.partitions)
        brokers = services.metadata.image.brokers
        key = (topic.topic_id, band(version), listener)
        if count >= self.MIN_PARTITIONS:
            hit = self._entries.pop(key, None)
            if hit is not None and hit[0] is topic and hit[1] is brokers:
                self._entries[key] = hit  # (now the most recent)
                return hit[2], hit[3]
        rows = partition_rows(services, topic, listener)
        packed = encode_partitions(rows, count, version)
        errors = [row[0] for row in rows if row[0]]
        if count >= self.MIN_PARTITIONS:
            self._entries[key] = (topic, brokers, packed, errors)
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]
        return packed, errors


_SECTIONS = PackedSections()


def broker_entries(services: BrokerServices, listener: str) -> list[Broker_]:
    """Every live broker at its endpoint for `listener`, and this broker always, even while fenced (it is
    the controller id clients are given: they must be able to reach it), at its first endpoint if it has
    none by that name. The list is the last committed image's: a lost controller quorum fences nobody."""
    image = services.metadata.image
    out = []
    ids = services.live_brokers()
    if services.node_id not in ids and services.node_id in image.brokers:
        ids = sorted([*ids, services.node_id])
    for broker_id in ids:
        endpoint = services.endpoint(broker_id, listener)
        if endpoint is None and broker_id == services.node_id:
            endpoint = image.brokers[broker_id].endpoints[0]
        if endpoint is not None:
            out.append(Broker_(node_id=broker_id, host=endpoint.host, port=endpoint.port, rack=image.brokers[broker_id].rack))
    return out


FIRST_TOPIC_ID_VERSION = 12
"""Metadata v10 and v11 carry a topic id (and a nullable name) in the request schema, but Kafka serves topics
by id from v12 only."""


def refusal_below_v12(request: MetadataRequest, version: int) -> str | None:
    """Why Kafka refuses this request (KafkaApis.handleTopicMetadataRequest), or None: below v12 a named topic
    must have a name and no topic id. The schema lets v10 and v11 write both (the fields came before the
    feature), so a client that does gets INVALID_REQUEST rather than an answer by id its version cannot
    carry (a topic found by id would have to be written with the name it asked without, and the response's
    name is not nullable below v12)."""
    if version >= FIRST_TOPIC_ID_VERSION or request.topics is None or (version == 0 and not request.topics):
        return None
    for t in request.topics:
        if t.name is None:
            return f"Topic name can not be null for version {version}"
        if t.topic_id != ZERO_UUID:
            return f"Topic IDs are not supported in requests for version {version}"
    return None


def _refuse(services: BrokerServices, ctx: RequestContext, request: MetadataRequest, reason: str) -> Answer:
    """Kafka's answer to a Metadata request its handler threw on (MetadataRequest.getErrorResponse, sent by
    RequestHandlerHelper.handleError rather than closing the connection): INVALID_REQUEST for every topic
    asked, each with its name (an empty one for a null name, which the response cannot carry below v12) and
    the topic id it was asked with, no partitions; no brokers, no cluster id, controller -1. Packed unless a
    client quota may throttle it, as any Metadata answer."""
    version = ctx.api_version
    code = int(ErrorCode.INVALID_REQUEST)
    log.debug("metadata request refused", reason=reason, api_version=version, client_id=ctx.client_id,
              principal=str(ctx.principal))
    asked = request.topics or []
    if not services.metadata.image.client_quotas:
        empty = encode_partitions((), 0, version)
        rows: list[TopicRow] = [(code, t.name or "", t.topic_id, False, empty, INT32_MIN) for t in asked]
        frame = encode_metadata_response(ctx.header.correlation_id, version, brokers=[], cluster_id=None,
                                         controller_id=-1, topics=rows, cluster_authorized_operations=INT32_MIN)
        return Packed([frame], [code] * len(rows) or None)
    return MetadataResponse(
        throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1,
        topics=[Topic_(error_code=code, name=t.name or "", topic_id=t.topic_id, is_internal=False, partitions=[],
                       topic_authorized_operations=INT32_MIN) for t in asked],
        cluster_authorized_operations=INT32_MIN, error_code=0)


@handles(3)
def handle_metadata(services: BrokerServices, ctx: RequestContext, request: MetadataRequest) -> Answer:
    reason = refusal_below_v12(request, ctx.api_version)
    if reason is not None:  # before anything is created on demand, as Kafka checks first
        return _refuse(services, ctx, request, reason)
    requested = request.topics
    if requested is not None and (ctx.api_version > 0 or requested):
        auto_create = request.allow_auto_topic_creation if ctx.api_version >= 4 else True
        image = services.metadata.image
        missing = [
            t.name for t in requested
            if t.name is not None and t.name not in image.topics_by_name and auto_create and _may_auto_create(services, t.name)
        ]
        if missing and services.authorizer is not None:
            missing = [name for name in missing if _may_create(services, ctx, name)]
        if missing:
            # Created through the controller; the answer is made once the creation is committed.
            names = list(dict.fromkeys(missing))
            created = services.controller.create_topics([NewTopic(name) for name in names])
            return services.answer(created, lambda results: _metadata(services, ctx, request, dict(zip(names, results))))
    return _metadata(services, ctx, request, {})


def _may_auto_create(services: BrokerServices, name: str) -> bool:
    return services.config.auto_create_topics_enable and is_valid_name(name) and not services.is_internal_topic(name)


def _may_create(services: BrokerServices, ctx: RequestContext, name: str) -> bool:
    """DESCRIBE and CREATE (on the cluster or the topic) for a topic made on demand (Kafka's getTopicMetadata)."""
    return services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name) and (
        services.authorized(ctx, AclOperation.CREATE, ResourceType.CLUSTER, log_denied=False)
        or services.authorized(ctx, AclOperation.CREATE, ResourceType.TOPIC, name))


def _authorize(services: BrokerServices, authorizer: Authorizer, ctx: RequestContext, request: MetadataRequest,
               response: MetadataResponse) -> None:
    """With an authorizer: topics the principal may not DESCRIBE are refused (an all-topics listing leaves
    them out), a topic it may not create on demand is refused, and the authorized operations are its own."""
    version = ctx.api_version
    listing = request.topics is None or (version == 0 and not request.topics)
    auto_create = request.allow_auto_topic_creation if version >= 4 else True
    names = {t.name for t in response.topics if t.name is not None}
    allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_denied=not listing)
    by_id = set() if listing else {t.topic_id for t in request.topics if t.name is None and t.topic_id != ZERO_UUID}
    topics = []
    for t in response.topics:
        if t.name is None or t.name in allowed:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and auto_create and _may_auto_create(services, t.name) \
                    and not _may_create(services, ctx, t.name):
                t.error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif t.name is not None and t.topic_authorized_operations != INT32_MIN:
                t.topic_authorized_operations = authorizer.authorized_operations(ctx, ResourceType.TOPIC, t.name)
            topics.append(t)
        elif not listing and t.topic_id in by_id:  # asked by id: the name stays unsaid (topic ids are not secret)
            topics.append(Topic_(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), name=None, topic_id=t.topic_id))
        elif not listing:
            topics.append(Topic_(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), name=t.name, topic_id=ZERO_UUID,
                                 is_internal=services.is_internal_topic(t.name)))
    response.topics = topics
    if response.cluster_authorized_operations != INT32_MIN:
        response.cluster_authorized_operations = (
            authorizer.authorized_operations(ctx, ResourceType.CLUSTER)
            if services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, log_denied=False) else INT32_MIN)


def _metadata(services: BrokerServices, ctx: RequestContext, request: MetadataRequest,
              created: dict) -> MetadataResponse | Packed:
    """The answer: packed straight into its frame (`_packed`) unless an authorizer must filter it or a client
    quota may throttle it (both work on the message). A nameless topic (asked by id) is only ever answered from
    v12, whose response may carry it: `refusal_below_v12` turned the request away below."""
    version = ctx.api_version
    listener = ctx.listener
    image = services.metadata.image
    include_ops = version >= 8 and request.include_topic_authorized_operations
    entries: list[TopicImage | Topic_] = []  # a topic found, or the answer for one that is not
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        for name in sorted(image.topics_by_name):
            entries.append(image.topics_by_name[name])
    else:
        for t in requested:
            if t.name is None:
                found = image.topics_by_id.get(t.topic_id) if t.topic_id != ZERO_UUID else None
                if found is None:
                    entries.append(Topic_(error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), name=None, topic_id=t.topic_id))
                else:
                    entries.append(found)
                continue
            found = image.topics_by_name.get(t.name)
            if found is None:
                result = created.get(t.name)
                if isinstance(result, MetadataError) and result.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    code = result.error_code
                elif result is not None:
                    # Created by the active controller, not in this broker's image yet: Kafka's answer for a
                    # topic being created, which clients retry.
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                elif is_valid_name(t.name):
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                entries.append(Topic_(error_code=int(code), name=t.name, topic_id=ZERO_UUID))
            else:
                entries.append(found)
    cluster_operations = (
        ALL_CLUSTER_OPERATIONS if 8 <= version <= 10 and request.include_cluster_authorized_operations else INT32_MIN
    )
    if services.authorizer is None and not image.client_quotas:
        return _packed(services, ctx, entries, include_ops, cluster_operations)
    response = MetadataResponse(
        throttle_time_ms=0,
        brokers=broker_entries(services, listener),
        cluster_id=image.cluster_id,
        controller_id=services.controller_id(),
        topics=[topic_response(services, e, version, include_ops, listener) if isinstance(e, TopicImage) else e
                for e in entries],
        cluster_authorized_operations=cluster_operations,
        error_code=0,
    )
    if services.authorizer is not None:
        _authorize(services, services.authorizer, ctx, request, response)
    return response


def _packed(services: BrokerServices, ctx: RequestContext, entries: list[TopicImage | Topic_], include_ops: bool,
            cluster_operations: int) -> Packed:
    """The same answer as the message `_metadata` builds, packed (protocol/fast_metadata.py) with each
    topic's partitions section from `_SECTIONS`: no object per partition, and a large topic's section
    packed once per change (tests/unit/test_metadata_packed.py holds both to the same bytes)."""
    version = ctx.api_version
    listener = ctx.listener
    image = services.metadata.image
    operations = ALL_TOPIC_OPERATIONS if include_ops else INT32_MIN
    codes: list[int] = []
    topics: list[TopicRow] = []
    empty = encode_partitions((), 0, version)
    for e in entries:
        if isinstance(e, TopicImage):
            section, errors = _SECTIONS.section(services, e, version, listener)
            codes += errors
            topics.append((0, e.name, e.topic_id, services.is_internal_topic(e.name), section, operations))
        else:
            codes.append(e.error_code)
            topics.append((e.error_code, e.name, e.topic_id, e.is_internal, empty, e.topic_authorized_operations))
    brokers = [(b.node_id, b.host, b.port, b.rack) for b in broker_entries(services, listener)]
    frame = encode_metadata_response(ctx.header.correlation_id, version, brokers=brokers, cluster_id=image.cluster_id,
                                     controller_id=services.controller_id(), topics=topics,
                                     cluster_authorized_operations=cluster_operations)
    return Packed([frame], codes or None)


# ---------------------------------------------------------------------------------------------------------
# DescribeTopicPartitions (75)

DTopic_: TypeAlias = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
DPartition_ = DTopic_.DescribeTopicPartitionsResponsePartition
Cursor_ = DescribeTopicPartitionsResponse.Cursor


@handles(75)
def handle_describe_topic_partitions(services: BrokerServices, ctx: RequestContext,
                                     request: DescribeTopicPartitionsRequest) -> Answer:
    """Kafka 3.8+'s describe of topics (KIP-966): what Metadata says of each partition plus its eligible
    leader replicas (ELR: replicas that left the ISR only because it fell below min.insync.replicas and may
    still be elected without losing committed data) and last known ELR (the ELR members seen last before
    they too became ineligible). `kafka-topics --describe` and the Java admin's describeTopics use it.

    Kafka's rules (DescribeTopicPartitionsRequestHandler, KRaftMetadataCache): the topics asked (all when
    the list is empty) are taken in name order from the cursor on; a response carries at most
    min(response_partition_limit, max.request.partition.size.limit) partitions (at least one), and when
    more are left `next_cursor` names the first one not sent (a topic and partition, or a topic's first
    partition when the limit fell exactly at a topic's end). A cursor whose topic is not in the list
    asked, or whose partition is negative, is an INVALID_REQUEST for every topic asked. Topics the
    principal may not DESCRIBE are refused when named (TOPIC_AUTHORIZATION_FAILED, no topic id, listed
    after the others) and silently left out of an all-topics listing; an unknown named topic answers
    UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an impossible name). A partition whose leader
    has no endpoint on this listener names leader -1, as Kafka does here (Metadata's LISTENER_NOT_FOUND
    has no counterpart in this API). The image is the last committed one, as for Metadata."""
    image = services.metadata.image
    listing = not request.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if listing:
        names = {name for name in image.topics_by_name if name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
    if cursor is not None and ((not listing and cursor.topic_name not in names) or cursor.partition_index < 0):
        return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=[
            DTopic_(error_code=int(ErrorCode.INVALID_REQUEST), name=t.name, topic_id=ZERO_UUID, is_internal=False,
                    partitions=[]) for t in request.topics])
    ordered = sorted(names)
    allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, ordered,
                                        log_denied=not listing)
    refused = [DTopic_(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), name=name, topic_id=ZERO_UUID,
                       is_internal=False, partitions=[]) for name in ordered if name not in allowed and not listing]
    remaining = max(min(services.config.max_request_partition_size_limit, request.response_partition_limit), 1)
    brokers = image.brokers
    topics: list[DTopic_] = []
    next_cursor = None
    for name in (n for n in ordered if n in allowed):
        if remaining == 0:
            # The limit fell exactly at the end of the previous topic: the next page starts here.
            next_cursor = Cursor_(topic_name=name, partition_index=0)
            break
        found = image.topics_by_name.get(name)
        if found is None:
            if not listing:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if is_valid_name(name) else ErrorCode.INVALID_TOPIC_EXCEPTION
                topics.append(DTopic_(error_code=int(code), name=name, topic_id=ZERO_UUID,
                                      is_internal=services.is_internal_topic(name), partitions=[]))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        count = len(found.partitions)
        upper = min(count, start + remaining)
        partitions = []
        for index in range(start, upper):
            p = found.partitions.get(index)
            if p is None:
                continue
            leader = p.leader if p.leader >= 0 and services.endpoint(p.leader, ctx.listener) is not None else -1
            partitions.append(DPartition_(
                error_code=0, partition_index=index, leader_id=leader, leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                eligible_leader_replicas=list(p.elr), last_known_elr=list(p.last_known_elr),
                offline_replicas=[r for r in p.replicas if r not in brokers or brokers[r].fenced]))
        topics.append(DTopic_(error_code=0, name=name, topic_id=found.topic_id,
                              is_internal=services.is_internal_topic(name), partitions=partitions))
        if upper < count:
            next_cursor = Cursor_(topic_name=name, partition_index=upper)
            break
        remaining -= len(partitions)
    authorizer = services.authorizer
    for t in topics:
        t.topic_authorized_operations = (ALL_TOPIC_OPERATIONS if authorizer is None
                                         else authorizer.authorized_operations(ctx, ResourceType.TOPIC, t.name))
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics + refused, next_cursor=next_cursor)
