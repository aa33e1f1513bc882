"""Broker configuration: Kafka's property names, Kafka's defaults, one validated immutable model.

Theory of operation
-------------------
`BrokerConfig` is a frozen pydantic model whose field *aliases* are Kafka's dotted property names
(`num.partitions`) and whose attribute names are their snake_case (`num_partitions`). Every value that
arrives as text (a server.properties line, an environment variable, a `--override`) goes through the
same parsers Kafka's `ConfigDef` applies: booleans are `true`/`false`, INT is 32-bit, LONG is 64-bit,
LIST is comma-separated. Each field also records its Kafka `ConfigType`, so DescribeConfigs can answer
without a second table (see `broker/topic_config.py`).

`load_config(path, overrides, env)` merges three layers, later winning per key:

    server.properties file  <  ODRADEK_<KEY> environment variables  <  "key=value" overrides

that is: for each key, a `--override` wins over an `ODRADEK_<KEY>` environment variable, which wins over the
properties file, which wins over the built-in default. It raises `ConfigError` naming the key (and where the
bad value came from) for an unknown key or a value that does not parse or validate. Only keys are merged; a
derived value such as the effective retention (`log.retention.ms`, else `.minutes`, else `.hours`) is
computed from the merged result.

The environment is read as strictly as the file: every variable that starts with `ODRADEK_` must name a
config key (`ODRADEK_LOG_DIRS` is `log.dirs`: upper case, dots and dashes as underscores), or be one of
`NON_CONFIG_ENV_VARS`, the few names the CLI and the test suite read for themselves
(`ODRADEK_BOOTSTRAP_SERVERS`, `ODRADEK_LONG`, ...). Any other refuses the start, naming the variable and
the key it would map to, so a misspelt `ODRADEK_NUM_PARTITION=3` is not silently a broker with one
partition per topic. Per-listener keys (`listener.name.<listener>.<key>`) have no environment form: the
variable's name could not say where the listener name ends; set them in the file or with `--override`.

Deviations from Kafka, each chosen so that the defaults run a working single broker:
- `node.id` defaults to 1 (Kafka has no default in KRaft mode), `process.roles` to `broker,controller`
  (combined mode), and an empty `controller.quorum.voters` means "a quorum of one: this node".
- The quorum is static: `controller.quorum.bootstrap.servers` (KIP-853's dynamic quorum) is served only in
  Kafka 4's standalone form, naming this controller alone (`standalone_voter`). A controller listener in
  `advertised.listeners` is accepted as in Kafka 3.9+: it is how other nodes reach this controller
  (`advertised_controller_listener_list`), never an endpoint given to clients (`advertised_listener_list`).
- `log.dir` defaults to `./odradek-data` (relative to the working directory), not `/tmp/kafka-logs`.
- The internal topics' replication factors (`offsets.topic.replication.factor`,
  `transaction.state.log.replication.factor`, `.min.isr`, and the share-state ones) default to 1, as in
  Kafka's own sample server.properties, rather than Kafka's built-in 3 (2 for min.isr).
- `log.segment.bytes` accepts values down to 64 bytes (`MIN_SEGMENT_BYTES`, the storage layer's floor)
  rather than Kafka 4.0's 1 MiB, so tests can roll segments quickly; `log.index.size.max.bytes` down to
  12 (`MIN_INDEX_BYTES`: one offset index entry) rather than Kafka's 4.
- Our own keys: `metrics.port` / `metrics.host` (Prometheus endpoint; port 0 = disabled, the default;
  the host defaults to the first listener's, so the endpoint is never reachable from wider than the
  broker itself: see `BrokerConfig.metrics_host`),
  `log.format` (`console` or `json`), `log.level`, `log.levels` (one logger's level, where Kafka uses its
  log4j configuration), and `log.cache.window.bytes` (how much of the end of
  each active segment stays in the page cache; see storage/log_manager.py).

Keys Kafka's sample server.properties carries but Odradek does not act on yet (thread counts, socket
buffer sizes, throttling) are still accepted and validated, so a Kafka config file loads unchanged.
"""

from __future__ import annotations

import difflib
import enum
import math
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, PrivateAttr, TypeAdapter, ValidationError, model_validator,
)

from odradek.replication.replica_selector import replica_selector_for

__all__ = [
    "ConfigError",
    "ConfigType",
    "BrokerConfig",
    "Listener",
    "QuorumVoter",
    "ENV_PREFIX",
    "NON_CONFIG_ENV_VARS",
    "load_config",
    "parse_properties",
    "parse_listener",
    "parse_listeners",
    "env_var_name",
    "render_value",
    "broker_config_keys",
]

ENV_PREFIX = "ODRADEK_"
# Environment variables that start with ENV_PREFIX but are not broker config keys: load_config leaves
# these alone and refuses any other ODRADEK_* name that maps to no key. Add a name here (and to the README's
# list) before reading a new one anywhere.
NON_CONFIG_ENV_VARS = frozenset({
    "ODRADEK_BOOTSTRAP_SERVERS",  # the client CLI's default --bootstrap-server (client/config.py)
    "ODRADEK_FORCE_PROGRESS",  # the CLI's perf tools draw progress without a terminal (client/cli_perf.py)
    "ODRADEK_LONG",  # the test suite: longer randomized and fault runs
    "ODRADEK_SIM_SEED",  # the simulation tests: replay one seed
    "ODRADEK_FAULT_SEED",  # the fault-injection tests: replay one seed ...
    "ODRADEK_FAULT_ROUNDS",  # ... and how many rounds
    "ODRADEK_TXN_FAULT_SEED",  # the transaction fault tests: seed, rounds, steps, debug logging
    "ODRADEK_TXN_FAULT_ROUNDS",
    "ODRADEK_TXN_FAULT_STEPS",
    "ODRADEK_TXN_DEBUG",
    "ODRADEK_TEST_FSYNC_JOURNAL",  # the power-loss tests: record fsyncs (storage/fsync_journal.py; pytest only)
    "ODRADEK_TEST_FAIL_WRITES",  # the log directory tests: injected I/O errors (storage/faults.py)
})

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Floors shared with topic_config and matching storage's LogConfig checks, so a value that passes
# validation here is one the storage layer accepts.
MIN_SEGMENT_BYTES = 64
MIN_INDEX_BYTES = 12
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("delete", "compact")
LOG_FORMATS = ("console", "json")
# Python's levels, plus log4j's spellings a Kafka operator types from habit.
LOG_LEVELS = {
    "TRACE": "DEBUG",
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARN": "WARNING",
    "WARNING": "WARNING",
    "ERROR": "ERROR",
    "FATAL": "CRITICAL",
    "CRITICAL": "CRITICAL",
}


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid. `key` names it; `source` says where from."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.key = key
        self.source = source
        self.reason = message


class ConfigType(enum.IntEnum):
    """Kafka's ConfigDef.Type as DescribeConfigs v3+ reports it in `config_type` (0 = unknown)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# --------------------------------------------------------------------------------------------------
# Value parsers, shared with topic_config. Each takes the raw value (text, or an already typed Python
# value when a config is built in code) and returns the parsed value or raises ValueError(reason).

_INT_RE = re.compile(r"[+-]?\d+")


def _text(value: Any) -> str:
    # Text from files and the environment; paths and numbers too when a config is built in code.
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value.strip()


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(value).lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError("must be true or false")


def _parse_integer(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"must be an integer ({what})")
    if isinstance(value, int):
        number = value
    else:
        text = _text(value)
        if not _INT_RE.fullmatch(text):
            raise ValueError(f"must be an integer ({what})")
        number = int(text)
    if not lo <= number <= hi:
        raise ValueError(f"must be an integer ({what}, {lo}..{hi})")
    return number


def parse_int32(value: Any) -> int:
    return _parse_integer(value, INT32_MIN, INT32_MAX, "32-bit")


def parse_int16(value: Any) -> int:
    return _parse_integer(value, -(2**15), 2**15 - 1, "16-bit")


def parse_int64(value: Any) -> int:
    return _parse_integer(value, INT64_MIN, INT64_MAX, "64-bit")


def parse_double(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a number")
    if isinstance(value, (int, float)):
        return float(value)
    text = _text(value)
    try:
        number = float(text)
    except ValueError:
        raise ValueError("must be a number") from None
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return number


def parse_list(value: Any) -> tuple[str, ...]:
    """Kafka's LIST: comma-separated, items trimmed, empty items dropped ("" is the empty list)."""
    if isinstance(value, (list, tuple)):
        items = [_text(v) for v in value]
    else:
        items = _text(value).split(",")
    return tuple(item.strip() for item in items if item.strip())


def parse_optional_string(value: Any) -> str | None:
    if value is None:
        return None
    text = _text(value)
    return text or None


def _blank_to_none(value: Any) -> Any:
    # An empty value (`log.roll.ms=` or ODRADEK_LOG_ROLL_MS="") unsets an optional key.
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _choice(*allowed: str, case_sensitive: bool = True):
    def parse(value: Any) -> str:
        text = _text(value)
        for option in allowed:
            if text == option or (not case_sensitive and text.lower() == option.lower()):
                return option
        raise ValueError(f"must be one of: {', '.join(allowed)}")

    return parse


def _list_of(*allowed: str, non_empty: bool = True):
    def parse(value: Any) -> tuple[str, ...]:
        items = tuple(item.lower() for item in parse_list(value))
        bad = [item for item in items if item not in allowed]
        if bad:
            raise ValueError(f"each item must be one of: {', '.join(allowed)}")
        if non_empty and not items:
            raise ValueError("must not be empty")
        if len(set(items)) != len(items):
            raise ValueError("must not repeat an item")
        return items

    return parse


def _parse_log_level(value: Any) -> str:
    text = _text(value).upper()
    if text not in LOG_LEVELS:
        raise ValueError(f"must be one of: {', '.join(sorted(LOG_LEVELS))}")
    return LOG_LEVELS[text]


class LoggerLevels(dict):
    """`log.levels` parsed: renders back as it is written, `logger=LEVEL,...`."""


def parse_log_levels(value: Any) -> LoggerLevels:
    """`log.levels`: `logger=LEVEL,...` (`kafka.authorizer.logger=DEBUG,odradek.broker.network=WARN`), each
    level one of LOG_LEVELS' names, as Python's level name; a logger named twice is refused."""
    if isinstance(value, Mapping):
        items = [f"{k}={v}" for k, v in value.items()]
    else:
        items = list(parse_list(value))
    result = LoggerLevels()
    for item in items:
        name, sep, level = item.partition("=")
        name, level = name.strip(), level.strip().upper()
        if not sep or not name or not level:
            raise ValueError(f"{item!r} is not logger=LEVEL (a list of logger=LEVEL)")
        if level not in LOG_LEVELS:
            raise ValueError(f"the level of {name!r} must be one of: {', '.join(sorted(LOG_LEVELS))}")
        if name in result:
            raise ValueError(f"logger {name!r} appears twice")
        result[name] = LOG_LEVELS[level]
    return result


