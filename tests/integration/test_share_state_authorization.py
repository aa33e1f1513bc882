"""The share-state APIs (83-87) and FindCoordinator key type 2 under the StandardAuthorizer, on an in-process
broker, as Kafka's KafkaApis checks them: CLUSTER_ACTION on the cluster (only brokers send them), refused
with CLUSTER_AUTHORIZATION_FAILED in every partition (and every coordinator key) otherwise; a malformed share
key is INVALID_REQUEST."""

from __future__ import annotations

import uuid

from odradek.broker.testing import running_broker
from odradek.coordinator.partitioning import share_coordinator_key
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    DeleteShareGroupStateRequest,
    FindCoordinatorRequest,
    REQUESTS,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)

from tests.harness.authz import AUTHZ, call, creation

CLUSTER_ACTION, CLUSTER, LITERAL = 9, 4, 3  # AclOperation, ResourceType, PatternType


def requests(topic_id: uuid.UUID):
    I, R, W = InitializeShareGroupStateRequest, ReadShareGroupStateRequest, WriteShareGroupStateRequest
    D, S = DeleteShareGroupStateRequest, ReadShareGroupStateSummaryRequest
    return [
        (83, 0, I(group_id="g", topics=[I.InitializeStateData(topic_id=topic_id, partitions=[
            I.InitializeStateData.PartitionData(partition=0, state_epoch=0, start_offset=0)])])),
        (85, 1, W(group_id="g", topics=[W.WriteStateData(topic_id=topic_id, partitions=[W.WriteStateData.PartitionData(
            partition=0, state_epoch=0, leader_epoch=0, start_offset=0, delivery_complete_count=-1, state_batches=[
                W.WriteStateData.PartitionData.StateBatch(first_offset=0, last_offset=1, delivery_state=2,
                                                          delivery_count=1)])])])),
        (84, 0, R(group_id="g", topics=[R.ReadStateData(topic_id=topic_id, partitions=[
            R.ReadStateData.PartitionData(partition=0, leader_epoch=0)])])),
        (87, 1, S(group_id="g", topics=[S.ReadStateSummaryData(topic_id=topic_id, partitions=[
            S.ReadStateSummaryData.PartitionData(partition=0, leader_epoch=-1)])])),
        (86, 0, D(group_id="g", topics=[D.DeleteStateData(topic_id=topic_id, partitions=[
            D.DeleteStateData.PartitionData(partition=0)])])),
    ]


async def test_share_state_apis_need_cluster_action(tmp_path):
    async with running_broker(tmp_path, **AUTHZ, **{"share.coordinator.state.topic.num.partitions": 2}) as kafka:
        b = kafka.broker
        topic_id = uuid.uuid4()  # not a topic: the coordinator answers UNKNOWN_TOPIC_OR_PARTITION, not a refusal
        key = share_coordinator_key("g", topic_id, 0)
        find = FindCoordinatorRequest(key_type=2, coordinator_keys=[key, "not-a-share-key"])
        refused = await call(b, "User:alice", 10, 6, find)
        assert [c.error_code for c in refused.coordinators] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
        for api_key, version, request in requests(topic_id):
            answer = await call(b, "User:alice", api_key, version, request)
            assert answer.results[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, api_key

        acl = REQUESTS[30](creations=[creation(CLUSTER, "kafka-cluster", LITERAL, CLUSTER_ACTION)])
        granted = await call(b, "User:admin", 30, 3, acl)
        assert granted.results[0].error_code == 0
        found = await call(b, "User:alice", 10, 6, find)
        assert [c.error_code for c in found.coordinators] == [ErrorCode.NONE, ErrorCode.INVALID_REQUEST]
        assert found.coordinators[0].node_id == b.node_id
        old = await call(b, "User:alice", 10, 5, FindCoordinatorRequest(key_type=2, coordinator_keys=[key]))
        assert old.coordinators[0].error_code == ErrorCode.INVALID_REQUEST  # share keys are v6+ (Kafka's rule)
        for api_key, version, request in requests(topic_id):
            answer = await call(b, "User:alice", api_key, version, request)
            code = answer.results[0].partitions[0].error_code
            # Delete of what does not exist succeeds; the others name the missing topic.
            assert code == (ErrorCode.NONE if api_key == 86 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (api_key, code)
