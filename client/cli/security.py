"""`odradek user ...` (SCRAM credentials), `odradek acl ...` (kafka-acls.sh) and `odradek quota ...`
(kafka-configs.sh --entity-type users|clients|ips): who may connect, what they may do, how fast."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any

from .common import EXIT_OK, Output, SubParsers, UsageError, key_value
from .properties import admin_for


def register(sub: SubParsers) -> None:
    """`user ...`, `acl ...` and `quota ...`."""
    usub = SubParsers(sub.add("user", help="create, list and delete SCRAM users"), "action")
    p = usub.add("create", handler=user_create, help="create a SCRAM user, or change its password")
    p.add_argument("name")
    p.add_argument("--password", help="the password (default: read from the terminal, or a line of stdin)")
    p.add_argument("--mechanism", "-m", action="append", default=[], choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="repeatable (default SCRAM-SHA-512)")
    p.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096 to 16384 (default 4096)")
    p = usub.add("list", handler=user_list, help="users and their SCRAM mechanisms")
    p.add_argument("names", nargs="*", metavar="USER")
    p = usub.add("delete", handler=user_delete, help="delete a SCRAM user's credentials")
    p.add_argument("name")
    p.add_argument("--mechanism", "-m", action="append", default=[], choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="repeatable (default: every mechanism the user has)")

    # acl (kafka-acls.sh) and quota (kafka-configs.sh --entity-type users/clients)
    asub = SubParsers(sub.add("acl", help="add, list and remove ACLs (kafka-acls)", allow_abbrev=False), "action")
    for action, help_text, handler in (("add", "add ACLs", acl_add),
                                       ("list", "list ACLs (all, or those matching the options)", acl_list),
                                       ("remove", "remove the ACLs matching the options", acl_remove)):
        p = asub.add(action, handler=handler, help=help_text)
        p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL", help="e.g. User:alice")
        p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
        p.add_argument("--principal", action="append", default=[], help="(list, remove) any permission")
        p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
        p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
        p.add_argument("--operation", action="append", default=[],
                       help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                            "AlterConfigs, IdempotentWrite, All (repeatable)")
        p.add_argument("--topic", action="append", default=[])
        p.add_argument("--group", action="append", default=[])
        p.add_argument("--transactional-id", action="append", default=[])
        p.add_argument("--cluster", action="store_true")
        p.add_argument("--resource-pattern-type", default="literal" if action == "add" else "any", type=str.lower,
                       choices=["literal", "prefixed", "any", "match"], help="(any case, as kafka-acls.sh)")
        if action != "list":  # kafka-acls.sh's conveniences for add and remove
            p.add_argument("--producer", action="store_true",
                           help="Write, Describe, Create on --topic (Write, Describe on --transactional-id)")
            p.add_argument("--consumer", action="store_true", help="Read, Describe on --topic and Read on --group")
            p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
            p.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh: nothing is asked anyway")
    qsub = SubParsers(sub.add("quota", help="set and describe client quotas (kafka-configs --entity-type users/clients/ips)"),
                       "action")
    for action, help_text, handler in (("set", "set or delete quota values of a user, a client id, or both", quota_set),
                                       ("describe", "show quotas (all, or of the given entity)", quota_describe)):
        p = qsub.add(action, handler=handler, help=help_text)
        p.add_argument("--user", default=None, help="a user name")
        p.add_argument("--user-default", "--user-defaults", action="store_true", help="the default user entity")
        p.add_argument("--client", dest="quota_client_id", default=None, help="a client id")
        p.add_argument("--client-default", "--client-defaults", action="store_true", help="the default client-id entity")
        p.add_argument("--ip", default=None, help="a client address (connection_creation_rate only)")
        p.add_argument("--ip-default", "--ip-defaults", action="store_true", help="the default ip entity")
        # kafka-configs.sh's general form: --entity-type users --entity-name alice [--entity-type clients
        # --entity-default] (each --entity-name or --entity-default goes with the --entity-type before it).
        p.add_argument("--entity-type", dest="entity_parts", action="append", type=_entity_type, default=[],
                       help="users, clients or ips (kafka-configs.sh)")
        p.add_argument("--entity-name", dest="entity_parts", action="append", type=lambda v: ("name", v))
        p.add_argument("--entity-default", dest="entity_parts", action="append_const", const=("name", None))
        if action == "set":
            p.add_argument("pairs", nargs="*", type=key_value, metavar="KEY=VALUE",
                           help="producer_byte_rate, consumer_byte_rate, request_percentage; for an ip, "
                                "connection_creation_rate")
            p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]")
            p.add_argument("--delete", "--delete-config", action="append", default=[], metavar="KEY")


# ---------------------------------------------------------------------------------------------- users


def _read_password(args: argparse.Namespace) -> str:
    if args.password is not None:
        return args.password
    if sys.stdin.isatty():
        import getpass

        first = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != first:
            raise UsageError("the passwords differ")
        return first
    line = sys.stdin.readline().rstrip("\n")
    if not line:
        raise UsageError("no password given (--password, or a line on stdin)")
    return line


async def user_create(args: argparse.Namespace, out: Output) -> int:
    password = _read_password(args)
    mechanisms = args.mechanism or ["SCRAM-SHA-512"]
    async with admin_for(args) as admin:
        results = await admin.alter_user_scram_credentials(
            upsert=[(args.name, m, password, args.iterations) for m in mechanisms])
    error = results.get(args.name)
    if error is not None:
        raise error
    if out.json:
        out.emit_json({"user": args.name, "mechanisms": mechanisms, "iterations": args.iterations})
    else:
        out.line(f"user {args.name}: {', '.join(mechanisms)} credentials set ({args.iterations} iterations)")
    return EXIT_OK


async def user_list(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        users = await admin.describe_user_scram_credentials(args.names or None)
    if out.json:
        out.emit_json([{"user": u, "credentials": [{"mechanism": m, "iterations": i} for m, i in creds]}
                       for u, creds in sorted(users.items())])
    else:
        out.table(["USER", "MECHANISMS"], [[u, ", ".join(f"{m} ({i})" for m, i in creds)] for u, creds in sorted(users.items())])
    return EXIT_OK


async def user_delete(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        mechanisms = args.mechanism
        if not mechanisms:
            mechanisms = [m for m, _ in (await admin.describe_user_scram_credentials([args.name]))[args.name]]
        results = await admin.alter_user_scram_credentials(delete=[(args.name, m) for m in mechanisms])
    error = results.get(args.name)
    if error is not None:
        raise error
    if out.json:
        out.emit_json({"user": args.name, "deleted": mechanisms})
    else:
        out.line(f"user {args.name}: {', '.join(mechanisms)} credentials deleted")
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- ACLs, quotas


def _acl_bindings(args: argparse.Namespace, *, add: bool) -> list:
    """The bindings (add) or filters (list, remove) kafka-acls.sh's options name."""
    from ..admin import AclBinding

    resources = ([("topic", n) for n in args.topic] + [("group", n) for n in args.group]
                 + [("transactional_id", n) for n in args.transactional_id] + ([("cluster", "kafka-cluster")] if args.cluster else []))
    entries = ([(p, "allow") for p in args.allow_principal] + [(p, "deny") for p in args.deny_principal]
               + [(p, "any") for p in args.principal])
    # Kafka's spellings (DescribeConfigs, IDEMPOTENT_WRITE, describe-configs) all name one operation.
    operations = [re.sub(r"(?<=[a-z])(?=[A-Z])", "_", op).lower().replace("-", "_") for op in args.operation] or ["any"]
    by_resource = [(rtype, name, operations) for rtype, name in resources]
    if getattr(args, "producer", False) or getattr(args, "consumer", False):
        by_resource = _convenience_acls(args, resources)
    elif getattr(args, "idempotent", False):
        raise UsageError("--idempotent goes with --producer")
    if add:
        if not by_resource or not entries or not (args.operation or args.producer or args.consumer):
            raise UsageError("acl add needs a resource (--topic, --group, --transactional-id or --cluster), "
                             "--allow-principal or --deny-principal, and --operation (or --producer/--consumer)")
        if any(permission == "any" for _, permission in entries):
            raise UsageError("acl add takes --allow-principal or --deny-principal, not --principal")
    out = []
    for rtype, name, ops in by_resource or [("any", None, operations)]:
        for principal, permission in entries or [(None, "any")]:
            hosts = (args.allow_host if permission == "allow" else args.deny_host if permission == "deny" else
                     args.allow_host + args.deny_host) or (["*"] if add else [None])
            for host in hosts:
                for op in ops:
                    out.append(AclBinding(rtype, name, args.resource_pattern_type, principal, host, op, permission))
    return out


