"""Handler checks for principals other than User:ANONYMOUS, on an in-process broker: requests are dispatched
with a connection whose principal is set directly (what SASL or mTLS will set), so each check runs as it
would for an authenticated client.

User:admin is a super user; User:alice is granted WRITE on topics prefixed `a-`, READ on group `g` and
nothing else.
"""

from __future__ import annotations


from odradek.broker.testing import running_broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import build_batch
from tests.harness.authz import AUTHZ, call, creation


def produce(topic: str):
    cls = REQUESTS[0]
    return cls(acks=1, timeout_ms=5000, topic_data=[cls.TopicProduceData(name=topic, partition_data=[
        cls.TopicProduceData.PartitionProduceData(index=0, records=bytearray(build_batch([(None, b"v", None, 0)], base_offset=0)))])])


async def test_checks_for_a_principal_with_some_acls(tmp_path):
    async with running_broker(tmp_path, **AUTHZ) as kafka:
        b = kafka.broker
        created = await call(b, "User:admin", 19, 7, REQUESTS[19](timeout_ms=5000, validate_only=False, topics=[
            REQUESTS[19].CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
            for n in ("a-1", "b-1")]))
        assert [t.error_code for t in created.topics] == [0, 0]
        acls = await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[
            creation(2, "a-", 4, 4), creation(3, "g", 3, 3)]))
        assert [r.error_code for r in acls.results] == [0, 0]

        # Produce: WRITE per topic.
        answer = await call(b, "User:alice", 0, 9, produce("a-1"))
        assert answer.responses[0].partition_responses[0].error_code == 0
        answer = await call(b, "User:alice", 0, 9, produce("b-1"))
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        # Metadata: WRITE implies DESCRIBE; other topics are left out of the listing, refused by name.
        listing = await call(b, "User:alice", 3, 12, REQUESTS[3](topics=None, allow_auto_topic_creation=False))
        assert [t.name for t in listing.topics] == ["a-1"]
        named = await call(b, "User:alice", 3, 12, REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name="b-1")],
                                                                allow_auto_topic_creation=True))
        assert named.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert "b-1" in b.metadata.image.topics_by_name and "b-2" not in b.metadata.image.topics_by_name
        auto = await call(b, "User:alice", 3, 12, REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name="a-new")],
                                                               allow_auto_topic_creation=True))
        assert auto.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # DESCRIBE but no CREATE
        assert "a-new" not in b.metadata.image.topics_by_name

        # Fetch and ListOffsets: READ / DESCRIBE.
        fetch_cls = REQUESTS[1]
        fetched = await call(b, "User:alice", 1, 11, fetch_cls(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, topics=[
                fetch_cls.FetchTopic(topic="a-1", partitions=[fetch_cls.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # WRITE is not READ
        follower = await call(b, "User:alice", 1, 11, fetch_cls(
            replica_id=2, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, topics=[
                fetch_cls.FetchTopic(topic="a-1", partitions=[fetch_cls.FetchTopic.FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
        assert follower.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # no CLUSTER_ACTION

        # Admin requests.
        create = await call(b, "User:alice", 19, 7, REQUESTS[19](timeout_ms=5000, validate_only=False, topics=[
            REQUESTS[19].CreatableTopic(name="a-2", num_partitions=1, replication_factor=1, assignments=[], configs=[])]))
        assert create.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        delete = await call(b, "User:alice", 20, 6, REQUESTS[20](timeout_ms=5000, topics=[
            REQUESTS[20].DeleteTopicState(name="a-1")]))
        assert delete.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        describe = await call(b, "User:alice", 32, 4, REQUESTS[32](include_synonyms=False, include_documentation=False,
            resources=[REQUESTS[32].DescribeConfigsResource(resource_type=2, resource_name=n, configuration_keys=None)
                       for n in ("a-1", "b-1")]))
        assert [r.error_code for r in describe.results] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
        mine = await call(b, "User:alice", 30, 3, REQUESTS[30](creations=[creation(2, "b-", 4, 4)]))
        assert mine.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert (await call(b, "User:alice", 29, 3, REQUESTS[29](
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1))).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

        # Producer ids: WRITE on some topic is enough for an idempotent producer (KIP-679), not for a txn id.
        pid = await call(b, "User:alice", 22, 4, REQUESTS[22](transactional_id=None, transaction_timeout_ms=60000,
                                                               producer_id=-1, producer_epoch=-1))
        assert pid.error_code == 0
        pid = await call(b, "User:alice", 22, 4, REQUESTS[22](transactional_id="tx", transaction_timeout_ms=60000,
                                                               producer_id=-1, producer_epoch=-1))
        assert pid.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        pid = await call(b, "User:bob", 22, 4, REQUESTS[22](transactional_id=None, transaction_timeout_ms=60000,
                                                             producer_id=-1, producer_epoch=-1))
        assert pid.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

        # Groups: READ on the group.
        hb = await call(b, "User:alice", 12, 4, REQUESTS[12](group_id="h", generation_id=1, member_id="m"))
        assert hb.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        hb = await call(b, "User:alice", 12, 4, REQUESTS[12](group_id="g", generation_id=1, member_id="m"))
        assert hb.error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED
        found = await call(b, "User:alice", 10, 4, REQUESTS[10](key_type=0, coordinator_keys=["g", "h"]))
        assert [c.error_code for c in found.coordinators] == [0, ErrorCode.GROUP_AUTHORIZATION_FAILED]
        commit_cls = REQUESTS[8]
        committed = await call(b, "User:alice", 8, 8, commit_cls(group_id="h", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=[commit_cls.OffsetCommitRequestTopic(name="a-1", partitions=[
                commit_cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                                                  committed_metadata="")])]))
        assert committed.topics[0].partitions[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        committed = await call(b, "User:alice", 8, 8, commit_cls(group_id="g", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=[commit_cls.OffsetCommitRequestTopic(name=n, partitions=[
                commit_cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                                                  committed_metadata="")])
                for n in ("b-1", "a-1")]))
        # READ on the group, not on the topics (alice only WRITEs a-1)
        assert [t.partitions[0].error_code for t in committed.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2

        # Groups she may describe show her own operations (READ implies DESCRIBE: bits 3 and 8).
        described = await call(b, "User:alice", 15, 5, REQUESTS[15](groups=["g", "h"], include_authorized_operations=True))
        assert [g.error_code for g in described.groups] == [0, ErrorCode.GROUP_AUTHORIZATION_FAILED]
        assert described.groups[0].authorized_operations == (1 << 3) | (1 << 8)

        # Transactions: WRITE on the transactional id first, then the topics.
        add_cls = REQUESTS[24]
        added = await call(b, "User:alice", 24, 3, add_cls(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[add_cls.AddPartitionsToTxnTopic(name="a-1", partitions=[0])]))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[creation(5, "tx", 3, 4)]))
        added = await call(b, "User:alice", 24, 3, add_cls(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[add_cls.AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in ("a-1", "b-1")]))
        assert {t.name: t.results_by_partition[0].partition_error_code for t in added.results_by_topic_v3_and_below} == {
            "a-1": ErrorCode.OPERATION_NOT_ATTEMPTED, "b-1": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        ended = await call(b, "User:bob", 26, 3, REQUESTS[26](transactional_id="tx", producer_id=1, producer_epoch=0,
                                                               committed=True))
        assert ended.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        # A controller listener: CLUSTER_ACTION or nothing.
        heartbeat = await call(b, "User:alice", 63, 1, REQUESTS[63](broker_id=1, broker_epoch=1, current_metadata_offset=0,
                                                                      want_fence=False, want_shut_down=False),
                               scope="controller")
        assert heartbeat.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
