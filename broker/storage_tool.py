"""`odradek storage`: format a node's log directories with a cluster id, as Kafka's `kafka-storage` does.

    odradek storage random-uuid                                   # a new cluster id
    odradek storage format --cluster-id ID -c server.properties   # writes meta.properties in every log dir
    odradek storage info -c server.properties                     # what each log dir belongs to
    odradek storage format ... --add-scram 'SCRAM-SHA-512=[name=admin,password=admin-secret]'
    odradek storage format --standalone -t ID -c server.properties  # Kafka 4's quick start: a quorum of one
    odradek storage format ... --feature transaction.version=1    # a feature level other than the default

`--add-scram` (repeatable, Kafka's syntax; also `iterations=`, and `salt=` with `saltedpassword=` in
base64 instead of `password=`) writes the user's SCRAM credential, salted, into `bootstrap.checkpoint` in
the metadata directory; the cluster's first controller writes it into the metadata log with the other
bootstrap records, so the first user can log in before any admin client can reach the cluster.

`--feature NAME=LEVEL` (repeatable, Kafka's syntax) finalizes a feature at a level other than a new cluster's
default, written into `bootstrap.checkpoint` as well: `transaction.version=1` keeps every client on
Transactions V1 (no epoch bump per transaction; the Java client then adds partitions itself). Only the
levels this release can run are accepted (1 or 2 for transaction.version; a level 0 is not offered: for the
clients it is version 1, which differs only in how Kafka's own coordinator lays out its records), and
`share.version=1` gives share groups without KIP-1191's dead-letter queues (1 or 2; Kafka's 0, no share
groups at all, is not offered: `odradek.share.enabled=false` turns them off).

Every node of a cluster is formatted with the same cluster id before its first start; a node refuses to
join a cluster whose id differs from its own (its log directories', and the metadata log's). A lone node
with no voters configured needs no formatting: it formats itself on first start with a new id.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import sys
from typing import Any

from odradek.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism, credential_from_salted_password, salted_password
from odradek.metadata.image import MetadataReplayError, new_cluster_id, replay_all
from odradek.metadata.image import SHARE_VERSION, SHARE_VERSION_FEATURE, TRANSACTION_VERSION, TRANSACTION_VERSION_FEATURE
from odradek.metadata.records import FeatureLevelRecord, UserScramCredentialRecord
from odradek.metadata.snapshot import decode_snapshot, encode_snapshot, image_records
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
    fmt.add_argument("--add-scram", "-S", action="append", default=[], metavar="MECHANISM=[name=...,password=...]",
                     help="a SCRAM user to create with the cluster (repeatable)")
    fmt.add_argument("--feature", "-f", action="append", default=[], metavar="NAME=LEVEL",
                     help="finalize a feature at this level instead of the default (repeatable): transaction.version=1")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="succeed when a directory is already formatted with this cluster and node id")
    fmt.add_argument("--standalone", "-s", action="store_true",
                     help="this controller is the quorum's only voter (Kafka 4's quick start); the config must "
                          "say so: controller.quorum.bootstrap.servers naming only this node's controller listener, "
                          "or controller.quorum.voters naming only this node")
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


BOOTSTRAP_FILE = "bootstrap.checkpoint"


def parse_add_scram(text: str, salt: bytes | None = None) -> Any:  # a UserScramCredentialRecord (a value, not a type)
    """`SCRAM-SHA-512=[name=alice,password=alice-secret]` (or with iterations=, salt= and saltedpassword=,
    base64) as Kafka's `kafka-storage format --add-scram` reads it."""
    m = re.fullmatch(r"\s*([A-Za-z0-9-]+)\s*=\s*\[(.*)\]\s*", text)
    if m is None:
        raise ValueError(f"--add-scram {text!r}: expected MECHANISM=[name=...,password=...]")
    try:
        mechanism = ScramMechanism.from_name(m.group(1))
    except ValueError as e:
        raise ValueError(f"--add-scram: {e}") from None
    fields: dict[str, str] = {}
    for key, quoted, bare in re.findall(r'\s*([a-zA-Z]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,]*))\s*(?:,|$)', m.group(2)):
        fields[key.lower()] = quoted if quoted else bare
    name = fields.get("name")
    if not name:
        raise ValueError("--add-scram: name= is required")
    iterations = int(fields.get("iterations", MIN_ITERATIONS))
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"--add-scram: iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
    if "saltedpassword" in fields:
        if "salt" not in fields:
            raise ValueError("--add-scram: saltedpassword= needs salt=")
        salt = base64.b64decode(fields["salt"])
        salted = base64.b64decode(fields["saltedpassword"])
    elif "password" in fields:
        salt = base64.b64decode(fields["salt"]) if "salt" in fields else (salt or os.urandom(32))
        salted = salted_password(mechanism, fields["password"], salt, iterations)
    else:
        raise ValueError("--add-scram: password= (or salt= and saltedpassword=) is required")
    c = credential_from_salted_password(mechanism, salted, salt, iterations)
    return UserScramCredentialRecord(name=name, mechanism=int(mechanism), salt=c.salt, stored_key=c.stored_key,
                                     server_key=c.server_key, iterations=iterations)


