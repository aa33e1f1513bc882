"""Share groups on the group side: the handlers behind the SHARE gate, FindCoordinator for share keys, the
share-partition state initialized through the persister, DeleteGroups of share groups, group.share.* configs."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.group_configs import GroupConfigError, describe_group, group_config_changes, share_defaults, \
    share_settings_of
from odradek.broker.handlers import SHARE, load_handlers
from odradek.broker.handlers.groups import handle_delete_groups, handle_describe_groups, handle_find_coordinator
from odradek.broker.handlers.share_groups import (
    handle_alter_share_group_offsets,
    handle_delete_share_group_offsets,
    handle_describe_share_group_offsets,
    handle_share_group_describe,
    handle_share_group_heartbeat,
)
from odradek.broker.server import Broker
from odradek.broker.services import BrokerServices
from odradek.broker.share.group_state import ShareStateInitializer
from odradek.broker.topic_config import ConfigSource
from odradek.broker.share.persister import InMemoryPersister, SharePartitionKey, SummaryResult
from odradek.coordinator.partitioning import share_coordinator_key, share_state_partition
from odradek.coordinator.topics import TopicsImage
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.group_config import share_group_settings, validate_group_configs
from odradek.metadata.records import ConfigResourceType
from odradek.metadata.image import BrokerRegistration, Endpoint, MetadataImage, PartitionImage, TopicImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    DeleteGroupsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)

from tests.harness.group_coordinator import NUM_PARTITIONS, Harness

T = uuid.UUID(int=1)
STATE_PARTITIONS = 5


def _image() -> MetadataImage:
    """Broker 3 at broker-3:9092, leading every partition of __consumer_offsets and __share_group_state."""
    registration = BrokerRegistration(3, uuid.uuid4(), 1, (Endpoint("PLAINTEXT", "broker-3", 9092),), None, False, False)
    topics = {}
    for name, count in (("__consumer_offsets", NUM_PARTITIONS), ("__share_group_state", STATE_PARTITIONS), ("t", 3)):
        partitions = {i: PartitionImage((3,), (3,), 3, 0, 0) for i in range(count)}
        topics[name] = TopicImage(name, T if name == "t" else uuid.uuid4(), partitions)
    return MetadataImage(cluster_id="c", brokers={3: registration}, features={"share.version": 1},
                         topics_by_id={t.topic_id: t for t in topics.values()}, topics_by_name=topics)


class FailingPersister(InMemoryPersister):
    """Refuses to initialize partition 1, and to delete anything, while `failing` is set."""

    failing = True

    async def initialize(self, key, state_epoch, start_offset):
        if self.failing and key.partition == 1:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return await super().initialize(key, state_epoch, start_offset)

    async def delete(self, group_id, partitions):
        if self.failing:
            return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        return await super().delete(group_id, partitions)


class Acls:
    """An authorizer that denies what `denied` lists: (operation, resource type, name)."""

    def __init__(self, *denied) -> None:
        self.denied = set(denied)

    def authorize(self, ctx, op, resource_type, name, log_denied=True) -> bool:
        return (op, resource_type, name) not in self.denied

    def authorized_names(self, ctx, op, resource_type, names, log_denied=True) -> set:
        return {n for n in names if self.authorize(ctx, op, resource_type, n)}

    def authorized_operations(self, ctx, resource_type, name) -> int:
        return 0


class FakeServices:
    """The handlers' services as far as the share handlers use them."""

    node_id = 3
    node_request = None  # no other broker to ask: a partition led elsewhere has lag -1
    endpoint = BrokerServices.endpoint
    partition_leader = BrokerServices.partition_leader
    authorized = BrokerServices.authorized
    authorized_names = BrokerServices.authorized_names
    future_from = staticmethod(Broker.future_from)

    def __init__(self, h: Harness, persister=None, authorizer=None) -> None:
        self.h = h
        self.groups = h.gc
        self.metadata = SimpleNamespace(image=_image())
        self.share_persister = persister if persister is not None else InMemoryPersister()
        self.authorizer = authorizer
        # Partition t-0 is led here with its high watermark at 10.
        hosted = {("t", 0): SimpleNamespace(is_leader=True, high_watermark=10)}
        self.data = SimpleNamespace(get_partition=lambda tp: hosted.get((tp.topic, tp.partition)))
        self.initializer = ShareStateInitializer(h.gc, self.share_persister, lambda: h.now)
        h.gc.share_state_initializer = self.initializer

    def now_ms(self) -> int:
        return self.h.now


