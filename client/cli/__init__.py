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
    1  the cluster refused or failed the operation (a Kafka error: topic exists, unknown group, ...), or
       the client could not authenticate (the listener speaks TLS or SASL and the client does not, or
       the listener refused its certificate or login)
    2  bad usage (unknown option, malformed value)
    3  no broker reachable (a refused connection is reported at once), or --timeout passed (every
       command's waits end there, produce's deliveries included)
    130  interrupted (Ctrl-C)
    143  `consume` stopped by SIGTERM (it commits and leaves its group first, as on Ctrl-C)

`--bootstrap-server` defaults to $ODRADEK_BOOTSTRAP_SERVERS, else localhost:9092.

The package holds one module per command family (topics, records, groups, configs, security, cluster,
transactions, perf); each adds its own subcommands in `register(sub)` and names the coroutine that runs each
one (`handler`), so this module only assembles the parser, normalizes the arguments and maps the outcome to
an exit code. What every family shares (output, argument types, exit codes) is in `common`; how the client
configs are built from properties files and options is in `properties`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from odradek.protocol.errors import ErrorCode

from ..config import default_bootstrap, parse_bootstrap
from ..errors import ConfigError, KafkaConnectionError, KafkaError, KafkaTimeoutError, NoBrokersAvailable, OdradekError
from . import cluster, configs, groups, perf, records, security, topics, transactions
from .cluster import _describe_quorum_or_reason, quorum_json, render_cluster, render_quorum
from .common import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Output,
    Parser,
    SubParsers,
    UsageError,
    global_options,
    key_value,
    print_error,
    print_warning,
)
from .properties import admin_for, client_properties
from .security import _acl_bindings, _quota_entity
from .topics import partition_flags, render_topics

__all__ = ["CLIENT_COMMANDS", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE",
           "FAMILIES", "Output", "UsageError", "build_parser", "main", "partition_flags", "quorum_json",
           "render_cluster", "render_quorum", "render_topics",
           # older spellings the tests use
           "_acl_bindings", "_describe_quorum_or_reason", "_quota_entity"]


# The commands this parser runs itself; a server-side command of the same name (odradek/cli.py's `cluster up`)
# is dispatched before this parser sees it.
CLIENT_COMMANDS = frozenset({"topic", "produce", "consume", "group", "config", "cluster", "perf", "txn", "user", "acl",
                             "quota"})

# The command families, in the order `odradek --help` lists them.
FAMILIES = (topics, records, groups, configs, security, cluster, transactions, perf)


