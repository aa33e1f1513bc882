"""What travels in an Envelope (protocol/envelope.py), and the authorizer's audit log (broker/authorizer.py)."""

from __future__ import annotations

import io
import json
import logging
import uuid
from types import SimpleNamespace

import pytest
import structlog

from odradek.broker.authorizer import AUDIT_LOGGER, Authorizer
from odradek.broker.context import ConnectionContext, KafkaPrincipal, RequestContext
from odradek.broker.logging import configure_logging
from odradek.protocol.envelope import (
    PrincipalDeserializationError,
    address_bytes,
    address_host,
    decode_request_data,
    decode_response_data,
    deserialize_principal,
    encode_request_data,
    encode_response_data,
    serialize_principal,
)
from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import CreateTopicsRequest, CreateTopicsResponse
from tests.harness.audit import audit_lines, authorizer, context  # noqa: F401 (audit_lines: a fixture)
from odradek.metadata.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

# -- the envelope's contents


def test_principal_is_serialized_as_kafkas_default_principal_builder():
    # int16 version 0, then DefaultPrincipalData v0 (flexible): compact strings, a bool, no tagged fields.
    assert serialize_principal("User", "alice") == b"\x00\x00\x05User\x06alice\x00\x00"
    assert deserialize_principal(serialize_principal("User", "CN=broker,O=x", True)) == ("User", "CN=broker,O=x", True)


@pytest.mark.parametrize("data", [None, b"", b"\x00", b"\x00\x01\x05User\x06alice\x00\x00", b"\x00\x00\x05Us"])
def test_a_principal_that_cannot_be_read_is_refused(data):
    with pytest.raises(PrincipalDeserializationError):
        deserialize_principal(data)


def test_client_addresses_travel_as_raw_bytes():
    assert address_bytes("10.1.2.3") == bytes([10, 1, 2, 3])
    assert address_host(address_bytes("::1")) == "::1"
    assert address_bytes("not-an-address") == bytes(4)
    with pytest.raises(RemoteProtocolError):
        address_host(b"\x01\x02")


def test_request_and_response_data_round_trip_with_the_clients_header():
    header = RequestHeader(19, 7, 1234, "rdkafka")
    request = CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=3, replication_factor=1, assignments=[], configs=[])])
    got_header, got = decode_request_data(encode_request_data(header, request))
    assert (got_header.api_key, got_header.api_version, got_header.correlation_id, got_header.client_id) == (19, 7, 1234, "rdkafka")
    assert got.topics[0].name == "t" and got.topics[0].num_partitions == 3

    response = CreateTopicsResponse(throttle_time_ms=0, topics=[CreateTopicsResponse.CreatableTopicResult(
        name="t", topic_id=uuid.UUID(int=7), error_code=0, error_message=None, num_partitions=3, replication_factor=1,
        configs=[])])
    data = encode_response_data(header, response)
    assert decode_response_data(data, header).topics[0].topic_id == uuid.UUID(int=7)
    with pytest.raises(RemoteProtocolError):  # the answer to another request
        decode_response_data(data, RequestHeader(19, 7, 1235, "rdkafka"))


def test_an_unknown_forwarded_api_does_not_decode():
    with pytest.raises(RemoteProtocolError):
        decode_request_data(encode_request_data(RequestHeader(19, 7, 1, None), CreateTopicsRequest(
            timeout_ms=1, validate_only=False, topics=[]))[:0] + b"\x7f\x00\x00\x00\x00\x00\x00\x00\xff\xff")


# -- the audit log


def test_denials_are_logged_at_info_and_grants_only_at_debug(audit_lines):
    a = authorizer(AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                              AclOperation.WRITE, AclPermissionType.ALLOW))
    assert a.authorize(context("User:alice", 0), AclOperation.WRITE, ResourceType.TOPIC, "orders")
    assert not a.authorize(context("User:alice"), AclOperation.CREATE, ResourceType.TOPIC, "orders")
    assert not a.authorize(context("User:alice"), AclOperation.CREATE, ResourceType.TOPIC, "orders")  # remembered, logged again
    lines = [line for line in audit_lines() if line["logger"] == AUDIT_LOGGER]
    assert len(lines) == 2 and {line["level"] for line in lines} == {"info"}
    assert lines[0]["event"] == ("Principal = User:alice is Denied operation = CREATE from host = 10.0.0.7 on resource = "
                                 "Topic:LITERAL:orders for request = CreateTopics")
    assert (lines[0]["principal"], lines[0]["host"], lines[0]["operation"], lines[0]["resource"], lines[0]["allowed"]) == (
        "User:alice", "10.0.0.7", "CREATE", "Topic:LITERAL:orders", False)

    # Routed by its name: DEBUG for this logger alone shows the grants too, the fast produce path's included.
    logging.getLogger(AUDIT_LOGGER).setLevel(logging.DEBUG)
    assert a.authorize(context("User:alice", 0), AclOperation.WRITE, ResourceType.TOPIC, "orders")
    assert a.authorize(context("User:admin", 0).connection, AclOperation.WRITE, ResourceType.TOPIC, "orders")
    granted = [line for line in audit_lines() if line["logger"] == AUDIT_LOGGER and line["level"] == "debug"]
    assert [line["event"] for line in granted] == [
        "Principal = User:alice is Allowed operation = WRITE from host = 10.0.0.7 on resource = Topic:LITERAL:orders for request = Produce",
        "Principal = User:admin is Allowed operation = WRITE from host = 10.0.0.7 on resource = Topic:LITERAL:orders for request = Produce",
    ]


