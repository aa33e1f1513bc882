"""`odradek group list|describe|delete|reset-offsets`, as kafka-consumer-groups.sh."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..cluster import TopicPartition
from ..errors import KafkaError
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    Output,
    SubParsers,
    UsageError,
    group_argument,
    non_negative,
    print_error,
    timestamp,
)
from .properties import admin_for


def register(sub: SubParsers) -> None:
    """`group ...`: list, describe and delete consumer groups, reset their offsets."""
    gsub = SubParsers(sub.add("group", help="list, describe, delete consumer groups and reset their offsets"),
                       "action")
    gsub.add("list", handler=group_list, help="list groups")
    p = gsub.add("describe", handler=group_describe, help="members, committed offsets and lag per partition")
    group_argument(p)
    p = gsub.add("delete", handler=group_delete, help="delete groups (they must have no members)")
    group_argument(p, many=True)
    p = gsub.add("reset-offsets", handler=group_reset_offsets, help="move a group's committed offsets (dry run unless --execute)")
    group_argument(p)
    p.add_argument("--topic", "-t", action="append", required=True, help="TOPIC or TOPIC:P1,P2")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=non_negative, default=None)
    target.add_argument("--to-timestamp", "--to-datetime", type=timestamp, default=None, metavar="MS|ISO-8601")
    target.add_argument("--shift-by", type=int, default=None)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")


async def group_list(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        groups = await admin.list_groups()
    if out.json:
        out.emit_json([{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state} for g in groups])
    else:
        out.table(["GROUP", "STATE", "PROTOCOL TYPE"], [[g.group_id, g.state or "-", g.protocol_type] for g in groups])
    return EXIT_OK


async def group_describe(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        desc = await admin.describe_group(args.group)
        lag = await admin.group_lag(args.group)
    if desc.error is not None and not lag:
        raise desc.error
    if out.json:
        out.emit_json({
            "group": args.group, "state": desc.state, "protocol": desc.protocol,
            "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                         "instance_id": m.group_instance_id,
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment]} for m in desc.members],
            "offsets": [{"topic": r.topic, "partition": r.partition, "committed": r.committed,
                         "end_offset": r.end_offset, "lag": r.lag, "member_id": r.member_id} for r in lag],
            "total_lag": sum(r.lag or 0 for r in lag),
        })
        return EXIT_OK
    out.line(f"group {args.group}  state {desc.state}  protocol {desc.protocol or '-'}  members {len(desc.members)}")
    out.table(["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER", "CLIENT"],
              [[r.topic, r.partition, r.committed, r.end_offset, r.lag, r.member_id, r.client_id] for r in lag])
    return EXIT_OK


async def group_delete(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        results = await admin.delete_groups(args.groups)
    if out.json:
        out.emit_json([{"group": g, "deleted": results[g] is None,
                        "error": None if results[g] is None else results[g].code.name} for g in args.groups])
    else:
        for g in args.groups:
            if results[g] is None:
                out.line(f"deleted group {g}")
    failed = [e for e in results.values() if e is not None]
    for e in failed:
        print_error(str(e))
    return EXIT_FAILED if failed else EXIT_OK


async def group_reset_offsets(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        tps: list[TopicPartition] = []
        for spec in args.topic:
            topic, _, plist = spec.partition(":")
            parts = await admin.topic_partitions(topic)
            if plist:
                try:
                    wanted = [int(p) for p in plist.split(",")]
                except ValueError:
                    raise UsageError(f"bad partition list in {spec!r}") from None
                for p in wanted:
                    if TopicPartition(topic, p) not in parts:
                        raise KafkaError(3, f"{topic!r} has {len(parts)} partition(s)", context=f"partition {p}")
                tps += [TopicPartition(topic, p) for p in wanted]
            else:
                tps += parts
        if args.to_earliest:
            kw: dict[str, Any] = {"to": "earliest"}
        elif args.to_latest:
            kw = {"to": "latest"}
        elif args.to_offset is not None:
            kw = {"to": "offset", "offset": args.to_offset}
        elif args.to_timestamp is not None:
            kw = {"to": "timestamp", "timestamp_ms": args.to_timestamp}
        else:
            kw = {"to": "shift", "shift": args.shift_by}
        before = await admin.list_group_offsets(args.group, tps)
        result = await admin.reset_group_offsets(args.group, tps, dry_run=not args.execute, **kw)
    if out.json:
        out.emit_json({"group": args.group, "executed": args.execute, "offsets": [
            {"topic": tp.topic, "partition": tp.partition,
             "previous": before[tp].offset if tp in before else None, "new": o} for tp, o in sorted(result.items())]})
    else:
        out.table(["TOPIC", "PARTITION", "PREVIOUS", "NEW"],
                  [[tp.topic, tp.partition, before[tp].offset if tp in before else None, o] for tp, o in sorted(result.items())])
        if not args.execute:
            sys.stderr.write("dry run: nothing committed (add --execute to apply)\n")
    return EXIT_OK
