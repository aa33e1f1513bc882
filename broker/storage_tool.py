"""`odradek storage`: format a node's log directories with a cluster id, as Kafka's `kafka-storage` does.

    odradek storage random-uuid                                   # a new cluster id
    odradek storage format --cluster-id ID -c server.properties   # writes meta.properties in every log dir
    odradek storage info -c server.properties                     # what each log dir belongs to

Every node of a cluster is formatted with the same cluster id before its first start; a node refuses to
join a cluster whose id differs from its own (its log directories', and the metadata log's). A lone node
with no voters configured needs no formatting: it formats itself on first start with a new id.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys

from odradek.replication.metadata_image import new_cluster_id
from odradek.storage.errors import ForeignLogDirectoryError
from odradek.storage.meta_properties import format_log_dir, new_directory_id, read_meta_properties

from .config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek storage", description="Format and inspect a node's log directories.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("random-uuid", help="print a new cluster id (a random UUID as Kafka writes it)")
    fmt = sub.add_parser("format", help="write meta.properties (cluster id, node id) into every log directory")
    fmt.add_argument("--cluster-id", "-t", required=True, metavar="ID", help="the cluster id (from random-uuid)")
    for p in (fmt, sub.add_parser("info", help="show what each log directory belongs to")):
        p.add_argument("--config", "-c", metavar="FILE", required=p is fmt, help="the node's server.properties")
        p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[], help="set a property (repeatable)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="succeed when a directory is already formatted with this cluster and node id")
    return parser


def valid_cluster_id(text: str) -> bool:
    """Kafka's form: 16 bytes as 22 characters of URL-safe base64, not the zero uuid."""
    if len(text) != 22:
        return False
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError):
        return False
    return len(raw) == 16 and any(raw)


def log_dirs(config) -> list[str]:
    dirs = list(config.data_dirs)
    if config.metadata_dir not in dirs:
        dirs.append(config.metadata_dir)
    return [os.path.abspath(os.path.expanduser(d)) for d in dirs]


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command == "random-uuid":
        print(new_cluster_id())
        return 0
    try:
        config = load_config(args.config, args.override, os.environ)
    except (ConfigError, OSError) as e:
        print(f"odradek: {e}", file=sys.stderr)
        return 2
    if args.command == "info":
        for directory in log_dirs(config):
            props = read_meta_properties(directory)
            shown = "not formatted" if props is None else " ".join(f"{k}={v}" for k, v in sorted(props.items()))
            print(f"{directory}: {shown}")
        return 0
    if not valid_cluster_id(args.cluster_id):
        print(f"odradek: {args.cluster_id!r} is not a cluster id (22 characters of base64, as random-uuid prints)",
              file=sys.stderr)
        return 2
    status = 0
    for directory in log_dirs(config):
        try:
            wrote = format_log_dir(directory, node_id=config.node_id, cluster_id=args.cluster_id,
                                   directory_id=new_directory_id(), ignore_formatted=args.ignore_formatted)
        except (ForeignLogDirectoryError, OSError) as e:
            print(f"odradek: {e}", file=sys.stderr)
            status = 1
            continue
        print(f"{'Formatted' if wrote else 'Already formatted'} {directory} (cluster.id={args.cluster_id}, node.id={config.node_id})")
    return status