def test_probes_are_not_logged_as_denials(audit_lines):
    a = authorizer()
    assert a.authorized_operations(context("User:bob", 3), ResourceType.TOPIC, "orders") == 0
    assert a.authorized_operations(context("User:admin", 3), ResourceType.CLUSTER) != 0
    # An all-topics Metadata leaves out what bob may not describe: no denial for each (Kafka's logIfDenied false).
    assert a.authorized_names(context("User:bob", 3), AclOperation.DESCRIBE, ResourceType.TOPIC, ["a", "b"],
                              log_denied=False) == set()
    assert [line for line in audit_lines() if line["logger"] == AUDIT_LOGGER] == []
    # Asked by name, the refusal is logged.
    assert a.authorized_names(context("User:bob", 3), AclOperation.DESCRIBE, ResourceType.TOPIC, ["a"]) == set()
    assert [line["resource"] for line in audit_lines() if line["logger"] == AUDIT_LOGGER] == ["Topic:LITERAL:a"]


# -- a forwarded request the controller never answered still gets an answer


def _one_item_requests():
    from odradek.protocol.messages import REQUESTS

    R = REQUESTS
    return {
        19: R[19](timeout_ms=1, validate_only=False, topics=[R[19].CreatableTopic(name="t", num_partitions=1,
                                                                                   replication_factor=1, assignments=[], configs=[])]),
        20: R[20](timeout_ms=1, topic_names=["t"], topics=[R[20].DeleteTopicState(name="t", topic_id=uuid.UUID(int=1))]),
        30: R[30](creations=[R[30].AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                               principal="User:a", host="*", operation=3, permission_type=3)]),
        31: R[31](filters=[R[31].DeleteAclsFilter(resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1,
                                                  principal_filter=None, host_filter=None, operation=1, permission_type=1)]),
        33: R[33](validate_only=False, resources=[R[33].AlterConfigsResource(resource_type=2, resource_name="t", configs=[])]),
        44: R[44](validate_only=False, resources=[R[44].AlterConfigsResource(resource_type=2, resource_name="t", configs=[])]),
        37: R[37](timeout_ms=1, validate_only=False, topics=[R[37].CreatePartitionsTopic(name="t", count=2, assignments=None)]),
        49: R[49](validate_only=False, entries=[R[49].EntryData(entity=[R[49].EntryData.EntityData(
            entity_type="ip", entity_name=None)], ops=[])]),
        51: R[51](deletions=[R[51].ScramCredentialDeletion(name="u", mechanism=1)], upsertions=[]),
        43: R[43](topic_partitions=[R[43].TopicPartitions(topic="t", partitions=[0])]), 45: R[45](), 46: R[46](), 55: R[55](),
    }


def test_every_forwardable_api_has_an_error_answer_at_every_version():
    from odradek.broker.handlers import CONTROLLER, load_handlers
    from odradek.broker.handlers.envelope import FORWARDABLE, error_response
    from odradek.protocol.codec import decode
    from odradek.protocol.errors import ErrorCode

    registry = load_handlers(CONTROLLER)
    requests = _one_item_requests()
    assert set(requests) == FORWARDABLE
    for api_key in sorted(FORWARDABLE):
        registration = registry[api_key]
        for version in range(registration.min_version, registration.max_version + 1):
            response = error_response(api_key, version, requests[api_key], ErrorCode.REQUEST_TIMED_OUT, "no controller")
            again = decode(type(response), response.encode(version), version)
            codes = [getattr(item, "error_code") for name in ("topics", "responses", "results", "filter_results", "entries")
                     for item in (getattr(again, name, None) or []) if hasattr(item, "error_code")]
            codes += [p.error_code for r in getattr(again, "replica_election_results", []) for p in r.partition_result]
            assert codes == [ErrorCode.REQUEST_TIMED_OUT] or getattr(again, "error_code", 0) == ErrorCode.REQUEST_TIMED_OUT, \
                (api_key, version, again)


@pytest.mark.parametrize("failure, code", [("refused", -1), ("unavailable", 7)])
async def test_a_forwarding_failure_is_answered_to_the_client(failure, code):
    from odradek.broker.handlers.envelope import forward_for_client
    from odradek.broker.node_client import NodeUnavailable
    from odradek.broker.quorum import ForwardingRefused

    async def forward(request, version, *, client=None):
        assert client is ctx
        raise ForwardingRefused("CLUSTER_AUTHORIZATION_FAILED") if failure == "refused" else NodeUnavailable("no controller")

    ctx = context("User:alice", 19)
    services = SimpleNamespace(controller=SimpleNamespace(forward=forward))
    answer = await forward_for_client(services, ctx, _one_item_requests()[19])
    assert [(t.name, t.error_code) for t in answer.topics] == [("t", code)]
