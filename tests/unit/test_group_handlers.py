"""The group and offset handlers: registered versions, and coordinator Deferreds adapted to asyncio futures."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from odradek.broker.handlers import load_handlers
from odradek.broker.handlers.groups import (
    handle_consumer_group_heartbeat,
    handle_find_coordinator,
    handle_join_group,
    handle_sync_group,
)
from odradek.broker.handlers.offsets import handle_offset_commit, handle_offset_fetch
from odradek.broker.server import Broker
from odradek.broker.services import BrokerServices
from odradek.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from odradek.coordinator.topics import TopicsImage
from odradek.metadata.image import BrokerRegistration, Endpoint, MetadataImage, PartitionImage, TopicImage

from tests.harness.group_coordinator import DELAY_MS, NUM_PARTITIONS, Harness, subscription

VERSIONS = {8: (2, 9), 9: (1, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5),
            42: (0, 2), 47: (0, 0), 68: (0, 1), 69: (0, 1)}


def _image() -> MetadataImage:
    """Broker 3 registered at broker-3:9092 and leading every __consumer_offsets partition."""
    registration = BrokerRegistration(3, uuid.uuid4(), 1, (Endpoint("PLAINTEXT", "broker-3", 9092),), None, False, False)
    topic_id = uuid.uuid4()
    partitions = {i: PartitionImage((3,), (3,), 3, 0, 0) for i in range(NUM_PARTITIONS)}
    topic = TopicImage("__consumer_offsets", topic_id, partitions)
    return MetadataImage(cluster_id="c", brokers={3: registration}, topics_by_id={topic_id: topic},
                         topics_by_name={topic.name: topic})


class FakeBroker:
    """The handlers' services as far as these handlers use them."""

    node_id = 3
    endpoint = BrokerServices.endpoint
    partition_leader = BrokerServices.partition_leader
    coordinates_here_in_vain = BrokerServices.coordinates_here_in_vain
    authorizer = None  # no authorizer: every check passes
    authorized = BrokerServices.authorized
    authorized_names = BrokerServices.authorized_names

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.groups = h.gc
        self.state_changes = 0
        self.metadata = SimpleNamespace(image=_image())
        self.data = SimpleNamespace(stranded=frozenset())  # the replica manager's stranded partitions

    def now_ms(self) -> int:
        return self.h.now

    def after_state_change(self) -> None:
        self.state_changes += 1

    future_from = staticmethod(Broker.future_from)


def ctx(version: int, client_id: str | None = "client"):
    return SimpleNamespace(api_version=version, header=SimpleNamespace(client_id=client_id), client_host="10.1.2.3",
                           listener="PLAINTEXT")


def test_registered_versions():
    registry = load_handlers()
    for api_key, (low, high) in VERSIONS.items():
        registration = registry[api_key]
        assert (registration.min_version, registration.max_version) == (low, high), api_key


def test_find_coordinator_answers_the_leader_of_the_groups_partition():
    broker = FakeBroker(Harness())
    response = handle_find_coordinator(broker, ctx(3), FindCoordinatorRequest(key="g"))
    assert (response.error_code, response.node_id, response.host, response.port) == (0, 3, "broker-3", 9092)


def test_find_coordinator_names_no_coordinator_on_a_partition_stranded_here(monkeypatch):
    """This broker leads the group's partition but has lost the controller and the partition's ISR needs a
    change (stranded): no write could commit here, so it names no coordinator (the client asks again,
    perhaps a broker that knows the new one) rather than itself."""
    from odradek.broker.handlers import groups as handlers
    from odradek.protocol.errors import ErrorCode
    from odradek.coordinator.partitioning import partition_for
    from odradek.storage.names import TopicPartition

    broker = FakeBroker(Harness())
    monkeypatch.setattr(handlers, "ensure_coordinator_topic", lambda services, key_type: None)
    broker.data.stranded = frozenset({TopicPartition("__consumer_offsets", partition_for("g", NUM_PARTITIONS))})
    response = handle_find_coordinator(broker, ctx(3), FindCoordinatorRequest(key="g"))
    assert (response.error_code, response.node_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)  # no other replica


def test_find_coordinator_on_a_partition_stranded_here_names_the_replica_the_controller_elects(monkeypatch):
    """With other replicas, the stranded leader names the one the controller elects when it fences this
    broker: the first replica, in assignment order, in the ISR and not fenced (here 4: 1 is fenced)."""
    import dataclasses

    from odradek.broker.handlers import groups as handlers
    from odradek.coordinator.partitioning import partition_for
    from odradek.storage.names import TopicPartition

    broker = FakeBroker(Harness())
    monkeypatch.setattr(handlers, "ensure_coordinator_topic", lambda services, key_type: None)
    image = broker.metadata.image
    brokers = dict(image.brokers)
    for node_id, fenced in ((1, True), (4, False), (5, False)):
        brokers[node_id] = dataclasses.replace(brokers[3], broker_id=node_id, fenced=fenced, endpoints=(
            Endpoint("PLAINTEXT", f"broker-{node_id}", 9092),))
    topic = image.topics_by_name["__consumer_offsets"]
    index = partition_for("g", NUM_PARTITIONS)
    partitions = dict(topic.partitions)
    partitions[index] = dataclasses.replace(partitions[index], replicas=(3, 1, 5, 4), isr=(3, 1, 4))
    topic = dataclasses.replace(topic, partitions=partitions)
    broker.metadata.image = dataclasses.replace(image, brokers=brokers, topics_by_id={topic.topic_id: topic},
                                                topics_by_name={topic.name: topic})
    assert handle_find_coordinator(broker, ctx(3), FindCoordinatorRequest(key="g")).node_id == 3
    broker.data.stranded = frozenset({TopicPartition("__consumer_offsets", index)})
    response = handle_find_coordinator(broker, ctx(3), FindCoordinatorRequest(key="g"))
    assert (response.error_code, response.node_id, response.host) == (0, 4, "broker-4")


