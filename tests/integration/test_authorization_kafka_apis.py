"""Checks found missing when the handlers were compared with Kafka's KafkaApis and ControllerApis, on an
in-process broker with requests dispatched as User:alice (a few ACLs) and User:admin (a super user):

* CreateTopics answers a created topic's configs only to a principal that may DESCRIBE_CONFIGS it; to
  another it answers TOPIC_AUTHORIZATION_FAILED in topic_config_error_code (ReplicationControlManager);
* AlterReplicaLogDirs needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED per partition otherwise);
* AssignReplicasToDirs, on a controller listener, needs CLUSTER_ACTION like every other node RPC;
* DeleteTopics is allowed by DELETE on the cluster (ALL there) as well as on the topic (ControllerApis).
"""

from __future__ import annotations

from odradek.broker.testing import running_broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS

from .test_authorization_principals import AUTHZ, call, creation

CREATE, ALL = 5, 2  # AclOperation
TOPIC, CLUSTER, LITERAL, PREFIXED = 2, 4, 3, 4


def create_topic(name: str):
    cls = REQUESTS[19]
    return cls(timeout_ms=5000, validate_only=False, topics=[cls.CreatableTopic(
        name=name, num_partitions=2, replication_factor=1, assignments=[], configs=[])])


async def test_checks_kafka_makes_that_were_missing(tmp_path):
    async with running_broker(tmp_path, **AUTHZ) as kafka:
        b = kafka.broker
        granted = await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[creation(TOPIC, "a-", PREFIXED, CREATE)]))
        assert granted.results[0].error_code == 0

        # CREATE without DESCRIBE_CONFIGS: created, but its configs are not shown.
        mine = (await call(b, "User:alice", 19, 7, create_topic("a-1"))).topics[0]
        assert (mine.error_code, mine.topic_config_error_code) == (0, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        assert (mine.configs, mine.num_partitions, mine.replication_factor) == ([], -1, -1)
        assert "a-1" in b.metadata.image.topics_by_name
        theirs = (await call(b, "User:admin", 19, 7, create_topic("b-1"))).topics[0]
        assert (theirs.topic_config_error_code, theirs.num_partitions) == (0, 2) and theirs.configs

        move_cls = REQUESTS[34]
        move = move_cls(dirs=[move_cls.AlterReplicaLogDir(path=str(tmp_path), topics=[
            move_cls.AlterReplicaLogDir.AlterReplicaLogDirTopic(name="a-1", partitions=[0, 1])])])
        refused = await call(b, "User:alice", 34, 2, move)
        assert [p.error_code for p in refused.results[0].partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
        allowed = await call(b, "User:admin", 34, 2, move)
        assert ErrorCode.CLUSTER_AUTHORIZATION_FAILED not in [p.error_code for p in allowed.results[0].partitions]

        assign = REQUESTS[73](broker_id=1, broker_epoch=1, directories=[])
        answer = await call(b, "User:alice", 73, 0, assign, scope="controller")
        assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        answer = await call(b, "User:admin", 73, 0, assign, scope="controller")
        assert answer.error_code != ErrorCode.CLUSTER_AUTHORIZATION_FAILED

        delete_cls = REQUESTS[20]
        delete = delete_cls(timeout_ms=5000, topics=[delete_cls.DeleteTopicState(name="b-1")])
        assert (await call(b, "User:alice", 20, 6, delete)).responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[creation(CLUSTER, "kafka-cluster", LITERAL, ALL)]))
        assert (await call(b, "User:alice", 20, 6, delete)).responses[0].error_code == 0
