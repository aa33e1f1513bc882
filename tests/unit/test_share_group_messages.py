"""The share-group messages (KIP-932): golden bytes built by hand from Kafka's JSON, and what is advertised.

Every version of every share API is already round-tripped by test_codec_roundtrip (it iterates REQUESTS and
RESPONSES); these vectors pin the field ORDER and flexible encodings, which a round trip of a wrong schema
would not catch. Each vector is written field by field from ShareFetchRequest.json & co (body only, no
header): compact strings and arrays carry length + 1 as an unsigned varint, every struct ends with its
tagged-field count (0 here).
"""

from __future__ import annotations

import uuid

import pytest

from odradek.broker.handlers import BROKER, CONTROLLER, advertised_versions, load_handlers
from odradek.protocol.codec import decode, encode
from odradek.protocol.messages import (
    DATA_CLASSES,
    REQUESTS,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)

TOPIC = uuid.UUID(bytes=bytes(range(16)))
TOPIC_HEX = bytes(range(16)).hex()
_FetchPart = ShareFetchResponse.ShareFetchableTopicResponse.PartitionData
_AckPart = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse.PartitionData
SHARE_KEYS = {76, 77, 78, 79, 83, 84, 85, 86, 87, 90, 91, 92}


def _hex(*parts: str) -> bytes:
    return bytes.fromhex("".join(p.replace(" ", "") for p in parts))


def test_share_fetch_request_v2_golden():
    msg = ShareFetchRequest(
        group_id="g", member_id="m", share_session_epoch=1, max_wait_ms=500, min_bytes=1,
        max_records=500, batch_size=500, share_acquire_mode=1,
        topics=[ShareFetchRequest.FetchTopic(topic_id=TOPIC, partitions=[
            ShareFetchRequest.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=[
                ShareFetchRequest.FetchTopic.FetchPartition.AcknowledgementBatch(first_offset=5, last_offset=7, acknowledge_types=[1]),
            ]),
        ])],
    )
    expected = _hex(
        "02 67",          # group_id "g"
        "02 6d",          # member_id "m"
        "00000001",       # share_session_epoch
        "000001f4",       # max_wait_ms 500
        "00000001",       # min_bytes
        "7fffffff",       # max_bytes (default)
        "000001f4",       # max_records (v1+)
        "000001f4",       # batch_size (v1+)
        "01",             # share_acquire_mode (v2+): record-limit
        "00",             # is_renew_ack (v2+, KIP-1222): false
        "02", TOPIC_HEX,  # topics[1].topic_id
        "02 00000000",    # partitions[1].partition_index; no partition_max_bytes after v0
        "02 0000000000000005 0000000000000007 02 01 00",  # one ack batch [5..7] ACCEPT, its tags
        "00 00",          # partition tags, topic tags
        "01",             # forgotten_topics_data: empty
        "00",             # top-level tags
    )
    assert encode(msg, 2) == expected
    assert decode(ShareFetchRequest, expected, 2) == msg
    # v1 has the same layout without share_acquire_mode and is_renew_ack.
    v1 = expected[:28] + expected[30:]
    msg.share_acquire_mode = 0
    assert encode(msg, 1) == v1
    # Kafka 4.4's Java client sends v2 with is_renew_ack: the byte after share_acquire_mode.
    renew = expected[:29] + b"\x01" + expected[30:]
    assert decode(ShareFetchRequest, renew, 2).is_renew_ack is True


def test_share_fetch_response_v2_golden():
    msg = ShareFetchResponse(
        throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=30000,
        responses=[ShareFetchResponse.ShareFetchableTopicResponse(topic_id=TOPIC, partitions=[
            _FetchPart(
                partition_index=3, error_code=0, acknowledge_error_code=121,
                current_leader=_FetchPart.LeaderIdAndEpoch(leader_id=1, leader_epoch=4),
                records=None,
                acquired_records=[_FetchPart.AcquiredRecords(first_offset=10, last_offset=19, delivery_count=2)],
            ),
        ])],
        node_endpoints=[ShareFetchResponse.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)],
    )
    expected = _hex(
        "00000000",       # throttle_time_ms
        "0000",           # error_code
        "00",             # error_message null
        "00007530",       # acquisition_lock_timeout_ms 30000
        "02", TOPIC_HEX,  # responses[1].topic_id
        "02 00000003",    # partitions[1].partition_index
        "0000 00",        # error_code, error_message null
        "0079 00",        # acknowledge_error_code INVALID_RECORD_STATE (121), message null
        "00000001 00000004 00",  # current_leader {leader_id, leader_epoch}, its tags
        "00",             # records null
        "02 000000000000000a 0000000000000013 0002 00",  # acquired_records [10..19] x2, its tags
        "00 00",          # partition tags, topic tags
        "02 00000001 02 68 00002384 00 00",  # node_endpoints[1] {1, "h", 9092, rack null}, its tags
        "00",             # top-level tags
    )
    assert encode(msg, 2) == expected
    assert decode(ShareFetchResponse, expected, 2) == msg


