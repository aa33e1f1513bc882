"""The asyncio admin client: topics, partitions, configs, groups and their offsets, records, cluster.

Theory of operation
-------------------
Each method builds one Kafka admin request and sends it where Kafka wants it: CreateTopics, DeleteTopics
and CreatePartitions to the controller (any broker when none is advertised; NOT_CONTROLLER refreshes
metadata and retries), DescribeConfigs and IncrementalAlterConfigs for a broker resource to that broker
and otherwise to any broker, ListGroups to every broker, group requests to the group's coordinator,
DeleteRecords and ListOffsets to each partition's leader. Retriable errors are retried through
`KafkaClient.call` until `default_api_timeout_ms`.

Batch methods (`create_topics`, `delete_topics`, `delete_groups`, ...) return a dict of per-item errors
(None for success) so one failure does not hide the others; singular helpers raise the `KafkaError`.

Group offsets: `list_group_offsets` reads committed offsets (OffsetFetch); `group_lag` adds each
partition's end offset (ListOffsets latest) and the difference; `reset_group_offsets` computes new
offsets (earliest, latest, a timestamp, an absolute offset or a shift) and commits them with generation
-1, which the coordinator only accepts while the group has no active members, as in
`kafka-consumer-groups --reset-offsets`.

Cluster: `describe_cluster` asks DescribeCluster (v2 also lists fenced brokers) and falls back to the
Metadata cache on brokers that do not serve it. `describe_quorum` asks DescribeQuorum for partition 0 of
`__cluster_metadata` on any broker (a broker forwards it to the active controller) and computes each
replica's lag as kafka-metadata-quorum does: the leader's log end offset minus the replica's.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import defaultdict
from dataclasses import dataclass, field, replace
from collections.abc import Awaitable, Callable
from typing import Any, Iterable

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS
from odradek.protocol.sasl import ScramMechanism, salted_password

from .assignors import decode_assignment
from .cluster import KafkaClient, PartitionInfo, TopicPartition
from .config import ClientConfig
from .consumer import EARLIEST, LATEST, OffsetAndMetadata, list_offsets
from .errors import ConfigError, KafkaError, OdradekError, UnsupportedVersionError
from .group import commit_offsets, fetch_committed_offsets

METADATA = 3
CREATE_TOPICS = 19
ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 43, 45, 46
DELETE_TOPICS = 20
DELETE_RECORDS = 21
LIST_GROUPS = 16
DESCRIBE_GROUPS = 15
DELETE_GROUPS = 42
SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
ALTER_SHARE_GROUP_OFFSETS = 91
DELETE_SHARE_GROUP_OFFSETS = 92
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
CREATE_PARTITIONS = 37
DESCRIBE_LOG_DIRS = 35
DESCRIBE_CLUSTER = 60
DESCRIBE_QUORUM = 55
API_VERSIONS = 18
DESCRIBE_TOPIC_PARTITIONS = 75

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49

METADATA_TOPIC = "__cluster_metadata"

RESOURCE_TYPES = {"topic": 2, "broker": 4, "broker_logger": 8, "group": 32}  # Kafka's ConfigResource.Type (GROUP is 32)
CONFIG_SOURCES = {
    -1: "unknown", 0: "unknown", 1: "dynamic_topic", 2: "dynamic_broker", 3: "dynamic_default_broker",
    4: "static_broker", 5: "default", 6: "dynamic_broker_logger", 7: "client_metrics", 8: "group",
}
OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}


def _config_context(rtype: int, name: str) -> str:
    """What an error about a config resource names: the empty BROKER name is the cluster-wide default."""
    return "configs of the cluster-wide broker default" if rtype == 4 and not name else f"configs of {name!r}"


@dataclass
class NewTopic:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class TopicDescription:
    name: str
    topic_id: Any
    is_internal: bool
    partitions: list[PartitionInfo]


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    is_sensitive: bool
    is_default: bool


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartition]


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    error: KafkaError | None = None


@dataclass
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topics: list[str]
    assignment: list[TopicPartition]


@dataclass
class ShareGroupDescription:
    """A share group (KIP-932) as ShareGroupDescribe answers it."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: list[ShareMemberDescription]
    error: KafkaError | None = None


@dataclass
class SharePartitionOffset:
    """A share-partition's start offset (-1: not started) and lag (-1: unknown), DescribeShareGroupOffsets."""

    topic: str
    partition: int
    start_offset: int
    leader_epoch: int
    lag: int
    error: KafkaError | None = None


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end_offset: int
    lag: int | None
    member_id: str | None = None
    client_id: str | None = None


@dataclass
class BrokerDescription:
    """A broker as DescribeCluster lists it; `is_fenced` is only known from v2 (older answers omit fenced
    brokers altogether, so False is then true of every broker listed)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False


@dataclass
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerDescription]


@dataclass
class FeatureMetadata:
    """The cluster's features as a broker reports them in ApiVersions v3+ (Admin.describeFeatures): the levels
    finalized (a feature at level 0 is off and absent), their epoch, and the (min, max) this broker supports."""

    finalized: dict[str, int]
    finalized_epoch: int
    supported: dict[str, tuple[int, int]]


@dataclass
class QuorumReplica:
    """A voter or observer of the metadata quorum, as the leader sees it.

    `lag` is the leader's log end offset minus this replica's (kafka-metadata-quorum's "Lag"); the
    timestamps are the leader's wall clock in ms, None where the leader does not know them (-1 on the wire).
    """

    replica_id: int
    log_end_offset: int
    lag: int
    last_fetch_timestamp_ms: int | None = None
    last_caught_up_timestamp_ms: int | None = None
    directory_id: Any = None


@dataclass
class QuorumNode:
    """A quorum member's listeners (DescribeQuorum v2): [(listener name, host, port)]."""

    node_id: int
    endpoints: list[tuple[str, str, int]]


@dataclass
class QuorumDescription:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplica]
    observers: list[QuorumReplica]
    nodes: list[QuorumNode] = field(default_factory=list)

    @property
    def leader(self) -> QuorumReplica | None:
        return next((v for v in self.voters if v.replica_id == self.leader_id), None)

    @property
    def max_follower_lag(self) -> int:
        """kafka-metadata-quorum's MaxFollowerLag: the lag of the voter with the smallest log end offset."""
        return max((v.lag for v in self.voters), default=0)

    @property
    def max_follower_lag_time_ms(self) -> int:
        """kafka-metadata-quorum's MaxFollowerLagTimeMs: how long ago, relative to the leader, the furthest
        behind voter was last caught up (0 when that is the leader itself, -1 when a timestamp is unknown)."""
        leader = self.leader
        if leader is None or not self.voters:
            return -1
        furthest = min(self.voters, key=lambda v: v.log_end_offset)
        if furthest.log_end_offset >= leader.log_end_offset:
            return 0
        if leader.last_caught_up_timestamp_ms is None or furthest.last_caught_up_timestamp_ms is None:
            return -1
        return leader.last_caught_up_timestamp_ms - furthest.last_caught_up_timestamp_ms