def ctx(version: int = 1):
    return SimpleNamespace(api_version=version, header=SimpleNamespace(client_id="sc"), client_host="10.1.2.3",
                           listener="PLAINTEXT")


def harness(**config) -> Harness:
    topics = TopicsImage()
    topics.add("t", 3, T)
    return Harness(topics=topics, **config)


def heartbeat(services: FakeServices, member_id: str, epoch: int, topics=None, group_id: str = "sg"):
    return handle_share_group_heartbeat(services, ctx(), ShareGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=epoch, subscribed_topic_names=topics))


def share_group(h: Harness, group_id: str = "sg"):
    return h.shard(group_id).share_groups[group_id]


# -- registration, configs, routing ----------------------------------------------------------------


def test_share_apis_are_served_only_behind_the_share_gate():
    assert 76 not in load_handlers() and 77 not in load_handlers()
    gated = load_handlers(gates=frozenset({SHARE}))
    assert {k: (gated[k].min_version, gated[k].max_version) for k in (76, 77)} == {76: (1, 1), 77: (1, 1)}
    assert BrokerConfig().share_enabled  # on by default, as in Kafka 4.2+
    assert not BrokerConfig.from_properties({"odradek.share.enabled": "false"}).share_enabled


def test_group_share_configs_have_kafkas_defaults_and_refuse_values_out_of_range():
    c = BrokerConfig()
    assert (c.share_group_session_timeout_ms, c.share_group_heartbeat_interval_ms, c.share_group_max_size,
            c.share_group_delivery_count_limit, c.share_group_record_lock_duration_ms,
            c.share_group_partition_max_record_locks, c.share_group_max_share_sessions) == (
        45000, 5000, 200, 5, 30000, 2000, 2000)
    for key, value, words in [
        ("group.share.max.size", "1001", "<= 1000"),
        ("group.share.delivery.count.limit", "11", "<= 10"),
        ("group.share.session.timeout.ms", "30000", "between group.share.min.session.timeout.ms"),
        ("group.share.record.lock.duration.ms", "90000", "group.share.max.record.lock.duration.ms (60000)"),
        ("group.share.partition.max.record.locks", "50", ">= 100"),
        ("group.share.assignors", "range", "only share group assignor is simple"),
    ]:
        with pytest.raises(ConfigError) as e:
            BrokerConfig.from_properties({key: value})
        assert key in str(e.value) and words in str(e.value), str(e.value)
    # Moving a bound moves what a value may be.
    assert BrokerConfig.from_properties({"group.share.max.record.lock.duration.ms": "120000",
                                         "group.share.record.lock.duration.ms": "90000"})


def test_share_keys_hash_to_a_share_group_state_partition_as_kafka_writes_them():
    key = share_coordinator_key("sg", T, 2)
    assert key == "sg:AAAAAAAAAAAAAAAAAAAAAQ:2"  # Uuid.toString: URL-safe base64, unpadded
    assert SharePartitionKey("sg", T, 2).coordinator_key() == key
    assert 0 <= share_state_partition(key, 50) < 50


# -- heartbeat and the share-partition state ---------------------------------------------------------