def _parse_protocol_map(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        items = [f"{k}:{v}" for k, v in value.items()]
    else:
        items = list(parse_list(value))
    result: dict[str, str] = {}
    for item in items:
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ValueError("must be a list of LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"unknown security protocol {protocol!r} (one of: {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in result:
            raise ValueError(f"listener name {name!r} is mapped twice")
        result[name] = protocol
    return result


# --------------------------------------------------------------------------------------------------
# Listeners and quorum voters


@dataclass(frozen=True, slots=True)
class Listener:
    """One `NAME://host:port` endpoint. An empty host binds every interface; port 0 asks the OS for one."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    """One `id@host:port` entry of `controller.quorum.voters`."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}"


_LISTENER_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9_]+)://(?:\[(?P<ipv6>[0-9A-Fa-f:.%a-z]+)\]|(?P<host>[^:\[\]/\s]*)):(?P<port>\d+)$"
)
_VOTER_RE = re.compile(
    r"^(?P<id>\d+)@(?:\[(?P<ipv6>[0-9A-Fa-f:.%a-z]+)\]|(?P<host>[^:\[\]/@\s]+)):(?P<port>\d+)$"
)


def parse_listener(text: str, protocol_map: Mapping[str, str] | None = None) -> Listener:
    """Parse `NAME://host:port` (host may be empty or a bracketed IPv6 address). Raises ValueError."""
    match = _LISTENER_RE.match(text.strip())
    if not match:
        raise ValueError(f"{text.strip()!r} is not of the form NAME://host:port")
    name = match["name"].upper()
    host = match["ipv6"] if match["ipv6"] is not None else match["host"]
    port = int(match["port"])
    if port > 65535:
        raise ValueError(f"port {port} of {text.strip()!r} is out of range 0..65535")
    if protocol_map is None:
        protocol = name if name in SECURITY_PROTOCOLS else "PLAINTEXT"
    elif name in protocol_map:
        protocol = protocol_map[name]
    else:
        raise ValueError(f"listener name {name!r} has no entry in listener.security.protocol.map")
    return Listener(name, host, port, protocol)


def parse_listeners(
    value: Iterable[str] | str, protocol_map: Mapping[str, str] | None = None
) -> list[Listener]:
    """Parse a listener list, refusing duplicate names and two listeners on one host and port."""
    items = parse_list(value) if isinstance(value, str) else tuple(value)
    listeners = [parse_listener(item, protocol_map) for item in items]
    names: set[str] = set()
    endpoints: set[tuple[str, int]] = set()
    for listener in listeners:
        if listener.name in names:
            raise ValueError(f"listener name {listener.name!r} appears twice")
        names.add(listener.name)
        if listener.port:
            if (listener.host, listener.port) in endpoints:
                raise ValueError(f"two listeners use {listener.host or '*'}:{listener.port}")
            endpoints.add((listener.host, listener.port))
    return listeners


def _parse_voter(text: str) -> QuorumVoter:
    match = _VOTER_RE.match(text.strip())
    if not match:
        raise ValueError(f"{text.strip()!r} is not of the form id@host:port")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} of {text.strip()!r} is out of range 1..65535")
    host = match["ipv6"] if match["ipv6"] is not None else match["host"]
    return QuorumVoter(int(match["id"]), host, port)


def _parse_voters(value: Any) -> tuple[str, ...]:
    items = parse_list(value)
    voters = [_parse_voter(item) for item in items]
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise ValueError("a node id appears twice")
    return tuple(str(v) for v in voters)


def _parse_listener_list(value: Any) -> tuple[str, ...]:
    items = parse_list(value)
    # Syntax only here; protocols are resolved against the map once every field is known.
    parse_listeners(items, protocol_map=None)
    return tuple(str(parse_listener(item)) for item in items)


def _parse_port(value: Any) -> int:
    port = parse_int32(value)
    if not 0 <= port <= 65535:
        raise ValueError("must be a port number 0..65535")
    return port


# --------------------------------------------------------------------------------------------------
# Field types

Bool = Annotated[bool, BeforeValidator(parse_bool)]
Int = Annotated[int, BeforeValidator(parse_int32)]
Short = Annotated[int, BeforeValidator(parse_int16)]
Long = Annotated[int, BeforeValidator(parse_int64)]
Double = Annotated[float, BeforeValidator(parse_double)]
OptInt = Annotated[
    int | None, BeforeValidator(lambda v: None if _blank_to_none(v) is None else parse_int32(v))
]
OptLong = Annotated[
    int | None, BeforeValidator(lambda v: None if _blank_to_none(v) is None else parse_int64(v))
]
Str = Annotated[str, BeforeValidator(_text)]
OptStr = Annotated[str | None, BeforeValidator(parse_optional_string)]
StrList = Annotated[tuple[str, ...], BeforeValidator(parse_list)]
OptStrList = Annotated[
    tuple[str, ...] | None, BeforeValidator(lambda v: None if _blank_to_none(v) is None else parse_list(v))
]
ListenerList = Annotated[tuple[str, ...], BeforeValidator(_parse_listener_list)]
OptListenerList = Annotated[
    tuple[str, ...] | None,
    BeforeValidator(lambda v: None if _blank_to_none(v) is None else _parse_listener_list(v)),
]
VoterList = Annotated[tuple[str, ...], BeforeValidator(_parse_voters)]
ProtocolMap = Annotated[dict[str, str], BeforeValidator(_parse_protocol_map)]
Roles = Annotated[tuple[str, ...], BeforeValidator(_list_of("broker", "controller"))]
CleanupPolicy = Annotated[tuple[str, ...], BeforeValidator(_list_of(*CLEANUP_POLICIES))]
CompressionType = Annotated[str, BeforeValidator(_choice(*COMPRESSION_TYPES, case_sensitive=False))]
TimestampType = Annotated[str, BeforeValidator(_choice(*TIMESTAMP_TYPES))]
LogFormat = Annotated[str, BeforeValidator(_choice(*LOG_FORMATS, case_sensitive=False))]
LogLevel = Annotated[str, BeforeValidator(_parse_log_level)]


def _parse_replica_selector(value: Any) -> str | None:
    text = parse_optional_string(value)
    replica_selector_for(text)  # (ValueError: a class this broker does not have refuses the start)
    return text


ReplicaSelectorClass = Annotated[str | None, BeforeValidator(_parse_replica_selector)]
Port = Annotated[int, BeforeValidator(_parse_port)]
SslStoreType = Annotated[str, BeforeValidator(_choice("JKS", "PKCS12", "PEM", case_sensitive=False))]
SslClientAuth = Annotated[str, BeforeValidator(_choice("none", "requested", "required", case_sensitive=False))]


AUTHORIZER_CLASS_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",)


class SemicolonList(tuple):
    """A list Kafka writes with semicolons (`super.users=User:admin;User:CN=broker,O=org`): a principal may
    hold commas, so it renders back joined by `;`, never `,`."""

    __slots__ = ()


def _parse_authorizer(value: Any) -> str:
    text = _text(value)
    if text and text not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"{text} is not served: {AUTHORIZER_CLASS_NAMES[0]} (KRaft's StandardAuthorizer) turns ACLs "
                         "on, an empty value leaves them off")
    return text


def _parse_super_users(value: Any) -> SemicolonList:
    if isinstance(value, (list, tuple)):
        value = ";".join(_text(v) for v in value)
    principals = SemicolonList(p.strip() for p in _text(value).split(";") if p.strip())
    for p in principals:
        kind, sep, name = p.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{p!r} is not a principal (Type:name, e.g. User:admin)")
    return principals


# The principal builder Kafka uses when none is named, and the only one served (broker/security.py builds
# principals its way); another class is refused rather than ignored.
DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"


def _parse_principal_builder(value: Any) -> str | None:
    text = parse_optional_string(value)
    if text is not None and text != DEFAULT_PRINCIPAL_BUILDER:
        raise ValueError(
            f"{text} is not served: principals are built as Kafka's {DEFAULT_PRINCIPAL_BUILDER} builds them "
            "(ssl.principal.mapping.rules for certificates, the SASL user name otherwise); leave it unset"
        )
    return text


