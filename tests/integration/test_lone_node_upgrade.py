"""A lone node on the one metadata road: Raft with itself as the only voter.

* A data directory written by the release that kept a lone node's metadata in a local log (no Raft:
  tests/vectors/lone_node_v1, made by its make_fixture.py) upgrades in place on first start: its metadata
  batches become the quorum's committed history, under the first LeaderChange, and everything they
  describe is there (topics and their config overrides, records, a group's committed offsets, a SCRAM user,
  an ACL, a client quota); new metadata changes work and survive a restart.
* A lone node with unformatted storage formats itself: a random cluster id, in meta.properties.
* DescribeQuorum on a lone node answers, at every version it advertises, a quorum of one voter led by
  itself in the epoch it elected itself in.
"""

from __future__ import annotations

import asyncio
import os
import tarfile
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition

from odradek.broker.testing import RawClient, running_broker
from odradek.client.admin import Admin, AclBinding, NewTopic
from odradek.client.producer import Producer
from odradek.protocol.messages import ApiVersionsRequest, DescribeQuorumRequest
from odradek.storage.meta_properties import read_meta_properties
from odradek.storage.names import TopicPartition

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).parent.parent / "vectors" / "lone_node_v1" / "lone_node_v1.tar.gz"
TIMEOUT_S = 15
# As the fixture's broker ran: ACLs need the authorizer; the test's clients are User:ANONYMOUS, a super user.
SECURITY = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS"}


def extract(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(data_dir, filter="data")
    return data_dir


async def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                fetch_max_wait_ms=100)
    await asyncio.wait_for(consumer.start(), TIMEOUT_S)
    try:
        tp = AioTopicPartition(topic, 0)
        consumer.assign([tp])
        await asyncio.wait_for(consumer.seek_to_beginning(tp), TIMEOUT_S)
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=500), TIMEOUT_S)
            got += [m.value for m in batch.get(tp, [])]
        return got
    finally:
        await asyncio.wait_for(consumer.stop(), TIMEOUT_S)


async def check_fixture_state(bootstrap: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        topics = {t.name: t for t in await admin.describe_topics(["orders", "audit"])}
        assert {name: len(t.partitions) for name, t in topics.items()} == {"orders": 3, "audit": 1}
        overrides = {e.name: e.value for e in await admin.describe_configs("topic", "orders") if not e.is_default}
        assert overrides.get("retention.ms") == "3600000" and overrides.get("cleanup.policy") == "delete"
        offsets = await admin.list_group_offsets("billing")
        assert {tp: o.offset for tp, o in offsets.items()} == {TopicPartition("orders", 0): 7, TopicPartition("audit", 0): 3}
        assert await admin.describe_user_scram_credentials(["alice"]) == {"alice": [("SCRAM-SHA-256", 4096)]}
        acls = await admin.describe_acls()
        assert [(a.resource_type, a.name, a.principal, a.operation, a.permission) for a in acls] == [
            ("topic", "orders", "User:alice", "read", "allow")]
        quotas = await admin.describe_client_quotas({"user": "alice"})
        assert quotas == [({"user": "alice"}, {"producer_byte_rate": 1048576.0})]
    assert await read_values(bootstrap, "orders", 10) == [f"order-{i}".encode() for i in range(10)]
    assert await read_values(bootstrap, "audit", 5) == [f"audit-{i}".encode() for i in range(5)]


async def test_a_directory_of_the_local_metadata_log_release_upgrades_in_place(tmp_path):
    data_dir = extract(tmp_path)
    assert "cluster.id" not in read_meta_properties(str(data_dir))  # that release wrote none
    async with running_broker(data_dir, node_id=1, **SECURITY) as running:
        broker = running.broker
        raft = broker.quorum.raft
        assert raft.is_leader and raft.epoch >= 1 and raft.config.voters == (1,)
        cluster_id = broker.metadata.image.cluster_id
        assert cluster_id and read_meta_properties(str(data_dir))["cluster.id"] == cluster_id
        assert not broker.fenced and broker.metadata.image.brokers[1].fenced is False
        bootstrap = f"{running.host}:{running.port}"
        await check_fixture_state(bootstrap)
        # New metadata changes go through the quorum, and records through the partitions, as on any node.
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic("fresh", 2, 1, {"retention.ms": "60000"})])
            await admin.alter_configs("topic", "audit", {"retention.ms": "120000"})
            await admin.create_acls([AclBinding("group", "billing", "literal", "User:alice", "*", "read", "allow")])
        async with Producer(bootstrap_servers=bootstrap) as producer:
            await producer.send_and_wait("orders", b"order-10", key=b"k", partition=0)
    async with running_broker(data_dir, node_id=1, **SECURITY) as running:
        assert running.broker.metadata.image.cluster_id == cluster_id
        bootstrap = f"{running.host}:{running.port}"
        assert await read_values(bootstrap, "orders", 11) == [f"order-{i}".encode() for i in range(11)]
        async with Admin(bootstrap_servers=bootstrap) as admin:
            assert len((await admin.describe_topics(["fresh"]))[0].partitions) == 2
            audit = {e.name: e.value for e in await admin.describe_configs("topic", "audit") if not e.is_default}
            assert audit.get("retention.ms") == "120000"
            assert len(await admin.describe_acls()) == 2
            offsets = await admin.list_group_offsets("billing")
            assert offsets[TopicPartition("orders", 0)].offset == 7


