"""The `odradek` command: `odradek broker ...` runs the daemon; every other command is the client CLI.

This module sits above every layer, so the client CLI never has to import broker internals. Commands that
run on a node rather than against a cluster (`broker`, `storage`) are dispatched here by their
first word; the client parser only lists them, so that `odradek --help` shows every command.
"""

from __future__ import annotations

import importlib
import os
import sys

# name -> (module with main(argv) -> int, help line for `odradek --help`)
SERVER_COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("odradek.broker.daemon", "run a broker: broker start [-c server.properties] [--override K=V ...]"),
    "console": ("odradek.console.main", "the web console: console --bootstrap-server HOST:PORT [--port 9080] [--read-only]"),
    "storage": ("odradek.broker.storage_tool", "format log directories: storage random-uuid | format --cluster-id ID -c FILE | info"),
}

# `odradek cluster up|down|status|compose` run a local cluster (broker/cluster_tool.py); every other
# `cluster` command (describe, log-dirs) asks a running cluster, through the client CLI.
LOCAL_CLUSTER_COMMANDS = ("up", "down", "status", "compose")


# The client CLI's global options that take a value, as they may come before `cluster up|down|status`.
_GLOBALS_WITH_VALUE = ("--bootstrap-server", "--bootstrap-servers", "-b", "--output", "-o", "--timeout",
                       "--command-config", "--producer.config", "--consumer.config", "-X", "--producer-property",
                       "--consumer-property", "--client-id")


def _local_cluster_command(args: list[str]) -> list[str] | None:
    """`cluster up|down|status|compose ...` as cluster_tool's argv, also when global options come first
    (`odradek -b HOST cluster status`): they are moved after the subcommand, where cluster_tool takes the
    ones that mean something to it (-b and --timeout for status) and refuses the others by name."""
    i, leading = 0, []
    while i < len(args) and args[i].startswith("-"):
        option = args[i].split("=", 1)[0]
        takes_value = option in _GLOBALS_WITH_VALUE and "=" not in args[i]
        if option not in _GLOBALS_WITH_VALUE or (takes_value and i + 1 >= len(args)):
            return None
        leading += args[i:i + 1 + takes_value]
        i += 1 + takes_value
    if args[i:i + 1] == ["cluster"] and args[i + 1:i + 2] and args[i + 1] in LOCAL_CLUSTER_COMMANDS:
        return [args[i + 1], *leading, *args[i + 2:]]
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        _quiet_stdout()
        return 0


def _quiet_stdout() -> None:
    """The reader of our output went away (`odradek ... | head`): the rest goes nowhere, and so does the
    interpreter's final flush, which would otherwise print a BrokenPipeError of its own."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _main(args: list[str]) -> int:
    local = _local_cluster_command(args)
    if local is not None:
        from odradek.broker.cluster_tool import main as cluster_main

        return cluster_main(local)
    if args and args[0] in SERVER_COMMANDS:
        module = importlib.import_module(SERVER_COMMANDS[args[0]][0])
        return module.main(args[1:])
    from odradek.client.cli import main as client_main

    code = client_main(args, tuple((name, help_text) for name, (_, help_text) in SERVER_COMMANDS.items()))
    sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
    return code


if __name__ == "__main__":
    sys.exit(main())