def _parse_ip_overrides(value: Any) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `host-or-address:count,...` (Kafka's format). Host names are
    resolved when the listeners start (broker/server.py), as Kafka resolves them when it reads the config."""
    if isinstance(value, Mapping):
        items = [f"{k}:{v}" for k, v in value.items()]
    else:
        items = list(parse_list(value))
    result: dict[str, int] = {}
    for item in items:
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not _INT_RE.fullmatch(count.strip()):
            raise ValueError(f"{item!r} is not host:count (a list of host-or-address:count)")
        number = int(count)
        if not 0 <= number <= INT32_MAX:
            raise ValueError(f"the count of {host!r} must be 0..{INT32_MAX}")
        result[host] = number
    return result


def _check_share_groups(c: BrokerConfig) -> None:
    """Kafka's checks of the group.share.* settings against each other (GroupCoordinatorConfig and
    ShareGroupConfig): each default lies within its min/max, a broker has a share session for as many members
    as a share group may have, the session outlasts the heartbeat, and the only assignor is `simple`."""
    for key, value, low_key, low, high_key, high in (
        ("group.share.session.timeout.ms", c.share_group_session_timeout_ms,
         "group.share.min.session.timeout.ms", c.share_group_min_session_timeout_ms,
         "group.share.max.session.timeout.ms", c.share_group_max_session_timeout_ms),
        ("group.share.heartbeat.interval.ms", c.share_group_heartbeat_interval_ms,
         "group.share.min.heartbeat.interval.ms", c.share_group_min_heartbeat_interval_ms,
         "group.share.max.heartbeat.interval.ms", c.share_group_max_heartbeat_interval_ms),
        ("group.share.delivery.count.limit", c.share_group_delivery_count_limit,
         "group.share.min.delivery.count.limit", c.share_group_min_delivery_count_limit,
         "group.share.max.delivery.count.limit", c.share_group_max_delivery_count_limit),
        ("group.share.record.lock.duration.ms", c.share_group_record_lock_duration_ms,
         "group.share.min.record.lock.duration.ms", c.share_group_min_record_lock_duration_ms,
         "group.share.max.record.lock.duration.ms", c.share_group_max_record_lock_duration_ms),
        ("group.share.partition.max.record.locks", c.share_group_partition_max_record_locks,
         "group.share.min.partition.max.record.locks", c.share_group_min_partition_max_record_locks,
         "group.share.max.partition.max.record.locks", c.share_group_max_partition_max_record_locks),
    ):
        if low > high:
            raise _KeyedError(low_key, f"must be <= {high_key} ({high})")
        if not low <= value <= high:
            raise _KeyedError(key, f"must be between {low_key} ({low}) and {high_key} ({high})")
    if c.share_group_max_share_sessions < c.share_group_max_size:  # ShareGroupConfig: every member a session
        raise _KeyedError("group.share.max.share.sessions",
                          f"must be greater than or equal to group.share.max.size ({c.share_group_max_size})")
    if c.share_group_session_timeout_ms <= c.share_group_heartbeat_interval_ms:
        raise _KeyedError("group.share.session.timeout.ms",
                          f"must be greater than group.share.heartbeat.interval.ms ({c.share_group_heartbeat_interval_ms})")
    unknown = [a for a in c.share_group_assignors if a != "simple"]
    if unknown or not c.share_group_assignors:
        raise _KeyedError("group.share.assignors", f"the only share group assignor is simple, not {', '.join(unknown) or 'none'}")


def _f(alias: str, default: Any, ktype: ConfigType, doc: str, **constraints: Any) -> Any:
    return Field(
        default, alias=alias, description=doc, json_schema_extra={"kafka_type": int(ktype)}, **constraints
    )


T = ConfigType
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


class BrokerConfig(BaseModel):
    """The broker's static configuration. Build it with `load_config`, `from_properties`, or keywords."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, validate_default=True)
    # listener.name.<listener>.<key> settings, by "<listener lower-case>.<key>" (see listener_setting)
    _listener_settings: dict[str, str] = PrivateAttr(default_factory=dict)

    # ---- identity and roles
    node_id: Int = _f("node.id", 1, T.INT, "This node's id in the cluster.", ge=0)
    broker_id: OptInt = _f(
        "broker.id", None, T.INT, "Legacy name of node.id; if set it must equal node.id.", ge=0
    )
    process_roles: Roles = _f(
        "process.roles", "broker,controller", T.LIST, "Roles of this node: broker, controller or both."
    )
    controller_quorum_voters: VoterList = _f(
        "controller.quorum.voters",
        "",
        T.LIST,
        "Controller quorum as id@host:port,...; empty means a quorum of one: this node.",
    )
    controller_quorum_bootstrap_servers: StrList = _f(
        "controller.quorum.bootstrap.servers",
        "",
        T.LIST,
        "host:port list used to discover the controller quorum.",
    )
    controller_quorum_election_timeout_ms: Int = _f(
        "controller.quorum.election.timeout.ms", 1000, T.INT,
        "How long a voter waits without hearing from a leader before it stands for election (randomized up to 2x).",
        ge=1,
    )
    controller_quorum_election_backoff_max_ms: Int = _f(
        "controller.quorum.election.backoff.max.ms", 1000, T.INT, "Longest wait before a failed election is retried.", ge=1
    )
    controller_quorum_fetch_timeout_ms: Int = _f(
        "controller.quorum.fetch.timeout.ms", 2000, T.INT,
        "A follower that cannot fetch from the leader this long stands for election; a leader not fetched from "
        "by a majority for 1.5x this long resigns.",
        ge=1,
    )
    controller_quorum_request_timeout_ms: Int = _f(
        "controller.quorum.request.timeout.ms", 2000, T.INT, "Timeout of the quorum's requests between nodes.", ge=1
    )
    controller_quorum_disconnect_grace_ms: Int = _f(
        "odradek.controller.quorum.disconnect.grace.ms", 500, T.INT,
        "Odradek's, not Kafka's: a voter whose connection to the quorum leader was closed or refused by the "
        "leader's host (its process died) stands for election when the leader has not answered a fetch within "
        "this grace (randomized up to 2x), instead of after controller.quorum.fetch.timeout.ms. -1 turns it "
        "off (KRaft's rule: the fetch timeout only).",
        ge=-1,
    )
    metadata_log_max_record_bytes_between_snapshots: Int = _f(
        "metadata.log.max.record.bytes.between.snapshots", 20971520, T.LONG,
        "Committed metadata record bytes after which a new metadata snapshot is taken.", ge=1
    )
    metadata_log_max_snapshot_interval_ms: Int = _f(
        "metadata.log.max.snapshot.interval.ms", 3600000, T.LONG,
        "Longest time between metadata snapshots while new records are committed (0: by size only).", ge=0
    )
    controller_listener_names: StrList = _f(
        "controller.listener.names",
        "CONTROLLER",
        T.LIST,
        "Names of the listeners that carry controller traffic.",
    )
    broker_rack: OptStr = _f(
        "broker.rack", None, T.STRING, "Rack of this broker, for rack-aware replica placement."
    )

    # ---- listeners
    listeners: ListenerList = _f(
        "listeners", "PLAINTEXT://localhost:9092", T.LIST, "Endpoints to bind, NAME://host:port,..."
    )
    advertised_listeners: OptListenerList = _f(
        "advertised.listeners",
        None,
        T.LIST,
        "Endpoints given to clients; defaults to the non-controller listeners.",
    )
    listener_security_protocol_map: ProtocolMap = _f(
        "listener.security.protocol.map",
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",  # Kafka's text, in its order
        T.STRING,
        "Security protocol of each listener name, NAME:PROTOCOL,...",
    )
    inter_broker_listener_name: OptStr = _f(
        "inter.broker.listener.name",
        None,
        T.STRING,
        "Listener brokers use to reach each other; default: the first broker listener.",
    )
    security_inter_broker_protocol: Annotated[
        str | None, BeforeValidator(lambda v: None if _blank_to_none(v) is None else _choice(*SECURITY_PROTOCOLS)(v))
    ] = _f(
        "security.inter.broker.protocol", None, T.STRING,
        "The older way to name the inter-broker listener: the listener named after this security protocol "
        "(SSL means the listener SSL). Only one of it and inter.broker.listener.name may be set.",
    )

    # ---- network and request handling
    num_network_threads: Int = _f(
        "num.network.threads",
        3,
        T.INT,
        "Accepted for compatibility; connections run on the event loop.",
        ge=1,
    )
    num_io_threads: Int = _f("num.io.threads", 8, T.INT, "Accepted for compatibility: requests are served on the event loop.", ge=1)
    socket_send_buffer_bytes: Int = _f(
        "socket.send.buffer.bytes",
        102400,
        T.INT,
        "SO_SNDBUF of client sockets; -1 keeps the OS default.",
        ge=-1,
    )
    socket_receive_buffer_bytes: Int = _f(
        "socket.receive.buffer.bytes",
        102400,
        T.INT,
        "SO_RCVBUF of client sockets; -1 keeps the OS default.",
        ge=-1,
    )
    socket_request_max_bytes: Int = _f(
        "socket.request.max.bytes", 104857600, T.INT, "Largest request frame accepted.", ge=1
    )
    connections_max_idle_ms: Long = _f(
        "connections.max.idle.ms", 600000, T.LONG, "Close connections idle this long."
    )
    max_connections: Int = _f(
        "max.connections", INT32_MAX, T.INT, "Most client connections open at once.", ge=0
    )
    max_connections_per_ip: Int = _f(
        "max.connections.per.ip", INT32_MAX, T.INT, "Most connections from one address.", ge=0
    )
    max_connections_per_ip_overrides: Annotated[dict[str, int], BeforeValidator(_parse_ip_overrides)] = _f(
        "max.connections.per.ip.overrides", "", T.STRING,
        "Per-address exceptions to max.connections.per.ip: host-or-address:count,... (host names resolved at start).",
    )
    max_connection_creation_rate: Int = _f(
        "max.connection.creation.rate", INT32_MAX, T.INT,
        "Most connections accepted per second on listeners other than the inter-broker one; over it, accepting "
        "is delayed (KIP-612). listener.name.<listener>.max.connection.creation.rate bounds one listener.", ge=0,
    )
    queued_max_requests: Int = _f(
        "queued.max.requests", 500, T.INT, "Requests queued before connections stop being read.", ge=1
    )
    max_request_partition_size_limit: Int = _f(
        "max.request.partition.size.limit", 2000, T.INT,
        "The most partitions one DescribeTopicPartitions response carries (the client's limit is capped by it).",
        ge=1,
    )
    request_timeout_ms: Int = _f(
        "request.timeout.ms", 30000, T.INT, "Timeout of requests this node sends to others.", ge=0
    )

    # ---- security: TLS and SASL (broker/security.py). Any of these may be set for one listener only as
    # listener.name.<listener>.<key> (e.g. listener.name.internal.ssl.client.auth); see listener_setting.
    ssl_keystore_type: SslStoreType = _f("ssl.keystore.type", "JKS", T.STRING, "Format of the key store: PKCS12 or PEM (JKS is refused with the keytool command that converts it); the file's own format decides.")
    ssl_keystore_location: OptStr = _f("ssl.keystore.location", None, T.STRING, "Key store file: PKCS12 (key, certificate and chain), or PEM with the private key and the certificate chain.")
    ssl_keystore_password: OptStr = _f("ssl.keystore.password", None, T.PASSWORD, "Password of the key store file (PKCS12), or of an encrypted PEM key.")
    ssl_key_password: OptStr = _f("ssl.key.password", None, T.PASSWORD, "Password of the (encrypted) private key.")
    ssl_keystore_key: OptStr = _f("ssl.keystore.key", None, T.PASSWORD, "The private key in PEM, inline (ssl.keystore.type=PEM).")
    ssl_keystore_certificate_chain: OptStr = _f("ssl.keystore.certificate.chain", None, T.PASSWORD, "The certificate chain in PEM, inline (ssl.keystore.type=PEM).")
    ssl_truststore_type: SslStoreType = _f("ssl.truststore.type", "JKS", T.STRING, "Format of the trust store: PKCS12 or PEM (JKS is refused with a conversion hint).")
    ssl_truststore_location: OptStr = _f("ssl.truststore.location", None, T.STRING, "Trust store file: PKCS12 or PEM CA certificates.")
    ssl_truststore_password: OptStr = _f("ssl.truststore.password", None, T.PASSWORD, "Password of the PKCS12 trust store (unused for PEM).")
    ssl_truststore_certificates: OptStr = _f("ssl.truststore.certificates", None, T.PASSWORD, "Trusted certificates in PEM, inline.")
    ssl_client_auth: SslClientAuth = _f("ssl.client.auth", "none", T.STRING, "Client certificates: none, requested or required.")
    ssl_principal_mapping_rules: Str = _f("ssl.principal.mapping.rules", "DEFAULT", T.STRING, "Rules mapping a client certificate's distinguished name to a user name: DEFAULT or RULE:pattern/replacement/[LU],...")
    ssl_protocol: Str = _f("ssl.protocol", "TLSv1.3", T.STRING, "TLS protocol of contexts this node makes as a client.")
    ssl_enabled_protocols: StrList = _f("ssl.enabled.protocols", "TLSv1.2,TLSv1.3", T.LIST, "TLS versions accepted.")
    ssl_cipher_suites: StrList = _f("ssl.cipher.suites", "", T.LIST, "TLS 1.2 cipher suites (OpenSSL or IANA names); empty: the defaults.")
    # Java's implementation choices, which Kafka's documentation lists among a secured broker's settings: OpenSSL
    # does what each names (X.509 key managers, PKIX path validation, a cryptographic random source), so
    # Java's algorithm names are accepted and any other value refused.
    ssl_keymanager_algorithm: Annotated[str, BeforeValidator(_choice("SunX509", "NewSunX509", "PKIX"))] = _f("ssl.keymanager.algorithm", "SunX509", T.STRING, "Java's key manager algorithm (SunX509, NewSunX509, PKIX): accepted; OpenSSL presents the key store's certificate chain.")
    ssl_trustmanager_algorithm: Annotated[str, BeforeValidator(_choice("PKIX", "SunX509"))] = _f("ssl.trustmanager.algorithm", "PKIX", T.STRING, "Java's trust manager algorithm (PKIX, SunX509): accepted; OpenSSL validates certificate paths against the trust store.")
    ssl_secure_random_implementation: Annotated[str | None, BeforeValidator(lambda v: None if _blank_to_none(v) is None else _choice("SHA1PRNG", "NativePRNG", "NativePRNGBlocking", "NativePRNGNonBlocking", "DRBG", "Windows-PRNG")(v))] = _f("ssl.secure.random.implementation", None, T.STRING, "Java's SecureRandom algorithm (SHA1PRNG, NativePRNG, DRBG ...): accepted; OpenSSL's own random generator serves TLS here.")
    ssl_endpoint_identification_algorithm: OptStr = _f("ssl.endpoint.identification.algorithm", "https", T.STRING, "https: this node checks the host name of the nodes it connects to; empty: it does not.")
    sasl_enabled_mechanisms: StrList = _f("sasl.enabled.mechanisms", "GSSAPI", T.LIST, "SASL mechanisms served: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (unsecured JWTs only; GSSAPI is not served).")
    sasl_mechanism_inter_broker_protocol: Str = _f("sasl.mechanism.inter.broker.protocol", "GSSAPI", T.STRING, "SASL mechanism brokers use with each other.")
    sasl_mechanism_controller_protocol: Str = _f("sasl.mechanism.controller.protocol", "GSSAPI", T.STRING, "SASL mechanism used to reach the controllers.")
    sasl_jaas_config: OptStr = _f("sasl.jaas.config", None, T.PASSWORD, "JAAS login configuration: PlainLoginModule user_<name>=\"<password>\" entries, and username/password this node authenticates with.")
    sasl_server_callback_handler_class: OptStr = _f("sasl.server.callback.handler.class", None, T.CLASS, "Set per mechanism (listener.name.<l>.oauthbearer.sasl.server.callback.handler.class): only Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, the OAUTHBEARER default, is served.")
    sasl_oauthbearer_jwks_endpoint_url: OptStr = _f("sasl.oauthbearer.jwks.endpoint.url", None, T.STRING, "Not served: OAUTHBEARER checks unsecured JWTs only; a broker with this set refuses to start rather than accept unsigned tokens.")
    sasl_server_max_receive_size: Int = _f("sasl.server.max.receive.size", 524288, T.INT, "Largest frame accepted before authentication.", ge=1)
    connection_failed_authentication_delay_ms: Int = _f("connection.failed.authentication.delay.ms", 100, T.INT, "Delay before a failed authentication is answered and the connection closed.", ge=0)
    connections_max_reauth_ms: Long = _f("connections.max.reauth.ms", 0, T.LONG, "Longest SASL session before the client must re-authenticate (KIP-368); 0: never.", ge=0)
    principal_builder_class: Annotated[str | None, BeforeValidator(_parse_principal_builder)] = _f("principal.builder.class", DEFAULT_PRINCIPAL_BUILDER, T.CLASS, f"Only {DEFAULT_PRINCIPAL_BUILDER} (Kafka's default): principals are built as it builds them; another class refuses the start.")

    # ---- log storage
    # LIST, as in Kafka 4's definition of log.dir (a describe reports it; the value is one directory)
    log_dir: Str = _f("log.dir", "./odradek-data", T.LIST, "Data directory, used when log.dirs is not set.")
    log_dirs: OptStrList = _f("log.dirs", None, T.LIST, "Comma-separated data directories; default: log.dir.")
    metadata_log_dir: OptStr = _f(
        "metadata.log.dir",
        None,
        T.STRING,
        "Directory of the metadata log; default: the first data directory.",
    )
    num_partitions: Int = _f(
        "num.partitions", 1, T.INT, "Partitions of an automatically created topic.", ge=1
    )
    default_replication_factor: Int = _f(
        "default.replication.factor", 1, T.INT, "Replication factor of an automatically created topic.", ge=1
    )
    auto_create_topics_enable: Bool = _f(
        "auto.create.topics.enable", True, T.BOOLEAN, "Create a topic when a client asks for an unknown one."
    )
    delete_topic_enable: Bool = _f("delete.topic.enable", True, T.BOOLEAN, "Allow DeleteTopics.")
    message_max_bytes: Int = _f(
        "message.max.bytes",
        1048588,
        T.INT,
        "Largest record batch accepted (topic default of max.message.bytes).",
        ge=0,
    )
    num_recovery_threads_per_data_dir: Int = _f(
        "num.recovery.threads.per.data.dir",
        2,
        T.INT,
        "Threads per data directory for recovery at start-up.",
        ge=1,
    )
    log_segment_bytes: Int = _f(
        "log.segment.bytes", 1073741824, T.INT, "Size at which a segment is rolled.", ge=MIN_SEGMENT_BYTES
    )
    log_roll_ms: OptLong = _f(
        "log.roll.ms", None, T.LONG, "Age at which a segment is rolled; default: log.roll.hours.", ge=1
    )
    log_roll_hours: Int = _f("log.roll.hours", 168, T.INT, "Age in hours at which a segment is rolled.", ge=1)
    log_roll_jitter_ms: OptLong = _f(
        "log.roll.jitter.ms", None, T.LONG, "Most random jitter subtracted from the roll time.", ge=0
    )
    log_roll_jitter_hours: Int = _f(
        "log.roll.jitter.hours", 0, T.INT, "Roll jitter in hours, when log.roll.jitter.ms is unset.", ge=0
    )
    log_retention_ms: OptLong = _f(
        "log.retention.ms",
        None,
        T.LONG,
        "Time a segment is kept; -1 keeps forever; default: minutes, then hours.",
    )
    log_retention_minutes: OptInt = _f(
        "log.retention.minutes", None, T.INT, "Retention in minutes, when log.retention.ms is unset."
    )
    log_retention_hours: Int = _f(
        "log.retention.hours", 168, T.INT, "Retention in hours, when ms and minutes are unset."
    )
    log_retention_bytes: Long = _f(
        "log.retention.bytes", -1, T.LONG, "Most bytes kept per partition; -1 means no limit."
    )
    log_retention_check_interval_ms: Long = _f(
        "log.retention.check.interval.ms", 300000, T.LONG, "How often retention is enforced.", ge=1
    )
    log_cleanup_policy: CleanupPolicy = _f(
        "log.cleanup.policy", "delete", T.LIST, "delete, compact, or both."
    )
    log_cleaner_enable: Bool = _f("log.cleaner.enable", True, T.BOOLEAN, "Run the log cleaner (compaction).")
    log_cleaner_threads: Int = _f("log.cleaner.threads", 1, T.INT, "Cleaner threads.", ge=0)
    log_cleaner_backoff_ms: Long = _f(
        "log.cleaner.backoff.ms", 15000, T.LONG, "Cleaner sleep when there is nothing to clean.", ge=0
    )
    log_cleaner_delete_retention_ms: Long = _f(
        "log.cleaner.delete.retention.ms", 86400000, T.LONG, "How long tombstones survive compaction.", ge=0
    )
    log_cleaner_min_cleanable_ratio: Double = _f(
        "log.cleaner.min.cleanable.ratio",
        0.5,
        T.DOUBLE,
        "Dirty ratio at which a log becomes cleanable.",
        ge=0,
        le=1,
    )
    log_cleaner_min_compaction_lag_ms: Long = _f(
        "log.cleaner.min.compaction.lag.ms",
        0,
        T.LONG,
        "Minimum age of a record before it can be compacted.",
        ge=0,
    )
    log_cleaner_max_compaction_lag_ms: Long = _f(
        "log.cleaner.max.compaction.lag.ms",
        INT64_MAX,
        T.LONG,
        "Maximum age of a record before it must be compacted.",
        ge=1,
    )
    log_index_interval_bytes: Int = _f(
        "log.index.interval.bytes", 4096, T.INT, "Bytes between offset index entries.", ge=0
    )
    log_index_size_max_bytes: Int = _f(
        "log.index.size.max.bytes", 10485760, T.INT, "Largest offset index file.", ge=MIN_INDEX_BYTES
    )
    log_flush_interval_messages: Long = _f(
        "log.flush.interval.messages",
        INT64_MAX,
        T.LONG,
        "Messages appended before a partition is fsynced.",
        ge=1,
    )
    log_flush_interval_ms: OptLong = _f(
        "log.flush.interval.ms",
        None,
        T.LONG,
        "Most time data stays unflushed; default: log.flush.scheduler.interval.ms.",
        ge=0,
    )
    log_flush_scheduler_interval_ms: Long = _f(
        "log.flush.scheduler.interval.ms",
        INT64_MAX,
        T.LONG,
        "How often the flusher checks for logs to flush.",
    )
    log_flush_offset_checkpoint_interval_ms: Int = _f(
        "log.flush.offset.checkpoint.interval.ms",
        60000,
        T.INT,
        "How often the recovery point is checkpointed.",
        ge=0,
    )
    log_segment_delete_delay_ms: Long = _f(
        "log.segment.delete.delay.ms", 60000, T.LONG, "Delay before a deleted segment's files go.", ge=0
    )
    log_preallocate: Bool = _f("log.preallocate", False, T.BOOLEAN, "Preallocate segment files.")
    log_message_timestamp_type: TimestampType = _f(
        "log.message.timestamp.type", "CreateTime", T.STRING, "CreateTime or LogAppendTime."
    )
    log_message_timestamp_before_max_ms: Long = _f(
        "log.message.timestamp.before.max.ms",
        INT64_MAX,
        T.LONG,
        "How far in the past a CreateTime timestamp may be.",
        ge=0,
    )
    log_message_timestamp_after_max_ms: Long = _f(
        "log.message.timestamp.after.max.ms",
        HOUR_MS,
        T.LONG,
        "How far in the future a CreateTime timestamp may be.",
        ge=0,
    )
    min_insync_replicas: Int = _f(
        "min.insync.replicas", 1, T.INT, "In-sync replicas an acks=all write needs.", ge=1
    )
    compression_type: CompressionType = _f(
        "compression.type",
        "producer",
        T.STRING,
        "Compression of stored batches; producer keeps the producer's.",
    )
    compression_gzip_level: Int = _f(
        "compression.gzip.level", -1, T.INT, "gzip level, 1..9 or -1 for the codec default."
    )
    compression_lz4_level: Int = _f("compression.lz4.level", 9, T.INT, "lz4 level, 1..17.", ge=1, le=17)
    compression_zstd_level: Int = _f(
        "compression.zstd.level", 3, T.INT, "zstd level, -131072..22.", ge=-131072, le=22
    )
    auto_leader_rebalance_enable: Bool = _f(
        "auto.leader.rebalance.enable", True, T.BOOLEAN,
        "The active controller moves leadership back to preferred replicas when the imbalance check finds it off.",
    )
    leader_imbalance_check_interval_seconds: Int = _f(
        "leader.imbalance.check.interval.seconds", 300, T.LONG, "How often the controller checks leader balance.", ge=1
    )
    unclean_leader_election_enable: Bool = _f(
        "unclean.leader.election.enable",
        False,
        T.BOOLEAN,
        "Let an out-of-sync replica become leader, losing data.",
    )

    # ---- replication
    replica_lag_time_max_ms: Long = _f(
        "replica.lag.time.max.ms", 30000, T.LONG, "A follower behind this long leaves the ISR.", ge=1
    )
    replica_fetch_max_bytes: Int = _f(
        "replica.fetch.max.bytes", 1048576, T.INT, "Bytes a follower fetches per partition.", ge=0
    )
    replica_fetch_min_bytes: Int = _f(
        "replica.fetch.min.bytes", 1, T.INT, "Bytes a follower fetch waits for.", ge=0
    )
    replica_fetch_wait_max_ms: Int = _f(
        "replica.fetch.wait.max.ms", 500, T.INT, "Longest wait of a follower fetch (a parked fetch without a "
        "partition newly led there with that follower as a replica is answered at once).", ge=0
    )
    replica_socket_timeout_ms: Int = _f(
        "replica.socket.timeout.ms", 30000, T.INT, "Socket timeout of follower fetches."
    )
    replica_fetch_backoff_ms: Int = _f(
        "replica.fetch.backoff.ms", 1000, T.INT, "How long a follower waits before fetching a partition again "
        "after an error. A partition its leader says it does not lead (yet) is retried after 10 ms, doubling "
        "up to this: the leader is usually only a few ms behind on metadata.", ge=0
    )
    replica_fetch_response_max_bytes: Int = _f(
        "replica.fetch.response.max.bytes", 10485760, T.INT, "Bytes a follower fetch asks for in all.", ge=0
    )
    replica_selector_class: ReplicaSelectorClass = _f(
        "replica.selector.class", None, T.STRING,  # STRING, not CLASS, in Kafka's definition too
        "Which replica a consumer in another rack is pointed to (KIP-392): "
        "org.apache.kafka.common.replica.RackAwareReplicaSelector for the closest in-sync replica, "
        "org.apache.kafka.common.replica.LeaderSelector or unset for the leader.",
    )
    num_replica_fetchers: Int = _f(
        "num.replica.fetchers", 1, T.INT, "Accepted for compatibility: one fetcher per source broker.", ge=1
    )
    fetch_max_bytes: Int = _f(
        "fetch.max.bytes", 57671680, T.INT, "Most bytes returned by one Fetch.", ge=1024
    )
    broker_session_timeout_ms: Int = _f(
        "broker.session.timeout.ms", 9000, T.INT, "A broker without heartbeats this long is fenced.", ge=1
    )
    broker_heartbeat_interval_ms: Int = _f(
        "broker.heartbeat.interval.ms", 2000, T.INT, "Interval of broker heartbeats.", ge=1
    )
    broker_session_disconnect_grace_ms: Int = _f(
        "odradek.broker.session.disconnect.grace.ms", 500, T.INT,
        "Odradek's, not Kafka's: the active controller fences a broker whose heartbeat connection closed "
        "(its process died) and that did not heartbeat again within this grace, without waiting for "
        "broker.session.timeout.ms; a controller that just took over fences a broker it has not heard from "
        "within broker.heartbeat.interval.ms plus this grace. -1 turns both off (Kafka's rule: the session only).",
        ge=-1,
    )

    # ---- consumer groups and offsets
    offsets_topic_num_partitions: Int = _f(
        "offsets.topic.num.partitions", 50, T.INT, "Partitions of __consumer_offsets.", ge=1
    )
    offsets_topic_replication_factor: Short = _f(
        "offsets.topic.replication.factor", 1, T.SHORT, "Replication factor of __consumer_offsets.", ge=1
    )
    offsets_topic_segment_bytes: Int = _f(
        "offsets.topic.segment.bytes", 104857600, T.INT, "Segment size of __consumer_offsets.", ge=1
    )
    offsets_retention_minutes: Int = _f(
        "offsets.retention.minutes",
        10080,
        T.INT,
        "How long committed offsets of an empty group are kept.",
        ge=1,
    )
    offsets_retention_check_interval_ms: Long = _f(
        "offsets.retention.check.interval.ms", 600000, T.LONG, "How often stale offsets are expired.", ge=1
    )
    offsets_commit_timeout_ms: Int = _f(
        "offsets.commit.timeout.ms", 5000, T.INT,
        "Longest wait for a __consumer_offsets write (commits, group state) to be replicated.", ge=1
    )
    offset_metadata_max_bytes: Int = _f(
        "offset.metadata.max.bytes", 4096, T.INT, "Largest metadata string of a committed offset."
    )
    group_initial_rebalance_delay_ms: Int = _f(
        "group.initial.rebalance.delay.ms",
        3000,
        T.INT,
        "Wait for more members before the first rebalance of a new group.",
        ge=0,
    )
    group_min_session_timeout_ms: Int = _f(
        "group.min.session.timeout.ms", 6000, T.INT, "Smallest session timeout a member may ask for."
    )
    group_max_session_timeout_ms: Int = _f(
        "group.max.session.timeout.ms", 1800000, T.INT, "Largest session timeout a member may ask for."
    )
    group_max_size: Int = _f("group.max.size", INT32_MAX, T.INT, "Most members in one group.", ge=1)
    consumer_group_session_timeout_ms: Int = _f(
        "group.consumer.session.timeout.ms", 45000, T.INT, "Session timeout of KIP-848 consumer group members.", ge=1
    )
    consumer_group_heartbeat_interval_ms: Int = _f(
        "group.consumer.heartbeat.interval.ms", 5000, T.INT, "Heartbeat interval of KIP-848 consumer group members.", ge=1
    )
    consumer_group_max_size: Int = _f(
        "group.consumer.max.size", INT32_MAX, T.INT, "Most members in one KIP-848 consumer group.", ge=1
    )

    # ---- share groups (KIP-932): Kafka 4.4's group.share.* names, defaults and ranges (GroupCoordinatorConfig
    # and ShareGroupConfig); the cross-checks are in _check_share_groups.
    share_enabled: Bool = _f(
        "odradek.share.enabled", True, T.BOOLEAN,
        "Serve share groups (KIP-932: ShareGroupHeartbeat, ShareFetch, ...), on by default as in Kafka 4.2+. Off, "
        "none of the share APIs is advertised, and a request for one is refused as an unsupported API.",
    )
    share_group_session_timeout_ms: Int = _f(
        "group.share.session.timeout.ms", 45000, T.INT, "Session timeout of share group members.", ge=1
    )
    share_group_min_session_timeout_ms: Int = _f(
        "group.share.min.session.timeout.ms", 45000, T.INT, "Smallest share.session.timeout.ms a group may set.", ge=1
    )
    share_group_max_session_timeout_ms: Int = _f(
        "group.share.max.session.timeout.ms", 60000, T.INT, "Largest share.session.timeout.ms a group may set.", ge=1
    )
    share_group_heartbeat_interval_ms: Int = _f(
        "group.share.heartbeat.interval.ms", 5000, T.INT, "Heartbeat interval of share group members.", ge=1
    )
    share_group_min_heartbeat_interval_ms: Int = _f(
        "group.share.min.heartbeat.interval.ms", 5000, T.INT,
        "Smallest share.heartbeat.interval.ms a group may set.", ge=1,
    )
    share_group_max_heartbeat_interval_ms: Int = _f(
        "group.share.max.heartbeat.interval.ms", 15000, T.INT,
        "Largest share.heartbeat.interval.ms a group may set.", ge=1,
    )
    share_group_max_size: Int = _f(
        "group.share.max.size", 200, T.INT, "Most members in one share group.", ge=1, le=1000
    )
    share_group_assignors: StrList = _f(
        "group.share.assignors", "simple", T.LIST, "Share group assignors; Kafka 4.4 has `simple` only."
    )
    share_group_initialize_retry_interval_ms: Int = _f(
        "group.share.initialize.retry.interval.ms", 30000, T.INT,
        "A share-partition whose state initialization got no answer this long is asked for again.", ge=1,
    )
    share_group_delivery_count_limit: Int = _f(
        "group.share.delivery.count.limit", 5, T.INT,
        "Deliveries of a record before it is archived (share.delivery.count.limit of a group overrides it).",
        ge=2, le=10,
    )
    # Bounds as Kafka 4.4's ShareGroupConfig defines them: min 2..5, max 5..25 (the default's own range,
    # 2..10, is narrower than what the max allows: Kafka's, kept).
    share_group_min_delivery_count_limit: Int = _f(
        "group.share.min.delivery.count.limit", 2, T.INT, "Smallest share.delivery.count.limit a group may set.",
        ge=2, le=5,
    )
    share_group_max_delivery_count_limit: Int = _f(
        "group.share.max.delivery.count.limit", 10, T.INT, "Largest share.delivery.count.limit a group may set.",
        ge=5, le=25,
    )
    share_group_record_lock_duration_ms: Int = _f(
        "group.share.record.lock.duration.ms", 30000, T.INT,
        "How long a consumer holds the records it acquired before they go back to be delivered again.",
        ge=1000, le=3600000,
    )
    share_group_min_record_lock_duration_ms: Int = _f(
        "group.share.min.record.lock.duration.ms", 15000, T.INT,
        "Smallest share.record.lock.duration.ms a group may set.", ge=1000, le=30000,
    )
    share_group_max_record_lock_duration_ms: Int = _f(
        "group.share.max.record.lock.duration.ms", 60000, T.INT,
        "Largest share.record.lock.duration.ms a group may set.", ge=30000, le=3600000,
    )
    share_group_partition_max_record_locks: Int = _f(
        "group.share.partition.max.record.locks", 2000, T.INT,
        "Most records in flight (acquired and not yet acknowledged) per share-partition.", ge=100, le=10000,
    )
    # Kafka 4.4's bounds of the group config share.partition.max.record.locks (KIP-1240), which this broker
    # does not take as a group config yet: checked against group.share.partition.max.record.locks at start,
    # as Kafka's ShareGroupConfig checks them.
    share_group_min_partition_max_record_locks: Int = _f(
        "group.share.min.partition.max.record.locks", 100, T.INT,
        "Smallest share.partition.max.record.locks a group may set.", ge=100, le=2000,
    )
    share_group_max_partition_max_record_locks: Int = _f(
        "group.share.max.partition.max.record.locks", 4000, T.INT,
        "Largest share.partition.max.record.locks a group may set.", ge=2000, le=10000,
    )
    share_group_max_share_sessions: Int = _f(
        "group.share.max.share.sessions", 2000, T.INT, "Most share sessions this broker keeps.", ge=1
    )
    # KIP-1191's share-group dead-letter queues (Kafka 4.4's GroupCoordinatorConfig; broker/share/dlq.py)
    errors_dlq_topic_name_prefix: Str = _f(
        "errors.deadletterqueue.topic.name.prefix", "dlq.", T.STRING,
        "The prefix every share group's DLQ topic name must have; \"\" lifts the rule.",
    )
    errors_dlq_auto_create_topics_enable: Bool = _f(
        "errors.deadletterqueue.auto.create.topics.enable", False, T.BOOLEAN,
        "Create a share group's DLQ topic (cluster defaults, errors.deadletterqueue.group.enable=true) when it "
        "does not exist.",
    )

    # ---- transactions and idempotence
    transaction_state_log_num_partitions: Int = _f(
        "transaction.state.log.num.partitions", 50, T.INT, "Partitions of __transaction_state.", ge=1
    )
    transaction_state_log_replication_factor: Short = _f(
        "transaction.state.log.replication.factor",
        1,
        T.SHORT,
        "Replication factor of __transaction_state.",
        ge=1,
    )
    transaction_state_log_min_isr: Int = _f(
        "transaction.state.log.min.isr", 1, T.INT, "min.insync.replicas of __transaction_state.", ge=1
    )
    transaction_state_log_segment_bytes: Int = _f(
        "transaction.state.log.segment.bytes", 104857600, T.INT, "Segment size of __transaction_state.", ge=1
    )
    transaction_state_log_load_buffer_size: Int = _f(
        "transaction.state.log.load.buffer.size",
        5242880,
        T.INT,
        "Accepted for compatibility: a __transaction_state partition is loaded in reads of a fixed size.",
        ge=1,
    )
    transaction_max_timeout_ms: Int = _f(
        "transaction.max.timeout.ms",
        900000,
        T.INT,
        "Largest transaction timeout a producer may ask for.",
        ge=1,
    )
    transactional_id_expiration_ms: Int = _f(
        "transactional.id.expiration.ms",
        604800000,
        T.INT,
        "Idle time after which a transactional id expires.",
        ge=1,
    )
    # Kafka's coordinator scans for timed-out transactions every interval, so one is aborted between its
    # timeout and its timeout plus the interval; here each Ongoing transaction has its own timer at start +
    # timeout (coordinator/transaction/shard.py), which keeps that bound for any interval. The interval is when
    # an abort that __transaction_state refused (ISR below min.isr) is tried again, as Kafka's next scan would.
    abort_timed_out_transaction_cleanup_interval_ms: Int = _f(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10000,
        T.INT,
        "Each open transaction is aborted by its own timer at its timeout; an abort the log refused is retried after this.",
        ge=1,
    )
    remove_expired_transaction_cleanup_interval_ms: Int = _f(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3600000,
        T.INT,
        "How often the transaction coordinator looks for expired transactional ids.",
        ge=1,
    )
    producer_id_expiration_ms: Int = _f(
        "producer.id.expiration.ms",
        86400000,
        T.INT,
        "Idle time after which a partition forgets a producer id's state (never while its transaction is open).",
        ge=1,
    )
    producer_id_expiration_check_interval_ms: Int = _f(
        "producer.id.expiration.check.interval.ms",
        600000,
        T.INT,
        "How often the partitions look for expired producer ids.",
        ge=1,
    )
    transaction_partition_verification_enable: Bool = _f(
        "transaction.partition.verification.enable",
        True,
        T.BOOLEAN,
        "Verify a transaction's first write to a partition with its coordinator (KIP-890).",
    )
    # ---- the share coordinator (KIP-932; coordinator/share/): Kafka's ShareCoordinatorConfig names and defaults,
    # but for the replication factor and min ISR, which default to 1 as the other internal topics' do.
    share_coordinator_state_topic_num_partitions: Int = _f(
        "share.coordinator.state.topic.num.partitions", 50, T.INT, "Partitions of __share_group_state.", ge=1
    )
    share_coordinator_state_topic_replication_factor: Short = _f(
        "share.coordinator.state.topic.replication.factor",
        1,
        T.SHORT,
        "Replication factor of __share_group_state (not created while fewer brokers are alive).",
        ge=1,
    )
    share_coordinator_state_topic_min_isr: Short = _f(
        "share.coordinator.state.topic.min.isr",
        1,
        T.SHORT,
        "min.insync.replicas of __share_group_state.",
        ge=1,
    )
    share_coordinator_state_topic_segment_bytes: Int = _f(
        "share.coordinator.state.topic.segment.bytes", 104857600, T.INT, "Segment size of __share_group_state.", ge=1
    )
    share_coordinator_snapshot_update_records_per_snapshot: Int = _f(
        "share.coordinator.snapshot.update.records.per.snapshot",
        500,
        T.INT,
        "ShareUpdate records written for a share-partition before its state is written whole again (ShareSnapshot).",
        ge=0, le=500,
    )
    share_coordinator_threads: Int = _f(
        "share.coordinator.threads", 1, T.INT, "Accepted for compatibility: the share coordinator runs on the event loop.",
        ge=1,
    )
    share_coordinator_load_buffer_size: Int = _f(
        "share.coordinator.load.buffer.size",
        5242880,
        T.INT,
        "Accepted for compatibility: a __share_group_state partition is loaded in reads of a fixed size.",
        ge=1,
    )
    share_coordinator_write_timeout_ms: Int = _f(
        "share.coordinator.write.timeout.ms",
        5000,
        T.INT,
        "Longest wait for a __share_group_state write to be replicated (then COORDINATOR_NOT_AVAILABLE).",
        ge=1,
    )
    # Internal configs in Kafka 4.4 (defineInternal), with its defaults: coordinator/share/coordinator.py.
    share_coordinator_cold_partition_snapshot_interval_ms: Int = _f(
        "share.coordinator.cold.partition.snapshot.interval.ms",
        300000,
        T.INT,
        "How often share-partitions without a recent ShareSnapshot get one, so that older records can be pruned.",
        ge=1,
    )
    share_coordinator_state_topic_prune_interval_ms: Int = _f(
        "share.coordinator.state.topic.prune.interval.ms",
        300000,
        T.INT,
        "How often __share_group_state records below the oldest offset still needed are deleted.",
        ge=1,
    )

    # ---- authorization and quotas
    authorizer_class_name: Annotated[str, BeforeValidator(_parse_authorizer)] = _f(
        "authorizer.class.name", "", T.STRING,
        "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer turns ACLs on; empty turns them off.",
    )
    super_users: Annotated[tuple[str, ...], PlainValidator(_parse_super_users)] = _f(
        "super.users", "", T.STRING, "Principals allowed everything, separated by semicolons: User:admin;User:broker.",
    )
    allow_everyone_if_no_acl_found: Bool = _f(
        "allow.everyone.if.no.acl.found", False, T.BOOLEAN,
        "With an authorizer: whether a resource no ACL covers is open to everyone.",
    )
    quota_window_num: Int = _f(
        "quota.window.num", 11, T.INT, "Number of samples a client quota's rate is measured over.", ge=2,
    )
    quota_window_size_seconds: Int = _f(
        "quota.window.size.seconds", 1, T.INT, "Length of one client quota sample.", ge=1,
    )

    # ---- Odradek's own
    metrics_port: Port = _f(
        "metrics.port", 0, T.INT, "Port of the Prometheus /metrics endpoint; 0 disables it."
    )
    # Read it as `metrics_host` (the property below), which fills in the default.
    metrics_host_setting: OptStr = _f(
        "metrics.host", None, T.STRING,
        "Address the /metrics endpoint binds; by default the host of the first listener (the first client "
        "listener on a node that has one), so metrics are reachable from no wider than the broker: "
        "127.0.0.1 when it listens on 127.0.0.1, every interface when it listens on 0.0.0.0 or an empty host.",
    )
    log_format: LogFormat = _f(
        "log.format", "console", T.STRING, "Format of the broker's own logs: console or json."
    )
    log_level: LogLevel = _f("log.level", "INFO", T.STRING, "Level of the broker's own logs.")
    # Kafka sets one logger's level in its log4j configuration (log4j.logger.kafka.authorizer.logger=DEBUG),
    # which Odradek does not read: this key carries the same choice in the broker's config, so the audit log
    # can be turned to DEBUG (grants too) while the rest stays at log.level.
    log_levels: Annotated[dict[str, str], PlainValidator(parse_log_levels)] = _f(
        "log.levels", "", T.STRING,
        "Levels of single loggers, over log.level: logger=LEVEL,... (kafka.authorizer.logger=DEBUG logs every "
        "authorization grant; odradek.broker.network=WARN quietens one module).",
    )
    log_cache_window_bytes: Long = _f(
        "log.cache.window.bytes",
        32 * 1024 * 1024,
        T.LONG,
        "Bytes at the end of each partition's active segment left in the OS page cache; older bytes are "
        "dropped from it once written (posix_fadvise DONTNEED, from a worker thread). 0 leaves the page "
        "cache to the OS, as Kafka does.",
        ge=0,
    )

    # ------------------------------------------------------------------------------------------------
    @model_validator(mode="after")
    def _cross_check(self) -> BrokerConfig:
        if self.broker_id is not None and self.broker_id != self.node_id:
            raise _KeyedError("broker.id", f"must equal node.id ({self.node_id}) when both are set")
        if not -1 <= self.compression_gzip_level <= 9 or self.compression_gzip_level == 0:
            raise _KeyedError("compression.gzip.level", "must be -1 or 1..9")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise _KeyedError(
                "group.min.session.timeout.ms",
                f"must be <= group.max.session.timeout.ms ({self.group_max_session_timeout_ms})",
            )
        _check_share_groups(self)
        if self.log_cleaner_min_compaction_lag_ms > self.log_cleaner_max_compaction_lag_ms:
            raise _KeyedError(
                "log.cleaner.min.compaction.lag.ms",
                f"must be <= log.cleaner.max.compaction.lag.ms ({self.log_cleaner_max_compaction_lag_ms})",
            )
        try:
            listeners = self.listener_list()
        except ValueError as exc:
            raise _KeyedError("listeners", str(exc)) from None
        if not listeners:
            raise _KeyedError("listeners", "must name at least one listener")
        names = {listener.name for listener in listeners}
        controller_names = {name.upper() for name in self.controller_listener_names}
        if "broker" in self.process_roles and not names - controller_names:
            raise _KeyedError("listeners", "needs a listener that is not a controller listener")
        if set(self.process_roles) == {"controller"} and names - controller_names:
            raise _KeyedError(
                "listeners",
                f"a controller-only node (process.roles=controller) serves only its controller listeners "
                f"({', '.join(sorted(controller_names))}), not {', '.join(sorted(names - controller_names))}",
            )
        if self.inter_broker_listener_name is not None and self.security_inter_broker_protocol is not None:
            raise _KeyedError(
                "security.inter.broker.protocol",
                "only one of inter.broker.listener.name and security.inter.broker.protocol may be set",
            )
        if self.security_inter_broker_protocol is not None and self.security_inter_broker_protocol not in names:
            raise _KeyedError(
                "security.inter.broker.protocol",
                f"names the listener {self.security_inter_broker_protocol}, which is not one of the listeners "
                f"({', '.join(sorted(names))}); set inter.broker.listener.name instead",
            )
        if (
            self.inter_broker_listener_name is not None
            and self.inter_broker_listener_name.upper() not in names
        ):
            raise _KeyedError(
                "inter.broker.listener.name", f"must be one of the listeners ({', '.join(sorted(names))})"
            )
        try:
            advertised = self.advertised_listener_list()
        except ValueError as exc:
            raise _KeyedError("advertised.listeners", str(exc)) from None
        # A controller listener in advertised.listeners (Kafka 3.9+, KIP-853) is how the other nodes reach
        # this controller: checked here, kept out of advertised_listener_list (what clients are given).
        try:
            advertised_controllers = self.advertised_controller_listener_list()
        except ValueError as exc:
            raise _KeyedError("advertised.listeners", str(exc)) from None
        for listener in advertised_controllers:
            if listener.name not in names:
                raise _KeyedError(
                    "advertised.listeners", f"controller listener {listener.name!r} is not in listeners"
                )
            if listener.host in ("0.0.0.0", "::"):
                raise _KeyedError(
                    "advertised.listeners",
                    f"cannot advertise the meta-address {listener.host!r} for the controller listener "
                    f"{listener.name!r}; name a host the other nodes can reach",
                )
        if "broker" in self.process_roles and self.advertised_listeners is not None and not advertised:
            raise _KeyedError("advertised.listeners", "needs a listener that is not a controller listener")
        for listener in advertised:
            if listener.name not in names:
                raise _KeyedError("advertised.listeners", f"listener {listener.name!r} is not in listeners")
            if listener.host in ("0.0.0.0", "::"):
                key = "advertised.listeners" if self.advertised_listeners is not None else "listeners"
                raise _KeyedError(
                    key,
                    f"cannot advertise the meta-address {listener.host!r} to clients; "
                    "set advertised.listeners to a reachable host",
                )
        voters = self.voters()
        if "controller" in self.process_roles and voters and self.node_id not in {v.node_id for v in voters}:
            raise _KeyedError(
                "controller.quorum.voters", f"must include this controller's node.id ({self.node_id})"
            )
        if (
            "controller" not in self.process_roles
            and not voters
            and not self.controller_quorum_bootstrap_servers
        ):
            raise _KeyedError(
                "controller.quorum.voters",
                "a broker-only node needs controller.quorum.voters or controller.quorum.bootstrap.servers",
            )
        return self

    # ------------------------------------------------------------------------------------------------
    # Construction from text

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, Any], sources: Mapping[str, str] | None = None
    ) -> BrokerConfig:
        """Build from `{dotted key: value}`, raising ConfigError (never pydantic's error) naming the key."""
        known = _known_keys()
        sources = sources or {}
        prefixed: dict[str, str] = {}
        plain: dict[str, Any] = {}
        for key, value in properties.items():
            match = _LISTENER_PREFIXED.match(key)
            rest = match.group(2) if match is not None else key
            _refuse_kerberos(key, rest, value, sources.get(key))
            if match is not None:
                mechanism_key = _MECHANISM_PREFIXED.match(rest)
                if not (rest in PER_LISTENER_KEYS or (mechanism_key and mechanism_key.group(2) in PER_MECHANISM_KEYS)):
                    reason = "is not read per listener: set it without the listener.name prefix" if rest in known else "is unknown"
                    raise ConfigError(
                        f"listener setting {rest!r} for listener {match.group(1)!r} {reason}", key=key, source=sources.get(key)
                    )
                prefixed[f"{match.group(1).lower()}.{rest}"] = _text(value)
                continue
            if key not in known:
                raise ConfigError(_unknown_key_message(key, known), key=key, source=sources.get(key))
            plain[key] = value
        try:
            config = cls.model_validate(plain)
        except ValidationError as exc:
            raise _translate(exc, properties, sources) from None
        config._listener_settings = prefixed
        for key, value in prefixed.items():
            listener, _, rest = key.partition(".")
            try:
                config.listener_setting(listener, rest)
            except ValueError as exc:
                raise ConfigError(f"invalid value {value!r}: {exc}", key=f"listener.name.{key}", source=sources.get(f"listener.name.{key}")) from None
        return config

    def listener_setting(self, listener: str, key: str) -> Any:
        """`key` for one listener: `listener.name.<listener>.<key>` when set (parsed as `key` is), else the
        broker-wide value of `key` (None for a mechanism-prefixed JAAS key with no broker-wide form)."""
        raw = self._listener_settings.get(f"{listener.lower()}.{key}")
        name = _field_by_key().get(key)
        if raw is None:
            return getattr(self, name) if name is not None else None
        if name is None:
            return raw
        info = type(self).model_fields[name]
        # The field's type with its constraints, built at run time: pydantic takes it, mypy sees no type form.
        field_type: Any = Annotated[info.annotation, *info.metadata]
        return TypeAdapter(field_type).validate_python(raw)

    # ------------------------------------------------------------------------------------------------
    # Derived values

    @property
    def data_dirs(self) -> tuple[str, ...]:
        """The data directories: `log.dirs`, else `log.dir`. Relative paths are relative to the cwd."""
        return self.log_dirs if self.log_dirs else (self.log_dir,)

    @property
    def data_dir_paths(self) -> tuple[Path, ...]:
        return tuple(Path(d).expanduser() for d in self.data_dirs)

    @property
    def metadata_dir(self) -> str:
        return self.metadata_log_dir or self.data_dirs[0]

    def _protocol_map(self) -> dict[str, str]:
        mapping = dict(self.listener_security_protocol_map)
        # As Kafka does, a controller listener missing from the map is assumed to be PLAINTEXT.
        for name in self.controller_listener_names:
            mapping.setdefault(name.upper(), "PLAINTEXT")
        return mapping

    def listener_list(self) -> list[Listener]:
        """`listeners` parsed, each with its security protocol. Raises ValueError on a bad list."""
        return parse_listeners(self.listeners, self._protocol_map())

    def client_listeners(self) -> list[Listener]:
        """Listeners that serve clients and brokers (every listener but the controller ones)."""
        controller = {name.upper() for name in self.controller_listener_names}
        return [listener for listener in self.listener_list() if listener.name not in controller]

    def controller_listeners(self) -> list[Listener]:
        controller = {name.upper() for name in self.controller_listener_names}
        return [listener for listener in self.listener_list() if listener.name in controller]

    def advertised_listener_list(self) -> list[Listener]:
        """What Metadata returns to clients (Kafka's effectiveAdvertisedBrokerListeners): `advertised.listeners`
        without its controller listeners, else the client listeners with an empty host replaced by this
        machine's host name. A port of 0 must be replaced by the bound port."""
        if self.advertised_listeners is not None:
            controller = {name.upper() for name in self.controller_listener_names}
            return [
                listener for listener in parse_listeners(self.advertised_listeners, self._protocol_map())
                if listener.name not in controller
            ]
        result = []
        for listener in self.client_listeners():
            host = listener.host or socket.gethostname()
            result.append(Listener(listener.name, host, listener.port, listener.security_protocol))
        return result

    def advertised_controller_listener_list(self) -> list[Listener]:
        """How other nodes reach this node's controller listeners (Kafka 3.9+'s
        effectiveAdvertisedControllerListeners, KIP-853): per name in `controller.listener.names`, its entry
        in `advertised.listeners` when there is one, else its entry in `listeners` (a 0.0.0.0 host becomes
        empty: "this machine"). Kafka registers these as the controller's endpoints; they are never given
        to clients, whose Metadata carries `advertised_listener_list()` only. Empty on a broker-only node."""
        if "controller" not in self.process_roles:
            return []
        advertised = (
            {listener.name: listener for listener in parse_listeners(self.advertised_listeners, self._protocol_map())}
            if self.advertised_listeners is not None else {}
        )
        bound = {listener.name: listener for listener in self.controller_listeners()}
        result = []
        for name in self.controller_listener_names:
            listener = advertised.get(name.upper()) or bound.get(name.upper())
            if listener is None:
                continue
            if listener.host == "0.0.0.0" and name.upper() not in advertised:
                listener = Listener(listener.name, "", listener.port, listener.security_protocol)
            result.append(listener)
        return result

    @property
    def metrics_host(self) -> str:
        """The address /metrics binds: `metrics.host` when set, else the host of the first client listener
        (the first controller listener on a controller-only node), so the endpoint is never reachable from
        wider than the broker's own listeners. An empty host means every interface there, as the listeners
        themselves bind it (0.0.0.0)."""
        if self.metrics_host_setting is not None:
            return self.metrics_host_setting
        listeners = self.client_listeners() or self.listener_list()
        return listeners[0].host or "0.0.0.0"

    @property
    def inter_broker_listener(self) -> str:
        if self.inter_broker_listener_name is not None:
            return self.inter_broker_listener_name.upper()
        if self.security_inter_broker_protocol is not None:
            return self.security_inter_broker_protocol
        return self.client_listeners()[0].name

    def voters(self) -> list[QuorumVoter]:
        """`controller.quorum.voters`; without it, this node alone when it is the standalone controller of
        `standalone_voter()`; else empty."""
        if self.controller_quorum_voters:
            return [_parse_voter(item) for item in self.controller_quorum_voters]
        standalone = self.standalone_voter()
        return [standalone] if standalone is not None else []

    def standalone_voter(self) -> QuorumVoter | None:
        """This node as the only voter when `controller.quorum.voters` is unset and
        `controller.quorum.bootstrap.servers` names one address, this controller's own: Kafka 4's sample
        server.properties (`controller.quorum.bootstrap.servers=localhost:9093` beside
        `CONTROLLER://localhost:9093` in advertised.listeners), formatted with `kafka-storage format
        --standalone`, is a quorum of this one voter (KIP-853). Odradek's quorum is static, so this is the
        only dynamic-quorum form served; `odradek storage format --standalone` checks that it applies."""
        if (
            self.controller_quorum_voters
            or "controller" not in self.process_roles
            or len(self.controller_quorum_bootstrap_servers) != 1
        ):
            return None
        host, sep, port_text = self.controller_quorum_bootstrap_servers[0].strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not port_text.isdigit():
            return None
        port = int(port_text)
        local = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
        for listener in self.advertised_controller_listener_list():
            if listener.port == port and (host == listener.host or host in local):
                return QuorumVoter(self.node_id, host, port)
        return None

    @property
    def log_retention_ms_effective(self) -> int:
        """`log.retention.ms`, else `.minutes`, else `.hours`; any negative value means forever (-1)."""
        if self.log_retention_ms is not None:
            millis = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            millis = self.log_retention_minutes * MINUTE_MS
        else:
            millis = self.log_retention_hours * HOUR_MS
        return -1 if millis < 0 else millis

    @property
    def log_roll_ms_effective(self) -> int:
        return self.log_roll_ms if self.log_roll_ms is not None else self.log_roll_hours * HOUR_MS

    @property
    def log_roll_jitter_ms_effective(self) -> int:
        if self.log_roll_jitter_ms is not None:
            return self.log_roll_jitter_ms
        return self.log_roll_jitter_hours * HOUR_MS

    @property
    def log_flush_interval_ms_effective(self) -> int:
        if self.log_flush_interval_ms is not None:
            return self.log_flush_interval_ms
        return self.log_flush_scheduler_interval_ms

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * MINUTE_MS

    # ------------------------------------------------------------------------------------------------
    # Rendering back to Kafka's text form

    @property
    def explicit_keys(self) -> frozenset[str]:
        """Dotted keys that were given explicitly (not defaulted)."""
        fields = type(self).model_fields
        return frozenset(fields[name].alias or name for name in self.model_fields_set)

    def get(self, key: str) -> Any:
        """The parsed value of a dotted key."""
        return getattr(self, _field_by_key()[key])

    def to_properties(self, *, include_defaults: bool = True) -> dict[str, str | None]:
        """`{dotted key: Kafka text}`; unset optional keys map to None."""
        explicit = self.explicit_keys
        return {
            key: render_value(getattr(self, name))
            for key, name in _field_by_key().items()
            if include_defaults or key in explicit
        }