FORMATTABLE_FEATURES = {TRANSACTION_VERSION_FEATURE: (1, TRANSACTION_VERSION), SHARE_VERSION_FEATURE: (1, SHARE_VERSION)}
"""The features `--feature` may set, with the levels it accepts (see the module doc for why not 0)."""


def parse_feature(text: str) -> Any:  # a FeatureLevelRecord (a value, not a type)
    """`transaction.version=1` as Kafka's `kafka-storage format --feature` reads it."""
    name, sep, level = text.partition("=")
    name = name.strip()
    if not sep or not level.strip().lstrip("-").isdigit():
        raise ValueError(f"--feature {text!r}: expected NAME=LEVEL, e.g. transaction.version=1")
    if name not in FORMATTABLE_FEATURES:
        raise ValueError(f"--feature {name}: not a feature this release lets formatting set "
                         f"(it can: {', '.join(sorted(FORMATTABLE_FEATURES))})")
    lo, hi = FORMATTABLE_FEATURES[name]
    if not lo <= int(level) <= hi:
        raise ValueError(f"--feature {name}={level.strip()}: this release runs {name} at levels {lo} to {hi}")
    return FeatureLevelRecord(name=name, feature_level=int(level))


def write_bootstrap_records(directory: str, records: list) -> None:
    path = os.path.join(directory, BOOTSTRAP_FILE)
    with open(path + ".tmp", "wb") as f:
        f.write(encode_snapshot(replay_all(records), 0))
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_bootstrap_records(directory: str) -> tuple:
    """The records `format --add-scram` and `--feature` left for the cluster's first controller (empty without the file)."""
    path = os.path.join(os.path.expanduser(directory), BOOTSTRAP_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ()
    try:
        image = decode_snapshot(data)
    except (MetadataReplayError, ValueError) as e:
        raise MetadataReplayError(f"{path} is not readable: {e}") from None
    return tuple(image_records(image))


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
    if args.standalone and [v.node_id for v in config.voters()] != [config.node_id]:
        print(f"odradek: --standalone makes node {config.node_id} the quorum's only voter, but its config names "
              f"{', '.join(map(str, config.voters())) or 'no voters'}: set controller.quorum.bootstrap.servers to this "
              "node's advertised controller listener, or controller.quorum.voters to this node alone", file=sys.stderr)
        return 2
    if not valid_cluster_id(args.cluster_id):
        print(f"odradek: {args.cluster_id!r} is not a cluster id (22 characters of base64, as random-uuid prints)",
              file=sys.stderr)
        return 2
    try:
        bootstrap = [parse_add_scram(text) for text in args.add_scram] + [parse_feature(text) for text in args.feature]
    except ValueError as e:
        print(f"odradek: {e}", file=sys.stderr)
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
    if bootstrap and status == 0:
        directory = os.path.abspath(os.path.expanduser(config.metadata_dir))
        write_bootstrap_records(directory, bootstrap)
        for record in bootstrap:
            if isinstance(record, FeatureLevelRecord):
                print(f"Finalizing {record.name} at level {record.feature_level} when the cluster starts")
        users = sum(not isinstance(r, FeatureLevelRecord) for r in bootstrap)
        print(f"Wrote {users} SCRAM credential(s) and {len(bootstrap) - users} feature level(s) to "
              f"{os.path.join(directory, BOOTSTRAP_FILE)}")
    return status
