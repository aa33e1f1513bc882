"""`odradek cluster describe|quorum|features|log-dirs`: the brokers, the controller and the metadata quorum (as
kafka-metadata-quorum.sh), the finalized feature levels (as kafka-features.sh describe), and the log directories. `cluster up|down|status|compose` run a local cluster and
are odradek/cli.py's own."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ..admin import Admin
from ..errors import KafkaError, KafkaTimeoutError, UnsupportedVersionError
from .common import EXIT_OK, Output, SubParsers, UsageError
from .properties import admin_for


def register(sub: SubParsers) -> None:
    """`cluster describe|quorum|log-dirs`."""
    # `cluster up|down|status|compose` are odradek/cli.py's own (they run brokers on this machine) and never reach
    # this parser; the help names them so that `odradek cluster --help` shows the whole family.
    ksub = SubParsers(sub.add(
        "cluster",
        help="brokers, controller, metadata quorum and log dirs; up|down|status|compose run a local cluster",
        epilog="cluster up|down|status|compose run a local cluster of processes on this machine (see odradek cluster up "
               "--help); after a node died, `odradek cluster up --dir DIR` restarts just it"),
        "action")
    ksub.add("describe", handler=cluster_describe, help="cluster id, controller, brokers (fenced or not) and the metadata quorum")
    p = ksub.add("quorum", handler=cluster_quorum, help="the metadata quorum, as kafka-metadata-quorum describe --status|--replication")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--status", action="store_true", help="a summary: leader, epoch, high watermark, lag (default)")
    view.add_argument("--replication", action="store_true",
                      help="one row per voter and observer: log end offset, lag, last fetch and caught-up times")
    p.add_argument("--human-readable", action="store_true", help="with --replication: times as 'N ms ago'")
    ksub.add("features", handler=cluster_features,
             help="the features' finalized levels and supported ranges (kafka-features describe): transaction.version, ...")
    ksub.add("log-dirs", handler=cluster_log_dirs, help="log directories and partition sizes per broker")
    # Listed so that `odradek cluster --help` shows the whole family; odradek/cli.py runs them before this
    # parser is built, so their handler only says so should one be reached another way.
    for name, text in LOCAL_COMMANDS:
        ksub.add(name, handler=_run_locally, globals_=False, add_help=False, help=text).add_argument(
            "rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


LOCAL_COMMANDS = (
    ("up", "start a local cluster's nodes that are not running (all at first; after a node died, just it)"),
    ("down", "stop the local cluster"),
    ("status", "each local node's process and addresses, and the quorum"),
    ("compose", "print a docker-compose.yml for the same nodes"),
)


async def _run_locally(args: argparse.Namespace, out: Output) -> int:
    raise UsageError(f"run it as `odradek cluster {args.action} ...` (see odradek cluster {args.action} --help)")


def quorum_json(quorum: Any) -> dict[str, Any]:
    def replica(r: Any, status: str) -> dict[str, Any]:
        return {"node_id": r.replica_id, "directory_id": None if r.directory_id is None else str(r.directory_id),
                "log_end_offset": r.log_end_offset, "lag": r.lag,
                "last_fetch_timestamp_ms": r.last_fetch_timestamp_ms,
                "last_caught_up_timestamp_ms": r.last_caught_up_timestamp_ms, "status": status}

    return {
        "leader_id": quorum.leader_id, "leader_epoch": quorum.leader_epoch,
        "high_watermark": quorum.high_watermark, "max_follower_lag": quorum.max_follower_lag,
        "max_follower_lag_time_ms": quorum.max_follower_lag_time_ms,
        "voters": [replica(v, "Leader" if v.replica_id == quorum.leader_id else "Follower") for v in quorum.voters],
        "observers": [replica(o, "Observer") for o in quorum.observers],
        "nodes": [{"node_id": n.node_id, "endpoints": [{"listener": name, "host": host, "port": port}
                                                       for name, host, port in n.endpoints]}
                  for n in quorum.nodes],
    }


def _quorum_rows(quorum: Any) -> list[tuple[Any, str]]:
    """Leader first, then the other voters, then observers: kafka-metadata-quorum --replication's order."""
    leader = [v for v in quorum.voters if v.replica_id == quorum.leader_id]
    followers = [v for v in quorum.voters if v.replica_id != quorum.leader_id]
    return ([(v, "Leader") for v in leader] + [(v, "Follower") for v in followers]
            + [(o, "Observer") for o in quorum.observers])


def render_cluster(out: Output, desc: Any, quorum: Any, quorum_error: str | None = None) -> None:
    """`cluster describe`: id, controller, the brokers and (where the broker serves DescribeQuorum) the quorum."""
    if out.json:
        out.emit_json({
            "cluster_id": desc.cluster_id, "controller_id": desc.controller_id,
            "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                         "is_fenced": b.is_fenced} for b in desc.brokers],
            "quorum": None if quorum is None else quorum_json(quorum),
            **({"quorum_error": quorum_error} if quorum is None else {}),
        })
        return
    out.line(f"cluster {desc.cluster_id}  controller {desc.controller_id}")
    out.table(["BROKER", "ADDRESS", "RACK", "FENCED"],
              [[b.node_id, f"{b.host}:{b.port}", b.rack, "yes" if b.is_fenced else "no"] for b in desc.brokers])
    out.line("")
    if quorum is None:
        out.line(f"quorum: not available ({quorum_error})")
        return
    out.line(f"quorum leader {quorum.leader_id}  epoch {quorum.leader_epoch}  "
             f"high watermark {quorum.high_watermark}  max follower lag {quorum.max_follower_lag}")
    out.table(["NODE", "ROLE", "LOG END OFFSET", "LAG"],
              [[r.replica_id, status.lower(), r.log_end_offset, r.lag] for r, status in _quorum_rows(quorum)])