def _timestamp_ms(value: int) -> int | None:
    return None if value < 0 else value


def quorum_from_response(response: Any) -> QuorumDescription:
    """A DescribeQuorum response as a `QuorumDescription`; its errors (top level or the partition's) raise."""
    if response.error_code:
        raise KafkaError(response.error_code, getattr(response, "error_message", None), context="DescribeQuorum")
    partition = next((p for t in response.topics if t.topic_name == METADATA_TOPIC
                      for p in t.partitions if p.partition_index == 0), None)
    if partition is None:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no {METADATA_TOPIC}-0 in the answer",
                         context="DescribeQuorum")
    if partition.error_code:
        raise KafkaError(partition.error_code, getattr(partition, "error_message", None),
                         context=f"DescribeQuorum {METADATA_TOPIC}-0")
    leader_end = next((v.log_end_offset for v in partition.current_voters if v.replica_id == partition.leader_id),
                      partition.high_watermark)

    def replicas(states: list[Any]) -> list[QuorumReplica]:
        return [QuorumReplica(
            s.replica_id, s.log_end_offset, leader_end - s.log_end_offset,
            _timestamp_ms(getattr(s, "last_fetch_timestamp", -1)),
            _timestamp_ms(getattr(s, "last_caught_up_timestamp", -1)),
            getattr(s, "replica_directory_id", None)) for s in states]

    nodes = [QuorumNode(n.node_id, [(ln.name, ln.host, ln.port) for ln in n.listeners])
             for n in (getattr(response, "nodes", None) or [])]
    return QuorumDescription(partition.leader_id, partition.leader_epoch, partition.high_watermark,
                             replicas(partition.current_voters), replicas(partition.observers),
                             sorted(nodes, key=lambda n: n.node_id))


# Kafka's ACL enums by name (org.apache.kafka.common.acl / resource): the codes on the wire.
ACL_RESOURCE_TYPES = {"any": 1, "topic": 2, "group": 3, "cluster": 4, "transactional_id": 5, "delegation_token": 6,
                      "user": 7}
ACL_PATTERN_TYPES = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
ACL_OPERATIONS = {"any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8,
                  "cluster_action": 9, "describe_configs": 10, "alter_configs": 11, "idempotent_write": 12,
                  "create_tokens": 13, "describe_tokens": 14}
ACL_PERMISSIONS = {"any": 1, "deny": 2, "allow": 3}


def _code(table: dict[str, int], name: str, what: str) -> int:
    try:
        return table[name.lower().replace("-", "_")]
    except KeyError:
        raise ConfigError(f"unknown {what} {name!r} (known: {', '.join(table)})") from None


def _name(table: dict[str, int], code: int) -> str:
    return next((n for n, c in table.items() if c == code), str(code))


@dataclass(frozen=True)
class AclBinding:
    """An ACL binding, or (with None or "any" fields) a filter: names as kafka-acls.sh spells them."""

    resource_type: str = "any"
    name: str | None = None
    pattern_type: str = "any"
    principal: str | None = None
    host: str | None = None
    operation: str = "any"
    permission: str = "any"

    resource_type_code = property(lambda self: _code(ACL_RESOURCE_TYPES, self.resource_type, "resource type"))
    pattern_type_code = property(lambda self: _code(ACL_PATTERN_TYPES, self.pattern_type, "pattern type"))
    operation_code = property(lambda self: _code(ACL_OPERATIONS, self.operation, "operation"))
    permission_code = property(lambda self: _code(ACL_PERMISSIONS, self.permission, "permission type"))

    @classmethod
    def from_codes(cls, resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int,
                   permission: int) -> "AclBinding":
        return cls(_name(ACL_RESOURCE_TYPES, resource_type), name, _name(ACL_PATTERN_TYPES, pattern_type), principal,
                   host, _name(ACL_OPERATIONS, operation), _name(ACL_PERMISSIONS, permission))

    def __str__(self) -> str:
        return (f"{self.permission} {self.principal} from {self.host} to {self.operation} "
                f"{self.resource_type}:{self.pattern_type}:{self.name}")


