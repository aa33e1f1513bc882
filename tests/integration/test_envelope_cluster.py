"""Forwarded admin requests carry their principal (Envelope, KIP-590), in a three-node cluster in one process.

Every listener is SASL_PLAINTEXT with PLAIN: clients and brokers on CLIENT (the brokers as User:admin),
the controllers on CONTROLLER (as User:controller); both are super users, and nobody else is allowed
anything without an ACL. User:alice may CREATE topics prefixed `alice-`. She sends CreateTopics for
`alice-1` and `bob-1` with confluent-kafka's AdminClient to a node that is not the active controller:
that node forwards the request in an envelope without checking it, and the active controller authorizes
alice, creating `alice-1` and refusing `bob-1`; the audit log names her, her address and the topic.

Envelope itself is a cluster-internal API: a client listener does not serve it (not advertised; a client
sending it has its connection closed), and on the controller listener a principal without CLUSTER_ACTION
cannot pass off a request as someone else's.
"""

from __future__ import annotations

import asyncio

import pytest
import structlog

from odradek.broker.node_client import NodeConnection, NodeSecurity, NodeUnavailable
from odradek.broker.server import Broker
from odradek.broker.testing import broker_config
from odradek.protocol.envelope import address_bytes, encode_request_data, serialize_principal
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import ApiVersionsRequest, CreateAclsRequest, CreateTopicsRequest, EnvelopeRequest
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import new_cluster_id
from odradek.storage.meta_properties import format_log_dir

from tests.harness.inprocess import QUICK, active, free_ports, until

pytestmark = pytest.mark.timeout(120)

CLIENT_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
               'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
CONTROLLER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" '
                   'password="controller-secret" user_controller="controller-secret" user_alice="alice-secret";')
TOPIC, PREFIXED, CREATE, ALLOW = 2, 4, 5, 3


def configs(tmp_path, n: int = 3):
    cluster_id = new_cluster_id()
    ports = free_ports(2 * n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[n + i]}" for i in range(n))
    out = []
    for i in range(n):
        data = tmp_path / f"node{i + 1}"
        format_log_dir(str(data), node_id=i + 1, cluster_id=cluster_id, directory_id=new_cluster_id())
        out.append(broker_config(data, **{
            "node.id": i + 1, "process.roles": "broker,controller", "controller.quorum.voters": voters,
            "listeners": f"CLIENT://127.0.0.1:{ports[i]},CONTROLLER://127.0.0.1:{ports[n + i]}",
            "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "CLIENT",
            "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.client.plain.sasl.jaas.config": CLIENT_JAAS,
            "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:controller",
            **QUICK,
        }))
    return out


def port_of(broker: Broker, listener: str) -> int:
    return next(port for name, _, port in [*broker.bound, *broker.controller_bound] if name == listener)


def as_user(broker: Broker, listener: str, user: str) -> NodeConnection:
    return NodeConnection(broker.node_id, "127.0.0.1", port_of(broker, listener),
                          security=NodeSecurity(mechanism="PLAIN", username=user, password=f"{user}-secret"))


class SpyAuthorizer:
    """A node's authorizer, recording each decision asked of it: (node id, principal, operation, type, name)."""

    def __init__(self, node_id: int, authorizer, seen: list) -> None:
        self.node_id, self.authorizer, self.seen = node_id, authorizer, seen

    def authorize(self, ctx, op, resource_type, name, **flags):
        connection = getattr(ctx, "connection", ctx)
        self.seen.append((self.node_id, str(connection.principal), op, resource_type, name))
        return self.authorizer.authorize(ctx, op, resource_type, name, **flags)

    def __getattr__(self, attr):
        return getattr(self.authorizer, attr)


def spy_on_authorizers(nodes, seen: list) -> None:
    for b in nodes:
        b.services.authorizer = SpyAuthorizer(b.node_id, b.services.authorizer, seen)