async def _describe_quorum_or_reason(admin: Admin) -> tuple[Any, str | None]:
    """The quorum, or None and why not: an older broker (or one in front of an old-style controller) does not
    serve DescribeQuorum, and a quorum without a leader answers with an error; neither hides the rest."""
    try:
        return await admin.describe_quorum(), None
    except UnsupportedVersionError:
        return None, "the broker does not serve DescribeQuorum"
    except (KafkaError, KafkaTimeoutError) as e:
        return None, str(e)


async def cluster_describe(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        desc = await admin.describe_cluster()
        quorum, reason = await _describe_quorum_or_reason(admin)
    render_cluster(out, desc, quorum, reason)
    return EXIT_OK


async def cluster_features(args: argparse.Namespace, out: Output) -> int:
    """As kafka-features.sh describe: one line per feature, its supported range and finalized level."""
    async with admin_for(args) as admin:
        features = await admin.describe_features()
    names = sorted(set(features.supported) | set(features.finalized))
    if out.json:
        out.emit_json({"epoch": features.finalized_epoch, "features": [
            {"feature": n, "supported_min": features.supported.get(n, (None, None))[0],
             "supported_max": features.supported.get(n, (None, None))[1], "finalized": features.finalized.get(n, 0)}
            for n in names]})
        return EXIT_OK
    out.table(["FEATURE", "SUPPORTED MIN", "SUPPORTED MAX", "FINALIZED", "EPOCH"],
              [[n, *features.supported.get(n, ("-", "-")), features.finalized.get(n, 0), features.finalized_epoch]
               for n in names])
    return EXIT_OK


def _ago(timestamp_ms: int | None, now_ms: int, human_readable: bool) -> str:
    if timestamp_ms is None:
        return "-1"
    return f"{max(now_ms - timestamp_ms, 0)} ms ago" if human_readable else str(timestamp_ms)


def _quorum_members(quorum: Any, replicas: list[Any]) -> str:
    """kafka-metadata-quorum's CurrentVoters/CurrentObservers: [{"id": 1, "endpoints": ["NAME://host:port"]}]."""
    endpoints = {n.node_id: n.endpoints for n in quorum.nodes}
    items = []
    for r in replicas:
        item = f'{{"id": {r.replica_id}'
        if r.directory_id is not None and r.directory_id.int:
            item += f', "directoryId": "{r.directory_id}"'
        if endpoints.get(r.replica_id):
            item += ', "endpoints": [' + ", ".join(
                f'"{name}://{f"[{host}]" if ":" in host else host}:{port}"'
                for name, host, port in endpoints[r.replica_id]) + "]"
        items.append(item + "}")
    return "[" + ", ".join(items) + "]"


def render_quorum(out: Output, quorum: Any, cluster_id: str | None, *, replication: bool,
                  human_readable: bool = False, now_ms: int | None = None) -> None:
    """`cluster quorum`: kafka-metadata-quorum describe --status (key: value lines, the same keys) or
    --replication (one row per replica, the same columns and Lag = leader's log end offset - replica's)."""
    if out.json:
        out.emit_json({"cluster_id": cluster_id, **quorum_json(quorum)})
        return
    if replication:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        rows = [[r.replica_id, r.directory_id, r.log_end_offset, r.lag,
                 _ago(r.last_fetch_timestamp_ms, now_ms, human_readable),
                 _ago(r.last_caught_up_timestamp_ms, now_ms, human_readable), status]
                for r, status in _quorum_rows(quorum)]
        out.table(["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp",
                   "Status"], rows)
        return
    for key, value in [("ClusterId", cluster_id), ("LeaderId", quorum.leader_id),
                       ("LeaderEpoch", quorum.leader_epoch), ("HighWatermark", quorum.high_watermark),
                       ("MaxFollowerLag", quorum.max_follower_lag),
                       ("MaxFollowerLagTimeMs", quorum.max_follower_lag_time_ms),
                       ("CurrentVoters", _quorum_members(quorum, quorum.voters)),
                       ("CurrentObservers", _quorum_members(quorum, quorum.observers))]:
        out.line(f"{key + ':':<24}{value}")


async def cluster_quorum(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        quorum = await admin.describe_quorum()
        cluster_id = admin.client.cluster.cluster_id
    render_quorum(out, quorum, cluster_id, replication=args.replication, human_readable=args.human_readable)
    return EXIT_OK


async def cluster_log_dirs(args: argparse.Namespace, out: Output) -> int:
    async with admin_for(args) as admin:
        dirs = await admin.describe_log_dirs()
    if out.json:
        out.emit_json({str(node): [{**d, "partitions": {str(tp): s for tp, s in d["partitions"].items()}}
                                   for d in ds] for node, ds in dirs.items()})
        return EXIT_OK
    rows = []
    for node, ds in dirs.items():
        for d in ds:
            # An offline directory (its disk failed or filled up) has no partitions to list: it gets a row of
            # its own, so that the operator sees it (DescribeLogDirs answers it KAFKA_STORAGE_ERROR).
            status = "online" if d["error"] == "NONE" else f"offline ({d['error']})"
            if not d["partitions"] or status != "online":
                rows.append([node, d["log_dir"], status, "-", "-", "-"])
            for tp, size in sorted(d["partitions"].items()):
                rows.append([node, d["log_dir"], status, tp.topic, tp.partition, size])
    out.table(["BROKER", "LOG DIR", "STATUS", "TOPIC", "PARTITION", "SIZE"], rows)
    return EXIT_OK