async def test_the_first_assignment_initializes_every_subscribed_partition_through_the_persister():
    h = harness()
    persister = InMemoryPersister()
    services = FakeServices(h, persister)
    r = heartbeat(services, "m1", 0, ["t"])
    # As Kafka 4.4: nothing is assigned before its share-partition state is initialized.
    assert r.error_code == 0 and r.assignment.topic_partitions == []
    state = share_group(h).state_partitions
    assert set(state.initializing) == {T} and state.initializing[T][1] == {0, 1, 2}
    await services.initializer.settle()
    state = share_group(h).state_partitions
    assert not state.initializing and state.initialized[T] == ("t", frozenset({0, 1, 2}))
    # The initialization bumped the group epoch: the next heartbeat brings the partitions.
    assert share_group(h).group_epoch == 2
    r = heartbeat(services, "m1", 1)
    assert (r.member_epoch, {p for tp in r.assignment.topic_partitions for p in tp.partitions}) == (2, {0, 1, 2})
    for p in range(3):  # state epoch = the group epoch; start offset -1: the leader applies share.auto.offset.reset
        read = await persister.read(SharePartitionKey("sg", T, p), 0)
        assert (read.snapshot.state_epoch, read.snapshot.start_offset) == (1, -1)
    # A second member joins: nothing left to initialize.
    heartbeat(services, "m2", 0, ["t"])
    assert not share_group(h).state_partitions.initializing
    assert services.initializer.initialized == 3
    # The state survives a failover: another coordinator replaying the log knows it.
    reloaded = h.reload().shard_for("sg").share_groups["sg"].state_partitions
    assert reloaded.initialized[T] == ("t", frozenset({0, 1, 2}))


async def test_a_failed_initialization_is_asked_again_by_the_next_heartbeat():
    h = harness()
    persister = FailingPersister()
    services = FakeServices(h, persister)
    heartbeat(services, "m1", 0, ["t"])
    await services.initializer.settle()
    state = share_group(h).state_partitions
    assert state.initialized[T][1] == {0, 2} and not state.initializing  # partition 1 left initializing
    persister.failing = False
    r = heartbeat(services, "m1", 1)
    # Only the run of initialized partitions from 0 is assigned: 2 waits behind 1.
    assert {p for tp in r.assignment.topic_partitions for p in tp.partitions} == {0}
    assert share_group(h).state_partitions.initializing[T][1] == {1}
    await services.initializer.settle()
    assert share_group(h).state_partitions.initialized[T][1] == {0, 1, 2}
    r = heartbeat(services, "m1", share_group(h).members["m1"].member_epoch)
    assert {p for tp in r.assignment.topic_partitions for p in tp.partitions} == {0, 1, 2}


async def test_an_initialization_without_answer_is_asked_again_after_the_retry_interval():
    h = harness(share_group_initialize_retry_interval_ms=30_000)
    asked = []
    h.gc.share_state_initializer = asked.append  # the broker never answers
    services = FakeServices.__new__(FakeServices)
    services.h, services.groups, services.authorizer = h, h.gc, None
    services.metadata = SimpleNamespace(image=_image())
    heartbeat(services, "m1", 0, ["t"])
    heartbeat(services, "m1", 1)
    assert len(asked) == 1  # still initializing, asked less than the interval ago
    h.advance(30_000)
    heartbeat(services, "m1", 1)
    assert len(asked) == 2 and asked[1].partitions == {T: frozenset({0, 1, 2})}


