"""Access control lists and the decision whether a principal may act on a resource (Kafka's StandardAuthorizer).

Theory of operation
-------------------
An ACL binding is a resource pattern (resource type, name, LITERAL or PREFIXED) and an access control
entry (principal, host, operation, ALLOW or DENY). Bindings live in the cluster metadata log
(AccessControlEntryRecord, RemoveAccessControlEntryRecord) and in the image, keyed by their id, so that
every broker decides alike. `AclIndex` is built from the image's bindings and answers `authorize`:

  * a super user (`super.users`) may do anything;
  * otherwise the bindings whose pattern covers the resource are found: LITERAL with the resource's
    name, LITERAL `*` (any name of that type), PREFIXED with a prefix of the name;
  * of those, a DENY for the principal (or `User:*`) from the host (or `*`) for the operation (or ALL)
    denies, whatever ALLOWs there are; an ALLOW of the operation (or ALL, or one that implies it: READ,
    WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; implication is for ALLOW
    only, a DENY READ does not deny DESCRIBE) allows;
  * when no binding covers the resource at all (for anyone), the answer is `allow.everyone.if.no.acl.found`;
    when some do but none matches this principal, host and operation, it is DENY.

This is StandardAuthorizerData's findAclRule. Filters (DescribeAcls, DeleteAcls) match bindings as Kafka's
AclBindingFilter does: ANY matches every value, MATCH (pattern type) matches the bindings that would
apply to a literal resource name. Pure and deterministic: no clock, no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# The operations each resource type has (Kafka's ResourceType/AclOperation table, `kafka-acls` refuses others).
OPERATIONS_BY_TYPE: Mapping[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    }),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


class AclError(ValueError):
    """A binding or filter that cannot be stored or used (CreateAcls/DeleteAcls answer INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission_type: AclPermissionType


def validate_binding(b: AclBinding) -> None:
    """Kafka's checks on a binding to create (AclControlManager.validateNewAcl): concrete values only."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise AclError(f"Invalid resourceType {b.resource_type.name}")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclError(f"Invalid patternType {b.pattern_type.name}")
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise AclError(f"Invalid operation {b.operation.name}")
    if b.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise AclError(f"Invalid permissionType {b.permission_type.name}")
    if not b.resource_name:
        raise AclError("Resource name should not be empty")
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if b.pattern_type == PatternType.PREFIXED and b.resource_name == WILDCARD:
        raise AclError("A PREFIXED ACL cannot have the wildcard resource name")
    principal_type, sep, name = b.principal.partition(":")
    if not sep or not principal_type or not name:
        raise AclError(f"Could not parse principal from `{b.principal}` (no colon is present separating the principal type from the principal name)")
    if not b.host:
        raise AclError("Invalid host: empty")
    if b.operation != AclOperation.ALL and b.operation not in OPERATIONS_BY_TYPE[b.resource_type]:
        raise AclError(f"Operation {b.operation.name} is not valid for resource type {b.resource_type.name}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter: None strings and ANY enums match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission_type):
            if value == 0:
                raise AclError(f"Filter contains UNKNOWN elements: {type(value).__name__}")

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == b.permission_type

    def _pattern_matches(self, b: AclBinding) -> bool:
        # ResourcePatternFilter.matches
        if self.pattern_type == PatternType.ANY:
            return self.resource_name is None or self.resource_name == b.resource_name
        if self.pattern_type != PatternType.MATCH:
            return self.pattern_type == b.pattern_type and (self.resource_name is None or self.resource_name == b.resource_name)
        if self.resource_name is None:
            return True
        if b.pattern_type == PatternType.LITERAL:
            return b.resource_name == self.resource_name or b.resource_name == WILDCARD
        if b.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(b.resource_name)
        return False


def _entry_result(b: AclBinding, principals: tuple[str, str], host: str, op: AclOperation) -> AclPermissionType | None:
    """StandardAuthorizerData.findResult: what one binding (whose pattern covers the resource) says, or None."""
    if b.principal not in principals:
        return None
    if b.host != WILDCARD and b.host != host:
        return None
    if b.operation != AclOperation.ALL:
        if b.permission_type == AclPermissionType.ALLOW:
            if op == AclOperation.DESCRIBE:
                if b.operation not in IMPLIES_DESCRIBE:
                    return None
            elif op == AclOperation.DESCRIBE_CONFIGS:
                if b.operation not in IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != b.operation:
                return None
        elif op != b.operation:
            return None
    return b.permission_type


class AclIndex:
    """The image's bindings, indexed for `authorize`: per resource type, LITERAL names and PREFIXED
    prefixes (with the prefix lengths present, so a lookup tries only those). Immutable once built."""

    __slots__ = ("bindings", "_literal", "_prefixed", "_prefix_lengths", "super_users", "allow_if_no_acl")

    def __init__(self, bindings: Mapping[uuid.UUID, AclBinding], *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.bindings = bindings
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}
        for b in bindings.values():
            key = (int(b.resource_type), b.resource_name)
            if b.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(key, []).append(b)
                lengths = self._prefix_lengths.setdefault(int(b.resource_type), [])
                if len(b.resource_name) not in lengths:
                    lengths.append(len(b.resource_name))
            else:
                self._literal.setdefault(key, []).append(b)

    def covering(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding whose pattern covers the literal resource (type, name)."""
        rt = int(resource_type)
        found = list(self._literal.get((rt, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((rt, WILDCARD), ()))
        for n in self._prefix_lengths.get(rt, ()):
            if n <= len(name):
                found.extend(self._prefixed.get((rt, name[:n]), ()))
        return found

    def authorize(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        covering = self.covering(resource_type, name)
        if not covering:
            return self.allow_if_no_acl
        principals = (principal, WILDCARD_PRINCIPAL)
        allowed = False
        for b in covering:
            result = _entry_result(b, principals, host, op)
            if result == AclPermissionType.DENY:
                return False
            if result == AclPermissionType.ALLOW:
                allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation, resource_type: ResourceType) -> bool:
        """Whether `principal` may do `op` on SOME resource of the type (Kafka's Authorizer.authorizeByResourceType,
        used for an idempotent producer without IDEMPOTENT_WRITE, KIP-679): an ALLOW it has (LITERAL or PREFIXED)
        that no DENY of it covers, and no DENY of it on the wildcard name."""
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        deny_literal: set[str] = set()
        deny_prefixed: list[str] = []
        allows: list[AclBinding] = []
        any_of_type = False
        for b in self.bindings.values():
            if b.resource_type != resource_type:
                continue
            any_of_type = True
            result = _entry_result(b, principals, host, op)
            if result == AclPermissionType.DENY:
                if b.pattern_type == PatternType.LITERAL:
                    if b.resource_name == WILDCARD:
                        return False
                    deny_literal.add(b.resource_name)
                else:
                    deny_prefixed.append(b.resource_name)
            elif result == AclPermissionType.ALLOW:
                allows.append(b)
        for b in allows:
            if any(b.resource_name.startswith(p) for p in deny_prefixed):
                continue
            if b.pattern_type == PatternType.LITERAL and b.resource_name in deny_literal:
                continue
            return True
        return not any_of_type and self.allow_if_no_acl

    def matching(self, f: AclFilter) -> list[tuple[uuid.UUID, AclBinding]]:
        """The bindings `f` matches, by id, in a stable order (resource, then entry)."""
        found = [(i, b) for i, b in self.bindings.items() if f.matches(b)]
        found.sort(key=lambda item: (item[1].resource_type, item[1].resource_name, item[1].pattern_type,
                                     item[1].principal, item[1].host, item[1].operation, item[1].permission_type))
        return found


def parse_principal_list(text: str) -> tuple[str, ...]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return tuple(p.strip() for p in text.split(";") if p.strip())