_LISTENER_PREFIXED = re.compile(r"^listener\.name\.([A-Za-z0-9_-]+)\.(.+)$")
_MECHANISM_PREFIXED = re.compile(r"^([A-Za-z0-9-]+)\.(sasl\.[a-z.]+)$")

# What `listener.name.<listener>.<key>` may set: the keys read for one listener (broker/security.py, the
# connection limits in broker/server.py and broker/quotas.py). Any other key so prefixed would be ignored
# for that listener, so it refuses the start instead (a setting is never silently dropped).
PER_LISTENER_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.client.auth", "ssl.principal.mapping.rules", "ssl.enabled.protocols",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "sasl.enabled.mechanisms", "sasl.jaas.config",
    "sasl.server.callback.handler.class", "sasl.oauthbearer.jwks.endpoint.url", "sasl.server.max.receive.size",
    "connections.max.reauth.ms", "max.connection.creation.rate", "max.connections",
})
# ... and `listener.name.<listener>.<mechanism>.<key>` (lower-case mechanism, as Kafka's JAAS keys).
PER_MECHANISM_KEYS = frozenset({"sasl.jaas.config", "sasl.server.callback.handler.class"})

KERBEROS_REFUSAL = (
    "SASL GSSAPI (Kerberos) is not served by this broker: remove GSSAPI from sasl.enabled.mechanisms (and the "
    "sasl.kerberos.* settings) and authenticate with SCRAM-SHA-512, SCRAM-SHA-256, PLAIN, OAUTHBEARER or mutual TLS"
)