def test_share_acknowledge_request_v2_golden():
    msg = ShareAcknowledgeRequest(
        group_id="g", member_id="m", share_session_epoch=2, is_renew_ack=True,
        topics=[ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=TOPIC, partitions=[
            ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                # One type per offset: offset 0 renew (4), 1 a gap (0), 2 reject (3).
                ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(first_offset=0, last_offset=2, acknowledge_types=[4, 0, 3]),
            ]),
        ])],
    )
    expected = _hex(
        "02 67 02 6d",    # group_id, member_id
        "00000002",       # share_session_epoch
        "01",             # is_renew_ack (v2+)
        "02", TOPIC_HEX,
        "02 00000000",
        "02 0000000000000000 0000000000000002 04 04 00 03 00",
        "00 00",
        "00",
    )
    assert encode(msg, 2) == expected
    assert decode(ShareAcknowledgeRequest, expected, 2) == msg
    # v1 lacks is_renew_ack: a true value there is refused locally, a false one is simply absent.
    msg.is_renew_ack = False
    assert encode(msg, 1) == expected[:8] + expected[9:]


def test_share_acknowledge_response_v2_golden():
    msg = ShareAcknowledgeResponse(
        throttle_time_ms=5, error_code=0, acquisition_lock_timeout_ms=15000,
        responses=[ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse(topic_id=TOPIC, partitions=[
            _AckPart(
                partition_index=1, error_code=0,
                current_leader=_AckPart.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
            ),
        ])],
    )
    expected = _hex(
        "00000005 0000 00",  # throttle_time_ms, error_code, error_message null
        "00003a98",          # acquisition_lock_timeout_ms 15000 (v2+)
        "02", TOPIC_HEX,
        "02 00000001 0000 00",  # partition_index, error_code, error_message null
        "ffffffff ffffffff 00",  # current_leader unknown, its tags
        "00 00",
        "01",                # node_endpoints: empty
        "00",
    )
    assert encode(msg, 2) == expected
    assert decode(ShareAcknowledgeResponse, expected, 2) == msg
    # v1 has no lock timeout; the field is ignorable, so a v2 answer downgrades by dropping it.
    assert encode(msg, 1) == expected[:7] + expected[11:]


def test_version_ranges_are_kafka_4_4s():
    ranges = {key: REQUESTS[key].VALID_VERSIONS for key in SHARE_KEYS}
    assert ranges == {
        76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2),
        83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1),
        90: (0, 1), 91: (0, 0), 92: (0, 0),
    }


# Served by the share coordinator (broker/handlers/share_state.py): "broker" APIs in Kafka's ApiKeys.
SHARE_STATE_KEYS = {83, 84, 85, 86, 87}


@pytest.mark.parametrize("scope", [BROKER, CONTROLLER])
def test_share_apis_are_not_advertised_until_served(scope):
    """ApiVersions is derived from the handler table: defining the messages advertises nothing. The client
    share APIs are behind the `odradek.share.enabled` gate (test below); the share coordinator's state APIs
    (broker/handlers/share_state.py; "broker" APIs in Kafka's ApiKeys) are served on broker listeners."""
    versions = advertised_versions(load_handlers(scope))
    served = SHARE_STATE_KEYS if scope == BROKER else set()
    assert SHARE_KEYS & set(versions) == served
    if scope == BROKER:
        assert {k: versions[k] for k in SHARE_STATE_KEYS} == {
            83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1)}


def test_share_apis_are_advertised_unless_disabled():
    from odradek.broker.server import Broker

    assert Broker().advertised_versions.keys() >= {76, 77, 78, 79, 90, 91, 92}  # on by default, as Kafka 4.2+
    assert not {76, 77, 78, 79, 90, 91, 92} & set(Broker(odradek_share_enabled="false").advertised_versions)


@pytest.mark.parametrize("name,sample", [
    ("ShareSnapshotKey", dict(group_id="g", topic_id=TOPIC, partition=3)),
    ("ShareUpdateKey", dict(group_id="g", topic_id=TOPIC, partition=3)),
    ("ShareSnapshotValue", dict(snapshot_epoch=1, state_epoch=2, leader_epoch=3, start_offset=40,
                                create_timestamp=1_000, write_timestamp=2_000)),
    ("ShareUpdateValue", dict(snapshot_epoch=1, leader_epoch=3, start_offset=40)),
])
def test_share_state_records_round_trip(name, sample):
    cls = DATA_CLASSES[name]
    if "Value" in name:
        sample["state_batches"] = [cls.StateBatch(first_offset=40, last_offset=49, delivery_state=2, delivery_count=1)]
    record = cls(**sample)
    assert decode(cls, encode(record, 0), 0) == record


def test_share_snapshot_key_is_not_flexible():
    cls = DATA_CLASSES["ShareSnapshotKey"]
    wire = encode(cls(group_id="g", topic_id=TOPIC, partition=3), 0)
    assert wire == _hex("0001 67", TOPIC_HEX, "00000003")  # int16-length string, no tagged fields
