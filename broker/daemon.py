"""`odradek broker start`: run a broker until SIGTERM or SIGINT, then shut down gracefully.

What the process writes: with `log.format=console` (the default) its log lines on stderr and, on stdout,
one human line per listener once it listens ("odradek broker 1 listening on PLAINTEXT://127.0.0.1:9092",
the line scripts and `cluster up` wait for) and "odradek: shutting down". With `log.format=json` every
line on both streams is one JSON object: the listener lines become `listening` events (with `listener`,
`host`, `port`, `url`), the shutdown a `shutting down` event, a refused start a `cannot start` event (even
a configuration error, when the configuration that could not be read asked for JSON), and an exception
nobody caught is logged as an event rather than printed as a traceback. The broker logs `listening` nowhere
else: one event per listener, not a log line and a printed line that say the same thing.
"""

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
    except (ConfigError, OSError) as e:
        message = str(e) if isinstance(e, ConfigError) else f"cannot read config: {e}"
        if _asked_for_json(args.config, args.override, os.environ):
            from .logging import configure_logging, get_logger

            configure_logging("json", "INFO")
            get_logger("odradek.broker").error("cannot start", error=message)
        else:
            print(f"odradek: {message}", file=sys.stderr)
        return 2
    journal = os.environ.get("ODRADEK_TEST_FSYNC_JOURNAL")
    if journal:
        # A test hook (storage/fsync_journal.py): it records every fsync so a test can drop what was not
        # flushed, as a power loss would. Never in production: it is honoured only under pytest.
        if "PYTEST_CURRENT_TEST" not in os.environ:
            print("odradek: ODRADEK_TEST_FSYNC_JOURNAL is a test hook (the power-loss tests' fsync journal) "
                  "and is honoured only under pytest; unset it", file=sys.stderr)
            return 2
        from odradek.storage.fsync_journal import install

        install(journal)
    from .logging import configure_logging

    configure_logging(config.log_format, config.log_level, levels=config.log_levels)
    if config.log_format == "json":
        _log_uncaught_exceptions()
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


def _asked_for_json(path: str | None, overrides: list[str], env) -> bool:
    """Whether the configuration that failed to load asks for log.format=json, read as leniently as can be
    (override, then environment, then file, as load_config ranks them): its error is then a JSON line too."""
    for item in reversed(overrides):
        key, _, value = item.partition("=")
        if key.strip() == "log.format":
            return value.strip().lower() == "json"
    if "ODRADEK_LOG_FORMAT" in env:
        return str(env["ODRADEK_LOG_FORMAT"]).strip().lower() == "json"
    if path is not None:
        try:
            from .config import parse_properties

            with open(path, encoding="utf-8") as f:
                props, _ = parse_properties(f.read(), origin=path)
            return props.get("log.format", "").strip().lower() == "json"
        except (OSError, ValueError, ConfigError):
            return False
    return False


def _log_uncaught_exceptions() -> None:
    """JSON mode: an exception no one caught (in the main thread or another) is a log event, not a
    traceback printed on stderr between the JSON lines."""
    import threading

    from .logging import get_logger

    log = get_logger("odradek.broker")

    def hook(kind, value, tb) -> None:
        log.critical("uncaught exception", exc_info=(kind, value, tb))

    def thread_hook(args) -> None:
        if args.exc_type is not SystemExit:
            log.critical("uncaught exception in a thread", thread=getattr(args.thread, "name", None),
                         exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    sys.excepthook = hook
    threading.excepthook = thread_hook


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

    from .heap import freeze_after_start
    from .server import Broker

    broker = Broker(config)
    # Handlers first: a signal that arrives once "listening" is printed (or during start-up) must stop the
    # broker gracefully, not kill it with the default action.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from .logging import get_logger

    log = get_logger("odradek.broker")
    json_mode = config.log_format == "json"
    try:
        await broker.start()
    except (StorageError, ReplicationError, ConfigError, OSError) as e:
        if json_mode:
            log.error("cannot start", error=str(e))
        else:
            print(f"odradek: cannot start: {e}", file=sys.stderr)
        await broker.stop()
        return 1
    fatal: list[str] = []

    def stop_for(why: str) -> None:  # the metadata log directory failed (broker/log_dirs.py)
        fatal.append(why)
        stop.set()

    broker.on_fatal_error(stop_for)
    freeze_after_start(config.node_id)  # what start-up made lives as long as the process (broker/heap.py)
    for name, host, port in [*broker.bound, *broker.controller_bound]:
        if json_mode:
            log.info("listening", node=config.node_id, listener=name, host=host, port=port, url=f"{name}://{host}:{port}")
        else:
            print(f"odradek broker {config.node_id} listening on {name}://{host}:{port}", flush=True)
    await stop.wait()
    if json_mode:
        if fatal:
            log.error("shutting down", node=config.node_id, cause=fatal[0])
        else:
            log.info("shutting down", node=config.node_id)
    else:
        print(f"odradek: shutting down{': ' + fatal[0] if fatal else ''}", flush=True)
    await broker.stop()
    return 1 if fatal else 0