def _convenience_acls(args: argparse.Namespace, resources: list) -> list:
    """kafka-acls.sh's --producer and --consumer (AclCommand): the operations each resource needs, allow only."""
    if args.operation or args.deny_principal or args.deny_host:
        raise UsageError("--producer and --consumer take no --operation, --deny-principal or --deny-host")
    if args.producer and not args.topic and not args.transactional_id:
        raise UsageError("with --producer give --topic (and/or --transactional-id)")
    if args.consumer and (not args.topic or not args.group):
        raise UsageError("with --consumer give --topic and --group")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent goes with --producer")
    ops: dict[tuple[str, str], list[str]] = {}
    for rtype, name in resources:
        wanted = []
        if args.producer:
            wanted += {"topic": ["write", "describe", "create"], "transactional_id": ["write", "describe"]}.get(rtype, [])
        if args.consumer:
            wanted += {"topic": ["read", "describe"], "group": ["read"]}.get(rtype, [])
        if wanted:
            ops.setdefault((rtype, name), [])
            ops[(rtype, name)] += [op for op in wanted if op not in ops[(rtype, name)]]
    if args.producer and args.idempotent:
        ops[("cluster", "kafka-cluster")] = ["idempotent_write"]
    return [(rtype, name, wanted) for (rtype, name), wanted in ops.items()]


