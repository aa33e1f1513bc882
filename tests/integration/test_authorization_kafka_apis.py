"""Checks found missing when the handlers were compared with Kafka's KafkaApis and ControllerApis, on an
in-process broker with requests dispatched as User:alice (a few ACLs) and User:admin (a super user):

* CreateTopics answers a created topic's configs only to a principal that may DESCRIBE_CONFIGS it; to
  another it answers TOPIC_AUTHORIZATION_FAILED in topic_config_error_code (ReplicationControlManager);
* AlterReplicaLogDirs needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED per partition otherwise);
* AssignReplicasToDirs, on a controller listener, needs CLUSTER_ACTION like every other node RPC;
* DeleteTopics is allowed by DELETE on the cluster (ALL there) as well as on the topic (ControllerApis);
* ElectLeaders refused answers CLUSTER_AUTHORIZATION_FAILED in every partition named (v0 has no top-level code).
"""

from __future__ import annotations

import pytest

from odradek.broker.testing import running_broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS

from tests.harness.authz import AUTHZ, call, creation

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

        elect_cls = REQUESTS[43]
        for version in (0, 2):  # v0 has no top-level error code: the refusal is in every partition named
            elect = elect_cls(election_type=0, timeout_ms=5000, topic_partitions=[
                elect_cls.TopicPartitions(topic="a-1", partitions=[0, 1])])
            refused = await call(b, "User:alice", 43, version, elect)
            assert [p.error_code for p in refused.replica_election_results[0].partition_result] == \
                [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
            assert refused.error_code == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if version else 0)

        delete_cls = REQUESTS[20]
        delete = delete_cls(timeout_ms=5000, topics=[delete_cls.DeleteTopicState(name="b-1")])
        assert (await call(b, "User:alice", 20, 6, delete)).responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[creation(CLUSTER, "kafka-cluster", LITERAL, ALL)]))
        assert (await call(b, "User:alice", 20, 6, delete)).responses[0].error_code == 0


