"""The admin client against a real broker: topics, partitions, configs, records, cluster, groups and offsets."""

from __future__ import annotations

import uuid

import pytest

from odradek.client import Admin, Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition
from odradek.client.errors import KafkaError


def _name(prefix: str = "a") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_topic_lifecycle(broker):
    name, other = _name(), _name()
    async with Admin(bootstrap_servers=broker.bootstrap) as admin:
        results = await admin.create_topics([NewTopic(name, 3, 1, {"retention.ms": "3600000"}), NewTopic(other, 1)])
        assert results == {name: None, other: None}
        again = await admin.create_topics([NewTopic(name, 1)])
        assert again[name].code.name == "TOPIC_ALREADY_EXISTS"
        await admin._wait_for_topic(name, present=True)
        assert {name, other} <= set(await admin.list_topics())
        (desc,) = await admin.describe_topics([name])
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        assert all(p.leader >= 0 and p.replicas for p in desc.partitions)
        assert (await admin.create_partitions({name: 5}))[name] is None
        await admin._wait_for_topic(name, present=True)
        (desc,) = await admin.describe_topics([name])
        assert len(desc.partitions) == 5
        shrink = await admin.create_partitions({name: 2})
        assert shrink[name].code.name == "INVALID_PARTITIONS"
        deleted = await admin.delete_topics([name, _name("missing")])
        assert deleted[name] is None
        assert [e.code.name for k, e in deleted.items() if k != name] == ["UNKNOWN_TOPIC_OR_PARTITION"]
        assert name not in await admin.list_topics()
        with pytest.raises(KafkaError):
            await admin.describe_topics([name])


async def test_topic_configs(broker):
    name = _name()
    async with Admin(bootstrap_servers=broker.bootstrap) as admin:
        await admin.create_topic(name, 1, configs={"retention.ms": "3600000"})
        entries = {e.name: e for e in await admin.describe_configs("topic", name)}
        assert entries["retention.ms"].value == "3600000" and not entries["retention.ms"].is_default
        assert entries["cleanup.policy"].is_default
        await admin.alter_configs("topic", name, {"cleanup.policy": "compact", "retention.ms": None})
        entries = {e.name: e for e in await admin.describe_configs("topic", name, ["cleanup.policy", "retention.ms"])}
        assert entries["cleanup.policy"].value == "compact" and entries["cleanup.policy"].source == "dynamic_topic"
        assert entries["retention.ms"].is_default
        with pytest.raises(KafkaError):
            await admin.alter_configs("topic", name, {"cleanup.policy": "sideways"})
        broker_configs = await admin.describe_configs("broker", "1")
        assert any(e.name == "num.partitions" for e in broker_configs)


async def test_delete_records_cluster_and_log_dirs(broker):
    name = _name()
    tp = TopicPartition(name, 0)
    async with Admin(bootstrap_servers=broker.bootstrap) as admin:
        await admin.create_topic(name, 1)
        async with Producer(bootstrap_servers=broker.bootstrap) as producer:
            for i in range(20):
                await producer.send(name, str(i))
            await producer.flush()
        assert await admin.delete_records({tp: 12}) == {tp: 12}
        assert await admin.beginning_offsets([tp]) == {tp: 12}
        assert await admin.end_offsets([tp]) == {tp: 20}
        cluster = await admin.describe_cluster()
        assert cluster.cluster_id and [b.node_id for b in cluster.brokers] == [1]
        assert cluster.controller_id == 1
        dirs = await admin.describe_log_dirs()
        sizes = {tp_: size for d in dirs[1] for tp_, size in d["partitions"].items()}
        assert sizes[tp] > 0


async def test_groups_offsets_lag_and_reset(broker):
    topic, group = _name(), _name("g")
    tps = [TopicPartition(topic, p) for p in range(2)]
    async with Admin(bootstrap_servers=broker.bootstrap) as admin:
        await admin.create_topic(topic, 2)
        async with Producer(bootstrap_servers=broker.bootstrap) as producer:
            for i in range(20):
                await producer.send(topic, str(i), partition=i % 2, timestamp_ms=5_000 + i)
            await producer.flush()
        async with Consumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False) as c:
            c.assign(tps)
            await c.commit({tps[0]: OffsetAndMetadata(4), tps[1]: OffsetAndMetadata(10)})
        assert group in [g.group_id for g in await admin.list_groups()]
        description = await admin.describe_group(group)
        assert description.state in ("Empty", "Stable") and description.members == []
        committed = await admin.list_group_offsets(group)
        assert {tp: om.offset for tp, om in committed.items()} == {tps[0]: 4, tps[1]: 10}
        lag = {(r.topic, r.partition): (r.committed, r.end_offset, r.lag) for r in await admin.group_lag(group)}
        assert lag == {(topic, 0): (4, 10, 6), (topic, 1): (10, 10, 0)}
        assert await admin.reset_group_offsets(group, tps, to="earliest", dry_run=True) == {tps[0]: 0, tps[1]: 0}
        assert (await admin.list_group_offsets(group))[tps[0]].offset == 4
        assert await admin.reset_group_offsets(group, tps, to="latest") == {tps[0]: 10, tps[1]: 10}
        assert await admin.reset_group_offsets(group, tps, to="offset", offset=3) == {tps[0]: 3, tps[1]: 3}
        assert await admin.reset_group_offsets(group, tps, to="shift", shift=-2) == {tps[0]: 1, tps[1]: 1}
        # Partition 0 holds even records (timestamps 5000, 5002, ...); 5007 -> offset 4 there, 3 in partition 1.
        assert await admin.reset_group_offsets(group, tps, to="timestamp", timestamp_ms=5_007) == {tps[0]: 4, tps[1]: 3}
        assert (await admin.delete_groups([group])) == {group: None}
        assert group not in [g.group_id for g in await admin.list_groups()]
        missing = await admin.delete_groups([group])
        assert missing[group].code.name == "GROUP_ID_NOT_FOUND"
