"""ShareFetch and ShareAcknowledge need READ on the group (else GROUP_AUTHORIZATION_FAILED, top-level) and
READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka's KafkaApis checks them;
on an in-process broker with the StandardAuthorizer, requests dispatched as User:alice."""

from __future__ import annotations

import uuid

from odradek.broker.testing import running_broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS, ShareAcknowledgeRequest, ShareFetchRequest

from tests.harness.authz import AUTHZ, call, creation

READ, TOPIC, GROUP, LITERAL = 3, 2, 3, 3


def share_fetch(topic_id: uuid.UUID, epoch: int, member: str) -> ShareFetchRequest:
    return ShareFetchRequest(
        group_id="sg", member_id=member, share_session_epoch=epoch, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        max_records=10, batch_size=10, topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            ShareFetchRequest.FetchTopic.FetchPartition(partition_index=0)])], forgotten_topics_data=[])


def share_ack(topic_id: uuid.UUID, epoch: int, member: str) -> ShareAcknowledgeRequest:
    part = ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition
    return ShareAcknowledgeRequest(group_id="sg", member_id=member, share_session_epoch=epoch, topics=[
        ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=topic_id, partitions=[part(
            partition_index=0, acknowledgement_batches=[part.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                                                 acknowledge_types=[1])])])])


async def test_read_on_group_and_topic(tmp_path):
    async with running_broker(tmp_path, **AUTHZ, **{"odradek.share.enabled": "true"}) as kafka:
        b = kafka.broker
        cls = REQUESTS[19]
        created = await call(b, "User:admin", 19, 7, cls(timeout_ms=5000, validate_only=False, topics=[
            cls.CreatableTopic(name="shared", num_partitions=1, replication_factor=1, assignments=[], configs=[])]))
        assert created.topics[0].error_code == 0
        topic_id = b.metadata.image.topics_by_name["shared"].topic_id
        member = str(uuid.uuid4())

        refused = await call(b, "User:alice", 78, 2, share_fetch(topic_id, 0, member))
        assert (refused.error_code, refused.responses) == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
        refused = await call(b, "User:alice", 79, 2, share_ack(topic_id, 1, member))
        assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED

        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[creation(GROUP, "sg", LITERAL, READ)]))
        opened = await call(b, "User:alice", 78, 2, share_fetch(topic_id, 0, member))
        assert opened.error_code == 0
        assert opened.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        acked = await call(b, "User:alice", 79, 2, share_ack(topic_id, 1, member))
        assert acked.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[creation(TOPIC, "shared", LITERAL, READ)]))
        fetched = await call(b, "User:alice", 78, 2, share_fetch(topic_id, 2, member))
        assert fetched.error_code == 0 and all(p.error_code == 0 for t in fetched.responses for p in t.partitions)
        acked = await call(b, "User:alice", 79, 2, share_ack(topic_id, 3, member))
        # Allowed now: offset 0 was never acquired by alice, so the leader's own answer comes back.
        assert acked.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
