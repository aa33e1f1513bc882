"""`odradek broker start`: run a broker until SIGTERM or SIGINT, then shut down gracefully."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from .config import ConfigError, load_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="odradek broker", description="Run an Odradek broker.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a broker (defaults: localhost:9092, data in ./odradek-data)")
    start.add_argument("--config", "-c", metavar="FILE", help="a server.properties file")
    start.add_argument(
        "--override", metavar="KEY=VALUE", action="append", default=[],
        help="set a property (repeatable); wins over the file and ODRADEK_* environment variables "
             "(Kafka's kafka-server-start.sh spelling; -o is the client commands' --output)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config, args.override, os.environ)
    except ConfigError as e:
        print(f"odradek: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"odradek: cannot read config: {e}", file=sys.stderr)
        return 2
    from .logging import configure_logging

    configure_logging(config.log_format, config.log_level, levels=config.log_levels)
    _raise_open_file_limit()
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay runnable without it
        runner = asyncio.run
    try:
        return runner(_run(config))
    except KeyboardInterrupt:
        return 130


def _raise_open_file_limit() -> None:
    """Every active segment keeps a log file and mapped indexes open: lift the soft limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


async def _run(config) -> int:
    from odradek.replication.errors import ReplicationError
    from odradek.storage.errors import StorageError

    from .server import Broker

    broker = Broker(config)
    # Handlers first: a signal that arrives once "listening" is printed (or during start-up) must stop the
    # broker gracefully, not kill it with the default action.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except (StorageError, ReplicationError, ConfigError, OSError) as e:
        print(f"odradek: cannot start: {e}", file=sys.stderr)
        await broker.stop()
        return 1
    fatal: list[str] = []

    def stop_for(why: str) -> None:  # the metadata log directory failed (broker/log_dirs.py)
        fatal.append(why)
        stop.set()

    broker.on_fatal_error(stop_for)
    for name, host, port in [*broker.bound, *broker.controller_bound]:
        print(f"odradek broker {config.node_id} listening on {name}://{host}:{port}", flush=True)
    await stop.wait()
    print(f"odradek: shutting down{': ' + fatal[0] if fatal else ''}", flush=True)
    await broker.stop()
    return 1 if fatal else 0