async def test_listings_show_only_what_the_principal_may_describe(tmp_path):
    """ListGroups, OffsetFetch, DescribeGroups and ListTransactions filter as KafkaApis does: groups, topics and
    transactional ids the principal may not DESCRIBE are left out of a listing and refused by name."""
    async with running_broker(tmp_path, **AUTHZ) as kafka:
        b = kafka.broker
        await call(b, "User:admin", 19, 7, REQUESTS[19](timeout_ms=5000, validate_only=False, topics=[
            REQUESTS[19].CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
            for n in ("seen", "unseen")]))
        commit_cls = REQUESTS[8]
        for group in ("g", "h"):
            committed = await call(b, "User:admin", 8, 8, commit_cls(
                group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=[commit_cls.OffsetCommitRequestTopic(name=n, partitions=[
                    commit_cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=1, committed_metadata="")]) for n in ("seen", "unseen")]))
            assert [t.partitions[0].error_code for t in committed.topics] == [0, 0]
        for tid in ("tx-seen", "tx-unseen"):
            pid = await call(b, "User:admin", 22, 4, REQUESTS[22](transactional_id=tid, transaction_timeout_ms=60000,
                                                                   producer_id=-1, producer_epoch=-1))
            assert pid.error_code == 0
        # alice: DESCRIBE on group g, topic "seen" and transactional id "tx-seen" (DESCRIBE = 8).
        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[
            creation(3, "g", LITERAL, 8), creation(TOPIC, "seen", LITERAL, 8), creation(5, "tx-seen", LITERAL, 8)]))

        listed = await call(b, "User:alice", 16, 4, REQUESTS[16](states_filter=[], types_filter=[]))
        assert [g.group_id for g in listed.groups] == ["g"]
        assert {g.group_id for g in (await call(b, "User:admin", 16, 4, REQUESTS[16](states_filter=[]))).groups} == {"g", "h"}

        fetch_cls = REQUESTS[9]
        fetched = await call(b, "User:alice", 9, 8, fetch_cls(require_stable=False, groups=[
            fetch_cls.OffsetFetchRequestGroup(group_id=g, topics=None) for g in ("g", "h")]))
        assert [(g.group_id, g.error_code) for g in fetched.groups] == [("g", 0), ("h", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
        assert [t.name for t in fetched.groups[0].topics] == ["seen"]  # all topics asked: the others left out
        named = await call(b, "User:alice", 9, 8, fetch_cls(require_stable=False, groups=[
            fetch_cls.OffsetFetchRequestGroup(group_id="g", topics=[
                fetch_cls.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=n, partition_indexes=[0])
                for n in ("seen", "unseen")])]))
        assert {t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in named.groups[0].topics} == {
            "seen": (0, 1), "unseen": (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)}

        described = await call(b, "User:alice", 15, 5, REQUESTS[15](groups=["g", "h"], include_authorized_operations=False))
        assert [g.error_code for g in described.groups] == [0, ErrorCode.GROUP_AUTHORIZATION_FAILED]

        transactions = await call(b, "User:alice", 66, 1, REQUESTS[66](state_filters=[], producer_id_filters=[]))
        assert [t.transactional_id for t in transactions.transaction_states] == ["tx-seen"]


async def test_describe_transactions_shows_only_describable_topics(tmp_path):
    async with running_broker(tmp_path, **AUTHZ) as kafka:
        b = kafka.broker
        await call(b, "User:admin", 19, 7, REQUESTS[19](timeout_ms=5000, validate_only=False, topics=[
            REQUESTS[19].CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
            for n in ("seen", "unseen")]))
        pid = await call(b, "User:admin", 22, 4, REQUESTS[22](transactional_id="tx", transaction_timeout_ms=60000,
                                                               producer_id=-1, producer_epoch=-1))
        add_cls = REQUESTS[24]
        added = await call(b, "User:admin", 24, 3, add_cls(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=pid.producer_id,
            v3_and_below_producer_epoch=pid.producer_epoch,
            v3_and_below_topics=[add_cls.AddPartitionsToTxnTopic(name=n, partitions=[0]) for n in ("seen", "unseen")]))
        assert {p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition} == {0}
        await call(b, "User:admin", 30, 3, REQUESTS[30](creations=[
            creation(TOPIC, "seen", LITERAL, 8), creation(5, "tx", LITERAL, 8)]))
        described = await call(b, "User:alice", 65, 0, REQUESTS[65](transactional_ids=["tx"]))
        assert described.transaction_states[0].error_code == 0
        assert [t.topic for t in described.transaction_states[0].topics] == ["seen"]


async def test_broker_loggers_are_described_and_changed_on_the_node_itself(tmp_path):
    """kafka-configs.sh --entity-type broker-loggers: the audit logger turned to DEBUG at run time and back,
    ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster, Kafka's refusals for what RuntimeLoggerManager refuses."""
    import logging

    from odradek.broker.authorizer import AUDIT_LOGGER

    describe_cls, alter_cls = REQUESTS[32], REQUESTS[44]
    resource = alter_cls.AlterConfigsResource

    def describe(*keys):
        return describe_cls(include_synonyms=False, include_documentation=False, resources=[
            describe_cls.DescribeConfigsResource(resource_type=8, resource_name="1", configuration_keys=list(keys) or None)])

    def alter(*ops, name="1", validate_only=False):
        return alter_cls(validate_only=validate_only, resources=[resource(resource_type=8, resource_name=name, configs=[
            resource.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])])

    async with running_broker(tmp_path, **AUTHZ) as kafka:
        b = kafka.broker
        try:
            before = (await call(b, "User:admin", 32, 4, describe(AUDIT_LOGGER, "root"))).results[0]
            inherited = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN"}[
                logging.getLogger().getEffectiveLevel()]  # the root's, whatever the test run set it to
            assert {c.name: (c.value, c.config_source, c.read_only) for c in before.configs} == {
                AUDIT_LOGGER: (inherited, 6, False), "root": (inherited, 6, False)}  # DYNAMIC_BROKER_LOGGER_CONFIG
            everything = (await call(b, "User:admin", 32, 4, describe())).results[0]
            assert everything.configs[0].name == "root" and AUDIT_LOGGER in {c.name for c in everything.configs}
            assert (await call(b, "User:alice", 32, 4, describe())).results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED

            refused = await call(b, "User:alice", 44, 1, alter((AUDIT_LOGGER, 0, "DEBUG")))
            assert refused.responses[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            checked = await call(b, "User:admin", 44, 1, alter((AUDIT_LOGGER, 0, "DEBUG"), validate_only=True))
            assert checked.responses[0].error_code == 0 and logging.getLogger(AUDIT_LOGGER).level == logging.NOTSET
            done = await call(b, "User:admin", 44, 1, alter((AUDIT_LOGGER, 0, "DEBUG")))
            assert done.responses[0].error_code == 0 and logging.getLogger(AUDIT_LOGGER).isEnabledFor(logging.DEBUG)
            after = (await call(b, "User:admin", 32, 4, describe(AUDIT_LOGGER))).results[0]
            assert [(c.name, c.value) for c in after.configs] == [(AUDIT_LOGGER, "DEBUG")]
            assert (await call(b, "User:admin", 44, 1, alter((AUDIT_LOGGER, 1, None)))).responses[0].error_code == 0
            assert logging.getLogger(AUDIT_LOGGER).level == logging.NOTSET

            for ops, name, code in [
                (((AUDIT_LOGGER, 0, "LOUD"),), "1", ErrorCode.INVALID_CONFIG),
                ((("no.such.logger", 0, "DEBUG"),), "1", ErrorCode.INVALID_CONFIG),
                ((("root", 1, None),), "1", ErrorCode.INVALID_REQUEST),
                (((AUDIT_LOGGER, 2, "DEBUG"),), "1", ErrorCode.INVALID_REQUEST),  # APPEND
                (((AUDIT_LOGGER, 0, "DEBUG"),), "2", ErrorCode.INVALID_REQUEST),  # another node's
            ]:
                answer = await call(b, "User:admin", 44, 1, alter(*ops, name=name))
                assert answer.responses[0].error_code == code, (ops, name, answer)
            assert logging.getLogger(AUDIT_LOGGER).level == logging.NOTSET  # nothing changed by a refused request
        finally:
            logging.getLogger(AUDIT_LOGGER).setLevel(logging.NOTSET)


async def test_dynamic_broker_configs_need_the_cluster_permissions(tmp_path):
    """kafka-configs.sh --entity-type brokers under an authorizer: ALTER_CONFIGS / DESCRIBE_CONFIGS on the
    cluster, as Kafka; a super user sets the cluster default and the node describes it."""
    describe_cls, alter_cls = REQUESTS[32], REQUESTS[44]
    resource = alter_cls.AlterConfigsResource

    def describe(name):
        return describe_cls(include_synonyms=True, include_documentation=False, resources=[
            describe_cls.DescribeConfigsResource(resource_type=4, resource_name=name, configuration_keys=["log.retention.ms"])])

    def alter(name, value):
        return alter_cls(validate_only=False, resources=[resource(resource_type=4, resource_name=name, configs=[
            resource.AlterableConfig(name="log.retention.ms", config_operation=0, value=value)])])

    async with running_broker(tmp_path, **AUTHZ) as kafka:
        b = kafka.broker
        refused = await call(b, "User:alice", 44, 1, alter("", "3600000"))
        assert refused.responses[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert (await call(b, "User:alice", 32, 4, describe("1"))).results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        done = await call(b, "User:admin", 44, 1, alter("", "3600000"))
        assert done.responses[0].error_code == 0, done
        for name in ("", "1"):
            (result,) = (await call(b, "User:admin", 32, 4, describe(name))).results
            assert [(c.name, c.value, c.config_source) for c in result.configs] == [("log.retention.ms", "3600000", 3)]
