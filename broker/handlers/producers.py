"""DescribeProducers (61): the active producers of partitions led here (kafka-transactions.sh
describe-producers), from each log's producer state: id, epoch, last sequence, last timestamp,
coordinator epoch and the first offset of the open transaction (-1 when none), as Kafka's
Partition.activeProducerState: any replica hosted here answers (admin clients ask the leader unless told
otherwise). A partition not hosted here answers NOT_LEADER_OR_FOLLOWER, one the image does not know
UNKNOWN_TOPIC_OR_PARTITION; one the principal may not READ, TOPIC_AUTHORIZATION_FAILED (as Kafka).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import DescribeProducersResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.storage.names import TopicPartition

from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import DescribeProducersRequest
    from ..context import RequestContext
    from ..services import BrokerServices

TopicResponse = DescribeProducersResponse.TopicResponse
PartitionResponse: TypeAlias = DescribeProducersResponse.TopicResponse.PartitionResponse
ProducerState = PartitionResponse.ProducerState
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."  # Kafka's text for the code


def _describe(services: BrokerServices, tp: TopicPartition) -> PartitionResponse:
    partition = services.data.get_partition(tp)
    if partition is None:
        image = services.topic_by_name(tp.topic)
        known = image is not None and tp.partition in image.partitions
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Kafka words only a topic it does not know (its metadata check, before the replica manager, which
        # answers a missing partition of a known topic without a message): so does Odradek.
        message = UNKNOWN_TOPIC_MESSAGE if image is None else None
        return PartitionResponse(partition_index=tp.partition, error_code=int(code), error_message=message,
                                 active_producers=[])
    state = partition.producer_state
    entries = list(state.producers.values()) if state is not None else []
    return PartitionResponse(partition_index=tp.partition, error_code=0, active_producers=[
        ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
                      last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                      current_txn_start_offset=e.current_txn_first_offset)
        for e in sorted(entries, key=lambda e: e.producer_id)
    ])


@handles(61)
def handle_describe_producers(services: BrokerServices, ctx: RequestContext,
                              request: DescribeProducersRequest) -> Answer:
    readable = services.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, {t.name for t in request.topics})
    denied = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    topics = [TopicResponse(name=t.name, partitions=[
        _describe(services, TopicPartition(t.name, index)) if t.name in readable
        else PartitionResponse(partition_index=index, error_code=denied, active_producers=[])
        for index in t.partition_indexes]) for t in request.topics]
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
