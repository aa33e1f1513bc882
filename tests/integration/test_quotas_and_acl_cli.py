"""Client quotas and the `odradek acl` / `odradek quota` commands against a broker process.

A produce over a client's quota is answered with throttle_time_ms (how long until its rate is back to the
quota: deterministic from the sizes, whatever the machine's speed); DescribeClientQuotas lists what
AlterClientQuotas set. The CLI manages ACLs on a broker with the authorizer on (and
allow.everyone.if.no.acl.found, so that the anonymous CLI may).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from odradek.broker.testing import RawClient
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import build_batch
from tests.brokerproc import BrokerProcess

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def open_secured(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("quota-data"), AUTHORIZER, "allow.everyone.if.no.acl.found=true",
                         "num.partitions=1", "log.levels=kafka.authorizer.logger=DEBUG").start()
    yield proc
    proc.stop()


def odradek(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "odradek", "-b", bootstrap, *args], capture_output=True, text=True,
                          timeout=60)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_quota_cli_and_a_throttled_produce(open_secured):
    bs = open_secured.bootstrap
    ok(odradek(bs, "quota", "set", "--client", "slow", "producer_byte_rate=1000"))
    ok(odradek(bs, "quota", "set", "--user-default", "consumer_byte_rate=2048", "request_percentage=200"))
    described = json.loads(ok(odradek(bs, "-o", "json", "quota", "describe")))
    assert {"entity": {"client-id": "slow"}, "quotas": {"producer_byte_rate": 1000.0}} in described
    assert {"entity": {"user": None}, "quotas": {"consumer_byte_rate": 2048.0, "request_percentage": 200.0}} in described
    bad = odradek(bs, "quota", "set", "--client", "slow", "producer_byte_rate=1.5")
    assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr

    produce = REQUESTS[0]
    topic_data = produce.TopicProduceData

    def request(n_bytes: int):
        batch = build_batch([(None, b"x" * n_bytes, None, 0)], base_offset=0)
        return produce(acks=1, timeout_ms=10000, topic_data=[topic_data(name="throttled", partition_data=[
            topic_data.PartitionProduceData(index=0, records=batch)])])

    with RawClient(bs, client_id="free") as client:  # (also creates the topic)
        client.request(REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name="throttled")],
                                   allow_auto_topic_creation=True), 9)
        assert client.request(request(20_000), 9).throttle_time_ms == 0
    with RawClient(bs, client_id="slow") as client:
        response = client.request(request(20_000), 9)
    assert response.responses[0].partition_responses[0].error_code == 0
    # ~20 KB against 1000 B/s measured over at least 10 s: (2000 - 1000) / 1000 * 10 s
    assert 9_000 <= response.throttle_time_ms <= 11_000


def test_acl_cli(open_secured):
    bs = open_secured.bootstrap
    ok(odradek(bs, "acl", "add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
               "--topic", "orders", "--resource-pattern-type", "prefixed"))
    ok(odradek(bs, "acl", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1", "--operation", "All",
               "--group", "g1"))
    listed = json.loads(ok(odradek(bs, "-o", "json", "acl", "list")))
    assert {(a["resource_type"], a["name"], a["pattern_type"], a["principal"], a["host"], a["operation"], a["permission"])
            for a in listed} == {
        ("topic", "orders", "prefixed", "User:alice", "*", "read", "allow"),
        ("topic", "orders", "prefixed", "User:alice", "*", "describe", "allow"),
        ("group", "g1", "literal", "User:bob", "10.0.0.1", "all", "deny"),
    }
    matching = json.loads(ok(odradek(bs, "-o", "json", "acl", "list", "--topic", "orders-eu",
                                     "--resource-pattern-type", "match")))
    assert len(matching) == 2
    removed = json.loads(ok(odradek(bs, "-o", "json", "acl", "remove", "--principal", "User:bob")))
    assert [a["name"] for a in removed] == ["g1"]
    assert len(json.loads(ok(odradek(bs, "-o", "json", "acl", "list")))) == 2
    usage = odradek(bs, "acl", "add", "--topic", "x")
    assert usage.returncode == 2


def test_quota_cli_sets_connection_creation_rates_of_ip_entities(open_secured):
    bs = open_secured.bootstrap
    ok(odradek(bs, "quota", "set", "--ip", "10.9.8.7", "connection_creation_rate=5"))
    ok(odradek(bs, "quota", "set", "--ip-default", "connection_creation_rate=50"))
    described = json.loads(ok(odradek(bs, "-o", "json", "quota", "describe", "--ip", "10.9.8.7")))
    assert described == [{"entity": {"ip": "10.9.8.7"}, "quotas": {"connection_creation_rate": 5.0}}]
    bad = odradek(bs, "quota", "set", "--ip", "10.9.8.7", "producer_byte_rate=5")  # not a quota of an address
    assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr
    ok(odradek(bs, "quota", "set", "--ip-default", "--delete", "connection_creation_rate"))
    ok(odradek(bs, "quota", "set", "--ip", "10.9.8.7", "--delete", "connection_creation_rate"))


def test_denials_reach_the_daemons_log_under_the_audit_logger(open_secured):
    bs = open_secured.bootstrap
    ok(odradek(bs, "acl", "add", "--allow-principal", "User:carol", "--operation", "Describe", "--topic", "audited"))
    try:
        with RawClient(bs, client_id="auditee") as client:
            answer = client.request(REQUESTS[3](topics=[REQUESTS[3].MetadataRequestTopic(name="audited")],
                                                allow_auto_topic_creation=False), 9)
        assert answer.topics[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED: the ACLs on it name carol only
        line = "Principal = User:ANONYMOUS is Denied operation = DESCRIBE from host = 127.0.0.1 on resource = " \
               "Topic:LITERAL:audited for request = Metadata"
        deadline = time.monotonic() + 30
        while line not in open_secured.log_text() and time.monotonic() < deadline:  # (the log is read by a thread)
            time.sleep(0.05)
        logged = [entry for entry in open_secured.log_text().splitlines() if line in entry]
        assert logged and "kafka.authorizer.logger" in logged[0]
        # log.levels turned the audit logger alone to DEBUG: the grant of the CLI's CreateAcls is there too,
        # and no other logger writes at DEBUG (the broker's log.level stays INFO).
        grant = "Principal = User:ANONYMOUS is Allowed operation = ALTER from host = 127.0.0.1 on resource = " \
                "Cluster:LITERAL:kafka-cluster for request = CreateAcls"
        assert any(grant in entry and "kafka.authorizer.logger" in entry for entry in open_secured.log_text().splitlines())
        assert not [entry for entry in open_secured.log_text().splitlines()
                    if "[debug" in entry and "kafka.authorizer.logger" not in entry]
    finally:
        ok(odradek(bs, "acl", "remove", "--principal", "User:carol", "--topic", "audited"))


def test_broker_loggers_from_the_cli(open_secured):
    """kafka-configs.sh --entity-type broker-loggers, as `odradek config get|set broker-logger <node>`: the audit
    logger is at DEBUG from log.levels, is unset back to the root's INFO, and set again, at run time."""
    bs = open_secured.bootstrap

    def level() -> str:
        return json.loads(ok(odradek(bs, "-o", "json", "config", "get", "broker-logger", "1", "kafka.authorizer.logger")))[
            "kafka.authorizer.logger"]["value"]

    assert level() == "DEBUG"
    ok(odradek(bs, "config", "set", "broker-logger", "1", "--delete", "kafka.authorizer.logger"))
    assert level() == "INFO"
    ok(odradek(bs, "config", "set", "broker-loggers", "1", "kafka.authorizer.logger=DEBUG"))
    assert level() == "DEBUG"
    refused = odradek(bs, "config", "set", "broker-logger", "1", "kafka.authorizer.logger=LOUD")
    assert refused.returncode == 1 and "INVALID_CONFIG" in refused.stderr