async def test_long_polls_become_futures_and_completed_results_messages():
    h = Harness()
    broker = FakeBroker(h)
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription("t"))]
    join = JoinGroupRequest(group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=30_000, member_id="",
                            protocol_type="consumer", protocols=protocols)
    first = handle_join_group(broker, ctx(5), join)
    assert first.error_code == 79  # answered at once: a message, not a future
    join.member_id = first.member_id
    pending = handle_join_group(broker, ctx(5, client_id=None), join)
    assert isinstance(pending, asyncio.Future) and not pending.done()
    h.advance(DELAY_MS)
    response = await asyncio.wait_for(pending, 1)
    assert response.error_code == 0 and response.generation_id == 1
    assert h.group("g").members[first.member_id].client_host == "/10.1.2.3"  # InetAddress.toString(), as Kafka
    sync = handle_sync_group(broker, ctx(3), SyncGroupRequest(
        group_id="g", generation_id=1, member_id=first.member_id,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=first.member_id, assignment=b"a")]))
    assert sync.assignment == b"a"
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = handle_offset_commit(broker, ctx(8), OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=1, member_id=first.member_id,
        topics=[topic(name="t", partitions=[topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=4,
                                                                               committed_metadata=None)])]))
    assert commit.topics[0].partitions[0].error_code == 0
    fetched = handle_offset_fetch(broker, ctx(5), OffsetFetchRequest(group_id="g", topics=None))
    assert fetched.topics[0].partitions[0].committed_offset == 4


def test_every_response_encodes_in_every_served_version():
    """Fields absent from a version must hold their defaults: encoding each response proves it."""
    from odradek.protocol.messages import (
        ConsumerGroupHeartbeatRequest,
        DeleteGroupsRequest,
        HeartbeatRequest,
        LeaveGroupRequest,
        OffsetDeleteRequest,
    )

    for version in range(10):
        h = Harness()
        first = h.join("g", version=version, instance_id="i" if version >= 5 and version % 2 else None)
        if first.done and first.result().error_code == 79:
            first.result().encode(version)
            first = h.join("g", first.result().member_id, version=version)
        h.advance(2 * DELAY_MS)
        joined = first.result()
        assert joined.error_code == 0, (version, joined)
        joined.encode(version)
        instance_id = "i" if version >= 5 and version % 2 else None
        static_rejoin = h.join("g", version=version, instance_id=instance_id) if instance_id else None
        if static_rejoin is not None:
            static_rejoin.result().encode(version)
            joined = static_rejoin.result()
        member_id, generation = joined.member_id, joined.generation_id
        for sync_version in range(min(version, 5) + 1):
            h.sync("g", member_id, generation, {member_id: b"x"}, version=sync_version,
                   instance_id=instance_id if sync_version >= 3 else None).result().encode(sync_version)
        for hb_version in range(5):
            h.gc.heartbeat(HeartbeatRequest(group_id="g", generation_id=generation, member_id=member_id,
                                            group_instance_id=instance_id if hb_version >= 3 else None),
                           hb_version, h.now).result().encode(hb_version)
        for commit_version in range(2, 10):
            h.commit("g", {("t", 0): commit_version}, generation=generation, member_id=member_id,
                     instance_id=instance_id, version=commit_version).encode(commit_version)
    for leave_version in range(6):
        h = Harness()
        members = [("nobody", None)] if leave_version <= 2 else [("nobody", None), ("", "x")]
        h.leave("g", *members, version=leave_version).encode(leave_version)
        h.commit("g", {("t", 0): 1})
        leave = LeaveGroupRequest(group_id="g", member_id="m") if leave_version <= 2 else LeaveGroupRequest(
            group_id="g", members=[LeaveGroupRequest.MemberIdentity(member_id="m")])
        h.gc.leave_group(leave, leave_version, h.now).result().encode(leave_version)
    h = Harness()
    for version in range(3):
        h.gc.delete_groups(DeleteGroupsRequest(groups_names=["a", "b"]), version, h.now).result().encode(version)
    h.gc.offset_delete(OffsetDeleteRequest(group_id="a"), 0, h.now).result().encode(0)
    for version in range(2):
        request = ConsumerGroupHeartbeatRequest(group_id="cg", member_id="m", member_epoch=0, rebalance_timeout_ms=1,
                                                subscribed_topic_names=["t"], topic_partitions=[])
        h.gc.consumer_group_heartbeat(request, version, h.now).result().encode(version)


async def test_a_consumer_group_member_s_host_is_the_peer_as_java_prints_it():
    """kafka-consumer-groups --describe prints the HOST Kafka records: InetAddress.toString(), "/10.1.2.3"."""
    topics = TopicsImage()
    topics.add("t", 2, uuid.uuid4())
    h = Harness(topics=topics)
    broker = FakeBroker(h)
    joined = handle_consumer_group_heartbeat(broker, ctx(0), ConsumerGroupHeartbeatRequest(
        group_id="cg", member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"], topic_partitions=[]))
    if isinstance(joined, asyncio.Future):
        joined = await asyncio.wait_for(joined, 1)
    assert joined.error_code == 0, joined
    (described,) = h.gc.consumer_group_describe(ConsumerGroupDescribeRequest(group_ids=["cg"]), 0, h.now).groups
    assert [m.client_host for m in described.members] == ["/10.1.2.3"]
