"""`odradek acl` reads kafka-acls.sh's options as kafka-acls.sh does: operations in any of Kafka's spellings,
pattern types in any case, and the --producer / --consumer / --idempotent conveniences (AclCommand); and
`odradek quota` takes kafka-configs.sh's entity options (--user-defaults, --entity-type/--entity-name)."""

from __future__ import annotations

import pytest

from odradek.client.cli import UsageError, _acl_bindings, build_parser


def bindings(*argv: str) -> set[tuple]:
    args = build_parser().parse_args(["acl", *argv])
    return {(b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation, b.permission)
            for b in _acl_bindings(args, add=args.action == "add")}


@pytest.mark.parametrize("spelling", ["DescribeConfigs", "describe_configs", "DESCRIBE_CONFIGS", "describe-configs"])
def test_operations_in_kafkas_spellings(spelling):
    assert bindings("add", "--allow-principal", "User:bob", "--operation", spelling, "--topic", "t") == {
        ("topic", "t", "literal", "User:bob", "*", "describe_configs", "allow")}


def test_pattern_type_in_any_case():
    assert {b[2] for b in bindings("add", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "t",
                                   "--resource-pattern-type", "PREFIXED")} == {"prefixed"}
    assert {b[2] for b in bindings("list", "--topic", "t", "--resource-pattern-type", "Match")} == {"match"}


def test_producer_and_consumer_conveniences():
    assert bindings("add", "--allow-principal", "User:bob", "--producer", "--topic", "t", "--transactional-id", "tx",
                    "--idempotent") == {
        ("topic", "t", "literal", "User:bob", "*", op, "allow") for op in ("write", "describe", "create")
    } | {("transactional_id", "tx", "literal", "User:bob", "*", op, "allow") for op in ("write", "describe")} | {
        ("cluster", "kafka-cluster", "literal", "User:bob", "*", "idempotent_write", "allow")}
    assert bindings("remove", "--allow-principal", "User:bob", "--consumer", "--topic", "t", "--group", "g",
                    "--force") == {
        ("topic", "t", "any", "User:bob", None, "read", "allow"), ("topic", "t", "any", "User:bob", None, "describe", "allow"),
        ("group", "g", "any", "User:bob", None, "read", "allow")}


@pytest.mark.parametrize("argv", [
    ["--consumer", "--topic", "t"],  # no --group
    ["--producer", "--group", "g"],  # no --topic
    ["--producer", "--topic", "t", "--operation", "Read"],
    ["--idempotent", "--topic", "t", "--operation", "Write"],
])
def test_convenience_misuse_is_a_usage_error(argv):
    with pytest.raises(UsageError):
        bindings("add", "--allow-principal", "User:bob", *argv)


def quota_entity(*argv: str) -> dict:
    from odradek.client.cli import _quota_entity

    return _quota_entity(build_parser().parse_args(["quota", "set", *argv, "producer_byte_rate=1"]))


def test_quota_entities_in_kafka_configs_spellings():
    assert quota_entity("--user", "alice", "--client-defaults") == {"user": "alice", "client-id": None}
    assert quota_entity("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                        "--entity-default") == {"user": "alice", "client-id": None}
    assert quota_entity("--entity-type", "ips", "--entity-name", "10.0.0.7") == {"ip": "10.0.0.7"}
    assert quota_entity("--user-defaults") == {"user": None}
    with pytest.raises(UsageError):
        quota_entity("--entity-type", "users")
