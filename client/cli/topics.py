"""`odradek topic create|list|describe|delete|alter|elect-leaders|reassign|reassignments`, as kafka-topics.sh,
kafka-leader-election.sh and kafka-reassign-partitions.sh."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from ..cluster import TopicPartition
from ..errors import KafkaError, OdradekError
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    Output,
    SubParsers,
    UsageError,
    key_value,
    positive,
    print_error,
    topic_argument,
)
from .properties import admin_for


def register(sub: SubParsers) -> None:
    """`topic ...`: create, list, describe, alter and delete topics; leaders and reassignments."""
    tsub = SubParsers(sub.add("topic", help="create, list, describe, alter and delete topics"), "action")
    p = tsub.add("create", handler=topic_create, help="create a topic")
    topic_argument(p)
    p.add_argument("--partitions", "-p", type=positive, default=None)
    p.add_argument("--replication-factor", "--replicas", "-r", type=positive, default=None)
    p.add_argument("--config", "--topic-config", "-c", type=key_value, action="append", default=[],
                   metavar="KEY=VALUE")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    p = tsub.add("list", handler=topic_list, help="list topics")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p = tsub.add("describe", handler=topic_describe, help="partitions, leaders, replicas, ISR and offsets of topics")
    topic_argument(p, many=True)
    p.add_argument("--internal", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a live leader")
    p = tsub.add("delete", handler=topic_delete, help="delete topics")
    topic_argument(p, many=True)
    p.add_argument("--if-exists", action="store_true", help="succeed if a topic does not exist")
    p = tsub.add("alter", handler=topic_alter, help="add partitions or change configs")
    topic_argument(p)
    p.add_argument("--partitions", "-p", type=positive, default=None, help="new total partition count")
    p.add_argument("--config", "--topic-config", "-c", type=key_value, action="append", default=[],
                   metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p = tsub.add("elect-leaders", handler=topic_elect_leaders, help="move leadership back to preferred replicas (kafka-leader-election)")
    p.add_argument("--topic", "-t", dest="topic", default=None, help="one topic (default: every partition)")
    p.add_argument("--partition", type=int, action="append", default=[], help="partitions of --topic (repeatable)")
    p.add_argument("--election-type", choices=["preferred", "unclean", "PREFERRED", "UNCLEAN"], default="preferred")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition (Kafka's spelling; the default)")
    p = tsub.add("reassign", handler=topic_reassign, help="move partitions to new replicas, or cancel a move (kafka-reassign-partitions)")
    topic_argument(p)
    p.add_argument("--partition", type=int, action="append", required=True, help="partition to move (repeatable)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--replicas", type=lambda v: [int(x) for x in v.split(",")], metavar="ID,ID,...",
                       help="the new replica list (the first is the preferred leader)")
    group.add_argument("--cancel", action="store_true", help="cancel the pending move")
    tsub.add("reassignments", handler=topic_reassignments, help="list pending partition moves")


async def topic_create(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        try:
            await admin.create_topic(args.name, args.partitions or -1, args.replication_factor or -1, dict(args.config))
        except KafkaError as e:
            if args.if_not_exists and e.code.name == "TOPIC_ALREADY_EXISTS":
                pass
            else:
                raise
        (desc,) = await admin.describe_topics([args.name])
    if out.json:
        out.emit_json({"topic": args.name, "partitions": len(desc.partitions), "created": True})
    else:
        out.line(f"created topic {args.name} with {len(desc.partitions)} partition(s)")
    return EXIT_OK


async def topic_list(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        descs = await admin.describe_topics(internal=args.internal)
    if out.json:
        out.emit_json([{"topic": d.name, "partitions": len(d.partitions), "internal": d.is_internal} for d in descs])
    else:
        out.table(["TOPIC", "PARTITIONS", "REPLICATION"],
                  [[d.name, len(d.partitions), len(d.partitions[0].replicas) if d.partitions else 0] for d in descs])
    return EXIT_OK


def partition_flags(p: Any, live_brokers: set[int], unreachable: set[int] | frozenset[int] = frozenset()) -> dict[str, bool]:
    """kafka-topics --describe's partition tests: under-replicated (ISR smaller than the replicas) and
    unavailable (no leader, or a leader that is not a live broker); and ours, leader_unreachable: the
    cluster still names a leader this client could not connect to (it died, and the controller has not
    moved its partitions yet)."""
    return {"under_replicated": len(p.isr) < len(p.replicas),
            "unavailable": p.leader < 0 or p.leader not in live_brokers,
            "leader_unreachable": p.leader >= 0 and p.leader in unreachable}


def _partition_state(flags: dict[str, bool]) -> str:
    if flags["unavailable"]:
        return "offline"
    if flags.get("leader_unreachable"):
        return "leader-unreachable"
    return "under-replicated" if flags["under_replicated"] else "ok"


async def unreachable_brokers(admin: Any, node_ids: set[int], budget_s: float) -> set[int]:
    """The brokers among `node_ids` this client cannot connect to within `budget_s` (all tried at once). A
    broker that died stays in the metadata (and leads its partitions) until the controller notices, after
    its session times out: asking it for offsets would only retry until then, so callers leave it out and
    say so."""
    async def reachable(node_id: int) -> bool:
        try:
            await asyncio.wait_for(admin.client.connection(node_id), budget_s)
            return True
        except (OdradekError, OSError, asyncio.TimeoutError):
            return False

    ids = sorted(node_ids)
    answers = await asyncio.gather(*(reachable(n) for n in ids))
    return {n for n, ok in zip(ids, answers) if not ok}


def _ids(nodes: list[int]) -> str:
    return ",".join(map(str, nodes))


def render_topics(out: Output, descs: list[Any], live_brokers: set[int], *, starts: dict | None = None,
                  ends: dict | None = None, configs: dict[str, dict[str, str]] | None = None,
                  under_replicated: bool = False, unavailable: bool = False,
                  unreachable: set[int] | frozenset[int] = frozenset()) -> None:
    """`topic describe`'s output. With a filter (Kafka's --under-replicated-partitions,
    --unavailable-partitions; both: either) only the matching partitions are shown, and topics without one
    are left out, as kafka-topics does."""
    starts, ends, configs = starts or {}, ends or {}, configs or {}
    filtered = under_replicated or unavailable
    shown = []
    for d in descs:
        parts = []
        for p in d.partitions:
            flags = partition_flags(p, live_brokers, unreachable)
            wanted = ((under_replicated and flags["under_replicated"])
                      or (unavailable and (flags["unavailable"] or flags["leader_unreachable"])))
            if wanted or not filtered:
                parts.append((p, flags))
        if parts or not filtered:
            shown.append((d, parts))
    if out.json:
        out.emit_json([{
            "topic": d.name, "topic_id": str(d.topic_id), "internal": d.is_internal,
            "configs": configs.get(d.name, {}),
            "partitions": [{"partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                            "replicas": p.replicas, "isr": p.isr, "offline_replicas": p.offline_replicas,
                            "elr": p.elr, "last_known_elr": p.last_known_elr,
                            **flags,
                            "start_offset": starts.get(TopicPartition(d.name, p.partition)),
                            "end_offset": ends.get(TopicPartition(d.name, p.partition))} for p, flags in parts],
        } for d, parts in shown])
        return
    for i, (d, parts) in enumerate(shown):
        if i:
            out.line("")
        extra = ", ".join(f"{k}={v}" for k, v in sorted(configs.get(d.name, {}).items()))
        out.line(f"topic {d.name}  id {d.topic_id}  partitions {len(d.partitions)}"
                 + (f"  configs {extra}" if extra else ""))
        # The eligible leader replicas (KIP-966) only when a partition has some: after an ISR shrank below
        # min.insync.replicas, which replicas may still lead without losing committed records.
        with_elr = any(p.elr or p.last_known_elr for p, _ in parts)
        rows = []
        for p, flags in parts:
            tp = TopicPartition(d.name, p.partition)
            elr = [_ids(p.elr) or None, _ids(p.last_known_elr) or None] if with_elr else []
            rows.append([p.partition, p.leader, p.leader_epoch, _ids(p.replicas), _ids(p.isr), *elr,
                         _ids(p.offline_replicas) or None, _partition_state(flags), starts.get(tp), ends.get(tp)])
        out.table(["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", *(["ELR", "LAST-KNOWN-ELR"] if with_elr else []),
                   "OFFLINE", "STATE", "START", "END"], rows)


async def topic_describe(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        descs = await admin.describe_topics(args.names or None, internal=args.internal)
        live = set(admin.client.cluster.brokers)
        leaders = {p.leader for d in descs for p in d.partitions if p.leader in live}
        unreachable = await unreachable_brokers(admin, leaders, min(args.timeout / 2, 3.0))
        # An offline partition has no leader to answer ListOffsets, nor one whose leader is unreachable:
        # asking would only wait for the timeout (or for the controller to move it).
        tps = [TopicPartition(d.name, p.partition) for d in descs for p in d.partitions
               if not (flags := partition_flags(p, live, unreachable))["unavailable"] and not flags["leader_unreachable"]]
        starts = await admin.beginning_offsets(tps) if tps else {}
        ends = await admin.end_offsets(tps) if tps else {}
        configs = {}
        for d in descs:
            try:
                configs[d.name] = {c.name: c.value for c in await admin.describe_configs("topic", d.name)
                                   if not c.is_default}
            except OdradekError:
                configs[d.name] = {}
    render_topics(out, descs, live, starts=starts, ends=ends, configs=configs, unreachable=unreachable,
                  under_replicated=args.under_replicated_partitions, unavailable=args.unavailable_partitions)
    return EXIT_OK


async def topic_delete(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        results = await admin.delete_topics(args.names)
    failed = {n: e for n, e in results.items() if e is not None
              and not (args.if_exists and e.code.name == "UNKNOWN_TOPIC_OR_PARTITION")}
    if out.json:
        out.emit_json([{"topic": n, "deleted": results.get(n) is None, "error": None if results.get(n) is None else
                        results[n].code.name} for n in args.names])
    else:
        for n in args.names:
            if results.get(n) is None:
                out.line(f"deleted topic {n}")
    for n, e in failed.items():
        print_error(str(e))
    return EXIT_FAILED if failed else EXIT_OK


async def topic_elect_leaders(args: argparse.Namespace, out: Output) -> int:
    partitions = None
    if args.topic is not None:
        async with admin_for(args) as admin:
            wanted = args.partition or [p.partition for p in (await admin.describe_topics([args.topic]))[0].partitions]
        partitions = [TopicPartition(args.topic, p) for p in wanted]
    async with admin_for(args) as admin:
        results = await admin.elect_leaders(partitions, election_type=args.election_type)
    rows, failed = [], 0
    for tp, error in sorted(results.items()):
        state = "elected" if error is None else error.code.name
        if error is not None and error.code.name != "ELECTION_NOT_NEEDED":
            failed += 1
        rows.append([tp.topic, tp.partition, state])
    if out.json:
        out.emit_json([{"topic": t, "partition": p, "result": r} for t, p, r in rows])
    else:
        out.table(["TOPIC", "PARTITION", "RESULT"], rows)
    return EXIT_FAILED if failed else EXIT_OK


async def topic_reassign(args: argparse.Namespace, out: Output) -> int:
    targets = {TopicPartition(args.name, p): (None if args.cancel else args.replicas) for p in args.partition}
    async with admin_for(args) as admin:
        results = await admin.alter_partition_reassignments(targets)
    rows = [[tp.topic, tp.partition, "cancelled" if args.cancel and e is None else "started" if e is None else e.code.name]
            for tp, e in sorted(results.items())]
    if out.json:
        out.emit_json([{"topic": t, "partition": p, "result": r} for t, p, r in rows])
    else:
        out.table(["TOPIC", "PARTITION", "RESULT"], rows)
    return EXIT_FAILED if any(e is not None for e in results.values()) else EXIT_OK


async def topic_reassignments(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        pending = await admin.list_partition_reassignments()
    rows = [[tp.topic, tp.partition, ",".join(map(str, m["replicas"])), ",".join(map(str, m["adding"])),
             ",".join(map(str, m["removing"]))] for tp, m in sorted(pending.items())]
    if out.json:
        out.emit_json([{"topic": r[0], "partition": r[1], "replicas": m["replicas"], "adding": m["adding"],
                        "removing": m["removing"]} for r, m in zip(rows, [pending[k] for k in sorted(pending)])])
    else:
        out.table(["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"], rows)
    return EXIT_OK


async def topic_alter(args: argparse.Namespace, out: Output) -> int:
    if args.partitions is None and not args.config and not args.delete_config:
        raise UsageError("nothing to alter: give --partitions, --config or --delete-config")
    done = []
    async with admin_for(args) as admin:
        await admin.describe_topics([args.name])
        if args.partitions is not None:
            result = await admin.create_partitions({args.name: args.partitions})
            if result.get(args.name) is not None:
                raise result[args.name]
            done.append(f"partitions={args.partitions}")
        changes: dict[str, str | None] = dict(args.config)
        changes.update({k: None for k in args.delete_config})
        if changes:
            await admin.alter_configs("topic", args.name, changes)
            done += [f"{k}={v}" if v is not None else f"-{k}" for k, v in changes.items()]
    if out.json:
        out.emit_json({"topic": args.name, "changes": done})
    else:
        out.line(f"altered topic {args.name}: {', '.join(done)}")
    return EXIT_OK
