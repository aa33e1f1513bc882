"""A cluster of one answers from its metadata image and the listener a request came in on.

An in-process broker (one node, its own controller: the only voter of its quorum) is given what a cluster would show it: a second broker
registered through the controller channel (as a real one would register with the controller) and topics
whose replicas sit on both. Then, on real sockets:

  * Metadata and DescribeCluster list every registered broker, each at its endpoint for the listener the
    request arrived on, and the partitions' leaders, replicas, ISR and offline replicas as the image says;
  * Produce and Fetch on a partition another broker leads answer NOT_LEADER_OR_FOLLOWER with the leader
    and its endpoint (KIP-951), which only the codec path can say: the fast paths decline to it;
  * a Fetch with a replica id is a follower's: it reads to the log end, and its position moves the high
    watermark, which releases a waiting acks=all produce and what consumers may read;
  * the partitions and the logs follow the image across a restart, the same road as a live change.
"""

from __future__ import annotations

import pytest

from odradek.broker.controller_channel import NewTopic
from odradek.broker.testing import BrokerThread, RawClient
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    DescribeClusterRequest,
    FetchRequest,
    FindCoordinatorRequest,
    MetadataRequest,
    ProduceRequest,
)
from odradek.protocol.records import build_batch
from odradek.metadata.image import Endpoint
from odradek.storage.names import TopicPartition

pytestmark = pytest.mark.timeout(120)

PTopic = ProduceRequest.TopicProduceData
PPart = PTopic.PartitionProduceData
FTopic = FetchRequest.FetchTopic
FPart = FTopic.FetchPartition


def register_second_broker(thread: BrokerThread) -> None:
    def register():
        channel = thread.broker.controller
        channel.register_broker(2, [Endpoint("INTERNAL", "b2-internal", 9201), Endpoint("EXTERNAL", "b2-external", 9202)],
                                rack="r2", cluster_id=None).result()
        created = channel.create_topics([
            NewTopic("t", assignments={0: [2, 1], 1: [1, 2], 2: [2, 1]}), NewTopic("u", assignments={0: [2]}),
        ]).result()
        assert not any(isinstance(c, Exception) for c in created), created

    thread.call(register)


@pytest.fixture
def node(tmp_path):
    overrides = {
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "advertised.listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://localhost:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "broker.rack": "r1",
    }
    with BrokerThread(tmp_path, **overrides) as thread:
        register_second_broker(thread)
        yield thread


def ports(thread: BrokerThread) -> dict[str, int]:
    return {name: port for name, _host, port in thread.broker.bound}


def batch(value: bytes) -> bytes:
    return build_batch([(b"k", value, [], 1_700_000_000_000)])


def produce(index: int, value: bytes, acks: int = -1, topic: str = "t") -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=10_000,
                          topic_data=[PTopic(name=topic, partition_data=[PPart(index=index, records=batch(value))])])


def fetch(index: int, offset: int, *, replica_id: int = -1, wait_ms: int = 0, topic: str = "t", topic_id=None) -> FetchRequest:
    return FetchRequest(replica_id=replica_id, max_wait_ms=wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        topics=[FTopic(topic=topic, topic_id=topic_id, partitions=[FPart(partition=index, fetch_offset=offset,
                                                                    partition_max_bytes=1 << 20)])])


def test_metadata_lists_every_broker_at_the_listeners_endpoint(node):
    for listener, own_host, other_host in (("INTERNAL", "127.0.0.1", "b2-internal"), ("EXTERNAL", "localhost", "b2-external")):
        with RawClient(f"127.0.0.1:{ports(node)[listener]}") as client:
            md = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 12)
            brokers = {b.node_id: (b.host, b.port, b.rack) for b in md.brokers}
            assert brokers == {1: (own_host, ports(node)[listener], "r1"),
                               2: (other_host, 9201 if listener == "INTERNAL" else 9202, "r2")}
            assert md.controller_id == 1
            (topic,) = md.topics
            parts = {p.partition_index: (p.leader_id, p.replica_nodes, p.isr_nodes, p.offline_replicas) for p in topic.partitions}
            assert parts == {0: (2, [2, 1], [2, 1], []), 1: (1, [1, 2], [1, 2], []), 2: (2, [2, 1], [2, 1], [])}
            cluster = client.request(DescribeClusterRequest(include_cluster_authorized_operations=False), 2)
            assert {b.broker_id: (b.host, b.is_fenced) for b in cluster.brokers} == {1: (own_host, False), 2: (other_host, False)}
            found = client.request(FindCoordinatorRequest(key="g"), 3)
            leader = node.call(lambda: _offsets_leader(node, "g"))  # offsets partitions spread over both brokers
            assert (found.error_code, found.node_id, found.host) == (0, leader, {1: own_host, 2: other_host}[leader])


