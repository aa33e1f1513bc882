"""What every command family of the CLI shares: exit codes, the output (tables or JSON), one-line
diagnostics, the argument types, and the subcommand parsers that all take the global options."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from ..config import parse_bootstrap
from ..errors import ConfigError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM: `consume` stopped by SIGTERM, after leaving its group

# The exit codes, as `odradek --help` and the README list them.
EXIT_CODES_HELP = ("exit codes: 0 success; 1 the cluster refused or failed the operation (a Kafka error), or the "
                   "client could not authenticate (the listener speaks TLS or SASL and the client does not, or "
                   "refused its login); 2 bad usage; 3 no broker reachable or --timeout passed; 130 interrupted "
                   "(Ctrl-C); 143 consume stopped by SIGTERM (it left its group first)")


class UsageError(Exception):
    """A bad argument found after parsing (exit code 2)."""


class Parser(argparse.ArgumentParser):
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


def print_error(message: str) -> None:
    sys.stderr.write(f"odradek: error: {message}\n")


def print_warning(message: str) -> None:
    sys.stderr.write(f"odradek: {message}\n")


# ---------------------------------------------------------------------------------------------- parsing helpers


def key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    if not k:
        raise argparse.ArgumentTypeError(f"empty key in {text!r}")
    return k, v


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def timestamp(text: str) -> int:
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


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
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
    group.add_argument("--timeout", type=seconds, default=keep(10.0),
                       help="seconds the command may take, connecting and retries included (default 10); "
                            "produce, consume and perf: each wait's bound")
    group.add_argument("--command-config", "--producer.config", "--consumer.config", default=keep(None),
                       metavar="FILE", help="client properties file (Kafka's key=value format)")
    group.add_argument("-X", "--producer-property", "--consumer-property", type=key_value, action="append",
                       dest="properties" if top else "late_properties", default=keep([]), metavar="KEY=VALUE",
                       help="a client property, as kcat's -X (repeatable; wins over --command-config)")
    group.add_argument("--client-id", default=keep("odradek-cli"), help=argparse.SUPPRESS)


# A command: the parsed arguments and the output in, an exit code out.
Handler = Callable[[argparse.Namespace, Output], Awaitable[int]]


class SubParsers:
    """Adds subcommand parsers that all take the global options."""

    def __init__(self, parent: argparse.ArgumentParser, dest: str):
        self.actions = parent.add_subparsers(dest=dest, metavar=dest.upper(), parser_class=Parser)
        self.actions.required = True

    def add(self, name: str, *, handler: Handler | None = None, globals_: bool = True,
            **kw: Any) -> argparse.ArgumentParser:
        """A subcommand; `handler` is the coroutine that runs it (main calls `args.handler(args, out)`)."""
        parser = self.actions.add_parser(name, **kw)
        if globals_:
            global_options(parser, top=False)
        if handler is not None:
            parser.set_defaults(handler=handler)
        return parser


def topic_argument(p: argparse.ArgumentParser, *, many: bool = False) -> None:
    """TOPIC as a positional (rpk, kcat -t aside) or as Kafka's `--topic` (kafka-topics.sh, console tools)."""
    if many:
        p.add_argument("names", nargs="*", metavar="TOPIC")
        p.add_argument("--topic", "-t", dest="topic_options", action="append", default=[], metavar="TOPIC",
                       help="Kafka's spelling of TOPIC (repeatable)")
    else:
        p.add_argument("name", nargs="?", metavar="TOPIC")
        p.add_argument("--topic", "-t", dest="topic_option", default=None, metavar="TOPIC",
                       help="Kafka's spelling of TOPIC")


def group_argument(p: argparse.ArgumentParser, *, many: bool = False) -> None:
    """GROUP as a positional or as kafka-consumer-groups.sh's `--group`."""
    if many:
        p.add_argument("groups", nargs="*", metavar="GROUP")
        p.add_argument("--group", "-g", dest="group_options", action="append", default=[], metavar="GROUP")
    else:
        p.add_argument("group", nargs="?", metavar="GROUP")
        p.add_argument("--group", "-g", dest="group_option", default=None, metavar="GROUP")
