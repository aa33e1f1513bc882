"""The replication fault test (test_cluster_faults.py) on a cluster with every listener secured.

Each node has three listeners, all SASL_SSL with certificates for 127.0.0.1/localhost from tests/pki.py:

  * CLIENT: SCRAM-SHA-512; the applications log in as `alice`, a user with no special rights, allowed by
    ACLs exactly what they need (WRITE and READ on the topic, READ on their groups); the idempotent producer
    has no IDEMPOTENT_WRITE on the cluster: WRITE on a topic is enough (KIP-679);
  * INTERNAL (the inter-broker listener the replica fetchers, the marker sender and forwarding use):
    SCRAM-SHA-512 as `admin`, the user `format --add-scram` made;
  * CONTROLLER: PLAIN from the listener's JAAS users as `controller` (SCRAM credentials live in the metadata
    log the quorum itself replicates, so, as in Kafka, the quorum cannot log in with them).

Sessions on INTERNAL and CONTROLLER last REAUTH_MS (connections.max.reauth.ms): the nodes re-authenticate
their links in band while the faults go on.

StandardAuthorizer is on, nothing is allowed without an ACL, and `super.users` names the two node users.

The faults are the same: the proxies (tests/netproxy.py) cannot read the client id out of TLS, so the
fabric tells the source of a connection by the process that opened it (`ProcessSources`); the nodes still
connect to, and verify, 127.0.0.1. One cluster serves the default slice (leader cut, follower cut until
it leaves the ISRs and rejoins, a restart, a fourth node and a reassignment onto it); ODRADEK_LONG=1 adds
the random loop (kill -9, SIGSTOP, cuts) on its own cluster.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from odradek.broker.node_client import NodeSecurity
from odradek.broker.storage_tool import parse_add_scram, write_bootstrap_records
from odradek.storage.meta_properties import format_log_dir
from odradek.metadata.image import new_cluster_id

from ..netproxy import Fabric, ProcessSources
from ..pki import Pki, make_pki
from tests.harness.faults import (
    LONG,
    SETTINGS,
    TOPIC,
    VOTERS,
    FaultCluster,
    cuts_restart_and_a_move,
    random_faults,
    running_cluster,
)

pytestmark = pytest.mark.timeout(900 if LONG else 300)

ADMIN, ADMIN_SECRET = "admin", "admin-secret"
APP, APP_SECRET = "alice", "alice-secret"
CONTROLLER_USER, CONTROLLER_SECRET = "controller", "controller-secret"
GROUPS = ("faults-group", "loop-group", "rolling-group", "checker")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
REAUTH_MS = 5000


class SecuredFaultCluster(FaultCluster):
    """FaultCluster with CLIENT, INTERNAL and CONTROLLER listeners on SASL_SSL and the authorizer on; each
    node's INTERNAL listener has its own proxy too (`internal`), so that replication can be cut."""

    pki: Pki  # set by the fixture before the nodes are configured

    def __init__(self, directory: Path, fabric: Fabric) -> None:
        super().__init__(directory, fabric)
        self.internal: dict[int, tuple[int, int]] = {}  # node -> (real port, proxy port)
        self.base = _port_block(24)

    def configure(self, node_id: int, *, controller: bool) -> None:
        port = self.base + 3 * (node_id - 1)
        client, internal, ctrl = port, port + 1, port + 2
        self.real[node_id] = (client, ctrl)
        self.proxy[node_id] = (self.fabric.add(node_id, client), self.fabric.add(node_id, ctrl) if controller else 0)
        self.internal[node_id] = (internal, self.fabric.add(node_id, internal))

    def properties(self, node_id: int, directory: Path, *, controller: bool) -> dict[str, str]:
        client, ctrl = self.real[node_id]
        internal = self.internal[node_id][0]
        listeners = f"CLIENT://127.0.0.1:{client},INTERNAL://127.0.0.1:{internal}"
        props = {
            "node.id": str(node_id),
            "process.roles": "broker,controller" if controller else "broker",
            "controller.quorum.voters": ",".join(f"{v}@127.0.0.1:{self.proxy[v][1]}" for v in VOTERS),
            "listeners": listeners + (f",CONTROLLER://127.0.0.1:{ctrl}" if controller else ""),
            "advertised.listeners": f"CLIENT://127.0.0.1:{self.proxy[node_id][0]},"
                                    f"INTERNAL://127.0.0.1:{self.internal[node_id][1]}",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(directory / "data"),
            "default.replication.factor": "3", "offsets.topic.replication.factor": "3",
            "transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
            "min.insync.replicas": "2", "num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
            # TLS: the test CA's certificate for localhost and 127.0.0.1 on every listener
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.pki.server_store),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca),
            # SASL: SCRAM for clients and brokers, PLAIN from JAAS for the quorum
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config":
                'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{ADMIN}" password="{ADMIN_SECRET}";',
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config":
                'org.apache.kafka.common.security.plain.PlainLoginModule required '
                f'username="{CONTROLLER_USER}" password="{CONTROLLER_SECRET}" '
                f'user_{CONTROLLER_USER}="{CONTROLLER_SECRET}";',
            # the nodes' own links renew their sessions under the faults (KIP-368; kafka-python, the admin
            # client of the reassignment, cannot, so the client listener's sessions do not end)
            "listener.name.internal.connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.controller.connections.max.reauth.ms": str(REAUTH_MS),
            # authorization: nothing without an ACL but for the nodes' own users
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{ADMIN};User:{CONTROLLER_USER}",
            "allow.everyone.if.no.acl.found": "false",
        }
        props.update(SETTINGS)
        return props

    def format(self, node_id: int, data: Path) -> None:
        format_log_dir(str(data), node_id=node_id, cluster_id=self.cluster_id, directory_id=new_cluster_id())
        write_bootstrap_records(str(data), [parse_add_scram(f"SCRAM-SHA-512=[name={ADMIN},password={ADMIN_SECRET}]"),
                                            parse_add_scram(f"SCRAM-SHA-512=[name={APP},password={APP_SECRET}]")])

    def _sasl_ssl(self, user: str, password: str) -> dict:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": password, "ssl.ca.location": str(self.pki.ca)}

    def client_conf(self) -> dict:
        return self._sasl_ssl(APP, APP_SECRET)

    def admin_conf(self) -> dict:
        return self._sasl_ssl(ADMIN, ADMIN_SECRET)

    def kafka_python_conf(self) -> dict:
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": ADMIN,
                "sasl_plain_password": ADMIN_SECRET, "ssl_cafile": str(self.pki.ca)}

    @property
    def node_security(self) -> NodeSecurity:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        return NodeSecurity(ssl_context=context, mechanism="SCRAM-SHA-512", username=ADMIN, password=ADMIN_SECRET)


