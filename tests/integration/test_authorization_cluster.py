"""ACLs and quotas in a three-node cluster (in one process): CreateAcls, DeleteAcls and AlterClientQuotas sent
to a node that is not the active controller are forwarded to it (KIP-590), committed to the metadata log, and
then every node enforces the same ACLs.

The nodes run StandardAuthorizer with allow.everyone.if.no.acl.found=true and give User:ANONYMOUS (every
PLAINTEXT connection, the nodes' own included) ALL on the cluster, so the quorum and the forwarding keep
working once the cluster resource has ACLs, as a Kafka cluster needs its nodes' principal allowed.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterClientQuotasRequest,
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    MetadataRequest,
)
from tests.harness.inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(120)

AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "allow.everyone.if.no.acl.found": "true"}
TOPIC, CLUSTER, PREFIXED, LITERAL = 2, 4, 4, 3
ALL, DESCRIBE, DENY, ALLOW = 2, 8, 2, 3


def creation(rtype, name, pattern, op, perm):
    return CreateAclsRequest.AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                                         principal="User:ANONYMOUS", host="*", operation=op, permission_type=perm)


async def test_acls_are_decided_by_the_controller_and_enforced_by_every_node(tmp_path):
    _, configs = cluster_configs(tmp_path, **AUTHZ)
    nodes = [Broker(c) for c in configs]
    conns = []
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    what="the cluster")
        follower = next(b for b in nodes if not b.controller.is_active)
        conns = [NodeConnection(b.node_id, "127.0.0.1", b.bound_port) for b in nodes]
        via = conns[nodes.index(follower)]
        created = await via.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="sec-1", num_partitions=1, replication_factor=1, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0

        response = await via.request(CreateAclsRequest(creations=[
            creation(CLUSTER, "kafka-cluster", LITERAL, ALL, ALLOW),
            creation(TOPIC, "sec", PREFIXED, DESCRIBE, DENY),
            creation(TOPIC, "", LITERAL, DESCRIBE, ALLOW),  # an empty name: refused, the others stand
        ]), 3)
        assert [r.error_code for r in response.results] == [0, 0, ErrorCode.INVALID_REQUEST]
        await until(lambda: all(len(b.metadata.image.acls) == 2 for b in nodes), what="the ACLs on every node")
        for conn in conns:
            described = await conn.request(DescribeAclsRequest(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
                host_filter=None, operation=1, permission_type=1), 3)
            assert sorted((r.resource_type, r.resource_name) for r in described.resources) == [
                (TOPIC, "sec"), (CLUSTER, "kafka-cluster")]
            metadata = await conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="sec-1")],
                                                          allow_auto_topic_creation=False), 12)
            assert metadata.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        altered = await via.request(AlterClientQuotasRequest(validate_only=False, entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id", entity_name="app")],
            ops=[AlterClientQuotasRequest.EntryData.OpData(key="producer_byte_rate", value=1024.0, remove=False)])]), 1)
        assert altered.entries[0].error_code == 0
        await until(lambda: all(b.metadata.image.client_quotas for b in nodes), what="the quota on every node")

        deleted = await via.request(DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=TOPIC, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1)]), 3)
        assert [m.resource_name for m in deleted.filter_results[0].matching_acls] == ["sec"]
        await until(lambda: all(len(b.metadata.image.acls) == 1 for b in nodes), what="the deletion on every node")
        for conn in conns:
            metadata = await conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="sec-1")],
                                                          allow_auto_topic_creation=False), 12)
            assert metadata.topics[0].error_code == 0
    finally:
        for conn in conns:
            await conn.close()
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