def _refuse_kerberos(key: str, rest: str, value: Any, source: str | None) -> None:
    """A Kerberos setting or a GSSAPI JAAS entry refuses the start. GSSAPI named as a mechanism is refused
    where it would be used (broker/security.py: a SASL listener serving it, a node logging in with it); on
    a broker without SASL listeners Kafka's default `sasl.enabled.mechanisms=GSSAPI` is inert, as in Kafka."""
    if rest.startswith("sasl.kerberos.") or rest.lower().startswith("gssapi."):
        raise ConfigError(KERBEROS_REFUSAL, key=key, source=source)


class _KeyedError(ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Key tables (built once)

_FIELD_BY_KEY: dict[str, str] | None = None


def _field_by_key() -> dict[str, str]:
    global _FIELD_BY_KEY
    if _FIELD_BY_KEY is None:
        _FIELD_BY_KEY = {(info.alias or name): name for name, info in BrokerConfig.model_fields.items()}
    return _FIELD_BY_KEY


def _known_keys() -> dict[str, str]:
    return _field_by_key()


def broker_config_keys() -> list[tuple[str, ConfigType, str]]:
    """`(dotted key, ConfigType, documentation)` for every broker property, in definition order."""
    result = []
    for name, info in BrokerConfig.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kafka_type: Any = extra.get("kafka_type", 0)  # a ConfigType value, stored in the field's JSON schema extra
        result.append((info.alias or name, ConfigType(kafka_type), info.description or ""))
    return result


def broker_default(key: str) -> str | None:
    """A broker property's default in Kafka's text form (None when it has none): what Kafka's
    DescribeConfigs reports as the DEFAULT_CONFIG synonym (DynamicBrokerConfig.staticDefaultConfigs,
    which leaves out null defaults)."""
    info = BrokerConfig.model_fields[_field_by_key()[key]]
    return render_value(info.get_default(call_default_factory=True))


def env_var_name(key: str) -> str:
    """`log.dirs` -> `ODRADEK_LOG_DIRS`."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def render_value(value: Any) -> str | None:
    """A parsed value in Kafka's text form: lists comma-joined, booleans lower-case, None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, LoggerLevels):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, SemicolonList):
        return ";".join(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _env_key(name: str) -> str:
    """The key an `ODRADEK_*` variable would set: `ODRADEK_NUM_PARTITION` -> `num.partition`."""
    return name[len(ENV_PREFIX):].lower().replace("_", ".")


def _unknown_env_message(name: str, by_env_name: Mapping[str, str]) -> str:
    key = _env_key(name)
    if key.startswith("listener.name."):
        return (f"per-listener keys ({key!r} here) have no environment form, since a variable's name cannot "
                "say where the listener name ends: set listener.name.<listener>.<key> in the properties "
                "file or with --override")
    close = difflib.get_close_matches(name, [*by_env_name, *NON_CONFIG_ENV_VARS], n=1, cutoff=0.8)
    if close and close[0] in by_env_name:
        hint = f" (did you mean {close[0]}, for {by_env_name[close[0]]!r}?)"
    else:
        hint = f" (did you mean {close[0]}?)" if close else ""
    return (f"names no config key (it would set {key!r}){hint}; a variable named ODRADEK_* must name a "
            "config key, apart from the few the README lists")


def _unknown_key_message(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown config {key!r}{hint}"


def _translate(exc: ValidationError, raw: Mapping[str, Any], sources: Mapping[str, str]) -> ConfigError:
    error = exc.errors()[0]
    ctx = error.get("ctx") or {}
    original = ctx.get("error")
    if isinstance(original, _KeyedError):
        key, reason = original.key, original.reason
    else:
        loc = error.get("loc") or ()
        key = str(loc[0]) if loc else "?"
        kind = error.get("type", "")
        if kind == "greater_than_equal":
            reason = f"must be >= {ctx.get('ge')}"
        elif kind == "less_than_equal":
            reason = f"must be <= {ctx.get('le')}"
        elif kind == "greater_than":
            reason = f"must be > {ctx.get('gt')}"
        elif kind == "less_than":
            reason = f"must be < {ctx.get('lt')}"
        elif kind == "extra_forbidden":
            return ConfigError(_unknown_key_message(key, _known_keys()), key=key, source=sources.get(key))
        elif isinstance(original, Exception):
            reason = str(original)
        else:
            reason = str(error.get("msg", "invalid"))
    suffix = ""
    if key in raw:
        got = raw[key]
        shown = got if isinstance(got, str) else render_value(got)
        suffix = f" (got {shown!r})"
    return ConfigError(f"invalid value for {key!r}: {reason}{suffix}", key=key, source=sources.get(key))


# --------------------------------------------------------------------------------------------------
# server.properties parsing and loading

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or whitespace, as in java.util.Properties.
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=:" or ch.isspace():
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip()
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip()
    return _unescape(key), _unescape(rest).strip()


def parse_properties(text: str, *, origin: str = "<properties>") -> tuple[dict[str, str], dict[str, str]]:
    """Parse java.util.Properties-style text: `#`/`!` comments, blank lines, `key=value`, `key: value`,
    `key value`, backslash escapes and backslash-newline continuations. Later duplicates win.

    Returns `(properties, sources)` where `sources[key]` is `"origin:line"`, for error messages."""
    props: dict[str, str] = {}
    sources: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next one.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip()
            i += 1
        key, value = _split_key_value(line)
        if not key:
            raise ConfigError(f"line without a key: {lines[start - 1]!r}", source=f"{origin}:{start}")
        props[key] = value
        sources[key] = f"{origin}:{start}"
    return props, sources


def load_config(
    properties_path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Load the broker config: for each key, an override wins over an `ODRADEK_<KEY>` environment
    variable, which wins over the properties file, which wins over the default.

    `env` defaults to `os.environ`. A variable that starts with `ODRADEK_` must name a config key or be
    one of `NON_CONFIG_ENV_VARS`; any other raises ConfigError naming the variable and the key it would
    be. Raises ConfigError naming the key for an unknown key or a bad value."""
    merged: dict[str, str] = {}
    sources: dict[str, str] = {}
    if properties_path is not None:
        path = Path(properties_path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file: {exc.strerror or exc}", source=str(path)) from None
        props, where = parse_properties(text, origin=str(path))
        merged.update(props)
        sources.update(where)

    env = os.environ if env is None else env
    by_env_name = {env_var_name(key): key for key in _known_keys()}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in NON_CONFIG_ENV_VARS:
            continue
        key = by_env_name.get(name)
        if key is None:
            raise ConfigError(_unknown_env_message(name, by_env_name), key=_env_key(name),
                              source=f"environment variable {name}")
        merged[key] = value
        sources[key] = f"environment variable {name}"

    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key=value", source="override")
        merged[key] = value.strip()
        sources[key] = "override"

    return BrokerConfig.from_properties(merged, sources)