def _port_block(n: int) -> int:
    from tests.harness.processes import free_port_block

    return free_port_block(n)


def grant_the_application(cluster: SecuredFaultCluster) -> None:
    """alice's ACLs, made by admin: WRITE and READ on the topic, READ on the groups the scenarios use."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    def allow(rtype, name, operation):
        return AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{APP}", "*", operation, AclPermissionType.ALLOW)

    bindings = [allow(ResourceType.TOPIC, TOPIC, AclOperation.WRITE), allow(ResourceType.TOPIC, TOPIC, AclOperation.READ)]
    bindings += [allow(ResourceType.GROUP, group, AclOperation.READ) for group in GROUPS]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), **cluster.admin_conf()})
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(timeout=60)

    # Every node enforces them before the load starts (they are replicated through the metadata log).
    def everywhere():
        return all((lambda ps: ps is not None)(_partitions_as(cluster, node_id)) for node_id in VOTERS)

    cluster.wait(everywhere, "alice's ACLs on every node")


def _partitions_as(cluster: SecuredFaultCluster, node_id: int):
    """TOPIC's partitions as alice sees them on node_id (None until her DESCRIBE, implied by READ, holds there)."""
    import asyncio

    from odradek.broker.node_client import NodeConnection, NodeUnavailable
    from odradek.protocol.messages import MetadataRequest

    async def call():
        security = NodeSecurity(ssl_context=cluster.node_security.ssl_context, mechanism="SCRAM-SHA-512",
                                username=APP, password=APP_SECRET)
        conn = NodeConnection(node_id, "127.0.0.1", cluster.real[node_id][0], backoff_s=0.0, security=security)
        try:
            return await conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12)
        finally:
            await conn.close()

    try:
        md = asyncio.run(call())
    except (NodeUnavailable, OSError):
        return None
    topic = next((t for t in md.topics if t.name == TOPIC and t.error_code == 0), None)
    return topic.partitions if topic else None


def secured_cluster(tmp_path: Path):
    pki = make_pki(tmp_path / "pki")
    cluster_class = type("SecuredWithPki", (SecuredFaultCluster,), {"pki": pki})
    holder: dict[str, SecuredFaultCluster] = {}

    def make(directory: Path, fabric: Fabric) -> SecuredFaultCluster:
        holder["cluster"] = cluster = cluster_class(directory, fabric)
        return cluster

    # The source of a connection is the node process that opened it (pid -> node id, as nodes restart).
    fabric = Fabric(identify=ProcessSources(
        lambda: {proc.pid: node_id for node_id, proc in list(holder["cluster"].procs.items()) if proc.poll() is None}))
    return running_cluster(tmp_path / "cluster", make=make, fabric=fabric)


@pytest.fixture
def secured_fault_cluster(tmp_path):
    with secured_cluster(tmp_path) as cluster:
        grant_the_application(cluster)
        yield cluster


def test_secured_cuts_restart_and_a_move_under_load(secured_fault_cluster):
    cuts_restart_and_a_move(secured_fault_cluster)


@pytest.mark.skipif(not LONG, reason="long fault loop: ODRADEK_LONG=1")
def test_secured_random_faults_loop(secured_fault_cluster):
    random_faults(secured_fault_cluster)