def build_parser(server_commands: tuple[tuple[str, str], ...] = ()) -> argparse.ArgumentParser:
    # No abbreviations here (nor on `acl`): kafka-acls.sh's --producer / --consumer, given after the command,
    # would otherwise be taken for ambiguous abbreviations of the global --producer.config / --consumer.config
    # while the arguments are sorted out, before the subcommand's parser (which has them exactly) sees them.
    parser = Parser(
        allow_abbrev=False,
        prog="odradek", description="Odradek command line: topics, records, groups, configs, perf.",
        epilog=EXIT_CODES_HELP,
    )
    global_options(parser, top=True)
    sub = SubParsers(parser, "command")
    # Commands that odradek/cli.py sends elsewhere before this parser runs (`broker start`): listed here
    # so that `odradek --help` shows every command.
    for name, help_text in server_commands:
        if name in CLIENT_COMMANDS:  # `cluster up|down|...` share the client's `cluster`, whose help names them
            continue
        sub.add(name, globals_=False, help=help_text, add_help=False).add_argument(
            "rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    for family in FAMILIES:
        family.register(sub)
    return parser


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
            args.pairs += [key_value(pair) for pair in item.split(",") if pair]


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None, server_commands: tuple[tuple[str, str], ...] = ()) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(server_commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_USAGE
    if args.command in dict(server_commands) and args.command not in CLIENT_COMMANDS:
        print_error(f"put '{args.command}' first: odradek {args.command} ... (it takes no client options)")
        return EXIT_USAGE
    try:
        _normalize(args)
        args.client_properties = client_properties(args)
    except (UsageError, ConfigError, argparse.ArgumentTypeError) as e:
        print_error(str(e))
        return EXIT_USAGE
    except OSError as e:
        print_error(f"cannot read {args.command_config}: {e.strerror or e}")
        return EXIT_USAGE
    args.bootstrap_server = (args.bootstrap_server or args.client_properties.pop("bootstrap_servers", None)
                             or default_bootstrap())
    try:
        parse_bootstrap(args.bootstrap_server)
    except ConfigError as e:
        print_error(f"bad bootstrap server: {e}")
        return EXIT_USAGE
    out = Output(args.output)
    try:
        return _run(_within_timeout(args, args.handler(args, out)))
    except KeyboardInterrupt:
        print_warning("interrupted")
        return EXIT_INTERRUPTED
    except UsageError as e:
        print_error(str(e))
        return EXIT_USAGE
    except ConfigError as e:
        print_error(str(e))
        return EXIT_USAGE
    except (KafkaConnectionError, KafkaTimeoutError) as e:
        # Only a bootstrap that failed blames the bootstrap address; a broker found through it that cannot be
        # reached is named in the error itself.
        print_error(f"{e} (is a broker running at {args.bootstrap_server}?)" if isinstance(e, NoBrokersAvailable) else str(e))
        return EXIT_UNREACHABLE
    except KafkaError as e:
        print_error(str(e))
        return EXIT_FAILED
    except OdradekError as e:
        print_error(str(e))
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as e:
        print_error(str(e))
        return EXIT_FAILED


# The commands whose --timeout bounds each wait (connecting, every request, every record's delivery) rather
# than the whole command: they last as long as their input, their subscription or their benchmark does, as
# Kafka's console producer (delivery.timeout.ms) and consumer (--timeout-ms, here --idle-timeout) do.
STREAMING = frozenset({records.produce, records.consume, perf.perf_produce, perf.perf_consume})


# The commands that need the active controller (metadata changes, and the reassignment listing only it
# holds): when one times out, the command line asks whether the controller quorum has a leader before saying
# what went wrong (`_controller_cause`).
NEEDS_CONTROLLER = frozenset({
    topics.topic_create, topics.topic_delete, topics.topic_alter, topics.topic_elect_leaders, topics.topic_reassign,
    topics.topic_reassignments, configs.config_set, security.user_create, security.user_delete, security.acl_add,
    security.acl_remove, security.quota_set,
})
CAUSE_PROBE_S = 3.0
"""How much of the --timeout (at most, and at most half of it) the explanation of a controller command may
use: a DescribeQuorum to every bootstrap address at once, which a node that knows no quorum leader answers at
once. It is asked over the last part of the --timeout, while the command may still finish, so that the whole
command still ends by the --timeout."""


async def _within_timeout(args: argparse.Namespace, command: Any) -> int:
    """Run `command`, ended at --timeout seconds from now unless it streams (STREAMING): connecting, every
    request and every retry of an admin command fit in it, and what is still waiting then is cancelled (its
    client closes its connections) and reported as exit code 3. The clients' own request timeouts are the
    --timeout too (properties._common), so the error says what was being waited for when one request takes
    all of it; this deadline is what bounds a command made of several requests, or retries.

    A command that needs the active controller (NEEDS_CONTROLLER) and times out, by this deadline, the
    client's, or the broker's REQUEST_TIMED_OUT (what Kafka's broker answers a forwarded request no
    controller took in time), is explained when the cause is that the controller quorum has no leader (a
    majority of the controllers is down or cut off): the error says so, in the broker's words, and where to
    look, rather than naming only the address that did not answer in time. The question is asked within the
    --timeout (`_CauseProbe`). The exit code stays the one of the timeout (3, or 1 for the broker's answer)."""
    if args.handler in STREAMING:
        return int(await command)
    what = " ".join(str(getattr(args, name)) for name in ("command", "action") if getattr(args, name, None))
    loop = asyncio.get_running_loop()
    end = loop.time() + args.timeout
    probe = _CauseProbe(args, end) if args.handler in NEEDS_CONTROLLER else None
    deadline = asyncio.timeout_at(end)
    try:
        async with deadline:
            return int(await command)
    except TimeoutError:
        if not deadline.expired():
            raise  # a timeout of the command's own, with its own message
        cause = await _answer(probe)
        raise KafkaTimeoutError(f"--timeout {args.timeout:g} s passed before `{what}` was done "
                                + (f"({cause})" if cause else
                                   f"(no answer from the cluster at {args.bootstrap_server} in time)")) from None
    except KafkaTimeoutError as e:
        cause = await _answer(probe)
        if cause is None:
            raise
        raise KafkaTimeoutError(f"`{what}` timed out: {cause}") from e
    except KafkaError as e:
        if e.code is not ErrorCode.REQUEST_TIMED_OUT or (cause := await _answer(probe)) is None:
            raise
        raise KafkaError(e.code, cause, context=e.context) from e
    finally:
        if probe is not None:
            await probe.cancel()


class _CauseProbe:
    """The controller-quorum question of one controller command, asked inside its --timeout (which ends at
    `end`, loop time): started on its own CAUSE_PROBE_S (or half the --timeout) before the end, while the
    command may still finish, or at once when the command times out earlier; its answer is due by the end."""

    def __init__(self, args: argparse.Namespace, end: float) -> None:
        self.args, self.end = args, end
        self.task: asyncio.Task | None = None
        loop = asyncio.get_running_loop()
        self._start_later = loop.call_at(end - min(CAUSE_PROBE_S, args.timeout / 2), self.start)

    def start(self) -> asyncio.Task:
        if self.task is None:
            self._start_later.cancel()
            remaining = self.end - asyncio.get_running_loop().time()
            self.task = asyncio.ensure_future(_controller_cause(self.args, min(CAUSE_PROBE_S, remaining)))
        return self.task

    async def cancel(self) -> None:
        self._start_later.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)


async def _answer(probe: _CauseProbe | None) -> str | None:
    return None if probe is None else await probe.start()


async def _controller_cause(args: argparse.Namespace, timeout_s: float) -> str | None:
    """A sentence saying the controller quorum has no leader (with the broker's own words) when a broker says
    so within `timeout_s`, else None."""
    if timeout_s <= 0:
        return None
    admin = admin_for(args)
    try:
        said = await admin.quorum_without_leader(timeout_s=timeout_s)
    except Exception:  # noqa: BLE001 - only an explanation: the timeout is reported as it was
        said = None
    finally:
        await admin.close()
    if said is None:
        return None
    return (f"the controller quorum has no leader, so no metadata change can be made until a majority of the "
            f"controllers is back; the broker says: {said}. `odradek cluster quorum` shows the quorum")


def _run(coro: Any) -> int:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    return runner(coro)