def _acl_row(b: Any) -> list[Any]:
    return [b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation, b.permission]


_ACL_COLUMNS = ["RESOURCE TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]


async def acl_add(args: argparse.Namespace, out: Output) -> int:
    bindings = _acl_bindings(args, add=True)
    async with admin_for(args) as admin:
        results = await admin.create_acls(bindings)
    for error in results:
        if error is not None:
            raise error
    if out.json:
        out.emit_json([dataclasses.asdict(b) for b in bindings])
    else:
        out.table(_ACL_COLUMNS, [_acl_row(b) for b in bindings], title="added")
    return EXIT_OK


async def acl_list(args: argparse.Namespace, out: Output) -> int:
    filters = _acl_bindings(args, add=False)
    found: dict = {}
    async with admin_for(args) as admin:
        for f in filters:
            for b in await admin.describe_acls(f):
                found[b] = None
    if out.json:
        out.emit_json([dataclasses.asdict(b) for b in found])
    else:
        out.table(_ACL_COLUMNS, [_acl_row(b) for b in found])
    return EXIT_OK


async def acl_remove(args: argparse.Namespace, out: Output) -> int:
    filters = _acl_bindings(args, add=False)
    if all(f.resource_type == "any" and f.principal is None for f in filters):
        raise UsageError("acl remove needs a resource or a principal (it would remove every ACL)")
    async with admin_for(args) as admin:
        removed = [b for bs in await admin.delete_acls(filters) for b in bs]
    if out.json:
        out.emit_json([dataclasses.asdict(b) for b in removed])
    else:
        out.table(_ACL_COLUMNS, [_acl_row(b) for b in removed], title="removed")
    return EXIT_OK


_ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def _entity_type(value: str) -> tuple[str, str]:
    if value not in _ENTITY_TYPES:
        raise argparse.ArgumentTypeError(f"quotas are set on {', '.join(_ENTITY_TYPES)} (got {value!r})")
    return ("type", _ENTITY_TYPES[value])


def _quota_entity(args: argparse.Namespace) -> dict[str, str | None]:
    entity: dict[str, str | None] = {}
    parts = list(args.entity_parts)
    while parts:  # kafka-configs.sh's --entity-type T (--entity-name N | --entity-default), pairwise
        kind, value = parts.pop(0)
        if kind != "type" or not parts or parts[0][0] != "name":
            raise UsageError("each --entity-type takes an --entity-name or --entity-default after it")
        entity[value] = parts.pop(0)[1]
    if args.user is not None or args.user_default:
        entity["user"] = None if args.user_default else args.user
    if args.quota_client_id is not None or args.client_default:
        entity["client-id"] = None if args.client_default else args.quota_client_id
    if args.ip is not None or args.ip_default:
        entity["ip"] = None if args.ip_default else args.ip
    return entity


async def quota_set(args: argparse.Namespace, out: Output) -> int:
    entity = _quota_entity(args)
    if not entity:
        raise UsageError("quota set needs --user/--user-default and/or --client-id/--client-default, or --ip/--ip-default")
    pairs = list(args.pairs) + [key_value(kv) for item in args.add_config for kv in item.split(",") if kv]
    try:
        changes: dict[str, float | None] = {k: float(v) for k, v in pairs}
    except ValueError:
        raise UsageError(f"quota values are numbers: {pairs}") from None
    changes.update({k: None for item in args.delete for k in item.split(",") if k})
    if not changes:
        raise UsageError("nothing to set: give KEY=VALUE pairs or --delete KEY")
    async with admin_for(args) as admin:
        await admin.alter_client_quotas(entity, changes)
    if out.json:
        out.emit_json({"entity": entity, "changes": changes})
    else:
        out.line(f"updated quotas of {_entity_text(entity)}: " +
                 ", ".join(f"{k}={_number(v)}" if v is not None else f"-{k}" for k, v in changes.items()))
    return EXIT_OK


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _entity_text(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity.items())


async def quota_describe(args: argparse.Namespace, out: Output) -> int:
    entity = _quota_entity(args)
    async with admin_for(args) as admin:
        entries = await admin.describe_client_quotas(entity or None, strict=bool(entity))
    if out.json:
        out.emit_json([{"entity": e, "quotas": v} for e, v in entries])
    else:
        out.table(["ENTITY", "QUOTA", "VALUE"], [[_entity_text(e), k, _number(v)] for e, vs in entries for k, v in sorted(vs.items())])
    return EXIT_OK
