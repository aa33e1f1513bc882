"""The `odradek` command: `odradek broker ...` runs the daemon; every other command is the client CLI.

This module sits above every layer, so the client CLI never has to import broker internals. Commands that
run on a node rather than against a cluster (`broker`, `storage`) are dispatched here by their
first word; the client parser only lists them, so that `odradek --help` shows every command.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module with main(argv) -> int, help line for `odradek --help`)
SERVER_COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("odradek.broker.daemon", "run a broker: broker start [-c server.properties] [--override K=V ...]"),
    "storage": ("odradek.broker.storage_tool", "format log directories: storage random-uuid | format --cluster-id ID -c FILE | info"),
}

# `odradek cluster up|down|status|compose` run a local cluster (broker/cluster_tool.py); every other
# `cluster` command (describe, log-dirs) asks a running cluster, through the client CLI.
LOCAL_CLUSTER_COMMANDS = ("up", "down", "status", "compose")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["cluster"] and args[1:2] and args[1] in LOCAL_CLUSTER_COMMANDS:
        from odradek.broker.cluster_tool import main as cluster_main

        return cluster_main(args[1:])
    if args and args[0] in SERVER_COMMANDS:
        module = importlib.import_module(SERVER_COMMANDS[args[0]][0])
        return module.main(args[1:])
    from odradek.client.cli import main as client_main

    return client_main(args, tuple((name, help_text) for name, (_, help_text) in SERVER_COMMANDS.items()))


if __name__ == "__main__":
    sys.exit(main())
