"""The admin client's view of the cluster and the CLI's rendering of it, from canned responses: DescribeQuorum
parsing (lag as kafka-metadata-quorum computes it, per version), version negotiation against a scripted
broker, and `topic describe`'s under-replicated / unavailable flags and filters (which one broker cannot
produce)."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from odradek.client.admin import (
    Admin,
    BrokerDescription,
    ClusterDescription,
    QuorumDescription,
    QuorumReplica,
    TopicDescription,
    quorum_from_response,
)
from odradek.client.cli import Output, _describe_quorum_or_reason, render_cluster, render_quorum, render_topics
from odradek.client.cluster import ClusterMetadata
from odradek.client.errors import KafkaError, UnsupportedVersionError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS, RESPONSES

from tests.harness.fake_broker import FakeBroker

DQ = RESPONSES[55]
PART = DQ.TopicData.PartitionData


def _state(replica_id: int, log_end_offset: int, fetch: int, caught_up: int, version: int):
    """A ReplicaState with only the fields `version` has (the codec refuses values a version cannot carry)."""
    state = PART.ReplicaState(replica_id=replica_id, log_end_offset=log_end_offset)
    if version >= 1:
        state.last_fetch_timestamp, state.last_caught_up_timestamp = fetch, caught_up
    if version >= 2:
        state.replica_directory_id = uuid.UUID(int=replica_id)
    return state


def _response(*, error_code: int = 0, partition_error: int = 0, leader_id: int = 1, version: int = 2) -> object:
    voters = [_state(1, 100, 5_000, 5_000, version), _state(2, 90, 4_990, 4_000, version),
              _state(3, 100, 4_995, 4_995, version)]
    observers = [_state(4, 50, 4_900, -1, version)]
    partition = PART(partition_index=0, error_code=partition_error, leader_id=leader_id, leader_epoch=7,
                     high_watermark=95, current_voters=voters, observers=observers)
    response = DQ(error_code=error_code,
                  topics=[DQ.TopicData(topic_name="__cluster_metadata", partitions=[partition])])
    if version >= 2:
        response.nodes = [DQ.Node(node_id=1, listeners=[DQ.Node.Listener(name="CONTROLLER", host="127.0.0.1",
                                                                          port=9093)])]
    return response


def _roundtrip(version: int) -> object:
    return DQ.decode(_response(version=version).encode(version), version)


def test_quorum_lag_is_the_leaders_log_end_offset_minus_the_replicas():
    quorum = quorum_from_response(_roundtrip(2))
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (1, 7, 95)
    assert [(v.replica_id, v.log_end_offset, v.lag) for v in quorum.voters] == [(1, 100, 0), (2, 90, 10), (3, 100, 0)]
    assert [(o.replica_id, o.lag, o.last_caught_up_timestamp_ms) for o in quorum.observers] == [(4, 50, None)]
    assert quorum.voters[1].last_fetch_timestamp_ms == 4_990 and quorum.voters[1].directory_id == uuid.UUID(int=2)
    assert quorum.max_follower_lag == 10
    assert quorum.max_follower_lag_time_ms == 1_000  # leader caught up at 5000, voter 2 at 4000
    assert [(n.node_id, n.endpoints) for n in quorum.nodes] == [(1, [("CONTROLLER", "127.0.0.1", 9093)])]


def test_older_versions_leave_out_timestamps_and_nodes():
    v0 = quorum_from_response(_roundtrip(0))
    assert all(v.last_fetch_timestamp_ms is None and v.last_caught_up_timestamp_ms is None for v in v0.voters)
    assert v0.nodes == [] and v0.max_follower_lag == 10
    assert v0.max_follower_lag_time_ms == -1  # the leader knows no timestamps before v1
    v1 = quorum_from_response(_roundtrip(1))
    assert v1.voters[0].last_fetch_timestamp_ms == 5_000 and v1.nodes == []


def test_max_follower_lag_time_is_zero_when_every_voter_is_caught_up():
    leader = QuorumReplica(1, 10, 0, 100, 100)
    quorum = QuorumDescription(1, 1, 10, [leader, QuorumReplica(2, 10, 0, None, None)], [])
    assert quorum.max_follower_lag == 0 and quorum.max_follower_lag_time_ms == 0
    assert QuorumDescription(-1, 0, 0, [], []).max_follower_lag_time_ms == -1


def test_quorum_errors_raise():
    with pytest.raises(KafkaError) as e:
        quorum_from_response(_response(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
    assert e.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not e.value.retriable
    with pytest.raises(KafkaError) as e:
        quorum_from_response(_response(partition_error=int(ErrorCode.NOT_LEADER_OR_FOLLOWER)))
    assert e.value.retriable
    empty = DQ(error_code=0, topics=[], nodes=[])
    with pytest.raises(KafkaError, match="__cluster_metadata-0"):
        quorum_from_response(empty)


class QuorumBroker(FakeBroker):
    """The scripted broker, also answering DescribeQuorum and DescribeCluster (v2: one fenced broker)."""

    def __init__(self, quorum_versions: tuple[int, int] | None = (0, 2), cluster_versions: tuple[int, int] = (0, 2)):
        supported = {k: REQUESTS[k].VALID_VERSIONS for k in (3, 18)}
        supported[60] = cluster_versions
        if quorum_versions is not None:
            supported[55] = quorum_versions
        super().__init__(supported)
        self.quorum_requests: list[object] = []

    def _answer(self, key: int, request):
        if key == 55:
            self.quorum_requests.append(request)
            return _response(version=self.versions[55])
        if key == 60:
            cls = RESPONSES[60]
            brokers = [cls.DescribeClusterBroker(broker_id=0, host="127.0.0.1", port=self.port, rack="r1")]
            if self.versions[60] >= 2:  # before v2 a fenced broker is left out
                brokers.append(cls.DescribeClusterBroker(broker_id=2, host="127.0.0.1", port=1, rack=None,
                                                         is_fenced=True))
            return cls(error_code=0, cluster_id="fake", controller_id=0, brokers=brokers)
        return super()._answer(key, request)


async def test_describe_quorum_negotiates_the_version_and_asks_for_the_metadata_partition():
    async with QuorumBroker((0, 1)) as fake:
        async with Admin(bootstrap_servers=fake.bootstrap) as admin:
            quorum = await admin.describe_quorum()
            cluster = await admin.describe_cluster()
    assert fake.versions[55] == 1 and quorum.voters[0].last_fetch_timestamp_ms == 5_000 and quorum.nodes == []
    (request,) = fake.quorum_requests
    assert [(t.topic_name, [p.partition_index for p in t.partitions]) for t in request.topics] == [
        ("__cluster_metadata", [0])]
    assert fake.versions[60] == 2
    assert [(b.node_id, b.rack, b.is_fenced) for b in cluster.brokers] == [(0, "r1", False), (2, None, True)]


async def test_describe_cluster_before_v2_knows_no_fenced_brokers():
    async with QuorumBroker(cluster_versions=(0, 1)) as fake:
        async with Admin(bootstrap_servers=fake.bootstrap) as admin:
            cluster = await admin.describe_cluster()
    assert fake.versions[60] == 1
    assert [(b.node_id, b.is_fenced) for b in cluster.brokers] == [(0, False)]


async def test_describe_quorum_on_a_broker_that_does_not_serve_it():
    async with QuorumBroker(None) as fake:
        async with Admin(bootstrap_servers=fake.bootstrap, default_api_timeout_ms=2_000) as admin:
            with pytest.raises(UnsupportedVersionError, match="DescribeQuorum"):
                await admin.describe_quorum()
            # `cluster describe` carries on without it.
            assert await _describe_quorum_or_reason(admin) == (None, "the broker does not serve DescribeQuorum")
    assert fake.calls[55] == 0


# ---------------------------------------------------------------------------------------------------
# Rendering


def _text(render, *args, fmt: str = "text", **kw) -> str:
    stream = io.StringIO()
    render(Output(fmt, stream), *args, **kw)
    return stream.getvalue()


def test_cluster_describe_without_a_quorum():
    desc = ClusterDescription("c1", 0, [BrokerDescription(0, "h0", 9092, "r1"),
                                        BrokerDescription(2, "h2", 9094, None, True)])
    text = _text(render_cluster, desc, None, "the broker does not serve DescribeQuorum")
    lines = text.splitlines()
    assert lines[0] == "cluster c1  controller 0"
    assert [line.split() for line in lines[1:4]] == [["BROKER", "ADDRESS", "RACK", "FENCED"],
                                                    ["0", "h0:9092", "r1", "no"], ["2", "h2:9094", "-", "yes"]]
    assert lines[-1] == "quorum: not available (the broker does not serve DescribeQuorum)"
    data = json.loads(_text(render_cluster, desc, None, "old broker", fmt="json"))
    assert data["quorum"] is None and data["quorum_error"] == "old broker"
    assert data["brokers"][1] == {"node_id": 2, "host": "h2", "port": 9094, "rack": None, "is_fenced": True}


def test_cluster_describe_with_a_quorum_lists_leader_followers_then_observers():
    quorum = quorum_from_response(_response(leader_id=3))
    desc = ClusterDescription("c1", 3, [BrokerDescription(0, "h0", 9092)])
    lines = _text(render_cluster, desc, quorum).splitlines()
    assert "quorum leader 3  epoch 7  high watermark 95  max follower lag 10" in lines  # voters only
    header = lines.index("NODE  ROLE      LOG END OFFSET  LAG")
    assert [line.split() for line in lines[header + 1:]] == [
        ["3", "leader", "100", "0"], ["1", "follower", "100", "0"], ["2", "follower", "90", "10"],
        ["4", "observer", "50", "50"]]
    data = json.loads(_text(render_cluster, desc, quorum, fmt="json"))["quorum"]
    assert [(v["node_id"], v["status"]) for v in data["voters"]] == [(1, "Follower"), (2, "Follower"), (3, "Leader")]
    assert data["observers"][0]["lag"] == 50


def test_cluster_quorum_status_and_replication_as_kafka_metadata_quorum():
    quorum = quorum_from_response(_response())
    status = _text(render_quorum, quorum, "c1", replication=False).splitlines()
    assert status[:6] == ["ClusterId:              c1", "LeaderId:               1", "LeaderEpoch:            7",
                          "HighWatermark:          95", "MaxFollowerLag:         10",
                          "MaxFollowerLagTimeMs:   1000"]
    assert status[6] == ('CurrentVoters:          [{"id": 1, "directoryId": "' + str(uuid.UUID(int=1))
                         + '", "endpoints": ["CONTROLLER://127.0.0.1:9093"]}, {"id": 2, "directoryId": "'
                         + str(uuid.UUID(int=2)) + '"}, {"id": 3, "directoryId": "' + str(uuid.UUID(int=3)) + '"}]')
    assert status[7].startswith('CurrentObservers:       [{"id": 4')
    rows = [line.split() for line in _text(render_quorum, quorum, "c1", replication=True).splitlines()]
    assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
                       "Status"]
    assert [(r[0], r[2], r[3], r[4], r[5], r[6]) for r in rows[1:]] == [
        ("1", "100", "0", "5000", "5000", "Leader"), ("2", "90", "10", "4990", "4000", "Follower"),
        ("3", "100", "0", "4995", "4995", "Follower"), ("4", "50", "50", "4900", "-1", "Observer")]
    human = _text(render_quorum, quorum, "c1", replication=True, human_readable=True, now_ms=6_000).splitlines()
    assert "1010 ms ago" in human[2] and "2000 ms ago" in human[2]  # voter 2: fetched at 4990, caught up at 4000
    assert human[4].split()[-3:] == ["ago", "-1", "Observer"]


def _metadata_topics() -> tuple[list[TopicDescription], set[int]]:
    """Brokers 1-3 live; partition 0 healthy, 1 under-replicated, 2 offline (no leader, replica 4 offline),
    3 led by broker 4, which is not live."""
    md = RESPONSES[3]
    P = md.MetadataResponseTopic.MetadataResponsePartition
    partitions = [
        P(error_code=0, partition_index=0, leader_id=1, leader_epoch=3, replica_nodes=[1, 2, 3], isr_nodes=[1, 2, 3]),
        P(error_code=0, partition_index=1, leader_id=2, leader_epoch=4, replica_nodes=[2, 3, 1], isr_nodes=[2, 3]),
        P(error_code=int(ErrorCode.LEADER_NOT_AVAILABLE), partition_index=2, leader_id=-1, leader_epoch=5,
          replica_nodes=[4], isr_nodes=[4], offline_replicas=[4]),
        P(error_code=0, partition_index=3, leader_id=4, leader_epoch=1, replica_nodes=[4, 1], isr_nodes=[4, 1]),
    ]
    response = md(brokers=[md.MetadataResponseBroker(node_id=n, host="h", port=9090 + n) for n in (1, 2, 3)],
                  cluster_id="c1", controller_id=1,
                  topics=[md.MetadataResponseTopic(error_code=0, name="orders", partitions=partitions),
                          md.MetadataResponseTopic(error_code=0, name="fine", partitions=partitions[:1])])
    response = md.decode(response.encode(12), 12)
    cluster = ClusterMetadata()
    cluster.update(response, None)
    return [TopicDescription(name, cluster.topics[name].topic_id, False,
                             [cluster.topics[name].partitions[p] for p in sorted(cluster.topics[name].partitions)])
            for name in ("orders", "fine")], set(cluster.brokers)


def test_topic_describe_flags_under_replicated_and_offline_partitions():
    descs, live = _metadata_topics()
    text = _text(render_topics, descs, live, starts={}, ends={})
    lines = text.splitlines()
    assert lines[1].split() == ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE", "STATE", "START", "END"]
    assert [line.split() for line in lines[2:6]] == [
        ["0", "1", "3", "1,2,3", "1,2,3", "-", "ok", "-", "-"],
        ["1", "2", "4", "2,3,1", "2,3", "-", "under-replicated", "-", "-"],
        ["2", "-1", "5", "4", "4", "4", "offline", "-", "-"],
        ["3", "4", "1", "4,1", "4,1", "-", "offline", "-", "-"],
    ]
    data = json.loads(_text(render_topics, descs, live, fmt="json"))
    flags = [(p["partition"], p["under_replicated"], p["unavailable"], p["offline_replicas"])
             for p in data[0]["partitions"]]
    assert flags == [(0, False, False, []), (1, True, False, []), (2, False, True, [4]), (3, False, True, [])]


def test_topic_describe_filters_as_kafka_topics():
    descs, live = _metadata_topics()

    def shown(**filters) -> list[tuple[str, list[int]]]:
        data = json.loads(_text(render_topics, descs, live, fmt="json", **filters))
        return [(t["topic"], [p["partition"] for p in t["partitions"]]) for t in data]

    assert shown() == [("orders", [0, 1, 2, 3]), ("fine", [0])]
    assert shown(under_replicated=True) == [("orders", [1])]
    assert shown(unavailable=True) == [("orders", [2, 3])]
    assert shown(under_replicated=True, unavailable=True) == [("orders", [1, 2, 3])]
    text = _text(render_topics, descs, live, under_replicated=True)
    assert "fine" not in text and [line.split()[0] for line in text.splitlines()[2:]] == ["1"]


def test_topic_describe_shows_eligible_leader_replicas_when_a_partition_has_some():
    import dataclasses

    descs, live = _metadata_topics()
    orders = descs[0]
    orders.partitions[1] = dataclasses.replace(orders.partitions[1], elr=[1])
    orders.partitions[2] = dataclasses.replace(orders.partitions[2], last_known_elr=[4])
    lines = _text(render_topics, [orders], live, starts={}, ends={}).splitlines()
    assert lines[1].split() == ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "ELR", "LAST-KNOWN-ELR", "OFFLINE",
                                "STATE", "START", "END"]
    assert [line.split()[:7] for line in lines[2:5]] == [
        ["0", "1", "3", "1,2,3", "1,2,3", "-", "-"],
        ["1", "2", "4", "2,3,1", "2,3", "1", "-"],
        ["2", "-1", "5", "4", "4", "-", "4"],
    ]
    data = json.loads(_text(render_topics, [orders], live, fmt="json"))
    assert [(p["elr"], p["last_known_elr"]) for p in data[0]["partitions"]][:3] == [([], []), ([1], []), ([], [4])]
    # Without any, the table keeps its usual columns.
    assert "ELR" not in _text(render_topics, [descs[1]], live, starts={}, ends={})