class Admin:
    def __init__(self, config: ClientConfig | None = None, **overrides: Any):
        if config is None:
            config = ClientConfig(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        self.config = config
        self.client = KafkaClient(config, allow_auto_create_topics=False)
        self.client.track_all_topics()
        self._started = False

    async def start(self) -> "Admin":
        if not self._started:
            await self.client.start()
            self._started = True
        return self

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> "Admin":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _controller(self) -> int:
        controller = self.client.cluster.controller_id
        if controller >= 0 and controller in self.client.cluster.brokers:
            return controller
        return self.client.least_loaded_node()

    # ------------------------------------------------------------------------------------------ topics

    async def list_topics(self, *, internal: bool = False) -> list[str]:
        await self.client.refresh_metadata()
        return sorted(t for t, info in self.client.cluster.topics.items() if internal or not info.is_internal)

    async def describe_topics(self, names: Iterable[str] | None = None, *, internal: bool = False) -> list[TopicDescription]:
        await self.client.refresh_metadata()
        cluster = self.client.cluster
        if names is None:
            names = sorted(t for t, info in cluster.topics.items() if internal or not info.is_internal)
        else:
            names = list(names)
            unseen = [n for n in names if n not in cluster.topics and n not in cluster.topic_errors]
            if unseen:
                await self._metadata_by_name(unseen)
        out = []
        for name in names:
            info = cluster.topics.get(name)
            if info is None:
                code = cluster.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                raise KafkaError(code, context=f"topic {name!r}")
            out.append(TopicDescription(name, info.topic_id, info.is_internal,
                                        [info.partitions[p] for p in sorted(info.partitions)]))
        await self._with_elr(out)
        return out

    async def _with_elr(self, descriptions: list[TopicDescription]) -> None:
        """Fill in each partition's eligible leader replicas (KIP-966) from DescribeTopicPartitions, page by
        page (the broker caps a page at max.request.partition.size.limit partitions and names where the
        next one starts). Kafka's admin describes topics with it when the broker serves it; here Metadata
        stays the source of the rest (it also names the live brokers), and a broker without API 75 leaves
        the ELR empty, as an older Kafka would."""
        if not descriptions or DESCRIBE_TOPIC_PARTITIONS not in await self.client.api_versions():
            return
        cls = REQUESTS[DESCRIBE_TOPIC_PARTITIONS]
        wanted = {d.name: {p.partition: i for i, p in enumerate(d.partitions)} for d in descriptions}
        by_name = {d.name: d for d in descriptions}
        cursor = None
        while True:
            request = cls(topics=[cls.TopicRequest(name=n) for n in sorted(wanted)], response_partition_limit=2000,
                          cursor=cursor)
            response = await self.client.send_any(request)
            for t in response.topics:
                if t.error_code != ErrorCode.NONE or t.name not in by_name:
                    continue
                d = by_name[t.name]
                for p in t.partitions:
                    index = wanted[t.name].get(p.partition_index)
                    if index is not None:
                        d.partitions[index] = replace(d.partitions[index], elr=list(p.eligible_leader_replicas or ()),
                                                      last_known_elr=list(p.last_known_elr or ()))
            nxt = response.next_cursor
            if nxt is None:
                return
            cursor = cls.Cursor(topic_name=nxt.topic_name, partition_index=nxt.partition_index)

    async def _metadata_by_name(self, names: list[str]) -> None:
        """Ask for `names` by name. The admin's refreshes list every topic, and such an answer leaves out
        the topics the principal may not describe; asked by name, the broker says which those are, so that
        describing a topic without the ACL fails with TOPIC_AUTHORIZATION_FAILED, as Kafka's describeTopics
        does, rather than with UNKNOWN_TOPIC_OR_PARTITION. Only that answer is kept: a topic still being
        created reads as unknown, as before, until the next refresh lists it."""
        cls = REQUESTS[METADATA]
        response = await self.client.send_any(
            lambda version: cls(topics=[cls.MetadataRequestTopic(name=n) for n in names],
                                allow_auto_topic_creation=False), api_key=METADATA)
        for t in response.topics:
            if t.name in names and t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                self.client.cluster.topic_errors[t.name] = ErrorCode.TOPIC_AUTHORIZATION_FAILED

    async def create_topics(self, topics: list[NewTopic], *, timeout_ms: int = 30_000,
                            validate_only: bool = False) -> dict[str, KafkaError | None]:
        cls = REQUESTS[CREATE_TOPICS]
        request = cls(
            topics=[cls.CreatableTopic(
                name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                assignments=[], configs=[cls.CreatableTopic.CreatableTopicConfig(name=k, value=str(v))
                                         for k, v in t.configs.items()])
                for t in topics],
            timeout_ms=timeout_ms, validate_only=validate_only,
        )
        results = await self._per_item(request, "topics", "name", via=self._controller)
        if not validate_only:
            self.client.request_update()
        return results

    async def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False) -> None:
        result = await self.create_topics([NewTopic(name, num_partitions, replication_factor, configs or {})],
                                          validate_only=validate_only)
        error = result[name]
        if error is not None:
            raise error
        if not validate_only:
            await self._wait_for_topic(name, present=True)

    async def _wait_for_topic(self, name: str, *, present: bool, timeout_s: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            await self.client.refresh_metadata()
            info = self.client.cluster.topics.get(name)
            ready = info is not None and info.partitions and all(p.leader >= 0 for p in info.partitions.values())
            if bool(ready) == present:
                return
            await asyncio.sleep(0.05)

    async def delete_topics(self, names: list[str], *, timeout_ms: int = 30_000) -> dict[str, KafkaError | None]:
        cls = REQUESTS[DELETE_TOPICS]

        def build(version: int) -> Any:
            if version >= 6:
                return cls(topics=[cls.DeleteTopicState(name=n) for n in names], timeout_ms=timeout_ms)
            return cls(topic_names=list(names), timeout_ms=timeout_ms)

        results = await self._per_item(build, "responses", "name", via=self._controller, api_key=DELETE_TOPICS)
        self.client.request_update()
        return results

    async def delete_topic(self, name: str) -> None:
        result = await self.delete_topics([name])
        error = result.get(name)
        if error is not None:
            raise error

    async def create_partitions(self, new_totals: dict[str, int], *, validate_only: bool = False,
                                timeout_ms: int = 30_000) -> dict[str, KafkaError | None]:
        cls = REQUESTS[CREATE_PARTITIONS]
        request = cls(topics=[cls.CreatePartitionsTopic(name=t, count=n, assignments=None) for t, n in new_totals.items()],
                      timeout_ms=timeout_ms, validate_only=validate_only)
        results = await self._per_item(request, "results", "name", via=self._controller)
        self.client.request_update()
        return results

    async def _per_item(self, build: Any, results_field: str, key_field: str, *, via: Any,
                        api_key: int | None = None) -> dict[str, KafkaError | None]:
        async def attempt() -> dict[str, KafkaError | None]:
            node = await via()
            response = await self.client.send(node, build, api_key=api_key)
            out: dict[str, KafkaError | None] = {}
            for item in getattr(response, results_field):
                code = ErrorCode.for_code(item.error_code)
                key = getattr(item, key_field)
                if code == ErrorCode.NOT_CONTROLLER:
                    raise KafkaError(code)
                out[key] = None if code == ErrorCode.NONE else KafkaError(
                    code, getattr(item, "error_message", None), context=str(key))
            return out

        return await self.client.call(attempt, what=type(build).__name__)

    # ------------------------------------------------------------------------------------------ configs

    @staticmethod
    def _resource(resource_type: str | int) -> int:
        if isinstance(resource_type, int):
            return resource_type
        try:
            return RESOURCE_TYPES[resource_type.lower()]
        except KeyError:
            raise ConfigError(f"unknown resource type {resource_type!r} (known: {', '.join(RESOURCE_TYPES)})") from None

    async def _config_node(self, rtype: int, name: str) -> int:
        if rtype in (4, 8) and name:
            try:
                node = int(name)
            except ValueError:
                raise ConfigError(f"a broker resource is named by its node id, not {name!r}") from None
            return node
        return self.client.least_loaded_node()

    async def describe_configs(self, resource_type: str | int, name: str,
                               keys: list[str] | None = None) -> list[ConfigEntry]:
        rtype = self._resource(resource_type)
        cls = REQUESTS[DESCRIBE_CONFIGS]
        request = cls(resources=[cls.DescribeConfigsResource(resource_type=rtype, resource_name=name,
                                                             configuration_keys=keys)])

        async def attempt() -> list[ConfigEntry]:
            response = await self.client.send(await self._config_node(rtype, name), request)
            result = response.results[0]
            if result.error_code:
                raise KafkaError(result.error_code, result.error_message, context=_config_context(rtype, name))
            return [ConfigEntry(c.name, c.value, CONFIG_SOURCES.get(c.config_source, str(c.config_source)),
                                c.read_only, c.is_sensitive, c.config_source == 5 or c.is_default)
                    for c in result.configs]

        return await self.client.call(attempt, what="DescribeConfigs")

    async def alter_configs(self, resource_type: str | int, name: str, changes: dict[str, str | None], *,
                            op: str = "set", validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: `op` set (value None deletes), delete, append or subtract for every key."""
        rtype = self._resource(resource_type)
        if op not in OPS:
            raise ConfigError(f"unknown config operation {op!r} (known: {', '.join(OPS)})")
        cls = REQUESTS[INCREMENTAL_ALTER_CONFIGS]
        configs = [cls.AlterConfigsResource.AlterableConfig(
            name=k, config_operation=OPS["delete"] if v is None and op == "set" else OPS[op], value=v)
            for k, v in changes.items()]
        request = cls(resources=[cls.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=configs)],
                      validate_only=validate_only)

        async def attempt() -> None:
            response = await self.client.send(await self._config_node(rtype, name), request)
            result = response.responses[0]
            if result.error_code:
                raise KafkaError(result.error_code, result.error_message, context=_config_context(rtype, name))

        await self.client.call(attempt, what="IncrementalAlterConfigs")

    # ------------------------------------------------------------------------------------------ SCRAM users

    async def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """{user: [(mechanism name, iterations), ...]} for `users` (None: every user). An unknown user named
        raises KafkaError RESOURCE_NOT_FOUND."""
        cls = REQUESTS[50]
        request = cls(users=None if users is None else [cls.UserName(name=u) for u in users])

        async def attempt():
            response = await self.client.send(await self._controller(), request)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message, context="DescribeUserScramCredentials")
            out = {}
            for r in response.results:
                if r.error_code:
                    raise KafkaError(r.error_code, r.error_message, context=f"user {r.user!r}")
                out[r.user] = [(ScramMechanism(c.mechanism).mechanism_name, c.iterations) for c in r.credential_infos]
            return out

        return await self.client.call(attempt, what="DescribeUserScramCredentials")

    async def alter_user_scram_credentials(
        self, *, upsert: Iterable[tuple[str, str, str, int]] = (), delete: Iterable[tuple[str, str]] = (),
    ) -> dict[str, KafkaError | None]:
        """Create or change users' SCRAM credentials ((user, mechanism, password, iterations); the password is
        salted and hashed here and never sent) and delete them ((user, mechanism)). {user: error or None}."""
        cls = REQUESTS[51]
        upsertions = []
        for user, mechanism, password, iterations in upsert:
            m = ScramMechanism.from_name(mechanism)
            salt = secrets.token_bytes(32)
            upsertions.append(cls.ScramCredentialUpsertion(
                name=user, mechanism=int(m), iterations=iterations, salt=salt,
                salted_password=salted_password(m, password, salt, iterations)))
        request = cls(upsertions=upsertions, deletions=[
            cls.ScramCredentialDeletion(name=user, mechanism=int(ScramMechanism.from_name(m))) for user, m in delete])

        async def attempt():
            response = await self.client.send(await self._controller(), request)
            out: dict[str, KafkaError | None] = {}
            for r in response.results:
                error = KafkaError(r.error_code, r.error_message, context=f"user {r.user!r}") if r.error_code else None
                if error is not None and error.retriable:
                    raise error
                out[r.user] = error
            return out

        return await self.client.call(attempt, what="AlterUserScramCredentials")

    # ------------------------------------------------------------------------------------------ groups

    async def list_groups(self) -> list[GroupListing]:
        cls = REQUESTS[LIST_GROUPS]
        await self.client.refresh_metadata()
        found: dict[str, GroupListing] = {}
        for node in list(self.client.cluster.brokers):
            async def attempt(node: int = node) -> Any:
                response = await self.client.send(node, cls(states_filter=[], types_filter=[]))
                if response.error_code:
                    raise KafkaError(response.error_code, context=f"ListGroups on broker {node}")
                return response

            response = await self.client.call(attempt, what="ListGroups")
            for g in response.groups:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type)
        return [found[k] for k in sorted(found)]

    async def describe_groups(self, group_ids: list[str]) -> list[GroupDescription]:
        cls = REQUESTS[DESCRIBE_GROUPS]
        out = []
        for group_id in group_ids:
            async def attempt(group_id: str = group_id) -> Any:
                node = await self.client.coordinator(group_id)
                response = await self.client.send(node, cls(groups=[group_id], include_authorized_operations=False))
                g = response.groups[0]
                code = ErrorCode.for_code(g.error_code)
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self.client.invalidate_coordinator(group_id)
                if code.retriable:
                    raise KafkaError(code, context=f"group {group_id!r}")
                return g

            g = await self.client.call(attempt, what="DescribeGroups")
            error = None
            if g.error_code:
                error = KafkaError(g.error_code, g.error_message, context=f"group {group_id!r}")
            members = []
            for m in g.members:
                try:
                    assignment = decode_assignment(bytes(m.member_assignment)) if g.protocol_type == "consumer" else []
                except Exception:
                    assignment = []
                members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment))
            state = g.group_state or ("Dead" if error is not None else "")
            out.append(GroupDescription(g.group_id or group_id, state, g.protocol_type, g.protocol_data,
                                        members, error))
        return out

    async def describe_group(self, group_id: str) -> GroupDescription:
        (description,) = await self.describe_groups([group_id])
        if description.error is not None and description.error.code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise description.error
        return description

    async def delete_groups(self, group_ids: list[str]) -> dict[str, KafkaError | None]:
        cls = REQUESTS[DELETE_GROUPS]
        out: dict[str, KafkaError | None] = {}
        for group_id in group_ids:
            async def attempt(group_id: str = group_id) -> Any:
                node = await self.client.coordinator(group_id)
                response = await self.client.send(node, cls(groups_names=[group_id]))
                r = response.results[0]
                code = ErrorCode.for_code(r.error_code)
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self.client.invalidate_coordinator(group_id)
                if code.retriable:
                    raise KafkaError(code, context=f"group {group_id!r}")
                return code

            code = await self.client.call(attempt, what="DeleteGroups")
            out[group_id] = None if code == ErrorCode.NONE else KafkaError(code, context=f"group {group_id!r}")
        return out

    # -- share groups (KIP-932)

    async def _share_group_call(self, group_id: str, build: Any, check: Any, what: str) -> Any:
        """Send a share-group request to the group's coordinator; `check(response)` gives the error code
        that decides a retry (NOT_COORDINATOR and the like find the coordinator again)."""
        async def attempt() -> Any:
            node = await self.client.coordinator(group_id)
            response = await self.client.send(node, build)
            code = ErrorCode.for_code(check(response))
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self.client.invalidate_coordinator(group_id)
            if code.retriable:
                raise KafkaError(code, context=f"group {group_id!r}")
            return response

        return await self.client.call(attempt, what=what)

    async def describe_share_group(self, group_id: str) -> ShareGroupDescription:
        """ShareGroupDescribe: members, their assignments and epochs. A group id that is unknown or not a
        share group comes back with `error` GROUP_ID_NOT_FOUND and state Dead."""
        request = REQUESTS[SHARE_GROUP_DESCRIBE](group_ids=[group_id], include_authorized_operations=False)
        response = await self._share_group_call(group_id, request, lambda r: r.groups[0].error_code,
                                                "ShareGroupDescribe")
        g = response.groups[0]
        if g.error_code:
            return ShareGroupDescription(group_id, "Dead", -1, -1, [],
                                         KafkaError(g.error_code, g.error_message, context=f"group {group_id!r}"))
        members = [ShareMemberDescription(
            m.member_id, m.client_id, m.client_host, m.member_epoch, list(m.subscribed_topic_names),
            sorted(TopicPartition(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions))
            for m in g.members]
        return ShareGroupDescription(g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, members)

    async def share_group_offsets(self, group_id: str,
                                  topics: dict[str, list[int]] | None = None) -> list[SharePartitionOffset]:
        """DescribeShareGroupOffsets: each share-partition's start offset and lag (of every partition with
        state, or of `topics`: name -> partitions)."""
        cls = REQUESTS[DESCRIBE_SHARE_GROUP_OFFSETS]
        group_cls = cls.DescribeShareGroupOffsetsRequestGroup
        wanted = None if topics is None else [
            group_cls.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=list(ps)) for t, ps in topics.items()]
        request = cls(groups=[group_cls(group_id=group_id, topics=wanted)])
        response = await self._share_group_call(group_id, request, lambda r: r.groups[0].error_code,
                                                "DescribeShareGroupOffsets")
        g = response.groups[0]
        if g.error_code:
            raise KafkaError(g.error_code, g.error_message, context=f"group {group_id!r}")
        rows = []
        for t in g.topics:
            for p in t.partitions:
                error = KafkaError(p.error_code, p.error_message, context=f"{t.topic_name}-{p.partition_index}") \
                    if p.error_code else None
                rows.append(SharePartitionOffset(t.topic_name, p.partition_index, p.start_offset, p.leader_epoch,
                                                 p.lag, error))
        return sorted(rows, key=lambda r: (r.topic, r.partition))

    async def alter_share_group_offsets(self, group_id: str,
                                        offsets: dict[TopicPartition, int]) -> dict[TopicPartition, KafkaError | None]:
        """AlterShareGroupOffsets: restart share-partitions of an empty share group at `offsets`."""
        cls = REQUESTS[ALTER_SHARE_GROUP_OFFSETS]
        by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for tp, offset in offsets.items():
            by_topic[tp.topic].append((tp.partition, offset))
        topic_cls = cls.AlterShareGroupOffsetsRequestTopic
        request = cls(group_id=group_id, topics=[topic_cls(topic_name=t, partitions=[
            topic_cls.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in sorted(ps)])
            for t, ps in sorted(by_topic.items())])
        response = await self._share_group_call(group_id, request, lambda r: r.error_code, "AlterShareGroupOffsets")
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message, context=f"group {group_id!r}")
        return {TopicPartition(t.topic_name, p.partition_index):
                KafkaError(p.error_code, p.error_message, context=f"{t.topic_name}-{p.partition_index}")
                if p.error_code else None
                for t in response.responses for p in t.partitions}

    async def delete_share_group_offsets(self, group_id: str, topics: list[str]) -> dict[str, KafkaError | None]:
        """DeleteShareGroupOffsets: forget the share-partition state of `topics` in an empty share group."""
        cls = REQUESTS[DELETE_SHARE_GROUP_OFFSETS]
        request = cls(group_id=group_id, topics=[cls.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
        response = await self._share_group_call(group_id, request, lambda r: r.error_code, "DeleteShareGroupOffsets")
        if response.error_code:
            raise KafkaError(response.error_code, response.error_message, context=f"group {group_id!r}")
        return {t.topic_name: KafkaError(t.error_code, t.error_message, context=t.topic_name) if t.error_code else None
                for t in response.responses}

    async def reset_share_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        to: str = "earliest",
        timestamp_ms: int | None = None,
        offset: int | None = None,
        shift: int | None = None,
        dry_run: bool = False,
    ) -> dict[TopicPartition, int]:
        """New start offsets for a share group's partitions (kafka-share-groups --reset-offsets): to earliest,
        latest, timestamp, offset or shift (from the current start offset, or the end if none); the group
        must be empty. Applied with AlterShareGroupOffsets unless `dry_run`."""
        partitions = sorted({TopicPartition(*tp) for tp in partitions})
        if not partitions:
            raise ConfigError("no partitions to reset")
        description = await self.describe_share_group(group_id)
        if description.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                             f"share group has {len(description.members)} active member(s); stop them first",
                             context=f"group {group_id!r}")
        async def current() -> dict[TopicPartition, int]:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                by_topic[tp.topic].append(tp.partition)
            return {TopicPartition(r.topic, r.partition): r.start_offset
                    for r in await self.share_group_offsets(group_id, dict(by_topic)) if r.start_offset >= 0}

        target = await self._reset_targets(partitions, to, timestamp_ms, offset, shift, current)
        if not dry_run:
            errors = await self.alter_share_group_offsets(group_id, target)
            failed = [e for e in errors.values() if e is not None]
            if failed:
                raise failed[0]
        return target

    async def list_group_offsets(self, group_id: str,
                                 partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        return await fetch_committed_offsets(self.client, group_id, partitions)

    async def group_lag(self, group_id: str) -> list[PartitionLag]:
        """Per partition: committed offset, end offset and lag; includes assigned partitions without commits."""
        committed = await self.list_group_offsets(group_id)
        owners: dict[TopicPartition, MemberDescription] = {}
        try:
            description = await self.describe_group(group_id)
            for m in description.members:
                for tp in m.assignment:
                    owners[tp] = m
        except OdradekError:
            pass
        partitions = set(committed) | set(owners)
        ends = await self.end_offsets(partitions) if partitions else {}
        rows = []
        for tp in sorted(partitions):
            om = committed.get(tp)
            end = ends.get(tp, -1)
            lag = None if om is None or end < 0 else max(end - om.offset, 0)
            member = owners.get(tp)
            rows.append(PartitionLag(tp.topic, tp.partition, None if om is None else om.offset, end, lag,
                                     member.member_id if member else None, member.client_id if member else None))
        return rows

    async def reset_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        to: str = "earliest",
        timestamp_ms: int | None = None,
        offset: int | None = None,
        shift: int | None = None,
        dry_run: bool = False,
    ) -> dict[TopicPartition, int]:
        """New committed offsets for `partitions`: to earliest, latest, timestamp, offset or shift (by N)."""
        partitions = sorted({TopicPartition(*tp) for tp in partitions})
        if not partitions:
            raise ConfigError("no partitions to reset")
        description = await self.describe_group(group_id)
        if description.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP,
                             f"group has {len(description.members)} active member(s); stop them first",
                             context=f"group {group_id!r}")
        async def current() -> dict[TopicPartition, int]:
            return {tp: c.offset for tp, c in (await self.list_group_offsets(group_id, partitions)).items()}

        target = await self._reset_targets(partitions, to, timestamp_ms, offset, shift, current)
        if not dry_run:
            await commit_offsets(self.client, group_id, {tp: OffsetAndMetadata(o) for tp, o in target.items()})
        return target

    async def _reset_targets(self, partitions: list[TopicPartition], to: str, timestamp_ms: int | None,
                             offset: int | None, shift: int | None,
                             current: Callable[[], Awaitable[dict[TopicPartition, int]]]) -> dict[TopicPartition, int]:
        """The offsets a reset moves `partitions` to, as kafka-consumer-groups / kafka-share-groups
        --reset-offsets compute them: earliest, latest, the first offset at a timestamp (the end if none), an
        offset, or a shift from the `current` position (the end where there is none); always clamped into
        [log start, log end]. Shared by consumer-group and share-group resets."""
        earliest = await self.beginning_offsets(partitions)
        latest = await self.end_offsets(partitions)
        if to in ("earliest", "latest"):
            target = dict(earliest if to == "earliest" else latest)
        elif to == "timestamp":
            if timestamp_ms is None:
                raise ConfigError("reset to a timestamp needs timestamp_ms")
            found = await list_offsets(self.client, {tp: timestamp_ms for tp in partitions})
            target = {tp: (found[tp][0] if found[tp][0] >= 0 else latest[tp]) for tp in partitions}
        elif to == "offset":
            if offset is None:
                raise ConfigError("reset to an offset needs offset")
            target = {tp: offset for tp in partitions}
        elif to == "shift":
            if shift is None:
                raise ConfigError("reset by a shift needs shift")
            now = await current()
            target = {tp: now.get(tp, latest[tp]) + shift for tp in partitions}
        else:
            raise ConfigError(f"unknown reset target {to!r} (earliest, latest, timestamp, offset, shift)")
        return {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in target.items()}

    # ------------------------------------------------------------------------------------------ offsets, records

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = await list_offsets(self.client, {TopicPartition(*tp): EARLIEST for tp in partitions})
        return {tp: o for tp, (o, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        found = await list_offsets(self.client, {TopicPartition(*tp): LATEST for tp in partitions})
        return {tp: o for tp, (o, _) in found.items()}

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        found = await list_offsets(self.client, {TopicPartition(*tp): ts for tp, ts in timestamps.items()})
        return {tp: o for tp, (o, _) in found.items()}

    async def topic_partitions(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in await self.client.partitions_for(topic)]

    async def delete_records(self, before: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete records below each offset (-1: the high watermark); returns the new low watermarks."""
        cls = REQUESTS[DELETE_RECORDS]
        result: dict[TopicPartition, int] = {}
        remaining = {TopicPartition(*tp): o for tp, o in before.items()}

        async def attempt() -> None:
            by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
            for tp, o in remaining.items():
                by_leader[await self.client.leader_for(tp)][tp] = o
            error: OdradekError | None = None
            for node, parts in by_leader.items():
                topics: dict[str, list] = defaultdict(list)
                for tp, o in parts.items():
                    topics[tp.topic].append(cls.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=tp.partition, offset=o))
                response = await self.client.send(node, cls(
                    topics=[cls.DeleteRecordsTopic(name=t, partitions=p) for t, p in topics.items()],
                    timeout_ms=self.config.request_timeout_ms))
                for t in response.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code:
                            e = KafkaError(p.error_code, context=f"DeleteRecords {tp}")
                            if not e.retriable:
                                raise e
                            error = e
                            continue
                        result[tp] = p.low_watermark
                        remaining.pop(tp, None)
            if remaining:
                raise error or KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "partitions missing from DeleteRecords")

        await self.client.call(attempt, what="DeleteRecords")
        return result

    # ------------------------------------------------------------------------------------------ cluster

    async def describe_cluster(self) -> ClusterDescription:
        await self.client.refresh_metadata()
        cluster = self.client.cluster
        node = self.client.least_loaded_node()
        conn = await self.client.connection(node)
        if conn.supports(DESCRIBE_CLUSTER):
            cls = REQUESTS[DESCRIBE_CLUSTER]
            def build(version: int) -> Any:
                # v2 lists fenced brokers too (flagged) when asked; older versions leave them out (and the
                # codec refuses a field a version does not have).
                request = cls(include_cluster_authorized_operations=False)
                if version >= 2:
                    request.include_fenced_brokers = True
                return request

            response = await self.client.send(node, build, api_key=DESCRIBE_CLUSTER)
            if not response.error_code:
                brokers = [BrokerDescription(b.broker_id, b.host, b.port, b.rack, bool(getattr(b, "is_fenced", False)))
                           for b in response.brokers]
                return ClusterDescription(response.cluster_id, response.controller_id,
                                          sorted(brokers, key=lambda b: b.node_id))
        return ClusterDescription(cluster.cluster_id, cluster.controller_id,
                                  [BrokerDescription(b.node_id, b.host, b.port, b.rack)
                                   for b in sorted(cluster.brokers.values(), key=lambda b: b.node_id)])

    async def describe_features(self) -> FeatureMetadata:
        """The features (KIP-584) as one broker reports them: ApiVersions at its highest version (v4+ lists the
        ranges that start at 0, such as transaction.version's)."""
        def build(version: int) -> Any:
            request = REQUESTS[API_VERSIONS]()
            if version >= 3:  # (the fields exist from v3, as the features in the answer do)
                request.client_software_name, request.client_software_version = "odradek-python", "0.1.0"
            return request

        node = self.client.least_loaded_node()
        response = await self.client.send(node, build, api_key=API_VERSIONS)
        if response.error_code:
            raise KafkaError(response.error_code, None, context="ApiVersions")
        return FeatureMetadata(
            finalized={f.name: f.max_version_level for f in response.finalized_features or ()},
            finalized_epoch=response.finalized_features_epoch,
            supported={f.name: (f.min_version, f.max_version) for f in response.supported_features or ()})

    async def describe_quorum(self) -> QuorumDescription:
        """The metadata quorum (DescribeQuorum); `UnsupportedVersionError` from a broker that does not serve it."""
        cls = REQUESTS[DESCRIBE_QUORUM]
        request = cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC,
                                            partitions=[cls.TopicData.PartitionData(partition_index=0)])])

        async def attempt() -> QuorumDescription:
            node = self.client.least_loaded_node()
            conn = await self.client.connection(node)
            if not conn.supports(DESCRIBE_QUORUM):
                raise UnsupportedVersionError(f"broker {node} does not serve DescribeQuorum")
            return quorum_from_response(await self.client.send(node, request))

        return await self.client.call(attempt, what="DescribeQuorum")

    async def quorum_without_leader(self, *, timeout_s: float) -> str | None:
        """Why a metadata change cannot be made now, if the reason is that the controller quorum has no
        leader: the words of a broker that says so (DescribeQuorum answering NOT_LEADER_OR_FOLLOWER or leader
        -1), else None (a broker names a leader, none serves DescribeQuorum, or none answers within
        `timeout_s`). Every bootstrap address is asked at once, each once, without the client's bootstrap or
        retries: when the quorum is lost some of those nodes are typically stopped or unreachable, and the
        question must not wait on them. For the command line's explanation of an admin request that timed
        out; `describe_quorum` is the full answer."""
        cls = REQUESTS[DESCRIBE_QUORUM]
        request = cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC,
                                            partitions=[cls.TopicData.PartitionData(partition_index=0)])])

        async def ask(node_id: int) -> str | None:
            response = await self.client.send(node_id, request, timeout_ms=int(timeout_s * 1000))
            try:
                description = quorum_from_response(response)
            except KafkaError as e:
                if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    return e.message or "the controller quorum has no leader"
                raise
            if description.leader_id < 0:
                return "the controller quorum has no leader"
            return None

        pending = {asyncio.ensure_future(ask(node)) for node in self.client.bootstrap_nodes}
        try:
            async with asyncio.timeout(timeout_s):
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        if task.exception() is None:
                            return task.result()  # a broker answered: no leader (its words), or one (None)
        except TimeoutError:
            pass
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        return None

    # ------------------------------------------------------------------------ leaders and reassignments

    async def elect_leaders(self, partitions: Iterable[TopicPartition] | None = None, *,
                            election_type: str = "preferred", timeout_ms: int = 30_000) -> dict[TopicPartition, KafkaError | None]:
        """ElectLeaders (kafka-leader-election.sh): PREFERRED moves leadership back to each partition's first
        replica, UNCLEAN elects an out-of-sync replica where no in-sync one is left. `partitions` None: all.
        A partition whose preferred replica leads already answers ELECTION_NOT_NEEDED."""
        cls = REQUESTS[ELECT_LEADERS]
        kind = {"preferred": 0, "unclean": 1}[election_type.lower()]
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = cls(election_type=kind, timeout_ms=timeout_ms, topic_partitions=None if partitions is None else [
            cls.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())])

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            response = await self.client.send(await self._controller(), request)
            if response.error_code:
                raise KafkaError(ErrorCode.for_code(response.error_code), context="ElectLeaders")
            out: dict[TopicPartition, KafkaError | None] = {}
            for topic in response.replica_election_results:
                for r in topic.partition_result:
                    tp = TopicPartition(topic.topic, r.partition_id)
                    out[tp] = None if r.error_code == 0 else KafkaError(
                        ErrorCode.for_code(r.error_code), r.error_message, context=str(tp))
            return out

        return await self.client.call(attempt, what="ElectLeaders")

    async def alter_partition_reassignments(self, targets: dict[TopicPartition, list[int] | None], *,
                                            timeout_ms: int = 30_000) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replica lists (None cancels a pending move), as kafka-reassign-partitions.sh
        --execute / --cancel: the new replicas catch up, then the controller switches the assignment."""
        cls = REQUESTS[ALTER_PARTITION_REASSIGNMENTS]
        by_topic: dict[str, list] = {}
        for tp, replicas in sorted(targets.items()):
            by_topic.setdefault(tp.topic, []).append(
                cls.ReassignableTopic.ReassignablePartition(partition_index=tp.partition, replicas=replicas))
        request = cls(timeout_ms=timeout_ms, topics=[cls.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()])

        async def attempt() -> dict[TopicPartition, KafkaError | None]:
            response = await self.client.send(await self._controller(), request)
            if response.error_code:
                raise KafkaError(ErrorCode.for_code(response.error_code), response.error_message, context="reassignment")
            out: dict[TopicPartition, KafkaError | None] = {}
            for topic in response.responses:
                for r in topic.partitions:
                    tp = TopicPartition(topic.name, r.partition_index)
                    out[tp] = None if r.error_code == 0 else KafkaError(
                        ErrorCode.for_code(r.error_code), r.error_message, context=str(tp))
            return out

        return await self.client.call(attempt, what="AlterPartitionReassignments")

    async def list_partition_reassignments(self) -> dict[TopicPartition, dict[str, list[int]]]:
        """Pending moves: {partition: {"replicas", "adding", "removing"}}."""
        cls = REQUESTS[LIST_PARTITION_REASSIGNMENTS]

        async def attempt() -> dict[TopicPartition, dict[str, list[int]]]:
            response = await self.client.send(await self._controller(), cls(timeout_ms=30_000, topics=None))
            if response.error_code:
                raise KafkaError(ErrorCode.for_code(response.error_code), response.error_message, context="reassignments")
            return {TopicPartition(t.name, p.partition_index): {"replicas": list(p.replicas), "adding": list(p.adding_replicas),
                                                                "removing": list(p.removing_replicas)}
                    for t in response.topics for p in t.partitions}

        return await self.client.call(attempt, what="ListPartitionReassignments")

    async def describe_log_dirs(self, broker_ids: list[int] | None = None) -> dict[int, list[dict]]:
        """Per broker: [{"log_dir", "error", "total_bytes", "usable_bytes", "partitions": {tp: size}}]."""
        cls = REQUESTS[DESCRIBE_LOG_DIRS]
        await self.client.refresh_metadata()
        brokers = broker_ids if broker_ids is not None else sorted(self.client.cluster.brokers)
        out: dict[int, list[dict]] = {}
        for node in brokers:
            # awaited before the loop moves on: the lambda sees this node
            response = await self.client.call(lambda: self.client.send(node, cls(topics=None)), what="DescribeLogDirs")
            if response.error_code:
                raise KafkaError(response.error_code, context=f"log dirs of broker {node}")
            dirs = []
            for r in response.results:
                parts = {TopicPartition(t.name, p.partition_index): p.partition_size
                         for t in r.topics for p in t.partitions}
                dirs.append({"log_dir": r.log_dir, "error": ErrorCode.for_code(r.error_code).name,
                             "total_bytes": r.total_bytes, "usable_bytes": r.usable_bytes, "partitions": parts})
            out[node] = dirs
        return out

    # ------------------------------------------------------------------------------- ACLs and quotas

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """CreateAcls (kafka-acls.sh --add): one result per binding, in order."""
        cls = REQUESTS[CREATE_ACLS]
        request = cls(creations=[cls.AclCreation(
            resource_type=b.resource_type_code, resource_name=b.name, resource_pattern_type=b.pattern_type_code,
            principal=b.principal, host=b.host, operation=b.operation_code, permission_type=b.permission_code)
            for b in bindings])

        async def attempt() -> list[KafkaError | None]:
            response = await self.client.send(self.client.least_loaded_node(), request)
            return [None if r.error_code == 0 else KafkaError(r.error_code, r.error_message, context=str(b))
                    for b, r in zip(bindings, response.results)]

        return await self.client.call(attempt, what="CreateAcls")

    async def describe_acls(self, acl_filter: AclBinding | None = None) -> list[AclBinding]:
        """DescribeAcls (kafka-acls.sh --list): the bindings `acl_filter` matches (None fields match anything)."""
        f = acl_filter or AclBinding()
        request = REQUESTS[DESCRIBE_ACLS](
            resource_type_filter=f.resource_type_code, resource_name_filter=f.name, pattern_type_filter=f.pattern_type_code,
            principal_filter=f.principal, host_filter=f.host, operation=f.operation_code, permission_type=f.permission_code)

        async def attempt() -> list[AclBinding]:
            response = await self.client.send(self.client.least_loaded_node(), request)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message, context="DescribeAcls")
            return [AclBinding.from_codes(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                                          a.operation, a.permission_type)
                    for r in response.resources for a in r.acls]

        return await self.client.call(attempt, what="DescribeAcls")

    async def delete_acls(self, filters: list[AclBinding]) -> list[list[AclBinding]]:
        """DeleteAcls (kafka-acls.sh --remove): per filter, the bindings it removed."""
        cls = REQUESTS[DELETE_ACLS]
        request = cls(filters=[cls.DeleteAclsFilter(
            resource_type_filter=f.resource_type_code, resource_name_filter=f.name, pattern_type_filter=f.pattern_type_code,
            principal_filter=f.principal, host_filter=f.host, operation=f.operation_code, permission_type=f.permission_code)
            for f in filters])

        async def attempt() -> list[list[AclBinding]]:
            response = await self.client.send(self.client.least_loaded_node(), request)
            out = []
            for r in response.filter_results:
                if r.error_code:
                    raise KafkaError(r.error_code, r.error_message, context="DeleteAcls")
                out.append([AclBinding.from_codes(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                                                  m.operation, m.permission_type) for m in r.matching_acls])
            return out

        return await self.client.call(attempt, what="DeleteAcls")

    async def describe_client_quotas(self, entity: dict[str, str | None] | None = None, *,
                                     strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas (kafka-configs.sh --describe --entity-type users/clients): `entity` maps
        "user"/"client-id" to a name, or None for the default; no entity: every quota."""
        cls = REQUESTS[DESCRIBE_CLIENT_QUOTAS]
        components = [cls.ComponentData(entity_type=t, match_type=0 if n is not None else 1, match=n)
                      for t, n in (entity or {}).items()]
        request = cls(components=components, strict=strict)

        async def attempt() -> list[tuple[dict[str, str | None], dict[str, float]]]:
            response = await self.client.send(self.client.least_loaded_node(), request)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message, context="DescribeClientQuotas")
            return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
                    for entry in response.entries or ()]

        return await self.client.call(attempt, what="DescribeClientQuotas")

    async def alter_client_quotas(self, entity: dict[str, str | None], changes: dict[str, float | None], *,
                                  validate_only: bool = False) -> None:
        """AlterClientQuotas: set each key (a None value removes it) of one entity."""
        cls = REQUESTS[ALTER_CLIENT_QUOTAS]
        entry = cls.EntryData(
            entity=[cls.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[cls.EntryData.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                 for k, v in changes.items()])
        request = cls(entries=[entry], validate_only=validate_only)

        async def attempt() -> None:
            response = await self.client.send(self.client.least_loaded_node(), request)
            for r in response.entries:
                if r.error_code:
                    raise KafkaError(r.error_code, r.error_message, context="AlterClientQuotas")

        await self.client.call(attempt, what="AlterClientQuotas")


__all__ = [
    "AclBinding",
    "Admin", "BrokerDescription", "ClusterDescription", "ConfigEntry", "GroupDescription", "GroupListing",
    "MemberDescription",
    "NewTopic", "PartitionLag", "QuorumDescription", "QuorumNode", "QuorumReplica", "TopicDescription",
    "quorum_from_response",
]
