"""The broker's own logs: structlog, rendered for humans on a console or as JSON lines.

structlog and the standard library share one pipeline: structlog loggers hand their event dicts to a
stdlib handler on the root logger, whose `ProcessorFormatter` renders them; records from plain
`logging` users (asyncio, libraries) get the same timestamp/level enrichment through its foreign
pre-chain, so every line on the stream has one format. Level filtering happens in stdlib, before any
rendering work (`filter_by_level`).

Usage:

    configure_logging("json", "INFO")
    log = get_logger(__name__)
    log.info("partition_loaded", topic="t", partition=0, log_end_offset=42)
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

import structlog

from .config import LOG_FORMATS, LOG_LEVELS, ConfigError

__all__ = ["configure_logging", "get_logger"]

_HANDLER_MARK = "_odradek_handler"


def _level_number(level: str | int, *, key: str = "log.level") -> int:
    if isinstance(level, int):
        return level
    name = LOG_LEVELS.get(str(level).strip().upper())
    if name is None:
        choices = ", ".join(sorted(LOG_LEVELS))
        raise ConfigError(
            f"invalid value for {key!r}: must be one of: {choices} (got {level!r})", key=key
        )
    return logging.getLevelName(name)


_LEVELLED: set[str] = set()  # loggers given a level of their own by the last configure_logging call


def configure_logging(
    fmt: str = "console", level: str | int = "INFO", *, stream: IO[str] | None = None,
    levels: dict[str, str | int] | None = None,
) -> None:
    """Route structlog and stdlib logging to `stream` (default stderr) as `console` text or `json` lines.

    `level` is the root logger's; `levels` (`log.levels`) sets single loggers' own, for them and the loggers
    under them (`odradek.broker` covers `odradek.broker.network`), up or down from `level`: the handler has
    no level of its own, so a record a logger lets through is written whatever the root's level.

    Safe to call again (tests, a reload): the handler installed by an earlier call is replaced, other
    handlers on the root logger are left alone, and loggers levelled by an earlier call go back to NOTSET."""
    fmt = str(fmt).strip().lower()
    if fmt not in LOG_FORMATS:
        choices = ", ".join(LOG_FORMATS)
        raise ConfigError(
            f"invalid value for 'log.format': must be one of: {choices} (got {fmt!r})", key="log.format"
        )
    level_no = _level_number(level)
    own_levels = {name: _level_number(value, key="log.levels") for name, value in (levels or {}).items()}
    stream = stream if stream is not None else sys.stderr

    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        timestamper,
        structlog.processors.StackInfoRenderer(),
    ]
    if fmt == "json":
        renderer: Any = structlog.processors.JSONRenderer()
        # Tracebacks as structured data, without frame locals (they can hold record payloads).
        tracebacks = structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )
        final: list[Any] = [tracebacks, renderer]
    else:
        colors = bool(getattr(stream, "isatty", lambda: False)())
        final = [structlog.dev.ConsoleRenderer(colors=colors)]

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.UnicodeDecoder(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached, so that a later configure_logging call takes effect on existing loggers.
        cache_logger_on_first_use=False,
    )

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    setattr(handler, _HANDLER_MARK, True)

    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()  # a StreamHandler's close() flushes; it never closes the stream itself
    root.addHandler(handler)
    root.setLevel(level_no)
    for name in _LEVELLED - own_levels.keys():
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, number in own_levels.items():
        logging.getLogger(name).setLevel(number)
    _LEVELLED.clear()
    _LEVELLED.update(own_levels)
    logging.captureWarnings(True)


def get_logger(name: str | None = None, **initial: Any) -> Any:
    """A structlog logger bound to `name` (stdlib logger name) and any initial key/values."""
    return structlog.get_logger(name, **initial)


# -- Kafka's broker-loggers resource (kafka-configs.sh --entity-type broker-loggers): the loggers of this
# process and their levels, in log4j's words, as Kafka's Log4jController shows and takes them.

ROOT_LOGGER = "root"
# Kafka's LogLevelConfig.VALID_LOG_LEVELS (upper case, as Kafka compares them), by the Python level each is.
LOG4J_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
                "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


def _log4j_name(level: int) -> str:
    if level < logging.DEBUG:
        return "TRACE"
    for name in ("FATAL", "ERROR", "WARN", "INFO"):
        if level >= LOG4J_LEVELS[name]:
            return name
    return "DEBUG"


def logger_levels() -> dict[str, str]:
    """Every logger this process has made, `root` first, with the level it logs at (its own, else the one
    it inherits), in log4j's words (Log4jController.loggers)."""
    levels = {ROOT_LOGGER: _log4j_name(logging.getLogger().getEffectiveLevel())}
    known = logging.Logger.manager.loggerDict
    for name in sorted(known):
        logger = known[name]
        if isinstance(logger, logging.Logger):  # not a PlaceHolder for loggers under it
            levels[name] = _log4j_name(logger.getEffectiveLevel())
    return levels


def logger_exists(name: str) -> bool:
    return name == ROOT_LOGGER or isinstance(logging.Logger.manager.loggerDict.get(name), logging.Logger)


def set_logger_level(name: str, level: str | None) -> None:
    """A broker-loggers change, at run time: SET a level (one of LOG4J_LEVELS), or DELETE it (None) so that
    the logger inherits its parent's again. The caller has checked the name and the level."""
    logger = logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)
    logger.setLevel(logging.NOTSET if level is None else LOG4J_LEVELS[level])