async def test_a_lone_node_formats_its_storage_at_first_start(tmp_path):
    async with running_broker(tmp_path) as running:
        cluster_id = running.broker.metadata.image.cluster_id
        assert cluster_id and len(cluster_id) == 22
        assert read_meta_properties(str(tmp_path))["cluster.id"] == cluster_id
        assert running.broker.quorum.raft.is_leader and not running.broker.fenced
    async with running_broker(tmp_path) as running:  # the same cluster again
        assert running.broker.metadata.image.cluster_id == cluster_id


async def test_a_lone_node_starts_and_stops_at_once(tmp_path):
    # An election timeout and a heartbeat interval of 30 s: a start or a stop that waited for either (or for
    # the 10 s controlled-shutdown timeout) could not stay under the bound, which leaves a busy machine room.
    slow = {"controller.quorum.election.timeout.ms": 30_000, "broker.heartbeat.interval.ms": 30_000}
    for _ in range(2):  # a new directory, then a restart (the node resigned nothing: it elects itself again)
        started = time.monotonic()
        async with running_broker(tmp_path, **slow) as running:
            ready_s = time.monotonic() - started
            assert running.broker.caught_up.is_set() and not running.broker.fenced
            assert running.broker.metadata.image.brokers[1].fenced is False
            stopping = time.monotonic()
        stop_s = time.monotonic() - stopping
        assert ready_s < 5 and stop_s < 5, (ready_s, stop_s)


def test_describe_quorum_on_a_lone_node_at_every_advertised_version(tmp_path):
    from odradek.broker.testing import BrokerThread

    with BrokerThread(tmp_path) as thread:
        client = RawClient(f"{thread.host}:{thread.port}")
        try:
            versions = client.request(ApiVersionsRequest(), 3)
            (advertised,) = [k for k in versions.api_keys if k.api_key == DescribeQuorumRequest.API_KEY]
            epoch = thread.broker.quorum.raft.epoch
            assert epoch >= 1
            for version in range(advertised.min_version, advertised.max_version + 1):
                request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                    topic_name="__cluster_metadata",
                    partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
                response = client.request(request, version)
                assert response.error_code == 0, version
                (partition,) = response.topics[0].partitions
                assert (partition.error_code, partition.leader_id, partition.leader_epoch) == (0, 1, epoch), version
                assert [v.replica_id for v in partition.current_voters] == [1] and not partition.observers
                assert partition.high_watermark > 0 and partition.current_voters[0].log_end_offset >= partition.high_watermark
                if version >= 2:
                    assert [n.node_id for n in response.nodes] == [1] and response.nodes[0].listeners
        finally:
            client.close()
