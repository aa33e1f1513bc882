"""What the pages show, read from the cluster through the Kafka protocol and cached for a moment.

The console's view of the cluster, one method per page, each a bounded number of admin requests: a page
never asks per record, and asks per group or per partition only up to the caps below. Every answer is
cached for `ttl_s` (2 s by default) per principal, so that reloading a page, several tabs and the
htmx refreshes of the banner cost the cluster one round of requests per interval, not one per view;
concurrent misses of the same key wait for one request (a lock per key) instead of each sending it.

The reader holds no state of its own beyond the cache: the cluster is the source of truth, and what a
principal may not describe comes back as the cluster's authorization error, shown where the data would be.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from odradek.client.admin import Admin, AclBinding, GroupDescription, QuorumDescription
from odradek.client.cluster import COORDINATOR_TRANSACTION, TopicPartition
from odradek.client.consumer import EARLIEST, LATEST, list_offsets
from odradek.client.errors import KafkaError, OdradekError, UnsupportedVersionError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS

T = TypeVar("T")

MAX_GROUPS_DESCRIBED = 200  # groups a list page describes (state, members); more are listed by name only
MAX_TRANSACTIONS_DESCRIBED = 100
METADATA_TOPIC = "__cluster_metadata"
DESCRIBE_CONFIGS, CONSUMER_GROUP_DESCRIBE, DESCRIBE_PRODUCERS, WRITE_TXN_MARKERS = 32, 69, 61, 27
LIST_TRANSACTIONS, DESCRIBE_TRANSACTIONS = 66, 65
SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS = 77, 90


class TtlCache:
    """Values by key for `ttl_s` seconds, one loader at a time per key."""

    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._values: dict[Any, tuple[float, Any]] = {}
        self._locks: dict[Any, asyncio.Lock] = {}

    async def get(self, key: Any, load: Callable[[], Awaitable[T]], ttl_s: float | None = None) -> T:
        ttl = self.ttl_s if ttl_s is None else ttl_s
        hit = self._values.get(key)
        if hit is not None and time.monotonic() - hit[0] < ttl:
            return hit[1]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            hit = self._values.get(key)
            if hit is not None and time.monotonic() - hit[0] < ttl:
                return hit[1]
            value = await load()
            self._values[key] = (time.monotonic(), value)
            if len(self._values) > 10_000:  # keys are pages and names: drop the oldest half
                for old in sorted(self._values, key=lambda k: self._values[k][0])[:5_000]:
                    self._values.pop(old, None)
            return value

    def peek(self, key: Any) -> Any:
        """The value cached under `key`, however old, or None: for a page that shows what is known without
        asking the cluster (the topic list's group lag)."""
        hit = self._values.get(key)
        return None if hit is None else hit[1]

    def forget(self, *prefixes: str) -> None:
        """Drop the cached answers whose key starts with one of `prefixes` (after a change made here)."""
        for key in list(self._values):
            if isinstance(key, tuple) and key and key[0] in prefixes:
                del self._values[key]


@dataclass
class Health:
    """The banner: what an operator must see on every page."""

    offline: list[str] = field(default_factory=list)
    under_replicated: list[str] = field(default_factory=list)
    under_min_isr: list[str] = field(default_factory=list)
    quorum_problem: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not (self.offline or self.under_replicated or self.under_min_isr or self.quorum_problem or self.error)


@dataclass
class PartitionRow:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    log_start_offset: int | None = None
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    size_bytes: int | None = None

    @property
    def state(self) -> str:
        if self.leader < 0:
            return "offline"
        if len(self.isr) < len(self.replicas):
            return "under-replicated"
        return "ok"


@dataclass
class GroupMemberRow:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None
    member_epoch: int | None
    assignment: list[TopicPartition]
    subscribed: list[str] = field(default_factory=list)


@dataclass
class GroupView:
    group_id: str
    group_type: str  # classic, consumer, share
    state: str
    protocol: str = ""
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: list[GroupMemberRow] = field(default_factory=list)
    error: str | None = None


def describe_error(e: BaseException) -> str:
    """An error as a page shows it: the cluster's error name and what it concerned."""
    return str(e) or type(e).__name__


class ClusterReader:
    """The pages' data for one principal (one Admin: the console's own, or a signed-in user's)."""

    def __init__(self, admin: Admin, cache: TtlCache, principal: str):
        self.admin = admin
        self.cache = cache
        self.principal = principal

    def _key(self, *parts: Any) -> tuple:
        return (parts[0], self.principal, *parts[1:])

    async def _cached(self, load: Callable[[], Awaitable[T]], *key: Any, ttl_s: float | None = None) -> T:
        return await self.cache.get(self._key(*key), load, ttl_s)

    # ------------------------------------------------------------------------------------------ cluster

    async def metadata(self) -> Any:
        async def load() -> Any:
            await self.admin.client.refresh_metadata()
            return self.admin.client.cluster
        return await self._cached(load, "metadata")

    async def cluster(self) -> Any:
        return await self._cached(self.admin.describe_cluster, "cluster")

    async def quorum(self) -> QuorumDescription | str:
        async def load() -> QuorumDescription | str:
            try:
                return await self.admin.describe_quorum()
            except OdradekError as e:
                return describe_error(e)
        return await self._cached(load, "quorum")

    async def log_dirs(self) -> dict[int, list[dict]] | str:
        async def load() -> dict[int, list[dict]] | str:
            try:
                return await self.admin.describe_log_dirs()
            except OdradekError as e:
                return describe_error(e)
        return await self._cached(load, "log_dirs", ttl_s=10.0)

    async def min_isr(self, topics: list[str]) -> dict[str, int]:
        """min.insync.replicas of each topic, in one DescribeConfigs (the cluster's default where not set)."""
        async def load() -> dict[str, int]:
            if not topics:
                return {}
            cls = REQUESTS[DESCRIBE_CONFIGS]
            request = cls(resources=[cls.DescribeConfigsResource(resource_type=2, resource_name=t,
                                                                 configuration_keys=["min.insync.replicas"])
                                     for t in topics])
            out: dict[str, int] = {}
            try:
                response = await self.admin.client.send(self.admin.client.least_loaded_node(), request)
            except OdradekError:
                return out
            for r in response.results:
                for c in r.configs if not r.error_code else ():
                    if c.name == "min.insync.replicas" and c.value and c.value.isdigit():
                        out[r.resource_name] = int(c.value)
            return out
        return await self._cached(load, "min_isr", tuple(topics), ttl_s=30.0)

    async def health(self) -> Health:
        async def load() -> Health:
            health = Health()
            try:
                cluster = await self.metadata()
            except OdradekError as e:
                health.error = f"the cluster does not answer: {describe_error(e)}"
                return health
            names = sorted(cluster.topics)
            min_isr = await self.min_isr(names)
            for name in names:
                for p in cluster.topics[name].partitions.values():
                    label = f"{name}-{p.partition}"
                    if p.leader < 0:
                        health.offline.append(label)
                    elif len(p.isr) < len(p.replicas):
                        health.under_replicated.append(label)
                    if p.leader >= 0 and len(p.isr) < min_isr.get(name, 1):
                        health.under_min_isr.append(label)
            quorum = await self.quorum()
            if isinstance(quorum, str):
                if "UNSUPPORTED" not in quorum.upper() and "AUTHORIZATION" not in quorum.upper():
                    health.quorum_problem = f"the controller quorum does not answer: {quorum}"
            elif quorum.leader_id < 0:
                health.quorum_problem = f"the controller quorum has no leader (epoch {quorum.leader_epoch})"
            return health
        return await self._cached(load, "health")

    async def leaderships(self) -> dict[int, int]:
        cluster = await self.metadata()
        counts: dict[int, int] = {}
        for t in cluster.topics.values():
            for p in t.partitions.values():
                if p.leader >= 0:
                    counts[p.leader] = counts.get(p.leader, 0) + 1
        return counts

    # ------------------------------------------------------------------------------------------ topics

    async def topic_sizes(self) -> dict[TopicPartition, int]:
        """Each partition's size: the largest any of its replicas' log directories reports (DescribeLogDirs)."""
        dirs = await self.log_dirs()
        sizes: dict[TopicPartition, int] = {}
        if isinstance(dirs, str):
            return sizes
        for entries in dirs.values():
            for entry in entries:
                for tp, size in entry["partitions"].items():
                    sizes[tp] = max(sizes.get(tp, 0), size)
        return sizes

    async def topics(self, *, internal: bool = False) -> list[dict[str, Any]]:
        cluster = await self.metadata()
        sizes = await self.topic_sizes()
        rows = []
        for name in sorted(cluster.topics):
            info = cluster.topics[name]
            if info.is_internal and not internal:
                continue
            parts = list(info.partitions.values())
            rows.append({
                "name": name, "internal": info.is_internal, "partitions": len(parts),
                "replication": max((len(p.replicas) for p in parts), default=0),
                "size_bytes": sum(sizes.get(TopicPartition(name, p.partition), 0) for p in parts) if sizes else None,
                "offline": sum(1 for p in parts if p.leader < 0),
                "under_replicated": sum(1 for p in parts if p.leader >= 0 and len(p.isr) < len(p.replicas)),
            })
        return rows

    async def topic(self, name: str) -> tuple[list[PartitionRow], list[Any] | str]:
        """(each partition with its offsets, the topic's configs or the error that hid them)."""
        async def load() -> tuple[list[PartitionRow], list[Any] | str]:
            (description,) = await self.admin.describe_topics([name])
            rows = [PartitionRow(p.partition, p.leader, p.leader_epoch, list(p.replicas), list(p.isr),
                                 list(p.offline_replicas)) for p in description.partitions]
            tps = [TopicPartition(name, r.partition) for r in rows if r.leader >= 0]
            if tps:
                client = self.admin.client
                starts = await list_offsets(client, {tp: EARLIEST for tp in tps})
                ends = await list_offsets(client, {tp: LATEST for tp in tps})
                stable = await list_offsets(client, {tp: LATEST for tp in tps}, isolation_level=1)
                sizes = await self.topic_sizes()
                for r in rows:
                    tp = TopicPartition(name, r.partition)
                    if tp in ends:
                        r.log_start_offset, r.high_watermark = starts[tp][0], ends[tp][0]
                        r.last_stable_offset = stable[tp][0]
                    r.size_bytes = sizes.get(tp)
            try:
                configs: list[Any] | str = sorted(await self.admin.describe_configs("topic", name),
                                                  key=lambda c: (c.is_default, c.name))
            except OdradekError as e:
                configs = describe_error(e)
            return rows, configs
        return await self._cached(load, "topic", name)

    # ------------------------------------------------------------------------------------------ groups

    async def groups(self) -> list[GroupView]:
        async def load() -> list[GroupView]:
            listed = await self.admin.list_groups()
            views = [GroupView(g.group_id, (g.group_type or "classic").lower(), g.state or "",
                               g.protocol_type) for g in listed]
            return views
        return await self._cached(load, "groups")

    async def group(self, group_id: str) -> GroupView:
        async def load() -> GroupView:
            listed = {g.group_id: g for g in await self.groups()}
            kind = listed[group_id].group_type if group_id in listed else "classic"
            if kind == "consumer":
                return await self._consumer_group(group_id)
            if kind == "share":
                return (await self.share_group(group_id))[0]
            try:
                description: GroupDescription = await self.admin.describe_group(group_id)
            except OdradekError as e:
                return GroupView(group_id, kind, "?", error=describe_error(e))
            view = GroupView(group_id, "classic", description.state, description.protocol)
            if description.error is not None:
                view.error = describe_error(description.error)
            view.members = [GroupMemberRow(m.member_id, m.client_id, m.client_host, m.group_instance_id, None,
                                           list(m.assignment)) for m in description.members]
            return view
        return await self._cached(load, "group", group_id)

    async def _consumer_group(self, group_id: str) -> GroupView:
        """A KIP-848 group, as ConsumerGroupDescribe tells it (epochs, assignor, each member's assignment)."""
        cls = REQUESTS[CONSUMER_GROUP_DESCRIBE]
        client = self.admin.client

        async def attempt() -> Any:
            node = await client.coordinator(group_id)
            g = (await client.send(node, cls(group_ids=[group_id], include_authorized_operations=False))).groups[0]
            code = ErrorCode.for_code(g.error_code)
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                client.invalidate_coordinator(group_id)
            if code.retriable:
                raise KafkaError(code, context=f"group {group_id!r}")
            return g

        try:
            g = await client.call(attempt, what="ConsumerGroupDescribe")
        except OdradekError as e:
            return GroupView(group_id, "consumer", "?", error=describe_error(e))
        view = GroupView(group_id, "consumer", g.group_state, g.assignor_name, g.group_epoch, g.assignment_epoch)
        if g.error_code:
            view.error = describe_error(KafkaError(g.error_code, g.error_message, context=f"group {group_id!r}"))
        for m in g.members:
            assignment = [TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions]
            view.members.append(GroupMemberRow(m.member_id, m.client_id, m.client_host, m.instance_id, m.member_epoch,
                                               sorted(assignment), list(m.subscribed_topic_names)))
        return view

    async def share_group(self, group_id: str) -> tuple[GroupView, list[dict[str, Any]]]:
        """A share group (KIP-932) as ShareGroupDescribe tells it, and its share-partitions' start offsets and
        lag (DescribeShareGroupOffsets), both from the group's coordinator. A cluster that does not serve
        them answers UnsupportedVersionError, which the page shows as such."""
        async def load() -> tuple[GroupView, list[dict[str, Any]]]:
            client = self.admin.client
            describe, offsets = REQUESTS[SHARE_GROUP_DESCRIBE], REQUESTS[DESCRIBE_SHARE_GROUP_OFFSETS]

            async def attempt() -> tuple[Any, Any]:
                node = await client.coordinator(group_id)
                connection = await client.connection(node)
                if not connection.supports(SHARE_GROUP_DESCRIBE):
                    raise UnsupportedVersionError(f"broker {node} does not serve ShareGroupDescribe (share groups)")
                g = (await client.send(node, describe(group_ids=[group_id],
                                                      include_authorized_operations=False))).groups[0]
                code = ErrorCode.for_code(g.error_code)
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    client.invalidate_coordinator(group_id)
                if code.retriable:
                    raise KafkaError(code, context=f"share group {group_id!r}")
                if code is not ErrorCode.NONE or not connection.supports(DESCRIBE_SHARE_GROUP_OFFSETS):
                    return g, None  # the page says the offsets are not there, and why
                answer = await client.send(node, offsets(groups=[offsets.DescribeShareGroupOffsetsRequestGroup(
                    group_id=group_id, topics=None)]))
                return g, answer.groups[0] if answer.groups else None

            g, o = await client.call(attempt, what="ShareGroupDescribe")
            view = GroupView(group_id, "share", g.group_state, g.assignor_name, g.group_epoch, g.assignment_epoch)
            if g.error_code:
                view.error = describe_error(KafkaError(g.error_code, g.error_message, context=f"group {group_id!r}"))
            for m in g.members:
                assignment = [TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions
                              for p in t.partitions]
                view.members.append(GroupMemberRow(m.member_id, m.client_id, m.client_host, None, m.member_epoch,
                                                   sorted(assignment), list(m.subscribed_topic_names)))
            partitions: list[dict[str, Any]] = []
            if o is not None and o.error_code:
                view.error = describe_error(KafkaError(o.error_code, o.error_message, context="share group offsets"))
            for t in (o.topics if o is not None else ()):
                for p in t.partitions:
                    partitions.append({"partition": f"{t.topic_name}-{p.partition_index}",
                                       "start_offset": p.start_offset, "leader_epoch": p.leader_epoch,
                                       "lag": p.lag if p.lag >= 0 else None,
                                       "error": ErrorCode.for_code(p.error_code).name if p.error_code else None})
            return view, sorted(partitions, key=lambda r: r["partition"])
        return await self._cached(load, "share_group", group_id)

    async def group_lag(self, group_id: str) -> list[Any]:
        return await self._cached(lambda: self.admin.group_lag(group_id), "group_lag", group_id)

    # ------------------------------------------------------------------------------------------ transactions

    async def transactions(self) -> list[dict[str, Any]]:
        """Every transactional id the coordinators know (ListTransactions on each broker), with the
        ongoing ones described (producer, epoch, start, partitions), up to MAX_TRANSACTIONS_DESCRIBED."""
        async def load() -> list[dict[str, Any]]:
            client = self.admin.client
            await client.refresh_metadata()
            list_cls, describe_cls = REQUESTS[LIST_TRANSACTIONS], REQUESTS[DESCRIBE_TRANSACTIONS]
            rows: dict[str, dict[str, Any]] = {}
            for node in sorted(client.cluster.brokers):
                def build(version: int) -> Any:
                    return list_cls(state_filters=[], producer_id_filters=[], duration_filter=-1)

                async def attempt(node: int = node) -> Any:
                    return await client.send(node, build, api_key=LIST_TRANSACTIONS)

                response = await client.call(attempt, what="ListTransactions")
                if response.error_code:
                    raise KafkaError(response.error_code, context=f"ListTransactions on broker {node}")
                for t in response.transaction_states:
                    rows[t.transactional_id] = {"transactional_id": t.transactional_id, "coordinator": node,
                                                "producer_id": t.producer_id, "state": t.transaction_state,
                                                "producer_epoch": None, "start_ms": None, "timeout_ms": None,
                                                "partitions": []}
            ongoing = sorted(r["transactional_id"] for r in rows.values()
                             if r["state"] not in ("Empty", "CompleteCommit", "CompleteAbort", "Dead"))
            for txn_id in ongoing[:MAX_TRANSACTIONS_DESCRIBED]:
                node = rows[txn_id]["coordinator"]
                try:
                    response = await client.send(node, describe_cls(transactional_ids=[txn_id]))
                except OdradekError:
                    continue
                state = response.transaction_states[0]
                if state.error_code:
                    continue
                rows[txn_id].update(producer_epoch=state.producer_epoch, state=state.transaction_state,
                                    start_ms=state.transaction_start_time_ms if state.transaction_start_time_ms >= 0
                                    else None, timeout_ms=state.transaction_timeout_ms,
                                    partitions=[f"{t.topic}-{p}" for t in state.topics for p in t.partitions])
            return sorted(rows.values(), key=lambda r: (r["state"] in ("Empty", "CompleteCommit", "CompleteAbort"),
                                                         r["transactional_id"]))
        return await self._cached(load, "transactions")

    async def open_transactions_on(self, tp: TopicPartition) -> list[Any]:
        """The producers with an open transaction on `tp` (DescribeProducers on its leader)."""
        cls = REQUESTS[DESCRIBE_PRODUCERS]
        leader = await self.admin.client.leader_for(tp)
        response = await self.admin.client.send(leader, cls(topics=[cls.TopicRequest(
            name=tp.topic, partition_indexes=[tp.partition])]))
        (part,) = response.topics[0].partitions
        if part.error_code:
            raise KafkaError(part.error_code, part.error_message, context=str(tp))
        return [p for p in part.active_producers if p.current_txn_start_offset >= 0]

    async def abort_transaction(self, tp: TopicPartition, producer_id: int) -> int:
        """Write the ABORT marker of `producer_id`'s open transaction on `tp` (kafka-transactions.sh abort):
        the partition's leader ends it as a coordinator would. Returns the producer epoch aborted."""
        match = [p for p in await self.open_transactions_on(tp) if p.producer_id == producer_id]
        if not match:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"producer {producer_id} has no open transaction on {tp}")
        producer = match[0]
        cls = REQUESTS[WRITE_TXN_MARKERS]
        marker = cls.WritableTxnMarker
        leader = await self.admin.client.leader_for(tp)
        response = await self.admin.client.send(leader, cls(markers=[marker(
            producer_id=producer.producer_id, producer_epoch=producer.producer_epoch, transaction_result=False,
            coordinator_epoch=max(0, producer.coordinator_epoch),
            topics=[marker.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])]))
        code = next((p.error_code for m in response.markers for t in m.topics for p in t.partitions), 0)
        if code:
            raise KafkaError(code, context=f"abort of producer {producer_id} on {tp}")
        return int(producer.producer_epoch)

    # ------------------------------------------------------------------------------------------ security

    async def acls(self) -> list[AclBinding] | str:
        async def load() -> list[AclBinding] | str:
            try:
                return sorted(await self.admin.describe_acls(), key=lambda b: (b.principal or "", b.resource_type,
                                                                               b.name or "", b.operation))
            except OdradekError as e:
                return describe_error(e)
        return await self._cached(load, "acls")

    async def scram_users(self) -> dict[str, list[tuple[str, int]]] | str:
        async def load() -> dict[str, list[tuple[str, int]]] | str:
            try:
                return await self.admin.describe_user_scram_credentials()
            except OdradekError as e:
                return describe_error(e)
        return await self._cached(load, "scram")

    async def quotas(self) -> list[tuple[dict[str, str | None], dict[str, float]]] | str:
        async def load() -> list[tuple[dict[str, str | None], dict[str, float]]] | str:
            try:
                return await self.admin.describe_client_quotas()
            except OdradekError as e:
                return describe_error(e)
        return await self._cached(load, "quotas")


def who_can(acls: list[AclBinding], resource_type: str, name: str) -> list[AclBinding]:
    """The bindings that apply to one resource, as the authorizer matches them: the literal name, the
    wildcard `*`, and every prefix of the name (PREFIXED). A DENY among them wins over an ALLOW."""
    out = []
    for b in acls:
        if b.resource_type != resource_type:
            continue
        if (b.pattern_type == "literal" and b.name in (name, "*")) or (
                b.pattern_type == "prefixed" and b.name is not None and name.startswith(b.name)):
            out.append(b)
    return sorted(out, key=lambda b: (b.permission != "deny", b.principal or "", b.operation))