async def test_a_forwarded_create_topics_is_authorized_by_the_controller_as_the_client(tmp_path):
    nodes = [Broker(c) for c in configs(tmp_path)]
    conns: list[NodeConnection] = []
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    timeout_s=60, what="the cluster")
        controller = active(nodes)[0]
        follower = next(b for b in nodes if b is not controller)

        admin = as_user(follower, "CLIENT", "admin")
        conns.append(admin)
        granted = await admin.request(CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
            resource_type=TOPIC, resource_name="alice-", resource_pattern_type=PREFIXED, principal="User:alice",
            host="*", operation=CREATE, permission_type=ALLOW)]), 3)
        assert [r.error_code for r in granted.results] == [0]
        await until(lambda: all(len(b.metadata.image.acls) == 1 for b in nodes), what="the ACL on every node")

        seen: list = []
        spy_on_authorizers(nodes, seen)
        bootstrap = f"127.0.0.1:{port_of(follower, 'CLIENT')}"

        def create_as_alice() -> dict:
            from confluent_kafka.admin import AdminClient, NewTopic

            client = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
            futures = client.create_topics([NewTopic("alice-1", 1, 3), NewTopic("bob-1", 1, 3)], request_timeout=30)
            outcome = {}
            for name, future in futures.items():
                try:
                    future.result(60)
                    outcome[name] = "created"
                except Exception as e:  # noqa: BLE001 - a KafkaException carrying the broker's error
                    outcome[name] = e.args[0].name() if e.args and hasattr(e.args[0], "name") else repr(e)
            return outcome

        with structlog.testing.capture_logs() as logs:
            outcome = await asyncio.get_running_loop().run_in_executor(None, create_as_alice)
        assert outcome == {"alice-1": "created", "bob-1": "TOPIC_AUTHORIZATION_FAILED"}
        await until(lambda: all("alice-1" in b.metadata.image.topics_by_name for b in nodes), what="alice-1 everywhere")
        assert not any("bob-1" in b.metadata.image.topics_by_name for b in nodes)

        # The decisions about alice's topics were made on the active controller, as alice; the node she
        # talked to made none (it forwarded the request as it came).
        creates = [(node, principal, name) for node, principal, op, rtype, name in seen
                   if op == AclOperation.CREATE and rtype == ResourceType.TOPIC]
        assert {(node, principal) for node, principal, _ in creates} == {(controller.node_id, "User:alice")}
        assert {name for _, _, name in creates} >= {"alice-1", "bob-1"}
        # The controller checked the forwarding node's CLUSTER_ACTION for the envelope (User:admin, the
        # inter-broker principal, connects to the controller listener as User:controller).
        assert any(node == controller.node_id and op == AclOperation.CLUSTER_ACTION and principal == "User:controller"
                   for node, principal, op, _, _ in seen)

        # The audit log: the denial at INFO, with the client's principal and address (from the envelope).
        denied = [e for e in logs if e["log_level"] == "info" and e.get("operation") == "CREATE"
                  and e.get("resource") == "Topic:LITERAL:bob-1"]
        assert denied and denied[0]["principal"] == "User:alice" and denied[0]["host"] == "127.0.0.1"
        assert denied[0]["event"].startswith("Principal = User:alice is Denied operation = CREATE from host = 127.0.0.1")
        assert not any("secret" in str(e) for e in logs)
    finally:
        for conn in conns:
            await conn.close()
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


def envelope_for(principal: tuple[str, str], topic: str) -> EnvelopeRequest:
    request = CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])])
    return EnvelopeRequest(request_data=encode_request_data(RequestHeader(19, 7, 99, "spoof"), request),
                           request_principal=serialize_principal(*principal), client_host_address=address_bytes("10.1.2.3"))


async def test_envelope_is_served_to_brokers_on_the_controller_listener_only(tmp_path):
    nodes = [Broker(c) for c in configs(tmp_path)]
    conns: list[NodeConnection] = []
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    timeout_s=60, what="the cluster")
        controller = active(nodes)[0]

        # The client listener neither advertises nor answers Envelope, even to a super user.
        client_side = as_user(controller, "CLIENT", "admin")
        conns.append(client_side)
        versions = await client_side.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert 58 not in {k.api_key for k in versions.api_keys}
        with pytest.raises(NodeUnavailable):
            await client_side.request(envelope_for(("User", "admin"), "spoofed-1"), 0, timeout_s=10)

        # On the controller listener: advertised; a principal without CLUSTER_ACTION cannot speak for admin.
        alice = as_user(controller, "CONTROLLER", "alice")
        conns.append(alice)
        versions = await alice.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        assert 58 in {k.api_key for k in versions.api_keys}
        refused = await alice.request(envelope_for(("User", "admin"), "spoofed-2"), 0)
        assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and refused.response_data is None

        # A controller's own principal may: the inner request is then authorized as the principal inside.
        node = as_user(controller, "CONTROLLER", "controller")
        conns.append(node)
        answered = await node.request(envelope_for(("User", "alice"), "spoofed-3"), 0)
        assert answered.error_code == 0
        from odradek.protocol.envelope import decode_response_data

        inner = decode_response_data(answered.response_data, RequestHeader(19, 7, 99, "spoof"))
        assert inner.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        answered = await node.request(envelope_for(("User", "admin"), "spoofed-4"), 0)
        inner = decode_response_data(answered.response_data, RequestHeader(19, 7, 99, "spoof"))
        assert inner.topics[0].error_code == 0
        # A node that is not the active controller answers NOT_CONTROLLER (the forwarder tries the new one).
        other = as_user(next(b for b in nodes if b is not controller), "CONTROLLER", "controller")
        conns.append(other)
        assert (await other.request(envelope_for(("User", "admin"), "x"), 0)).error_code == ErrorCode.NOT_CONTROLLER
        for spoofed in ("spoofed-1", "spoofed-2", "spoofed-3"):
            assert spoofed not in controller.metadata.image.topics_by_name
    finally:
        for conn in conns:
            await conn.close()
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
