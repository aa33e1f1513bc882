"""The `odradek` command: `odradek broker ...` runs the daemon; every other command is the client CLI.

This module sits above every layer, so the client CLI never has to import broker internals.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "broker":
        from odradek.broker.daemon import main as broker_main

        return broker_main(args[1:])
    if args and args[0] == "storage":
        from odradek.broker.storage_tool import main as storage_main

        return storage_main(args[1:])
    from odradek.client.cli import main as client_main

    return client_main(args)


if __name__ == "__main__":
    sys.exit(main())