async def test_heartbeat_and_describe_authorization():
    h = harness()
    off = FakeServices(h)
    off.metadata = SimpleNamespace(image=MetadataImage())  # a cluster without share.version 1
    assert heartbeat(off, "m", 0, ["t"]).error_code == ErrorCode.UNSUPPORTED_VERSION
    services = FakeServices(h, authorizer=Acls((AclOperation.READ, ResourceType.GROUP, "denied")))
    assert heartbeat(services, "m", 0, ["t"], group_id="denied").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    services.authorizer = Acls((AclOperation.DESCRIBE, ResourceType.TOPIC, "t"))
    refused = heartbeat(services, "m", 0, ["t"])
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and "t" in refused.error_message
    services.authorizer = None
    assert heartbeat(services, "m", 0, ["t"]).error_code == 0
    await services.initializer.settle()
    assert heartbeat(services, "m", 1).assignment.topic_partitions  # assigned once initialized
    request = ShareGroupDescribeRequest(group_ids=["sg"], include_authorized_operations=False)
    (group,) = handle_share_group_describe(services, ctx(), request).groups
    assert group.error_code == 0 and group.members[0].assignment.topic_partitions[0].topic_name == "t"
    services.authorizer = Acls((AclOperation.DESCRIBE, ResourceType.TOPIC, "t"))
    (group,) = handle_share_group_describe(services, ctx(), request).groups
    assert group.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not group.members
    services.authorizer = Acls((AclOperation.DESCRIBE, ResourceType.GROUP, "sg"))
    (group,) = handle_share_group_describe(services, ctx(), request).groups
    assert group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED


# -- DescribeGroups and DeleteGroups of a share group -------------------------------------------------


async def test_describe_groups_answers_a_share_group_not_a_classic_group():
    h = harness()
    services = FakeServices(h)
    heartbeat(services, "m1", 0, ["t"])
    (group,) = handle_describe_groups(services, ctx(6), DescribeGroupsRequest(groups=["sg"])).groups
    assert (group.error_code, group.group_state, group.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND, "Dead", "Group sg is not a classic group.")


async def _answered(answer):
    if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future):
        return await answer
    return answer


async def test_delete_groups_deletes_an_empty_share_groups_state_first():
    h = harness()
    persister = FailingPersister()
    persister.failing = False
    services = FakeServices(h, persister)
    heartbeat(services, "m1", 0, ["t"])
    await services.initializer.settle()
    response = await _answered(handle_delete_groups(services, ctx(2), DeleteGroupsRequest(groups_names=["sg"])))
    assert response.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    heartbeat(services, "m1", -1)  # leaves: the group is empty, its state still there
    persister.failing = True
    response = await _answered(handle_delete_groups(services, ctx(2), DeleteGroupsRequest(groups_names=["sg", "nope"])))
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("sg", ErrorCode.COORDINATOR_NOT_AVAILABLE), ("nope", ErrorCode.GROUP_ID_NOT_FOUND)]
    assert "sg" in h.shard("sg").share_groups  # kept: its state could not be deleted
    persister.failing = False
    response = await _answered(handle_delete_groups(services, ctx(2), DeleteGroupsRequest(groups_names=["sg"])))
    assert response.results[0].error_code == 0 and "sg" not in h.shard("sg").share_groups
    summary = await persister.read_summary(SharePartitionKey("sg", T, 0))
    assert summary.start_offset == -1 and summary.state_epoch == 0  # nothing left


# -- the share admin APIs ----------------------------------------------------------------------------


class CountingPersister(InMemoryPersister):
    """Summaries carry a delivery-complete count of 2 (what a leader's writes would have recorded)."""

    async def read_summary(self, key, leader_epoch=-1):
        s = await super().read_summary(key, leader_epoch)
        return SummaryResult(s.error_code, s.state_epoch, s.leader_epoch, s.start_offset,
                             2 if s.start_offset >= 0 else -1)


def describe_offsets(services, group_id: str = "sg", topics=None):
    group = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    return handle_describe_share_group_offsets(services, ctx(1), DescribeShareGroupOffsetsRequest(groups=[
        group(group_id=group_id, topics=topics)]))


