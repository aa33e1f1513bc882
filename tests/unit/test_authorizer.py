"""The authorizer's decisions (metadata/acl.py) as a table of cases, after Kafka's StandardAuthorizerTest;
ACL records through the image, snapshots and the controller."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.metadata.acl import (
    AclBinding,
    AclError,
    AclFilter,
    AclIndex,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as Pat,
    ResourceType as Res,
    validate_binding,
)
from odradek.metadata.image import MetadataError, MetadataImage, replay_all
from odradek.metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from odradek.metadata.snapshot import decode_snapshot, encode_snapshot

ALLOW, DENY = Perm.ALLOW, Perm.DENY
LIT, PRE = Pat.LITERAL, Pat.PREFIXED


def acl(res, name, pat, principal, host, op, perm) -> AclBinding:
    return AclBinding(res, name, pat, principal, host, op, perm)


def index(*bindings, super_users=(), allow_if_none=False) -> AclIndex:
    return AclIndex({uuid.UUID(int=i + 1): b for i, b in enumerate(bindings)}, super_users=super_users,
                    allow_everyone_if_no_acl_found=allow_if_none)


ALICE_READS_FOO = acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.READ, ALLOW)

CASES = [
    # (description, bindings, kwargs, principal, host, op, resource type, name, expected)
    ("no ACLs, default deny", [], {}, "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", False),
    ("no ACLs, allow.everyone.if.no.acl.found", [], {"allow_if_none": True}, "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", True),
    ("super user with no ACLs", [], {"super_users": ["User:admin"]}, "User:admin", "1.1.1.1", Op.ALTER, Res.CLUSTER, "kafka-cluster", True),
    ("super user despite a DENY", [acl(Res.TOPIC, "foo", LIT, "User:admin", "*", Op.ALL, DENY)], {"super_users": ["User:admin"]},
     "User:admin", "1.1.1.1", Op.READ, Res.TOPIC, "foo", True),
    ("literal ALLOW", [ALICE_READS_FOO], {}, "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", True),
    ("READ implies DESCRIBE", [ALICE_READS_FOO], {}, "User:alice", "1.1.1.1", Op.DESCRIBE, Res.TOPIC, "foo", True),
    ("READ does not imply WRITE", [ALICE_READS_FOO], {}, "User:alice", "1.1.1.1", Op.WRITE, Res.TOPIC, "foo", False),
    ("READ does not imply DESCRIBE_CONFIGS", [ALICE_READS_FOO], {}, "User:alice", "1.1.1.1", Op.DESCRIBE_CONFIGS, Res.TOPIC, "foo", False),
    ("another principal, ACLs on the resource: deny even with allow-if-none", [ALICE_READS_FOO], {"allow_if_none": True},
     "User:bob", "1.1.1.1", Op.READ, Res.TOPIC, "foo", False),
    ("another resource, allow-if-none", [ALICE_READS_FOO], {"allow_if_none": True}, "User:bob", "1.1.1.1", Op.READ, Res.TOPIC, "bar", True),
    ("literal name is not a prefix", [ALICE_READS_FOO], {}, "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foobar", False),
    ("same name, other resource type", [ALICE_READS_FOO], {}, "User:alice", "1.1.1.1", Op.READ, Res.GROUP, "foo", False),
    ("prefixed covers longer names", [acl(Res.TOPIC, "foo", PRE, "User:alice", "*", Op.WRITE, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.WRITE, Res.TOPIC, "foobar", True),
    ("prefixed covers the name itself", [acl(Res.TOPIC, "foo", PRE, "User:alice", "*", Op.WRITE, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.WRITE, Res.TOPIC, "foo", True),
    ("prefixed does not cover shorter names", [acl(Res.TOPIC, "foo", PRE, "User:alice", "*", Op.WRITE, ALLOW)], {"allow_if_none": True},
     "User:alice", "1.1.1.1", Op.WRITE, Res.TOPIC, "fo", True),
    ("wildcard resource name", [acl(Res.TOPIC, "*", LIT, "User:alice", "*", Op.READ, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "anything", True),
    ("wildcard principal", [acl(Res.TOPIC, "foo", LIT, "User:*", "*", Op.READ, ALLOW)], {},
     "User:carol", "1.1.1.1", Op.READ, Res.TOPIC, "foo", True),
    ("host match", [acl(Res.TOPIC, "foo", LIT, "User:alice", "10.0.0.1", Op.READ, ALLOW)], {},
     "User:alice", "10.0.0.1", Op.READ, Res.TOPIC, "foo", True),
    ("host mismatch", [acl(Res.TOPIC, "foo", LIT, "User:alice", "10.0.0.1", Op.READ, ALLOW)], {},
     "User:alice", "10.0.0.2", Op.READ, Res.TOPIC, "foo", False),
    ("ALL allows any operation", [acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.ALL, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.ALTER_CONFIGS, Res.TOPIC, "foo", True),
    ("deny wins over allow", [acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.ALL, ALLOW),
                              acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.WRITE, DENY)], {},
     "User:alice", "1.1.1.1", Op.WRITE, Res.TOPIC, "foo", False),
    ("a DENY of another operation leaves the allow", [acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.ALL, ALLOW),
                                                     acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.WRITE, DENY)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", True),
    ("a prefixed DENY beats a literal ALLOW", [ALICE_READS_FOO, acl(Res.TOPIC, "f", PRE, "User:alice", "*", Op.READ, DENY)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", False),
    ("a wildcard-principal DENY applies to everyone", [ALICE_READS_FOO, acl(Res.TOPIC, "*", LIT, "User:*", "*", Op.READ, DENY)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", False),
    ("a DENY from another host does not apply", [ALICE_READS_FOO, acl(Res.TOPIC, "foo", LIT, "User:alice", "9.9.9.9", Op.READ, DENY)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", True),
    ("DENY READ does not deny DESCRIBE (implication is for ALLOW)",
     [acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.DESCRIBE, ALLOW), acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.READ, DENY)], {},
     "User:alice", "1.1.1.1", Op.DESCRIBE, Res.TOPIC, "foo", True),
    ("DENY ALL denies DESCRIBE", [ALICE_READS_FOO, acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.ALL, DENY)], {},
     "User:alice", "1.1.1.1", Op.DESCRIBE, Res.TOPIC, "foo", False),
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS", [acl(Res.CLUSTER, "kafka-cluster", LIT, "User:alice", "*", Op.ALTER_CONFIGS, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.DESCRIBE_CONFIGS, Res.CLUSTER, "kafka-cluster", True),
    ("WRITE, DELETE, ALTER imply DESCRIBE", [acl(Res.GROUP, "g", LIT, "User:alice", "*", Op.DELETE, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.DESCRIBE, Res.GROUP, "g", True),
    ("DESCRIBE does not imply READ", [acl(Res.GROUP, "g", LIT, "User:alice", "*", Op.DESCRIBE, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.GROUP, "g", False),
    ("transactional id", [acl(Res.TRANSACTIONAL_ID, "tx-", PRE, "User:alice", "*", Op.WRITE, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.WRITE, Res.TRANSACTIONAL_ID, "tx-1", True),
    ("principal types differ", [acl(Res.TOPIC, "foo", LIT, "Group:alice", "*", Op.READ, ALLOW)], {},
     "User:alice", "1.1.1.1", Op.READ, Res.TOPIC, "foo", False),
]


@pytest.mark.parametrize("description, bindings, kwargs, principal, host, op, rtype, name, expected", CASES,
                         ids=[c[0] for c in CASES])
def test_authorize(description, bindings, kwargs, principal, host, op, rtype, name, expected):
    assert index(*bindings, **kwargs).authorize(principal, host, op, rtype, name) is expected


@pytest.mark.parametrize("bindings, expected", [
    ([], False),
    ([acl(Res.TOPIC, "a", LIT, "User:alice", "*", Op.WRITE, ALLOW)], True),
    ([acl(Res.TOPIC, "a", PRE, "User:*", "*", Op.ALL, ALLOW)], True),
    ([acl(Res.TOPIC, "a", LIT, "User:alice", "*", Op.READ, ALLOW)], False),
    ([acl(Res.TOPIC, "a", LIT, "User:alice", "*", Op.WRITE, ALLOW), acl(Res.TOPIC, "a", LIT, "User:alice", "*", Op.WRITE, DENY)], False),
    ([acl(Res.TOPIC, "ab", LIT, "User:alice", "*", Op.WRITE, ALLOW), acl(Res.TOPIC, "a", PRE, "User:alice", "*", Op.WRITE, DENY)], False),
    ([acl(Res.TOPIC, "b", LIT, "User:alice", "*", Op.WRITE, ALLOW), acl(Res.TOPIC, "a", PRE, "User:alice", "*", Op.WRITE, DENY)], True),
    ([acl(Res.TOPIC, "b", LIT, "User:alice", "*", Op.WRITE, ALLOW), acl(Res.TOPIC, "*", LIT, "User:alice", "*", Op.WRITE, DENY)], False),
])
def test_authorize_by_resource_type(bindings, expected):
    assert index(*bindings).authorize_by_resource_type("User:alice", "1.1.1.1", Op.WRITE, Res.TOPIC) is expected


def test_authorize_by_resource_type_super_user_and_default():
    assert index(super_users=["User:alice"]).authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)
    assert index(allow_if_none=True).authorize_by_resource_type("User:alice", "h", Op.WRITE, Res.TOPIC)


BINDINGS = [
    acl(Res.TOPIC, "foo", LIT, "User:alice", "*", Op.READ, ALLOW),
    acl(Res.TOPIC, "fo", PRE, "User:bob", "*", Op.WRITE, ALLOW),
    acl(Res.TOPIC, "*", LIT, "User:carol", "*", Op.DESCRIBE, ALLOW),
    acl(Res.GROUP, "foo", LIT, "User:alice", "*", Op.READ, DENY),
]


@pytest.mark.parametrize("f, expected", [
    (AclFilter(), [0, 1, 2, 3]),
    (AclFilter(Res.TOPIC), [0, 1, 2]),
    (AclFilter(Res.TOPIC, "foo", Pat.LITERAL), [0]),
    (AclFilter(Res.TOPIC, "foo", Pat.ANY), [0]),
    (AclFilter(Res.TOPIC, "foo", Pat.MATCH), [0, 1, 2]),
    (AclFilter(Res.TOPIC, "fo", Pat.PREFIXED), [1]),
    (AclFilter(principal="User:alice"), [0, 3]),
    (AclFilter(permission_type=Perm.DENY), [3]),
    (AclFilter(operation=Op.WRITE), [1]),
    (AclFilter(host="10.0.0.1"), []),
])
def test_filters(f, expected):
    assert sorted(BINDINGS.index(b) for _, b in index(*BINDINGS).matching(f)) == expected


@pytest.mark.parametrize("binding", [
    acl(Res.ANY, "foo", LIT, "User:a", "*", Op.READ, ALLOW),
    acl(Res.TOPIC, "foo", Pat.MATCH, "User:a", "*", Op.READ, ALLOW),
    acl(Res.TOPIC, "foo", LIT, "User:a", "*", Op.ANY, ALLOW),
    acl(Res.TOPIC, "foo", LIT, "User:a", "*", Op.READ, Perm.ANY),
    acl(Res.TOPIC, "", LIT, "User:a", "*", Op.READ, ALLOW),
    acl(Res.CLUSTER, "other", LIT, "User:a", "*", Op.ALTER, ALLOW),
    acl(Res.TOPIC, "foo", LIT, "alice", "*", Op.READ, ALLOW),
    acl(Res.GROUP, "g", LIT, "User:a", "*", Op.WRITE, ALLOW),  # WRITE is not a group operation
])
def test_invalid_bindings(binding):
    with pytest.raises(AclError):
        validate_binding(binding)


def test_filter_with_unknown_values_is_refused():
    with pytest.raises(AclError):
        AclFilter(operation=Op.UNKNOWN).validate()


def _record(acl_id: int, b: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=uuid.UUID(int=acl_id), resource_type=b.resource_type, resource_name=b.resource_name, pattern_type=b.pattern_type,
        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission_type)


def test_image_replays_acl_records_and_snapshots_keep_them():
    image = replay_all([_record(i + 1, b) for i, b in enumerate(BINDINGS)])
    assert list(image.acls.values()) == BINDINGS
    image = replay_all([RemoveAccessControlEntryRecord(id=uuid.UUID(int=2))], image)
    assert BINDINGS[1] not in image.acls.values() and len(image.acls) == 3
    assert decode_snapshot(encode_snapshot(image, 0)) == image


def test_controller_creates_each_binding_once_and_deletes_by_filter():
    from odradek.metadata.controller import Controller

    controller = Controller(rng=random.Random(1))
    controller.image = MetadataImage()
    records, _ = controller.create_acl(BINDINGS[0])
    controller.image = replay_all(records, controller.image)
    assert list(controller.image.acls.values()) == [BINDINGS[0]]
    assert controller.create_acl(BINDINGS[0]) == ([], None)  # an equal binding: nothing new
    with pytest.raises(MetadataError):
        controller.create_acl(acl(Res.TOPIC, "", LIT, "User:a", "*", Op.READ, ALLOW))
    records, deleted = controller.delete_acls(AclFilter(Res.TOPIC))
    assert deleted == [BINDINGS[0]]
    assert replay_all(records, controller.image).acls == {}


# -- the per-item decorator: the handler sees only the allowed items, the refused ones answer in place


def test_per_item_hands_on_the_allowed_items_and_puts_refusals_back_in_order():
    import asyncio
    from types import SimpleNamespace

    from odradek.broker.authorizer import per_item

    seen = []

    def refusal(services, ctx, item):
        return None if item.startswith("ok") else 29

    @per_item("items", "results", refusal, lambda item, code, version: (item, code))
    def handler(services, ctx, request):
        seen.append(list(request.items))
        response = SimpleNamespace(results=[(item, 0) for item in request.items])
        if request.how == "now":
            return response

        async def later():
            return response

        return later()

    services = SimpleNamespace(authorizer=object())
    ctx = SimpleNamespace(api_version=1)
    request = SimpleNamespace(items=["ok1", "no1", "ok2", "no2"], how="now")
    assert handler(services, ctx, request).results == [("ok1", 0), ("no1", 29), ("ok2", 0), ("no2", 29)]
    assert seen[-1] == ["ok1", "ok2"] and request.items == ["ok1", "no1", "ok2", "no2"]  # (the request is not changed)
    request.how = "later"  # a forwarded request: a coroutine
    assert asyncio.run(handler(services, ctx, request)).results == [("ok1", 0), ("no1", 29), ("ok2", 0), ("no2", 29)]
    services.authorizer = None  # no authorizer: the handler sees the request as it is
    assert [r for r, _ in handler(services, ctx, SimpleNamespace(items=["no"], how="now")).results] == ["no"]