def test_a_partition_led_elsewhere_answers_with_its_leader(node):
    with RawClient(f"127.0.0.1:{ports(node)['EXTERNAL']}") as client:
        for topic, index in (("u", 0), ("t", 2)):  # u-0: not a replica here; t-2: a follower here
            response = client.request(produce(index, b"x", topic=topic), 12)
            part = response.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 0)
            assert [(e.node_id, e.host, e.port, e.rack) for e in response.node_endpoints] == [(2, "b2-external", 9202, "r2")]
            topic_id = node.call(lambda topic=topic: node.broker.metadata.image.topics_by_name[topic].topic_id)
            fetched = client.request(fetch(index, 0, topic=topic, topic_id=topic_id), 16)
            part = fetched.responses[0].partitions[0]
            if topic == "t":  # an in-sync follower serves a consumer's Fetch v11+ (KIP-392); not v10
                assert part.error_code == 0
                fetched = client.request(fetch(index, 0, topic=topic, topic_id=topic_id), 10)
                assert fetched.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                continue
            assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert part.current_leader.leader_id == 2 and part.records in (b"", [])
            assert [(e.node_id, e.host) for e in fetched.node_endpoints] == [(2, "b2-external")]
        # v9: no place for hints; the error alone, from the same path
        older = client.request(produce(2, b"x"), 9)
        assert older.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_followers_fetch_moves_the_high_watermark(node):
    bootstrap = f"127.0.0.1:{ports(node)['INTERNAL']}"
    with RawClient(bootstrap) as producer, RawClient(bootstrap) as follower, RawClient(bootstrap) as consumer:
        producer.send(produce(1, b"replicated"), 12)  # acks=all, ISR {1, 2}: waits for broker 2
        first = follower.request(fetch(1, 0, replica_id=2), 11)
        data = first.responses[0].partitions[0]
        assert data.error_code == 0 and data.high_watermark == 0 and len(bytes(_records(data.records))) > 0
        visible = consumer.request(fetch(1, 0), 11).responses[0].partitions[0]
        assert visible.high_watermark == 0 and not _records(visible.records)  # consumers read below the HW only
        caught_up = follower.request(fetch(1, 1, replica_id=2), 11).responses[0].partitions[0]
        assert caught_up.error_code == 0
        acked = producer.receive().responses[0].partition_responses[0]
        assert (acked.error_code, acked.base_offset) == (0, 0)
        visible = consumer.request(fetch(1, 0), 11).responses[0].partitions[0]
        assert visible.high_watermark == 1 and _records(visible.records)
        # A replica id that is not a replica of the partition is refused.
        stranger = follower.request(fetch(1, 0, replica_id=7), 11).responses[0].partitions[0]
        assert stranger.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_hosting_follows_the_image_across_a_restart(tmp_path):
    overrides = {
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
    }
    with BrokerThread(tmp_path, **overrides) as thread:
        register_second_broker(thread)
        before = thread.call(lambda: _hosting(thread))
    with BrokerThread(tmp_path, **overrides) as thread:
        after = thread.call(lambda: _hosting(thread))
    assert before == {0: (2, False), 1: (1, True), 2: (2, False)}
    # The graceful stop was a controlled shutdown: with broker 2 alive in the image, the controller moved
    # the leadership of t-1 to it (its other ISR member), and the restarted node follows that.
    assert after == {0: (2, False), 1: (2, False), 2: (2, False)}


def _offsets_leader(thread: BrokerThread, group: str) -> int:
    partition = thread.broker.groups.partition_for(group)
    return thread.broker.metadata.image.topics_by_name["__consumer_offsets"].partitions[partition].leader


def _hosting(thread: BrokerThread) -> dict:
    data = thread.broker.data
    assert data.get_partition(TopicPartition("u", 0)) is None  # no replica here
    return {i: (p.leader_id, p.is_leader) for i in (0, 1, 2) if (p := data.get_partition(TopicPartition("t", i)))}


def _records(records) -> bytes:
    if isinstance(records, (bytes, bytearray, memoryview)):
        return bytes(records)
    return b"".join(bytes(r) for r in records or ())
