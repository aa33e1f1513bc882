"""The `odradek` command line (every command but `broker`, which odradek/cli.py sends to the daemon).

    odradek [--bootstrap-server HOST:PORT] [--output text|json] [--timeout S] COMMAND ...

    topic create|list|describe|delete|alter    produce TOPIC    consume TOPIC
    group list|describe|delete|reset-offsets   config get|set   perf produce|consume
    acl add|list|remove    quota set|describe
    cluster describe|quorum|log-dirs    (cluster up|down|status|compose: odradek/cli.py, server-side)
    txn list|describe|describe-producers|abort|find-hanging    (as kafka-transactions.sh)

Human output is aligned tables (rich); `--output json` prints one JSON document (JSON lines for
`consume`) for scripts. Diagnostics go to stderr as one line, `odradek: error: ...`, never a traceback.

Exit codes scripts can rely on:

    0  success
    1  the cluster refused or failed the operation (a Kafka error: topic exists, unknown group, ...)
    2  bad usage (unknown option, malformed value)
    3  no broker reachable, or the operation timed out
    130  interrupted (Ctrl-C)

`--bootstrap-server` defaults to $ODRADEK_BOOTSTRAP_SERVERS, else localhost:9092.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import re
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable

from odradek.protocol.errors import ErrorCode

from .admin import Admin
from .cluster import TopicPartition
from .config import ClientConfig, ConsumerConfig, ProducerConfig, default_bootstrap, parse_bootstrap
from .errors import (
    ConfigError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OdradekError,
    UnsupportedVersionError,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130


# The commands this parser runs itself; a server-side command of the same name (odradek/cli.py's `cluster up`)
# is dispatched before this parser sees it.
CLIENT_COMMANDS = frozenset({"topic", "produce", "consume", "group", "config", "cluster", "perf", "txn", "user", "acl",
                             "quota"})


class UsageError(Exception):
    """A bad argument found after parsing (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"odradek: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


# ---------------------------------------------------------------------------------------------- output


class Output:
    def __init__(self, fmt: str, stream: Any = None):
        self.json = fmt == "json"
        self.stream = stream or sys.stdout
        self._console = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            tty = self.stream.isatty()
            self._console = Console(file=self.stream, width=None if tty else 100_000, highlight=False,
                                    soft_wrap=not tty, no_color=not tty)
        return self._console

    def table(self, columns: list[str], rows: list[list[Any]], *, title: str | None = None) -> None:
        from rich import box
        from rich.table import Table

        if title:
            self.console.print(title)
        table = Table(box=box.SIMPLE_HEAD if self.stream.isatty() else None, show_edge=False,
                      pad_edge=False, header_style="bold" if self.stream.isatty() else "")
        for c in columns:
            table.add_column(c, no_wrap=True, overflow="fold")
        for row in rows:
            table.add_row(*("-" if v is None else str(v) for v in row))
        with self.console.capture() as capture:
            self.console.print(table)
        text = capture.get()
        self.stream.write("\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n")

    def line(self, text: str) -> None:
        self.stream.write(text + "\n")

    def emit_json(self, data: Any) -> None:
        self.stream.write(json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, set):
        return sorted(value)
    return str(value)


def _err(message: str) -> None:
    sys.stderr.write(f"odradek: error: {message}\n")


def _warn(message: str) -> None:
    sys.stderr.write(f"odradek: {message}\n")


# ---------------------------------------------------------------------------------------------- parsing helpers


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    if not k:
        raise argparse.ArgumentTypeError(f"empty key in {text!r}")
    return k, v


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date/time (UTC unless it says otherwise)."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected milliseconds or an ISO-8601 time, got {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def _bootstrap(text: str) -> str:
    try:
        parse_bootstrap(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _offset(text: str) -> int | str:
    """A start offset: a number, or Kafka's console consumer words earliest / latest."""
    if text in ("earliest", "latest", "beginning", "end"):
        return {"beginning": "earliest", "end": "latest"}.get(text, text)
    return _non_negative(text)


def _milliseconds(text: str) -> float:
    return _positive(text) / 1000


_RESOURCE_TYPES = {"topic": "topic", "topics": "topic", "broker": "broker", "brokers": "broker",
                   "group": "group", "groups": "group", "broker-logger": "broker_logger", "broker-loggers": "broker_logger"}


def _resource_type(text: str) -> str:
    """topic, broker, group or broker-logger (a node's loggers and their levels); kafka-configs.sh's plural
    entity types too."""
    try:
        return _RESOURCE_TYPES[text]
    except KeyError:
        raise argparse.ArgumentTypeError(f"expected topic, broker, group or broker-logger, got {text!r}") from None


def _global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes, before or after the subcommand.

    Kafka's tutorials put `--bootstrap-server` last (`kafka-topics.sh --create --topic t --bootstrap-server
    h:9092`), kcat users put `-b` first: both must work. The top parser holds the defaults; every subcommand
    parser declares the same options with SUPPRESS defaults, so a value given after the subcommand overrides
    one given before it and an absent one leaves the top's value alone. `-X` collects into its own list
    after the subcommand (an append action would otherwise replace the list given before it).
    """
    keep = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    group = parser.add_argument_group("global options (before or after the command)") if not top else parser
    group.add_argument("--bootstrap-server", "--bootstrap-servers", "-b", type=_bootstrap, default=keep(None),
                       metavar="HOSTS",
                       help="HOST:PORT[,HOST:PORT...] (default: $ODRADEK_BOOTSTRAP_SERVERS or localhost:9092)")
    group.add_argument("--output", "-o", choices=["text", "json"], default=keep("text"), help="output format")
    group.add_argument("--timeout", type=_seconds, default=keep(10.0),
                       help="seconds to wait for the cluster before giving up (default 10)")
    group.add_argument("--command-config", "--producer.config", "--consumer.config", default=keep(None),
                       metavar="FILE", help="client properties file (Kafka's key=value format)")
    group.add_argument("-X", "--producer-property", "--consumer-property", type=_key_value, action="append",
                       dest="properties" if top else "late_properties", default=keep([]), metavar="KEY=VALUE",
                       help="a client property, as kcat's -X (repeatable; wins over --command-config)")
    group.add_argument("--client-id", default=keep("odradek-cli"), help=argparse.SUPPRESS)


class _SubParsers:
    """Adds subcommand parsers that all take the global options."""

    def __init__(self, parent: argparse.ArgumentParser, dest: str):
        self.actions = parent.add_subparsers(dest=dest, metavar=dest.upper(), parser_class=_Parser)
        self.actions.required = True

    def add(self, name: str, *, globals_: bool = True, **kw: Any) -> argparse.ArgumentParser:
        parser = self.actions.add_parser(name, **kw)
        if globals_:
            _global_options(parser, top=False)
        return parser


def _topic_argument(p: argparse.ArgumentParser, *, many: bool = False) -> None:
    """TOPIC as a positional (rpk, kcat -t aside) or as Kafka's `--topic` (kafka-topics.sh, console tools)."""
    if many:
        p.add_argument("names", nargs="*", metavar="TOPIC")
        p.add_argument("--topic", "-t", dest="topic_options", action="append", default=[], metavar="TOPIC",
                       help="Kafka's spelling of TOPIC (repeatable)")
    else:
        p.add_argument("name", nargs="?", metavar="TOPIC")
        p.add_argument("--topic", "-t", dest="topic_option", default=None, metavar="TOPIC",
                       help="Kafka's spelling of TOPIC")


def build_parser(server_commands: tuple[tuple[str, str], ...] = ()) -> argparse.ArgumentParser:
    # No abbreviations here (nor on `acl`): kafka-acls.sh's --producer / --consumer, given after the command,
    # would otherwise be taken for ambiguous abbreviations of the global --producer.config / --consumer.config
    # while the arguments are sorted out, before the subcommand's parser (which has them exactly) sees them.
    parser = _Parser(
        allow_abbrev=False,
        prog="odradek", description="Odradek command line: topics, records, groups, configs, perf.",
        epilog="exit codes: 0 success, 1 the cluster refused or failed the operation, 2 bad usage, "
               "3 no broker reachable or timed out, 130 interrupted",
    )
    _global_options(parser, top=True)
    sub = _SubParsers(parser, "command")
    # Commands that odradek/cli.py sends elsewhere before this parser runs (`broker start`): listed here
    # so that `odradek --help` shows every command.
    for name, help_text in server_commands:
        if name in CLIENT_COMMANDS:  # `cluster up|down|...` share the client's `cluster`, whose help names them
            continue
        sub.add(name, globals_=False, help=help_text, add_help=False).add_argument(
            "rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    # topic
    tsub = _SubParsers(sub.add("topic", help="create, list, describe, alter and delete topics"), "action")
    p = tsub.add("create", help="create a topic")
    _topic_argument(p)
    p.add_argument("--partitions", "-p", type=_positive, default=None)
    p.add_argument("--replication-factor", "--replicas", "-r", type=_positive, default=None)
    p.add_argument("--config", "--topic-config", "-c", type=_key_value, action="append", default=[],
                   metavar="KEY=VALUE")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic already exists")
    p = tsub.add("list", help="list topics")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p = tsub.add("describe", help="partitions, leaders, replicas, ISR and offsets of topics")
    _topic_argument(p, many=True)
    p.add_argument("--internal", action="store_true")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a live leader")
    p = tsub.add("delete", help="delete topics")
    _topic_argument(p, many=True)
    p.add_argument("--if-exists", action="store_true", help="succeed if a topic does not exist")
    p = tsub.add("alter", help="add partitions or change configs")
    _topic_argument(p)
    p.add_argument("--partitions", "-p", type=_positive, default=None, help="new total partition count")
    p.add_argument("--config", "--topic-config", "-c", type=_key_value, action="append", default=[],
                   metavar="KEY=VALUE")
    p.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    p = tsub.add("elect-leaders", help="move leadership back to preferred replicas (kafka-leader-election)")
    p.add_argument("--topic", "-t", dest="topic", default=None, help="one topic (default: every partition)")
    p.add_argument("--partition", type=int, action="append", default=[], help="partitions of --topic (repeatable)")
    p.add_argument("--election-type", choices=["preferred", "unclean", "PREFERRED", "UNCLEAN"], default="preferred")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition (Kafka's spelling; the default)")
    p = tsub.add("reassign", help="move partitions to new replicas, or cancel a move (kafka-reassign-partitions)")
    _topic_argument(p)
    p.add_argument("--partition", type=int, action="append", required=True, help="partition to move (repeatable)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--replicas", type=lambda v: [int(x) for x in v.split(",")], metavar="ID,ID,...",
                       help="the new replica list (the first is the preferred leader)")
    group.add_argument("--cancel", action="store_true", help="cancel the pending move")
    tsub.add("reassignments", help="list pending partition moves")

    # produce
    p = sub.add("produce", help="send lines from stdin or a file as records")
    _topic_argument(p)
    p.add_argument("--file", "-f", default="-", help="read lines from this file (default stdin)")
    p.add_argument("--key-separator", "-K", default=None, help="split each line into KEY<sep>VALUE")
    p.add_argument("--key", "-k", default=None, help="the same key for every record")
    p.add_argument("--property", dest="reader_properties", type=_key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="Kafka's console producer properties: parse.key, key.separator, null.marker")
    p.add_argument("--header", "-H", type=_key_value, action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--partition", "-p", type=_non_negative, default=None)
    p.add_argument("--compression", "--compression-codec", "-z", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   default=None)
    p.add_argument("--acks", "--request-required-acks", choices=["0", "1", "-1", "all"], default=None)
    p.add_argument("--linger-ms", type=_non_negative, default=None)
    p.add_argument("--null-empty", "--tombstone", "-Z", action="store_true",
                   help="send an empty value as null (a tombstone)")

    # consume
    p = sub.add("consume", help="print records")
    _topic_argument(p)
    p.add_argument("--group", "-g", default=None, help="consume as a member of this group (commits offsets)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--from-end", action="store_true")
    start.add_argument("--offset", type=_offset, default=None, metavar="OFFSET|earliest|latest",
                       help="start at this offset (a number needs --partition)")
    start.add_argument("--timestamp", type=_timestamp, default=None, metavar="MS|ISO-8601",
                       help="start at the first record at or after this time")
    p.add_argument("--partition", "--partitions", "-p", type=_non_negative, action="append", default=None)
    p.add_argument("--count", "--max-messages", "--num", "-n", "-c", type=_positive, default=None,
                   help="exit after this many records")
    idle = p.add_mutually_exclusive_group()
    idle.add_argument("--idle-timeout", type=_seconds, default=None,
                      help="exit when no record arrives for this many seconds")
    idle.add_argument("--timeout-ms", dest="idle_timeout", type=_milliseconds, default=None,
                      help="the same in milliseconds (Kafka's console consumer)")
    p.add_argument("--format", "-F", "-f", default=None,
                   help="template: {topic} {partition} {offset} {timestamp} {key} {value} {headers}")
    p.add_argument("--print-key", action="store_true", help="print KEY<tab>VALUE")
    p.add_argument("--property", dest="formatter_properties", type=_key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="Kafka's console consumer properties: print.key, print.timestamp, print.partition, "
                        "print.offset, print.headers, print.value, key.separator, line.separator, "
                        "headers.separator, null.literal")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default=None)
    p.add_argument("--no-commit", action="store_true", help="with --group: do not commit offsets")

    # group
    gsub = _SubParsers(sub.add("group", help="list, describe, delete consumer groups and reset their offsets"),
                       "action")
    gsub.add("list", help="list groups")
    p = gsub.add("describe", help="members, committed offsets and lag per partition")
    _group_argument(p)
    p = gsub.add("delete", help="delete groups (they must have no members)")
    _group_argument(p, many=True)
    p = gsub.add("reset-offsets", help="move a group's committed offsets (dry run unless --execute)")
    _group_argument(p)
    p.add_argument("--topic", "-t", action="append", required=True, help="TOPIC or TOPIC:P1,P2")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=_non_negative, default=None)
    target.add_argument("--to-timestamp", "--to-datetime", type=_timestamp, default=None, metavar="MS|ISO-8601")
    target.add_argument("--shift-by", type=int, default=None)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")

    # config
    csub = _SubParsers(sub.add("config", help="read and change topic, broker and group configs"), "action")
    p = csub.add("get", help="show configs")
    p.add_argument("resource_type", type=_resource_type, metavar="{topic,broker,group,broker-logger}")
    p.add_argument("name")
    p.add_argument("keys", nargs="*")
    p.add_argument("--all", action="store_true", help="include defaults")
    p = csub.add("set", help="set or delete configs (incremental)")
    p.add_argument("resource_type", type=_resource_type, metavar="{topic,broker,group,broker-logger}")
    p.add_argument("name")
    p.add_argument("pairs", nargs="*", type=_key_value, metavar="KEY=VALUE")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]",
                   help="kafka-configs.sh's spelling of KEY=VALUE pairs")
    p.add_argument("--delete", "--delete-config", action="append", default=[], metavar="KEY")

    # user (SCRAM credentials, as kafka-configs.sh --entity-type users --alter --add-config SCRAM-SHA-512=[...])
    usub = _SubParsers(sub.add("user", help="create, list and delete SCRAM users"), "action")
    p = usub.add("create", help="create a SCRAM user, or change its password")
    p.add_argument("name")
    p.add_argument("--password", help="the password (default: read from the terminal, or a line of stdin)")
    p.add_argument("--mechanism", "-m", action="append", default=[], choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="repeatable (default SCRAM-SHA-512)")
    p.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096 to 16384 (default 4096)")
    p = usub.add("list", help="users and their SCRAM mechanisms")
    p.add_argument("names", nargs="*", metavar="USER")
    p = usub.add("delete", help="delete a SCRAM user's credentials")
    p.add_argument("name")
    p.add_argument("--mechanism", "-m", action="append", default=[], choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="repeatable (default: every mechanism the user has)")

    # acl (kafka-acls.sh) and quota (kafka-configs.sh --entity-type users/clients)
    asub = _SubParsers(sub.add("acl", help="add, list and remove ACLs (kafka-acls)", allow_abbrev=False), "action")
    for action, help_text in (("add", "add ACLs"), ("list", "list ACLs (all, or those matching the options)"),
                              ("remove", "remove the ACLs matching the options")):
        p = asub.add(action, help=help_text)
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
    qsub = _SubParsers(sub.add("quota", help="set and describe client quotas (kafka-configs --entity-type users/clients/ips)"),
                       "action")
    for action, help_text in (("set", "set or delete quota values of a user, a client id, or both"),
                              ("describe", "show quotas (all, or of the given entity)")):
        p = qsub.add(action, help=help_text)
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
            p.add_argument("pairs", nargs="*", type=_key_value, metavar="KEY=VALUE",
                           help="producer_byte_rate, consumer_byte_rate, request_percentage; for an ip, "
                                "connection_creation_rate")
            p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]")
            p.add_argument("--delete", "--delete-config", action="append", default=[], metavar="KEY")

    # cluster
    # `cluster up|down|status|compose` are odradek/cli.py's own (they run brokers on this machine) and never reach
    # this parser; the help names them so that `odradek cluster --help` shows the whole family.
    ksub = _SubParsers(sub.add(
        "cluster",
        help="brokers, controller, metadata quorum and log dirs; up|down|status|compose run a local cluster",
        epilog="cluster up|down|status|compose: run a local cluster (server-side; see odradek cluster up --help)"),
        "action")
    ksub.add("describe", help="cluster id, controller, brokers (fenced or not) and the metadata quorum")
    p = ksub.add("quorum", help="the metadata quorum, as kafka-metadata-quorum describe --status|--replication")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--status", action="store_true", help="a summary: leader, epoch, high watermark, lag (default)")
    view.add_argument("--replication", action="store_true",
                      help="one row per voter and observer: log end offset, lag, last fetch and caught-up times")
    p.add_argument("--human-readable", action="store_true", help="with --replication: times as 'N ms ago'")
    ksub.add("log-dirs", help="log directories and partition sizes per broker")

    # txn
    xsub = _SubParsers(sub.add("txn", help="transactions: list, describe, abort a hanging one (kafka-transactions.sh)"),
                       "action")
    p = xsub.add("list", help="transactional ids every coordinator knows, with their state")
    p.add_argument("--state", action="append", default=[], metavar="STATE", help="only these states (Ongoing, ...)")
    p.add_argument("--producer-id", action="append", type=int, default=[], metavar="ID")
    p.add_argument("--duration-filter", type=_non_negative, default=None, metavar="MS",
                   help="only transactions running longer than MS")
    p.add_argument("--transactional-id-pattern", default=None, metavar="REGEX",
                   help="only transactional ids this regular expression matches whole (ListTransactions v2)")
    p = xsub.add("describe", help="one transactional id: producer, epoch, state, timeout, partitions")
    p.add_argument("transactional_id", nargs="?", metavar="TRANSACTIONAL_ID")
    p.add_argument("--transactional-id", dest="transactional_id_option", default=None, metavar="TRANSACTIONAL_ID")
    p = xsub.add("describe-producers", help="the active producers of a partition (id, epoch, open transaction)")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=_non_negative, required=True)
    p.add_argument("--broker-id", type=int, default=None, help="ask this replica instead of the leader")
    p = xsub.add("find-hanging", help="open transactions on partitions that no coordinator will close")
    p.add_argument("--topic", "-t", default=None, help="only this topic (or --broker-id)")
    p.add_argument("--partition", type=_non_negative, default=None, help="with --topic: only this partition")
    p.add_argument("--broker-id", type=int, default=None, help="only the partitions this broker has a replica of")
    p.add_argument("--max-transaction-timeout", type=_non_negative, default=15, metavar="MINUTES",
                   help="only transactions whose producer wrote nothing for longer than this (default 15)")
    p = xsub.add("abort", help="abort a hanging transaction on a partition (writes its ABORT marker)")
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=_non_negative, required=True)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--start-offset", type=_non_negative, default=None,
                     help="the first offset of the open transaction (as DescribeProducers shows it)")
    who.add_argument("--producer-id", type=int, default=None, help="with --producer-epoch and --coordinator-epoch")
    p.add_argument("--producer-epoch", type=int, default=None)
    p.add_argument("--coordinator-epoch", type=int, default=None)

    # perf
    psub = _SubParsers(sub.add("perf", help="measure throughput and latency"), "action")
    p = psub.add("produce", help="produce records as fast as allowed")
    _topic_argument(p)
    p.add_argument("--num-records", "-n", type=_positive, default=100_000)
    p.add_argument("--record-size", "-s", type=_positive, default=100)
    p.add_argument("--throughput", type=_positive, default=None, help="records per second (default: unlimited)")
    p.add_argument("--acks", choices=["0", "1", "-1", "all"], default=None)
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default=None)
    p.add_argument("--batch-size", type=_positive, default=None)
    p.add_argument("--linger-ms", type=_non_negative, default=None)
    p.add_argument("--keys", type=_non_negative, default=0, help="use this many distinct keys (0: no keys)")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="draw throughput and latency (needs matplotlib)")
    p.add_argument("--no-progress", action="store_true")
    p = psub.add("consume", help="consume records as fast as possible")
    _topic_argument(p)
    p.add_argument("--num-records", "--messages", "-n", type=_positive, default=100_000)
    p.add_argument("--group", "-g", default=None)
    p.add_argument("--plot", default=None, metavar="FILE.png")
    p.add_argument("--no-progress", action="store_true")
    return parser


def _group_argument(p: argparse.ArgumentParser, *, many: bool = False) -> None:
    """GROUP as a positional or as kafka-consumer-groups.sh's `--group`."""
    if many:
        p.add_argument("groups", nargs="*", metavar="GROUP")
        p.add_argument("--group", "-g", dest="group_options", action="append", default=[], metavar="GROUP")
    else:
        p.add_argument("group", nargs="?", metavar="GROUP")
        p.add_argument("--group", "-g", dest="group_option", default=None, metavar="GROUP")


def _normalize(args: argparse.Namespace) -> None:
    """One spelling per value after parsing: positional or Kafka's option, -X before and after the command."""
    args.properties = list(args.properties) + list(getattr(args, "late_properties", []))
    if hasattr(args, "topic_option"):
        if args.name is not None and args.topic_option is not None and args.name != args.topic_option:
            raise UsageError(f"two topics given: {args.name!r} and --topic {args.topic_option!r}")
        args.name = args.name or args.topic_option
        if args.name is None:
            raise UsageError("no topic given: add TOPIC or --topic TOPIC")
        args.topic = args.name
    if hasattr(args, "topic_options"):
        args.names = list(args.names) + [t for t in args.topic_options if t not in args.names]
        if args.action == "delete" and not args.names:
            raise UsageError("no topic given: add TOPIC or --topic TOPIC")
    if hasattr(args, "group_option"):
        if args.group is not None and args.group_option is not None and args.group != args.group_option:
            raise UsageError(f"two groups given: {args.group!r} and --group {args.group_option!r}")
        args.group = args.group or args.group_option
        if args.group is None:
            raise UsageError("no group given: add GROUP or --group GROUP")
    if hasattr(args, "group_options"):
        args.groups = list(args.groups) + [g for g in args.group_options if g not in args.groups]
        if not args.groups:
            raise UsageError("no group given: add GROUP or --group GROUP")
    if getattr(args, "add_config", None):
        for item in args.add_config:
            args.pairs += [_key_value(pair) for pair in item.split(",") if pair]


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None, server_commands: tuple[tuple[str, str], ...] = ()) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(server_commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_USAGE
    if args.command in dict(server_commands) and args.command not in CLIENT_COMMANDS:
        _err(f"put '{args.command}' first: odradek {args.command} ... (it takes no client options)")
        return EXIT_USAGE
    try:
        _normalize(args)
        args.client_properties = _client_properties(args)
    except (UsageError, ConfigError, argparse.ArgumentTypeError) as e:
        _err(str(e))
        return EXIT_USAGE
    except OSError as e:
        _err(f"cannot read {args.command_config}: {e.strerror or e}")
        return EXIT_USAGE
    args.bootstrap_server = (args.bootstrap_server or args.client_properties.pop("bootstrap_servers", None)
                             or default_bootstrap())
    try:
        parse_bootstrap(args.bootstrap_server)
    except ConfigError as e:
        _err(f"bad bootstrap server: {e}")
        return EXIT_USAGE
    out = Output(args.output)
    handler = _HANDLERS[(args.command, getattr(args, "action", None))]
    try:
        return _run(handler(args, out))
    except KeyboardInterrupt:
        _warn("interrupted")
        return EXIT_INTERRUPTED
    except UsageError as e:
        _err(str(e))
        return EXIT_USAGE
    except ConfigError as e:
        _err(str(e))
        return EXIT_USAGE
    except (KafkaConnectionError, KafkaTimeoutError) as e:
        _err(f"{e} (is a broker running at {args.bootstrap_server}?)" if isinstance(e, KafkaConnectionError) else str(e))
        return EXIT_UNREACHABLE
    except KafkaError as e:
        _err(str(e))
        return EXIT_FAILED
    except OdradekError as e:
        _err(str(e))
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:
        _err(str(e))
        return EXIT_FAILED


def _run(coro: Any) -> int:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    return runner(coro)


def _common(args: argparse.Namespace) -> dict[str, Any]:
    timeout_ms = int(args.timeout * 1000)
    return dict(bootstrap_servers=args.bootstrap_server, client_id=args.client_id,
                default_api_timeout_ms=timeout_ms, request_timeout_ms=max(timeout_ms, 5_000),
                connect_timeout_ms=min(timeout_ms, 10_000))


# Security settings are accepted in the client-properties syntax so that a properties file written for
# Kafka's tools is understood; only what the bundled client can do is allowed through.
_PROPERTY_ALIASES = {"sasl.mechanisms": "sasl.mechanism"}
_JAVA_ONLY = {"ssl.truststore.location": "ssl.ca.location"}  # ssl.keystore.location is librdkafka's too (PKCS12)


def _read_properties(path: str) -> dict[str, str]:
    """A Java properties file as Kafka's tools read it: key=value or key: value, # and ! comments."""
    props = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if cut <= 0:
                raise UsageError(f"{path}:{number}: expected key=value, got {line!r}")
            props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def _client_properties(args: argparse.Namespace) -> dict[str, Any]:
    """--command-config FILE, then -X key=value, as ClientConfig field names (dotted names to snake_case)."""
    props: dict[str, str] = _read_properties(args.command_config) if args.command_config else {}
    props.update(dict(args.properties))
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key == "sasl.jaas.config":  # Kafka's tools: username="..." password="..." of the login module
            for option, text in re.findall(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"', value):
                out[f"sasl_{option}"] = re.sub(r"\\(.)", r"\1", text)
            continue
        if key in _JAVA_ONLY:  # Java key/trust store settings: say what librdkafka's names are
            raise UsageError(f"{key} is a Java client setting; use {_JAVA_ONLY[key]} (PEM files) instead")
        key = _PROPERTY_ALIASES.get(key, key)
        out[key.replace(".", "_").replace("-", "_")] = value
    return out


def _config(cls: type, args: argparse.Namespace, defaults: dict[str, Any] | None = None, **options: Any) -> Any:
    """A client config: the command's defaults, then client properties, then options typed on the line.

    `options` holds the command's own settings; a None there means "not given" and yields to a property.
    A property of another kind of client (acks for a consumer) is ignored with a note, as Kafka's tools
    ignore configs they do not use, so that one properties file serves every command; a name no client
    knows is a usage error (a typo).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    merged: dict[str, Any] = {**_common(args), **(defaults or {})}
    for name, raw in args.client_properties.items():
        if name not in fields:
            if any(name in {f.name for f in dataclasses.fields(other)} for other in (ProducerConfig, ConsumerConfig)):
                _warn(f"ignoring client property {name.replace('_', '.')!r}: this command does not use it")
                continue
            raise UsageError(f"unknown client property {name.replace('_', '.')!r}")
        merged[name] = _convert(name, raw, fields[name].type)
    merged.update({k: v for k, v in options.items() if v is not None})
    return cls(**merged)


def _convert(name: str, raw: str, annotation: Any) -> Any:
    """A property's text as the field's type (the dataclass annotations are strings: "int | None", ...)."""
    kinds = str(annotation).replace(" ", "").split("|")
    if "bool" in kinds:
        if raw.lower() not in ("true", "false"):
            raise UsageError(f"{name.replace('_', '.')} expects true or false, got {raw!r}")
        return raw.lower() == "true"
    if "int" in kinds and "str" not in kinds:
        try:
            return int(raw)
        except ValueError:
            raise UsageError(f"{name.replace('_', '.')} expects a whole number, got {raw!r}") from None
    return raw


def _admin(args: argparse.Namespace) -> Admin:
    return Admin(_config(ClientConfig, args))


# ---------------------------------------------------------------------------------------------- topics


async def topic_create(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
        descs = await admin.describe_topics(internal=args.internal)
    if out.json:
        out.emit_json([{"topic": d.name, "partitions": len(d.partitions), "internal": d.is_internal} for d in descs])
    else:
        out.table(["TOPIC", "PARTITIONS", "REPLICATION"],
                  [[d.name, len(d.partitions), len(d.partitions[0].replicas) if d.partitions else 0] for d in descs])
    return EXIT_OK


def partition_flags(p: Any, live_brokers: set[int]) -> dict[str, bool]:
    """kafka-topics --describe's partition tests: under-replicated (ISR smaller than the replicas) and
    unavailable (no leader, or a leader that is not a live broker)."""
    return {"under_replicated": len(p.isr) < len(p.replicas),
            "unavailable": p.leader < 0 or p.leader not in live_brokers}


def _partition_state(flags: dict[str, bool]) -> str:
    if flags["unavailable"]:
        return "offline"
    return "under-replicated" if flags["under_replicated"] else "ok"


def _ids(nodes: list[int]) -> str:
    return ",".join(map(str, nodes))


def render_topics(out: Output, descs: list[Any], live_brokers: set[int], *, starts: dict | None = None,
                  ends: dict | None = None, configs: dict[str, dict[str, str]] | None = None,
                  under_replicated: bool = False, unavailable: bool = False) -> None:
    """`topic describe`'s output. With a filter (Kafka's --under-replicated-partitions,
    --unavailable-partitions; both: either) only the matching partitions are shown, and topics without one
    are left out, as kafka-topics does."""
    starts, ends, configs = starts or {}, ends or {}, configs or {}
    filtered = under_replicated or unavailable
    shown = []
    for d in descs:
        parts = []
        for p in d.partitions:
            flags = partition_flags(p, live_brokers)
            wanted = (under_replicated and flags["under_replicated"]) or (unavailable and flags["unavailable"])
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
        rows = []
        for p, flags in parts:
            tp = TopicPartition(d.name, p.partition)
            rows.append([p.partition, p.leader, p.leader_epoch, _ids(p.replicas), _ids(p.isr),
                         _ids(p.offline_replicas) or None, _partition_state(flags), starts.get(tp), ends.get(tp)])
        out.table(["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "OFFLINE", "STATE", "START", "END"], rows)


async def topic_describe(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
        descs = await admin.describe_topics(args.names or None, internal=args.internal)
        live = set(admin.client.cluster.brokers)
        # An offline partition has no leader to answer ListOffsets: asking would only wait for the timeout.
        tps = [TopicPartition(d.name, p.partition) for d in descs for p in d.partitions
               if not partition_flags(p, live)["unavailable"]]
        starts = await admin.beginning_offsets(tps) if tps else {}
        ends = await admin.end_offsets(tps) if tps else {}
        configs = {}
        for d in descs:
            try:
                configs[d.name] = {c.name: c.value for c in await admin.describe_configs("topic", d.name)
                                   if not c.is_default}
            except OdradekError:
                configs[d.name] = {}
    render_topics(out, descs, live, starts=starts, ends=ends, configs=configs,
                  under_replicated=args.under_replicated_partitions, unavailable=args.unavailable_partitions)
    return EXIT_OK


async def topic_delete(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
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
        _err(str(e))
    return EXIT_FAILED if failed else EXIT_OK


async def topic_elect_leaders(args: argparse.Namespace, out: Output) -> int:
    partitions = None
    if args.topic is not None:
        async with _admin(args) as admin:
            wanted = args.partition or [p.partition for p in (await admin.describe_topics([args.topic]))[0].partitions]
        partitions = [TopicPartition(args.topic, p) for p in wanted]
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
        results = await admin.alter_partition_reassignments(targets)
    rows = [[tp.topic, tp.partition, "cancelled" if args.cancel and e is None else "started" if e is None else e.code.name]
            for tp, e in sorted(results.items())]
    if out.json:
        out.emit_json([{"topic": t, "partition": p, "result": r} for t, p, r in rows])
    else:
        out.table(["TOPIC", "PARTITION", "RESULT"], rows)
    return EXIT_FAILED if any(e is not None for e in results.values()) else EXIT_OK


async def topic_reassignments(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
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


# ---------------------------------------------------------------------------------------------- produce / consume


# Kafka's console producer (LineMessageReader) and console consumer (DefaultMessageFormatter) properties.
_READER_PROPERTIES = {"parse.key": "false", "key.separator": "\t", "null.marker": None}
_FORMATTER_PROPERTIES = {"print.timestamp": "false", "print.key": "false", "print.value": "true",
                         "print.partition": "false", "print.offset": "false", "print.headers": "false",
                         "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
                         "null.literal": "null"}


def _known_properties(given: list[tuple[str, str]], known: dict[str, str | None], option: str) -> dict[str, str]:
    props = {k: v for k, v in known.items() if v is not None}
    for key, value in given:
        if key not in known:
            raise UsageError(f"unknown {option} {key!r} (known: {', '.join(known)})")
        props[key] = value.strip().lower() if key.startswith(("print.", "parse.")) else value
    return props


def _reader_properties(args: argparse.Namespace) -> dict[str, str]:
    """--property (Kafka's spelling) and --key-separator (kcat's -K) as one reader configuration."""
    props = _known_properties(args.reader_properties, _READER_PROPERTIES, "--property")
    if args.key_separator is not None:
        props.update({"parse.key": "true", "key.separator": args.key_separator})
    if props["parse.key"] == "true" and args.key is not None:
        raise UsageError("--key and a key separator both give the key: pick one")
    return props


async def produce(args: argparse.Namespace, out: Output) -> int:
    from .producer import Producer

    config = _config(ProducerConfig, args, acks=args.acks, compression_type=args.compression,
                     linger_ms=args.linger_ms, max_block_ms=int(args.timeout * 1000))
    reader = _reader_properties(args)
    headers = [(k, v.encode()) for k, v in args.header]
    sep = reader["key.separator"].encode() if reader.get("parse.key") == "true" else None
    null_marker = reader["null.marker"].encode() if "null.marker" in reader else None
    fixed_key = args.key.encode() if args.key is not None else None
    stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    sent = 0
    failures: list[BaseException] = []
    partitions: dict[int, int] = {}
    try:
        async with Producer(config) as producer:
            await producer.partitions_for(args.topic)

            def delivered(md: Any, error: BaseException | None) -> None:
                if error is not None:
                    failures.append(error)
                else:
                    partitions[md.partition] = partitions.get(md.partition, 0) + 1

            for raw in stream:
                line = raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw
                key = fixed_key
                value: bytes | None = line
                if sep is not None:
                    if sep not in line:
                        raise UsageError(f"line {sent + 1} has no key separator {sep.decode()!r}")
                    key, value = line.split(sep, 1)
                if null_marker is not None:
                    key = None if key == null_marker else key
                    value = None if value == null_marker else value
                if args.null_empty and not value:
                    value = None
                await producer.send(args.topic, value, key, partition=args.partition, headers=headers,
                                    on_delivery=delivered)
                sent += 1
            await producer.flush()
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if failures:
        _err(f"{len(failures)} of {sent} record(s) failed: {failures[0]}")
        code = EXIT_UNREACHABLE if isinstance(failures[0], (KafkaConnectionError, KafkaTimeoutError)) else EXIT_FAILED
        return code
    if out.json:
        out.emit_json({"topic": args.topic, "records": sent, "partitions": {str(k): v for k, v in sorted(partitions.items())}})
    else:
        sys.stderr.write(f"produced {sent} record(s) to {args.topic}\n")
    return EXIT_OK


def _text(value: bytes | None) -> str:
    if value is None:
        return "null"
    return value.decode("utf-8", "backslashreplace")


def _record_json(record: Any) -> dict[str, Any]:
    return {
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "timestamp_type": "LogAppendTime" if record.timestamp_type else "CreateTime",
        "key": None if record.key is None else _text(record.key),
        "value": None if record.value is None else _text(record.value),
        "headers": {k: (None if v is None else _text(v)) for k, v in record.headers},
    }


class _Template:
    FIELDS = {"topic", "partition", "offset", "timestamp", "key", "value", "headers", "timestamp_type", "iso_time"}

    def __init__(self, template: str):
        template = template.encode().decode("unicode_escape")
        for name in re.findall(r"{([^{}:!]*)", template):
            if name not in self.FIELDS:
                raise UsageError(f"unknown field {{{name}}} in --format (known: {', '.join(sorted(self.FIELDS))})")
        self.template = template

    def render(self, record: Any) -> str:
        fields = _record_json(record)
        fields["key"] = _text(record.key)
        fields["value"] = _text(record.value)
        fields["headers"] = ",".join(f"{k}={_text(v)}" for k, v in record.headers)
        fields["iso_time"] = datetime.fromtimestamp(record.timestamp / 1000, timezone.utc).isoformat(timespec="milliseconds")
        return self.template.format(**fields)


class _KafkaFormatter:
    """kafka-console-consumer.sh's DefaultMessageFormatter: `--property print.key=true` and friends.

    The layout is Kafka's: [CreateTime:TS] [Partition:P] [Offset:O] [HEADERS|NO_HEADERS] [KEY] [VALUE], the
    columns joined by key.separator, each record ended by line.separator, null keys and values as
    null.literal. `--print-key` is print.key=true.
    """

    def __init__(self, args: argparse.Namespace):
        props = _known_properties(args.formatter_properties, _FORMATTER_PROPERTIES, "--property")
        if args.print_key:
            props["print.key"] = "true"
        self.columns = [name for name in ("timestamp", "partition", "offset", "headers", "key", "value")
                        if props[f"print.{name}"] == "true"]
        self.column_separator = props["key.separator"]
        self.line_separator = props["line.separator"]
        self.headers_separator = props["headers.separator"]
        self.null_literal = props["null.literal"]

    def _bytes(self, value: bytes | None) -> str:
        return self.null_literal if value is None else value.decode("utf-8", "backslashreplace")

    def render(self, record: Any) -> str:
        cells = []
        for column in self.columns:
            if column == "timestamp":
                kind = "LogAppendTime" if record.timestamp_type else "CreateTime"
                cells.append(f"{kind}:{record.timestamp}")
            elif column == "partition":
                cells.append(f"Partition:{record.partition}")
            elif column == "offset":
                cells.append(f"Offset:{record.offset}")
            elif column == "headers":
                cells.append(self.headers_separator.join(f"{k}:{self._bytes(v)}" for k, v in record.headers)
                             or "NO_HEADERS")
            else:
                cells.append(self._bytes(record.key if column == "key" else record.value))
        # After the last column Kafka writes the line separator instead of the column separator.
        return self.column_separator.join(cells) + self.line_separator if cells else ""


async def consume(args: argparse.Namespace, out: Output) -> int:
    from .consumer import Consumer

    if args.offset in ("earliest", "latest"):  # Kafka's console consumer spells the two ends as offsets
        args.from_beginning, args.from_end, args.offset = args.offset == "earliest", args.offset == "latest", None
    if args.offset is not None and not args.partition:
        raise UsageError("--offset needs --partition")
    template = _Template(args.format) if args.format else None
    formatter = _KafkaFormatter(args) if args.formatter_properties or args.print_key else None
    reset = "earliest" if args.from_beginning else "latest"
    config = _config(ConsumerConfig, args, group_id=args.group, auto_offset_reset=reset,
                     enable_auto_commit=bool(args.group) and not args.no_commit,
                     isolation_level=args.isolation_level, allow_auto_create_topics=False)
    count = 0
    async with Consumer(config=config) as consumer:
        parts = await consumer.client.partitions_for(args.topic, must_exist=True)
        chosen = parts
        if args.partition:
            missing = [p for p in args.partition if p not in parts]
            if missing:
                raise KafkaError(3, f"{args.topic!r} has {len(parts)} partition(s)", context=f"partition {missing[0]}")
            chosen = args.partition
        tps = [TopicPartition(args.topic, p) for p in chosen]
        if args.group and not args.partition:
            consumer.subscribe([args.topic])
            if args.from_beginning or args.from_end or args.timestamp is not None:
                _warn("with --group, the start position applies only to partitions without committed offsets")
        else:
            consumer.assign(tps)
            if args.from_beginning:
                consumer.seek_to_beginning(*tps)
            elif args.from_end:
                consumer.seek_to_end(*tps)
            elif args.offset is not None:
                for tp in tps:
                    consumer.seek(tp, args.offset)
            elif args.timestamp is not None:
                found = await consumer.offsets_for_times({tp: args.timestamp for tp in tps})
                for tp in tps:
                    if found.get(tp) is not None:
                        consumer.seek(tp, found[tp].offset)
                    else:
                        consumer.seek_to_end(tp)
        write = sys.stdout.write
        last = time.monotonic()
        while args.count is None or count < args.count:
            wait_ms = 500
            batch = await consumer.getmany(timeout_ms=wait_ms,
                                           max_records=None if args.count is None else args.count - count)
            if not batch:
                if args.idle_timeout is not None and time.monotonic() - last >= args.idle_timeout:
                    break
                continue
            last = time.monotonic()
            records = sorted((r for rs in batch.values() for r in rs), key=lambda r: (r.partition, r.offset))
            for r in records:
                if out.json:
                    write(json.dumps(_record_json(r)) + "\n")
                elif template is not None:
                    write(template.render(r) + "\n")
                elif formatter is not None:
                    write(formatter.render(r))
                else:
                    write(_text(r.value) + "\n")
                count += 1
            sys.stdout.flush()
        if args.group and not args.no_commit:
            await consumer.commit()
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- groups


async def group_list(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
        groups = await admin.list_groups()
    if out.json:
        out.emit_json([{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state} for g in groups])
    else:
        out.table(["GROUP", "STATE", "PROTOCOL TYPE"], [[g.group_id, g.state or "-", g.protocol_type] for g in groups])
    return EXIT_OK


async def group_describe(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
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
        _err(str(e))
    return EXIT_FAILED if failed else EXIT_OK


async def group_reset_offsets(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
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


# ---------------------------------------------------------------------------------------------- configs, cluster


async def config_get(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
        entries = await admin.describe_configs(args.resource_type, args.name, args.keys or None)
    if not args.all and not args.keys:
        entries = [e for e in entries if not e.is_default]
    if out.json:
        out.emit_json({e.name: {"value": e.value, "source": e.source, "read_only": e.read_only,
                                "sensitive": e.is_sensitive} for e in entries})
    else:
        out.table(["NAME", "VALUE", "SOURCE"], [[e.name, "(sensitive)" if e.is_sensitive else e.value, e.source]
                                                for e in entries])
    return EXIT_OK


async def config_set(args: argparse.Namespace, out: Output) -> int:
    changes: dict[str, str | None] = dict(args.pairs)
    changes.update({k: None for k in args.delete})
    if not changes:
        raise UsageError("nothing to set: give KEY=VALUE pairs or --delete KEY")
    async with _admin(args) as admin:
        await admin.alter_configs(args.resource_type, args.name, changes)
    if out.json:
        out.emit_json({"resource": args.resource_type, "name": args.name, "changes": changes})
    else:
        out.line(f"updated {args.resource_type} {args.name}: " +
                 ", ".join(f"{k}={v}" if v is not None else f"-{k}" for k, v in changes.items()))
    return EXIT_OK


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
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
        users = await admin.describe_user_scram_credentials(args.names or None)
    if out.json:
        out.emit_json([{"user": u, "credentials": [{"mechanism": m, "iterations": i} for m, i in creds]}
                       for u, creds in sorted(users.items())])
    else:
        out.table(["USER", "MECHANISMS"], [[u, ", ".join(f"{m} ({i})" for m, i in creds)] for u, creds in sorted(users.items())])
    return EXIT_OK


async def user_delete(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
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
    from .admin import AclBinding

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
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
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
    pairs = list(args.pairs) + [_key_value(kv) for item in args.add_config for kv in item.split(",") if kv]
    try:
        changes: dict[str, float | None] = {k: float(v) for k, v in pairs}
    except ValueError:
        raise UsageError(f"quota values are numbers: {pairs}") from None
    changes.update({k: None for item in args.delete for k in item.split(",") if k})
    if not changes:
        raise UsageError("nothing to set: give KEY=VALUE pairs or --delete KEY")
    async with _admin(args) as admin:
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
    async with _admin(args) as admin:
        entries = await admin.describe_client_quotas(entity or None, strict=bool(entity))
    if out.json:
        out.emit_json([{"entity": e, "quotas": v} for e, v in entries])
    else:
        out.table(["ENTITY", "QUOTA", "VALUE"], [[_entity_text(e), k, _number(v)] for e, vs in entries for k, v in sorted(vs.items())])
    return EXIT_OK


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
    async with _admin(args) as admin:
        desc = await admin.describe_cluster()
        quorum, reason = await _describe_quorum_or_reason(admin)
    render_cluster(out, desc, quorum, reason)
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
    async with _admin(args) as admin:
        quorum = await admin.describe_quorum()
        cluster_id = admin.client.cluster.cluster_id
    render_quorum(out, quorum, cluster_id, replication=args.replication, human_readable=args.human_readable)
    return EXIT_OK


async def cluster_log_dirs(args: argparse.Namespace, out: Output) -> int:
    async with _admin(args) as admin:
        dirs = await admin.describe_log_dirs()
    if out.json:
        out.emit_json({str(node): [{**d, "partitions": {str(tp): s for tp, s in d["partitions"].items()}}
                                   for d in ds] for node, ds in dirs.items()})
        return EXIT_OK
    rows = []
    for node, ds in dirs.items():
        for d in ds:
            for tp, size in sorted(d["partitions"].items()):
                rows.append([node, d["log_dir"], tp.topic, tp.partition, size])
    out.table(["BROKER", "LOG DIR", "TOPIC", "PARTITION", "SIZE"], rows)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------- transactions


async def _txn_send_all(admin: Admin, build: Callable[[int], Any], api_key: int, what: str) -> list[tuple[int, Any]]:
    """One request per broker (each answers for the transactional ids it coordinates): (broker, response)."""
    await admin.client.refresh_metadata()
    responses = []
    for node in sorted(admin.client.cluster.brokers):
        async def attempt(node: int = node) -> Any:
            response = await admin.client.send(node, build, api_key=api_key)
            if response.error_code:
                raise KafkaError(response.error_code, context=f"{what} on broker {node}")
            return response

        responses.append((node, await admin.client.call(attempt, what=what)))
    return responses


async def txn_list(args: argparse.Namespace, out: Output) -> int:
    from odradek.protocol.messages import REQUESTS

    cls = REQUESTS[66]

    def build(version: int) -> Any:
        if args.transactional_id_pattern is not None and version < 2:
            raise UsageError("--transactional-id-pattern needs ListTransactions v2 (Kafka 4.1): this broker has "
                             f"v{version}")
        return cls(state_filters=list(args.state), producer_id_filters=list(args.producer_id),
                   duration_filter=-1 if args.duration_filter is None else args.duration_filter,
                   transactional_id_pattern=args.transactional_id_pattern)

    async with _admin(args) as admin:
        responses = await _txn_send_all(admin, build, 66, "ListTransactions")
    listed = sorted({(t.transactional_id, node, t.producer_id, t.transaction_state)
                     for node, r in responses for t in r.transaction_states})
    unknown = sorted({s for _, r in responses for s in r.unknown_state_filters})
    for state in unknown:
        _warn(f"unknown state {state!r}")
    if out.json:
        out.emit_json([{"transactional_id": t, "coordinator": c, "producer_id": p, "state": s} for t, c, p, s in listed])
    else:
        out.table(["TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "STATE"], [list(row) for row in listed])
    return EXIT_OK


async def txn_describe(args: argparse.Namespace, out: Output) -> int:
    from odradek.protocol.messages import REQUESTS

    from .cluster import COORDINATOR_TRANSACTION

    txn_id = args.transactional_id or args.transactional_id_option
    if not txn_id:
        raise UsageError("no transactional id given: add TRANSACTIONAL_ID or --transactional-id")
    cls = REQUESTS[65]
    async with _admin(args) as admin:
        async def attempt() -> Any:
            node = await admin.client.coordinator(txn_id, COORDINATOR_TRANSACTION)
            response = await admin.client.send(node, cls(transactional_ids=[txn_id]))
            state = response.transaction_states[0]
            code = ErrorCode.for_code(state.error_code)
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                admin.client.invalidate_coordinator(txn_id, COORDINATOR_TRANSACTION)
            if code is not ErrorCode.NONE:
                raise KafkaError(code, context=f"transactional id {txn_id!r}")
            return node, state

        node, state = await admin.client.call(attempt, what="DescribeTransactions")
    partitions = [f"{t.topic}-{p}" for t in state.topics for p in t.partitions]
    started = state.transaction_start_time_ms
    duration_ms = int(time.time() * 1000) - started if started >= 0 else None  # kafka-transactions.sh's column
    record = {"transactional_id": txn_id, "coordinator": node, "producer_id": state.producer_id,
              "producer_epoch": state.producer_epoch, "state": state.transaction_state,
              "timeout_ms": state.transaction_timeout_ms, "start_time_ms": started, "duration_ms": duration_ms,
              "partitions": partitions}
    if out.json:
        out.emit_json(record)
    else:
        out.table(["COORDINATOR", "TRANSACTIONAL ID", "PRODUCER ID", "EPOCH", "STATE", "TIMEOUT MS", "STARTED",
                   "DURATION MS", "PARTITIONS"],
                  [[node, txn_id, state.producer_id, state.producer_epoch, state.transaction_state,
                    state.transaction_timeout_ms, started if started >= 0 else "None",
                    "None" if duration_ms is None else duration_ms, ",".join(partitions) or "-"]])
    return EXIT_OK


async def _describe_producers(admin: Admin, partitions: list[TopicPartition], broker_id: int | None) -> dict:
    """{partition: its active producers} from DescribeProducers, asked of each partition's leader (or of
    `broker_id`); a partition answering an error raises it."""
    from odradek.protocol.messages import REQUESTS

    cls = REQUESTS[61]
    by_node: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        node = broker_id if broker_id is not None else await admin.client.leader_for(tp)
        by_node.setdefault(node, []).append(tp)
    found: dict[TopicPartition, list[Any]] = {}
    for node, tps in sorted(by_node.items()):
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        response = await admin.client.send(node, cls(topics=[cls.TopicRequest(name=t, partition_indexes=ps)
                                                             for t, ps in by_topic.items()]))
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition_index)
                if part.error_code:
                    where = f"broker {broker_id}" if broker_id is not None else "its leader"
                    raise KafkaError(part.error_code, part.error_message, context=f"{tp} on {where}")
                found[tp] = list(part.active_producers)
    return found


def _producer_row(p: Any) -> dict:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "coordinator_epoch": p.coordinator_epoch, "last_sequence": p.last_sequence,
            "last_timestamp": p.last_timestamp,
            "current_transaction_start_offset": p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None}


async def txn_describe_producers(args: argparse.Namespace, out: Output) -> int:
    """kafka-transactions.sh describe-producers: the producer state the partition's leader (or a replica) keeps."""
    tp = TopicPartition(args.topic, args.partition)
    async with _admin(args) as admin:
        producers = (await _describe_producers(admin, [tp], args.broker_id))[tp]
    rows = [_producer_row(p) for p in producers]
    if out.json:
        out.emit_json(rows)
    else:
        out.table(["PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "LAST SEQUENCE", "LAST TIMESTAMP",
                   "TRANSACTION START OFFSET"],
                  [[r["producer_id"], r["producer_epoch"], r["coordinator_epoch"], r["last_sequence"],
                    r["last_timestamp"], "None" if r["current_transaction_start_offset"] is None
                    else r["current_transaction_start_offset"]] for r in rows])
    return EXIT_OK


async def txn_find_hanging(args: argparse.Namespace, out: Output) -> int:
    """kafka-transactions.sh find-hanging. A partition's open transaction (DescribeProducers) whose producer
    wrote nothing for longer than --max-transaction-timeout is hanging when no coordinator will ever write its
    marker: no transactional id has its producer id (ListTransactions), the id is gone (DescribeTransactions),
    or the id's transaction does not hold the partition (a write the coordinator never heard of)."""
    from odradek.protocol.messages import REQUESTS

    from .cluster import COORDINATOR_TRANSACTION

    if args.topic is None and args.broker_id is None:
        raise UsageError("find-hanging needs --topic or --broker-id to limit the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    max_idle_ms = args.max_transaction_timeout * 60_000
    async with _admin(args) as admin:
        if args.topic is not None and args.partition is not None:
            partitions = [TopicPartition(args.topic, args.partition)]
        else:
            described = await admin.describe_topics([args.topic] if args.topic is not None else None)
            partitions = [TopicPartition(d.name, p.partition) for d in described for p in d.partitions
                          if args.broker_id is None or args.broker_id in p.replicas]
        producers = await _describe_producers(admin, partitions, args.broker_id) if partitions else {}
        now_ms = int(time.time() * 1000)
        candidates = [(tp, p) for tp, ps in sorted(producers.items()) for p in ps
                      if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_idle_ms]
        transactional_ids: dict[int, str] = {}
        descriptions: dict[str, Any] = {}
        if candidates:
            list_cls = REQUESTS[66]
            pids = sorted({p.producer_id for _, p in candidates})
            for _, response in await _txn_send_all(
                    admin, lambda v: list_cls(state_filters=[], producer_id_filters=pids, duration_filter=-1),
                    66, "ListTransactions"):
                for t in response.transaction_states:
                    if t.producer_id in pids:
                        transactional_ids[t.producer_id] = t.transactional_id
            describe_cls = REQUESTS[65]
            for txn_id in sorted(set(transactional_ids.values())):
                async def attempt(txn_id: str = txn_id) -> Any:
                    node = await admin.client.coordinator(txn_id, COORDINATOR_TRANSACTION)
                    state = (await admin.client.send(node, describe_cls(transactional_ids=[txn_id]))).transaction_states[0]
                    code = ErrorCode.for_code(state.error_code)
                    if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                        admin.client.invalidate_coordinator(txn_id, COORDINATOR_TRANSACTION)
                    if code is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                        return None
                    if code is not ErrorCode.NONE:
                        raise KafkaError(code, context=f"transactional id {txn_id!r}")
                    return state

                descriptions[txn_id] = await admin.client.call(attempt, what="DescribeTransactions")
    hanging = []
    for tp, p in candidates:
        txn_id = transactional_ids.get(p.producer_id)
        state = descriptions.get(txn_id) if txn_id is not None else None
        if state is not None and any(t.topic == tp.topic and tp.partition in t.partitions for t in state.topics):
            continue  # the coordinator holds the partition in the transaction: it will write the marker
        hanging.append({"topic": tp.topic, "partition": tp.partition, "producer_id": p.producer_id,
                        "producer_epoch": p.producer_epoch, "coordinator_epoch": p.coordinator_epoch,
                        "start_offset": p.current_txn_start_offset, "last_timestamp": p.last_timestamp,
                        "duration_min": (now_ms - p.last_timestamp) // 60_000})
    if out.json:
        out.emit_json(hanging)
    else:
        out.table(["TOPIC", "PARTITION", "PRODUCER ID", "EPOCH", "COORDINATOR EPOCH", "START OFFSET",
                   "LAST TIMESTAMP", "DURATION (MIN)"], [list(h.values()) for h in hanging])
    return EXIT_OK


async def txn_abort(args: argparse.Namespace, out: Output) -> int:
    """kafka-transactions.sh abort: find the partition's open transaction (DescribeProducers, by its start
    offset) or take the producer given, and ask the partition's leader to write its ABORT marker."""
    from odradek.protocol.messages import REQUESTS

    tp = TopicPartition(args.topic, args.partition)
    async with _admin(args) as admin:
        leader = await admin.client.leader_for(tp)
        if args.start_offset is not None:
            describe = REQUESTS[61]
            response = await admin.client.send(leader, describe(topics=[describe.TopicRequest(
                name=tp.topic, partition_indexes=[tp.partition])]))
            (part,) = response.topics[0].partitions
            if part.error_code:
                raise KafkaError(part.error_code, part.error_message, context=str(tp))
            match = [p for p in part.active_producers if p.current_txn_start_offset == args.start_offset]
            if not match:
                raise UsageError(f"no open transaction starts at offset {args.start_offset} of {tp}")
            pid, epoch, coordinator_epoch = match[0].producer_id, match[0].producer_epoch, match[0].coordinator_epoch
        else:
            if args.producer_epoch is None or args.coordinator_epoch is None:
                raise UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")
            pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
        # A producer whose transaction began before any marker was written has coordinator epoch -1 in
        # DescribeProducers: 0 is at or below any coordinator epoch there can be (kafka-transactions.sh too).
        coordinator_epoch = max(0, coordinator_epoch)
        markers = REQUESTS[27]
        Marker = markers.WritableTxnMarker
        response = await admin.client.send(leader, markers(markers=[Marker(
            producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=coordinator_epoch,
            topics=[Marker.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])]))
    code = next((p.error_code for m in response.markers for t in m.topics for p in t.partitions), 0)
    if code:
        raise KafkaError(code, context=f"abort of producer {pid} on {tp}")
    if out.json:
        out.emit_json({"topic": tp.topic, "partition": tp.partition, "producer_id": pid, "producer_epoch": epoch,
                       "aborted": True})
    else:
        out.line(f"aborted the transaction of producer {pid} (epoch {epoch}) on {tp}")
    return EXIT_OK


async def _perf_produce(args: argparse.Namespace, out: Output) -> int:
    from .cli_perf import perf_produce

    return await perf_produce(args, out, functools.partial(_config, args=args))


async def _perf_consume(args: argparse.Namespace, out: Output) -> int:
    from .cli_perf import perf_consume

    return await perf_consume(args, out, functools.partial(_config, args=args))


_HANDLERS: dict[tuple[str, str | None], Callable[[argparse.Namespace, Output], Any]] = {
    ("topic", "create"): topic_create,
    ("topic", "list"): topic_list,
    ("topic", "describe"): topic_describe,
    ("topic", "delete"): topic_delete,
    ("topic", "alter"): topic_alter,
    ("topic", "elect-leaders"): topic_elect_leaders,
    ("topic", "reassign"): topic_reassign,
    ("topic", "reassignments"): topic_reassignments,
    ("produce", None): produce,
    ("consume", None): consume,
    ("group", "list"): group_list,
    ("group", "describe"): group_describe,
    ("group", "delete"): group_delete,
    ("group", "reset-offsets"): group_reset_offsets,
    ("config", "get"): config_get,
    ("config", "set"): config_set,
    ("user", "create"): user_create,
    ("user", "list"): user_list,
    ("user", "delete"): user_delete,
    ("cluster", "describe"): cluster_describe,
    ("cluster", "quorum"): cluster_quorum,
    ("cluster", "log-dirs"): cluster_log_dirs,
    ("txn", "list"): txn_list,
    ("txn", "describe"): txn_describe,
    ("txn", "abort"): txn_abort,
    ("txn", "describe-producers"): txn_describe_producers,
    ("txn", "find-hanging"): txn_find_hanging,
    ("acl", "add"): acl_add,
    ("acl", "list"): acl_list,
    ("acl", "remove"): acl_remove,
    ("quota", "set"): quota_set,
    ("quota", "describe"): quota_describe,
    ("perf", "produce"): _perf_produce,
    ("perf", "consume"): _perf_consume,
}
