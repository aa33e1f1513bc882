"""Several log directories per broker (JBOD): three nodes in one process, each with `log.dirs=a,b`.

  * kafka-python's describe_log_dirs sees both directories of every broker, and the replicas spread over
    them; its alter_replica_log_dirs moves a replica to the other directory while librdkafka writes to it
    (acks=all): the future replica catches up, is swapped in, and the three replicas' logs stay identical;
  * an I/O error in one directory (injected: the disk of a test cannot be made to fail for root) takes that
    directory's replicas offline on that broker only: the broker tells the controller, leadership moves to
    another broker, the producer carries on, and every acknowledged record is read back. The broker keeps
    serving its other directory, and DescribeLogDirs shows the failed one with KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest, DescribeLogDirsRequest
from odradek.protocol.records import build_batch
from odradek.storage.names import TopicPartition

from tests.harness.inprocess import active, cluster_configs, until
from tests.harness.replicated import FAST, PARTITIONS, TOPIC, assert_identical, consume, in_sync, produce

pytestmark = pytest.mark.timeout(180)


def jbod_configs(tmp_path):
    _, configs = cluster_configs(tmp_path, **FAST)
    out = []
    for config in configs:
        first = config.data_dirs[0]
        out.append(config.model_copy(update={"log_dirs": (first, first + "-b")}))
    return out


async def describe(node, version: int = 4):
    conn = NodeConnection(node.node_id, "127.0.0.1", node.bound_port)
    try:
        return await conn.request(DescribeLogDirsRequest(topics=None), version)
    finally:
        await conn.close()


async def start(tmp_path):
    nodes = [Broker(c) for c in jbod_configs(tmp_path)]
    await asyncio.gather(*(b.start() for b in nodes))
    await until(lambda: len(active(nodes)) == 1, what="an active controller")
    await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
    conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
    created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
        CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                           assignments=[], configs=[]),
    ]), 7)
    await conn.close()
    assert created.topics[0].error_code == 0, created
    await until(lambda: in_sync(nodes, 3), what="the topic's replicas on every broker")
    return nodes


async def test_replicas_spread_over_directories_and_move_between_them_while_written(tmp_path):
    from kafka import TopicPartitionReplica
    from kafka.admin import KafkaAdminClient

    nodes = await start(tmp_path)
    try:
        bootstrap = f"127.0.0.1:{nodes[0].bound_port}"
        for node in nodes:
            result = await describe(node)
            assert [r.error_code for r in result.results] == [0, 0]
            counts = sorted(sum(len(t.partitions) for t in r.topics if t.name == TOPIC) for r in result.results)
            assert counts == [1, 2]  # three partitions over two directories: least-loaded placement
        # (built and closed in a thread: the brokers answer on this event loop)
        admin = await asyncio.to_thread(KafkaAdminClient, bootstrap_servers=bootstrap, request_timeout_ms=20000)
        try:
            described = await asyncio.to_thread(admin.describe_log_dirs)
            assert len(described) == 3 and described  # every broker answered, through a real client

            node = nodes[1]
            tp = TopicPartition(TOPIC, 0)
            source = node.log_manager.dir_of(tp)
            target = next(d for d in node.log_manager.dirs if d is not source)
            first = [b"before-%d" % i for i in range(300)]
            assert await asyncio.to_thread(produce, bootstrap, first) == []
            # Slow the mover down so that the move spans the writes below.
            import odradek.broker.log_dirs as log_dirs

            log_dirs.MOVE_STEP_BYTES = 256
            during: list[bytes] = [b"during-%d" % i for i in range(600)]
            errors: list[str] = []
            writer = threading.Thread(target=lambda: errors.extend(produce(bootstrap, during)))
            writer.start()
            answer = await asyncio.to_thread(
                admin.alter_replica_log_dirs, {TopicPartitionReplica(TOPIC, 0, node.node_id): target.path})
            assert [getattr(e, "errno", 0) for e in answer.values()] == [0], answer
            await asyncio.to_thread(writer.join)
            assert errors == []
            await until(lambda: node.log_manager.dir_of(tp) is target and not node.log_manager.future_logs,
                        what="the move to finish")
            assert node.log_dirs.moves_completed == 1
            result = await describe(node)
            where = {r.log_dir: {(t.name, p.partition_index, p.is_future_key) for t in r.topics for p in t.partitions}
                     for r in result.results}
            assert (TOPIC, 0, False) in where[target.path] and (TOPIC, 0, False) not in where[source.path]
            await until(lambda: in_sync(nodes, 3), what="replicas in sync after the move")
            assert assert_identical(nodes, 3) == len(first) + len(during)
            assert sorted(await asyncio.to_thread(consume, bootstrap, len(first) + len(during))) == sorted(first + during)
            # Errors as Kafka answers them: an unknown directory, a replica not on this broker.
            bad = await asyncio.to_thread(
                admin.alter_replica_log_dirs, {TopicPartitionReplica(TOPIC, 1, node.node_id): "/nowhere"})
            assert [getattr(e, "errno", None) for e in bad.values()] == [ErrorCode.LOG_DIR_NOT_FOUND], bad
        finally:
            await asyncio.to_thread(admin.close)
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


async def test_a_failed_directory_takes_its_replicas_offline_and_leadership_moves(tmp_path):
    nodes = await start(tmp_path)
    try:
        bootstrap = f"127.0.0.1:{nodes[0].bound_port}"
        tp = TopicPartition(TOPIC, 0)
        failing = next(b for b in nodes if b.data.get_partition(tp).is_leader)
        bad_dir = failing.log_manager.dir_of(tp)
        in_bad = sorted(t for t in failing.log_manager.logs if failing.log_manager.dir_of(t) is bad_dir and t.topic == TOPIC)
        others = [t for t in (TopicPartition(TOPIC, i) for i in range(PARTITIONS)) if t not in in_bad]
        first = [b"before-%d" % i for i in range(150)]
        assert await asyncio.to_thread(produce, bootstrap, first) == []

        def broken_disk(*_args, **_kwargs):
            raise OSError(errno.EIO, "Input/output error")

        for t in in_bad:  # every log of that directory fails its next write, as a dead disk would
            failing.data.get_partition(t).log.append = broken_disk
            failing.data.get_partition(t).log.append_as_follower = broken_disk

        second = [b"after-%d" % i for i in range(300)]
        assert await asyncio.to_thread(produce, bootstrap, second) == []  # retried to the new leaders
        await until(lambda: not bad_dir.online, what="the directory offline")
        for t in in_bad:
            await until(lambda t=t: all(
                b.metadata.image.topics_by_name[TOPIC].partitions[t.partition].leader != failing.node_id
                and failing.node_id not in b.metadata.image.topics_by_name[TOPIC].partitions[t.partition].isr
                for b in nodes), what=f"{t} led elsewhere, without the failed replica")
            assert failing.data.get_partition(t) is None and t in failing.data.offline_partitions
        for t in others:  # the broker's other directory goes on serving
            assert failing.data.get_partition(t) is not None
        result = await describe(failing)
        by_path = {r.log_dir: r.error_code for r in result.results}
        assert by_path[bad_dir.path] == ErrorCode.KAFKA_STORAGE_ERROR and sorted(by_path.values()) == [0, 56]
        values = await asyncio.to_thread(consume, bootstrap, len(first) + len(second))
        assert sorted(set(values)) == sorted(first + second)  # every acknowledged record (at least once)
        assert os.path.isdir(bad_dir.path)  # left as it was: its data stays for the operator
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


async def test_a_failed_directory_on_a_lone_broker_takes_only_its_partitions_offline(tmp_path):
    from odradek.broker.testing import broker_config

    a, b = tmp_path / "a", tmp_path / "b"
    broker = Broker(broker_config(a, **{"log.dirs": f"{a},{b}"}))
    await broker.start()
    try:
        conn = NodeConnection(1, "127.0.0.1", broker.bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="lone", num_partitions=2, replication_factor=1, assignments=[],
                                               configs=[])]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0
        await until(lambda: all(broker.data.get_partition(TopicPartition("lone", i)) is not None for i in (0, 1)),
                    what="both partitions")
        manager = broker.log_manager
        dirs = {i: manager.dir_of(TopicPartition("lone", i)) for i in (0, 1)}
        assert dirs[0] is not dirs[1]  # one in each directory
        # The broken one is the partition outside the metadata log directory (the first of log.dirs): that
        # directory failing stops the node, as in Kafka (broker/log_dirs.py).
        bad = next(i for i in (0, 1) if dirs[i].path != manager.metadata_log_dir)
        good = 1 - bad
        broken = TopicPartition("lone", bad)

        def broken_disk(*_args, **_kwargs):
            raise OSError(errno.EIO, "Input/output error")

        broker.data.get_partition(broken).log.append = broken_disk
        results = {}
        for i in (0, 1):
            broker.data.append_records({TopicPartition("lone", i): bytearray(build_batch([(None, b"x", None, 0)]))},
                                       required_acks=1, timeout_ms=1000, now_ms=broker.now_ms(), respond=results.update)
        assert results[TopicPartition("lone", good)].error_code == 0
        assert results[broken].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        await until(lambda: broker.metadata.image.topics_by_name["lone"].partitions[bad].leader == -1,
                    what="the controller took the partition's leader away")
        assert broker.metadata.image.topics_by_name["lone"].partitions[good].leader == 1
        assert not dirs[bad].online and dirs[good].online
        assert broker.log_dirs.unreported == set()
    finally:
        await broker.stop()