async def test_alter_describe_and_delete_share_group_offsets():
    h = harness()
    persister = CountingPersister()
    services = FakeServices(h, persister)
    topic = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    part = topic.AlterShareGroupOffsetsRequestPartition
    # A group that does not exist yet is created, empty, with its start offsets.
    alter = AlterShareGroupOffsetsRequest(group_id="sg", topics=[
        topic(topic_name="t", partitions=[part(partition_index=0, start_offset=4), part(partition_index=7, start_offset=1)]),
        topic(topic_name="nope", partitions=[part(partition_index=0, start_offset=0)])])
    response = await handle_alter_share_group_offsets(services, ctx(0), alter)
    assert response.error_code == 0
    assert [(t.topic_name, t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.responses] == [
        ("t", T, [(0, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("nope", uuid.UUID(int=0), [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]
    assert share_group(h).state_partitions.initialized[T][1] == {0}
    summary = await persister.read_summary(SharePartitionKey("sg", T, 0))
    assert (summary.start_offset, summary.state_epoch) == (4, 1)

    (group,) = (await describe_offsets(services)).groups  # every partition with state
    assert group.error_code == 0
    (described,) = group.topics
    (p0,) = described.partitions
    assert (described.topic_name, p0.partition_index, p0.start_offset, p0.lag) == ("t", 0, 4, 10 - 4 - 2)
    (group,) = (await describe_offsets(services, topics=[
        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup.DescribeShareGroupOffsetsRequestTopic(
            topic_name="t", partitions=[1])])).groups
    assert [(p.partition_index, p.start_offset, p.lag) for p in group.topics[0].partitions] == [(1, -1, -1)]
    (group,) = (await describe_offsets(services, group_id="unknown")).groups
    assert group.error_code == ErrorCode.GROUP_ID_NOT_FOUND

    # A member joins: altering is refused while the group has members.
    heartbeat(services, "m1", 0, ["t"])
    await services.initializer.settle()
    assert {p for p, _ in [(0, 0)]} <= share_group(h).state_partitions.initialized[T][1]
    refused = await handle_alter_share_group_offsets(services, ctx(0), alter)
    assert refused.error_code == ErrorCode.NON_EMPTY_GROUP
    delete = DeleteShareGroupOffsetsRequest(group_id="sg", topics=[
        DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name="t")])
    assert (await handle_delete_share_group_offsets(services, ctx(0), delete)).error_code == ErrorCode.NON_EMPTY_GROUP
    heartbeat(services, "m1", -1)
    delete.topics.append(DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name="nope"))
    response = await handle_delete_share_group_offsets(services, ctx(0), delete)
    assert response.error_code == 0
    assert [(t.topic_name, t.error_code) for t in response.responses] == [
        ("t", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    assert share_group(h).state_partitions.all_partitions() == {}
    assert (await persister.read_summary(SharePartitionKey("sg", T, 0))).start_offset == -1


async def test_share_admin_apis_authorization():
    h = harness()
    services = FakeServices(h, authorizer=Acls((AclOperation.READ, ResourceType.GROUP, "sg"),
                                               (AclOperation.DELETE, ResourceType.GROUP, "sg"),
                                               (AclOperation.DESCRIBE, ResourceType.GROUP, "sg")))
    topic = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    alter = AlterShareGroupOffsetsRequest(group_id="sg", topics=[topic(topic_name="t", partitions=[
        topic.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])])
    assert handle_alter_share_group_offsets(services, ctx(0), alter).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    delete = DeleteShareGroupOffsetsRequest(group_id="sg", topics=[
        DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name="t")])
    assert handle_delete_share_group_offsets(services, ctx(0), delete).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    (group,) = (await describe_offsets(services)).groups
    assert group.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    services.authorizer = Acls((AclOperation.READ, ResourceType.TOPIC, "t"))
    response = await handle_alter_share_group_offsets(services, ctx(0), alter)
    assert response.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


# -- GROUP configs (share.*) -------------------------------------------------------------------------


def test_group_configs_are_checked_by_name_form_and_the_brokers_bounds():
    bounds = share_defaults(BrokerConfig())
    validate_group_configs({"share.auto.offset.reset": "by_duration:PT1H30M", "share.isolation.level": None})
    for changes, words in [
        ({"consumer.session.timeout.ms": "50000"}, "Unknown group config name: consumer.session.timeout.ms"),
        ({"share.auto.offset.reset": "oldest"}, "not one of latest, earliest"),
        ({"share.auto.offset.reset": "by_duration:1h"}, "ISO-8601"),
        ({"share.isolation.level": "serializable"}, "read_committed"),
        ({"share.record.lock.duration.ms": "abc"}, "not an integer"),
    ]:
        with pytest.raises(ValueError, match=words):
            validate_group_configs(changes)
    with pytest.raises(ValueError, match="between 15000 .group.share.min.record.lock.duration.ms. and 60000"):
        validate_group_configs({"share.record.lock.duration.ms": "90000"}, bounds)
    with pytest.raises(ValueError, match="less than share.session.timeout.ms"):
        validate_group_configs({"share.heartbeat.interval.ms": "15000"},
                               {**bounds, "group.share.min.session.timeout.ms": 10000},
                               {"share.session.timeout.ms": "15000"})


def test_group_configs_describe_with_defaults_and_refuse_list_operations():
    config = BrokerConfig()
    image = MetadataImage(configs={(ConfigResourceType.GROUP, "sg"): {"share.auto.offset.reset": "earliest"}})
    entries = {e.name: e for e in describe_group(image, config, "sg")}
    assert (entries["share.auto.offset.reset"].value, entries["share.auto.offset.reset"].source) == (
        "earliest", ConfigSource.GROUP_CONFIG)
    assert (entries["share.record.lock.duration.ms"].value, entries["share.record.lock.duration.ms"].source) == (
        "30000", ConfigSource.DEFAULT_CONFIG)
    assert group_config_changes(image, config, "sg", [("share.delivery.count.limit", 0, "3"),
                                                      ("share.auto.offset.reset", 1, None)]) == {
        "share.delivery.count.limit": "3", "share.auto.offset.reset": None}
    with pytest.raises(GroupConfigError, match="not LIST"):
        group_config_changes(image, config, "sg", [("share.delivery.count.limit", 2, "3")])
    with pytest.raises(GroupConfigError, match="between 2"):
        group_config_changes(image, config, "sg", [("share.delivery.count.limit", 0, "11")])
    settings = share_group_settings(image.configs[(ConfigResourceType.GROUP, "sg")], share_defaults(config))
    assert (settings.auto_offset_reset, settings.record_lock_duration_ms, settings.delivery_count_limit) == (
        "earliest", 30000, 5)


def test_the_share_partition_leaders_run_a_group_with_its_own_configs():
    """The leaders' ShareSettings of a group: its share.* GROUP configs over the broker's group.share.* (a
    group's share.auto.offset.reset=earliest is what its never-initialized share-partitions start at)."""
    from odradek.broker.share.manager import ShareSettings

    config, base = BrokerConfig(), ShareSettings(record_lock_duration_ms=20000, max_record_locks=7)
    image = MetadataImage(configs={(ConfigResourceType.GROUP, "sg"): {
        "share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed",
        "share.delivery.count.limit": "3"}})
    assert share_settings_of(image, config, "other", base) is base
    own = share_settings_of(image, config, "sg", base)
    assert (own.auto_offset_reset, own.read_committed, own.delivery_count_limit, own.max_record_locks) == (
        "earliest", True, 3, 7)
    assert own.record_lock_duration_ms == 30000  # the group's lock duration defaults to the broker's config


def test_the_controller_writes_group_configs_and_refuses_unknown_names():
    from odradek.metadata.controller.configuration_control import ConfigurationControlManager
    from odradek.metadata.controller.requests import ConfigChange
    from odradek.metadata.controller.settings import ControllerSettings
    from odradek.metadata.image import MetadataError

    manager = ConfigurationControlManager(ControllerSettings(), None)
    records, _ = manager.alter_config_change(MetadataImage(), ConfigChange(
        int(ConfigResourceType.GROUP), "sg", {"share.isolation.level": "read_committed"}))
    assert [(r.resource_type, r.resource_name, r.name, r.value) for r in records] == [
        (ConfigResourceType.GROUP, "sg", "share.isolation.level", "read_committed")]
    with pytest.raises(MetadataError) as e:
        manager.alter_config_change(MetadataImage(), ConfigChange(int(ConfigResourceType.GROUP), "sg", {"x.y": "1"}))
    assert e.value.error_code == ErrorCode.INVALID_CONFIG


async def test_a_share_groups_session_timeout_and_heartbeat_interval_come_from_its_group_configs():
    h = harness()
    h.gc.group_configs = lambda group_id: ({"share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "7000"}
                                           if group_id == "sg" else {})
    services = FakeServices(h)
    assert heartbeat(services, "m1", 0, ["t"]).heartbeat_interval_ms == 7000
    assert heartbeat(services, "m2", 0, ["t"], group_id="other").heartbeat_interval_ms == 5000
    h.advance(49_000)
    assert "m1" in share_group(h).members
    h.advance(1_000)
    assert "m1" not in share_group(h).members  # expired at 50 s, not the broker's 45 s


async def test_share_group_metrics():
    from odradek.broker.share.group_metrics import ShareGroupMembershipCollector

    h = harness()
    services = FakeServices(h)
    heartbeat(services, "m1", 0, ["t"])
    heartbeat(services, "m2", 0, ["t"])
    heartbeat(services, "x", 0, ["t"], group_id="other")
    heartbeat(services, "x", -1, group_id="other")
    await services.initializer.settle()
    samples = {(m.name, tuple(s.labels.values())): s.value
               for m in ShareGroupMembershipCollector(lambda: h.gc).collect() for s in m.samples}
    assert samples[("odradek_share_groups", ("Stable",))] == 1 and samples[("odradek_share_groups", ("Empty",))] == 1
    assert samples[("odradek_share_group_members", ())] == 2
    assert samples[("odradek_share_partitions_initialized", ())] == 6  # 3 partitions of t, for each group
    assert list(ShareGroupMembershipCollector(lambda: None).collect())  # before the coordinator starts: zeros


async def test_list_groups_filters_share_groups_by_type():
    from odradek.protocol.messages import ListGroupsRequest

    h = harness()
    services = FakeServices(h)
    heartbeat(services, "m1", 0, ["t"])
    listed = h.gc.list_groups(ListGroupsRequest(states_filter=[], types_filter=["Share"]), 5, h.now).groups
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed] == [
        ("sg", "share", "share", "Stable")]
    assert h.gc.list_groups(ListGroupsRequest(states_filter=[], types_filter=["consumer"]), 5, h.now).groups == []


def test_the_lag_of_a_partition_led_elsewhere_is_asked_of_its_leader():
    """KIP-1226's lag needs the partition's end offset: a coordinator that does not lead the partition asks the
    leader with ListOffsets (latest); a failed question leaves the lag unknown (-1), never fails the describe."""
    from odradek.broker.handlers.share_groups import _end_offset
    from odradek.protocol.messages import ListOffsetsResponse

    asked = []

    async def node_request(node_id, request, version):
        asked.append((node_id, request.topics[0].name, request.topics[0].partitions[0].timestamp))
        if node_id == 2:
            raise ConnectionError("gone")
        return ListOffsetsResponse(topics=[ListOffsetsResponse.ListOffsetsTopicResponse(name="t", partitions=[
            ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                partition_index=0, error_code=0, offset=42)])])

    services = SimpleNamespace(node_id=3, node_request=node_request,
                               data=SimpleNamespace(get_partition=lambda tp: None))
    assert asyncio.run(_end_offset(services, "t", 0, 1)) == 42
    assert asyncio.run(_end_offset(services, "t", 0, 2)) == -1
    assert asyncio.run(_end_offset(services, "t", 0, -1)) == -1  # no leader: nobody to ask
    assert asked == [(1, "t", -1), (2, "t", -1)]
