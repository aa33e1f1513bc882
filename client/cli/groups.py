"""`odradek group list|describe|delete|reset-offsets|delete-offsets`, as kafka-consumer-groups.sh, and for share
groups (KIP-932) as kafka-share-groups.sh: describe shows members, assignments and each share-partition's start
offset and lag; reset-offsets moves start offsets (AlterShareGroupOffsets); delete-offsets forgets them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..cluster import TopicPartition
from ..consumer import OffsetAndMetadata
from ..errors import KafkaError, UnsupportedVersionError
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
    p = gsub.add("delete-offsets", handler=group_delete_offsets,
                 help="forget a share group's start offsets and delivery state for topics (the group must be empty)")
    group_argument(p)
    p.add_argument("--topic", "-t", action="append", required=True, help="TOPIC")
    p = gsub.add("reset-offsets", handler=group_reset_offsets,
                 help="move a group's committed offsets, or a share group's start offsets (dry run unless --execute)")
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
        out.emit_json([{"group": g.group_id, "type": g.group_type, "protocol_type": g.protocol_type, "state": g.state}
                       for g in groups])
    else:
        out.table(["GROUP", "TYPE", "STATE", "PROTOCOL TYPE"],
                  [[g.group_id, g.group_type or "-", g.state or "-", g.protocol_type] for g in groups])
    return EXIT_OK


async def _share_group(admin: Any, group_id: str) -> Any:
    """The group's ShareGroupDescribe answer if it is a share group (and the broker serves them), else None."""
    try:
        description = await admin.describe_share_group(group_id)
    except UnsupportedVersionError:
        return None
    return description if description.error is None else None


async def share_group_describe(admin: Any, group_id: str, desc: Any, out: Output) -> int:
    """A share group: its members and assignments, and each share-partition's start offset and lag."""
    offsets = await admin.share_group_offsets(group_id)
    members_of: dict[TopicPartition, list[str]] = {}
    for m in desc.members:
        for tp in m.assignment:
            members_of.setdefault(tp, []).append(m.client_id or m.member_id)
    if out.json:
        out.emit_json({
            "group": group_id, "type": "share", "state": desc.state, "group_epoch": desc.group_epoch,
            "assignment_epoch": desc.assignment_epoch,
            "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                         "member_epoch": m.member_epoch, "subscribed_topics": m.subscribed_topics,
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment]} for m in desc.members],
            "offsets": [{"topic": r.topic, "partition": r.partition, "start_offset": r.start_offset,
                         "leader_epoch": r.leader_epoch, "lag": r.lag,
                         "members": members_of.get(TopicPartition(r.topic, r.partition), [])} for r in offsets],
        })
        return EXIT_OK
    out.line(f"group {group_id}  type share  state {desc.state}  epoch {desc.group_epoch}  members {len(desc.members)}")
    out.table(["MEMBER", "CLIENT", "HOST", "EPOCH", "ASSIGNMENT"],
              [[m.member_id, m.client_id, m.client_host, m.member_epoch,
                ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"] for m in desc.members])
    out.table(["TOPIC", "PARTITION", "START-OFFSET", "LAG", "MEMBERS"],
              [[r.topic, r.partition, r.start_offset if r.start_offset >= 0 else "-", r.lag if r.lag >= 0 else "-",
                ",".join(members_of.get(TopicPartition(r.topic, r.partition), [])) or "-"] for r in offsets])
    return EXIT_OK


async def group_describe(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        share = await _share_group(admin, args.group)
        if share is not None:
            return await share_group_describe(admin, args.group, share, out)
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


async def group_delete_offsets(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        if await _share_group(admin, args.group) is None:
            raise UsageError(f"{args.group!r} is not a share group: delete-offsets serves share groups")
        results = await admin.delete_share_group_offsets(args.group, list(dict.fromkeys(args.topic)))
    if out.json:
        out.emit_json([{"group": args.group, "topic": t, "deleted": e is None,
                        "error": None if e is None else e.code.name} for t, e in results.items()])
    else:
        for t, e in results.items():
            if e is None:
                out.line(f"deleted the share offsets of {t} in group {args.group}")
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
        if await _share_group(admin, args.group) is not None:
            # A share group's offsets are its share-partitions' start offsets (AlterShareGroupOffsets).
            by_topic: dict[str, list[int]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            starts = await admin.share_group_offsets(args.group, by_topic)
            before = {TopicPartition(r.topic, r.partition): OffsetAndMetadata(r.start_offset)
                      for r in starts if r.start_offset >= 0}
            result = await admin.reset_share_group_offsets(args.group, tps, dry_run=not args.execute, **kw)
        else:
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
