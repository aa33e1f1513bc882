"""Client configuration: plain, picklable dataclasses (no live objects), Kafka's names in snake_case.

`ClientConfig` holds what every client shares; `ProducerConfig` and `ConsumerConfig` add their own.
Durations are milliseconds, sizes bytes, as in Kafka. `bootstrap_servers` is a comma-separated string or a
list of "host:port" ("[::1]:9092" for IPv6); `from_dict` takes Kafka's dotted names too
(`{"bootstrap.servers": ..., "linger.ms": 5}`), so a Spark job can pass a plain dict of options.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Self

from .assignors import ASSIGNORS
from .errors import ConfigError

DEFAULT_BOOTSTRAP = "localhost:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVERS"


def default_bootstrap() -> str:
    return os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def parse_bootstrap(servers: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    """["host:port", ...] or "host:port,host:port" -> [(host, port), ...]; the port defaults to 9092."""
    if isinstance(servers, str):
        items = [s.strip() for s in servers.split(",")]
    else:
        items = [str(s).strip() for s in servers]
    out = []
    for item in items:
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        else:
            host, port_text = item, ""
        try:
            port = int(port_text) if port_text else 9092
        except ValueError:
            raise ConfigError(f"bad port in bootstrap server {item!r}") from None
        if not host or not 0 < port < 65536:
            raise ConfigError(f"bad bootstrap server {item!r}")
        out.append((host, port))
    if not out:
        raise ConfigError("no bootstrap servers given")
    return out


# librdkafka's other spellings of the same settings.
_ALIASES = {"sasl.mechanisms": "sasl.mechanism"}


_UNSECURED_JWT_KEYS = ("principal", "principalClaimName", "scope", "scopeClaimName", "lifeSeconds")


def unsecured_jwt_settings(text: str | None) -> dict[str, Any]:
    """librdkafka's `sasl.oauthbearer.config` for its unsecured JWT builder, checked: space-separated
    key=value with principal required, lifeSeconds whole seconds, extension_<name>=<value> extensions."""
    settings: dict[str, Any] = {"principalClaimName": "sub", "scopeClaimName": "scope", "scope": [], "lifeSeconds": 3600,
                                "extensions": {}}
    for item in (text or "").split():
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise ConfigError(f"sasl.oauthbearer.config: expected key=value, got {item!r}")
        if key.startswith("extension_") and len(key) > len("extension_"):
            settings["extensions"][key[len("extension_"):]] = value
        elif key not in _UNSECURED_JWT_KEYS:
            raise ConfigError(f"sasl.oauthbearer.config: unknown key {key!r} (known: {', '.join(_UNSECURED_JWT_KEYS)}, extension_<name>)")
        elif key == "scope":
            settings["scope"] = [s for s in value.split(",") if s]
        elif key == "lifeSeconds":
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"sasl.oauthbearer.config: lifeSeconds must be a positive whole number, got {value!r}")
            settings["lifeSeconds"] = int(value)
        else:
            settings[key] = value
    if not settings.get("principal"):
        raise ConfigError("sasl.oauthbearer.config needs principal=<name> for an unsecured JWT")
    return settings


@dataclass(kw_only=True)
class ClientConfig:
    bootstrap_servers: str | list[str] = field(default_factory=default_bootstrap)
    client_id: str = "odradek"
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 10_000
    default_api_timeout_ms: int = 60_000
    # When every bootstrap server refuses the connection: retry until default_api_timeout_ms (True, as the Java
    # client does: a broker may be starting) or fail at once (False: the CLI, which says so at once).
    bootstrap_retry_refused: bool = True
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    allow_auto_create_topics: bool = True
    # Security, as librdkafka names it: security.protocol PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
    # sasl.mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with sasl.username/sasl.password, or OAUTHBEARER
    # (below); ssl.ca.location (PEM CA certificates; default: the system's), ssl.certificate.location and
    # ssl.key.location (PEM, for mutual TLS) or ssl.keystore.location (PKCS12), ssl.key.password;
    # ssl.endpoint.identification.algorithm "https" (check the broker's host name, the default) or "none".
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    # librdkafka's PKCS12 client key store (key, certificate and chain in one file), instead of the two PEMs
    ssl_keystore_location: str | None = None
    ssl_keystore_password: str | None = field(default=None, repr=False)
    # librdkafka's ssl.certificate.pem / ssl.key.pem: the client certificate (chain) and its private key as PEM
    # text, held in memory only (the console's per-user mTLS sign-in); ssl.key.password decrypts the key
    ssl_certificate_pem: str | None = field(default=None, repr=False)
    ssl_key_pem: str | None = field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    # OAUTHBEARER, as librdkafka: enable.sasl.oauthbearer.unsecure.jwt=true makes an unsecured JWT from
    # sasl.oauthbearer.config ("principal=alice scope=a,b lifeSeconds=3600 principalClaimName=sub
    # scopeClaimName=scope extension_<name>=<value>"); or oauth_cb(sasl.oauthbearer.config) returns
    # (token, expiry in epoch seconds[, principal, extensions]) as confluent-kafka's does.
    sasl_oauthbearer_config: str | None = field(default=None, repr=False)
    enable_sasl_oauthbearer_unsecure_jwt: bool = False
    oauth_cb: Callable[[str | None], tuple] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        parse_bootstrap(self.bootstrap_servers)
        self.security_protocol = str(self.security_protocol).upper()
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(f"security.protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (got {self.security_protocol!r})")
        self.sasl_mechanism = str(self.sasl_mechanism).upper()
        if self.security_protocol.startswith("SASL_"):
            if self.sasl_mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
                raise ConfigError(f"sasl.mechanism must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (got {self.sasl_mechanism!r})")
            if self.sasl_mechanism == "OAUTHBEARER":
                if isinstance(self.enable_sasl_oauthbearer_unsecure_jwt, str):  # from a dict of strings (Spark options)
                    flag = self.enable_sasl_oauthbearer_unsecure_jwt.strip().lower()
                    if flag not in ("true", "false"):
                        raise ConfigError(f"enable.sasl.oauthbearer.unsecure.jwt must be true or false (got {flag!r})")
                    self.enable_sasl_oauthbearer_unsecure_jwt = flag == "true"
                if self.oauth_cb is None:
                    if not self.enable_sasl_oauthbearer_unsecure_jwt:
                        raise ConfigError("sasl.mechanism OAUTHBEARER needs oauth_cb, or enable.sasl.oauthbearer.unsecure.jwt=true "
                                          "with sasl.oauthbearer.config=\"principal=<name> ...\"")
                    unsecured_jwt_settings(self.sasl_oauthbearer_config)
            elif self.sasl_username is None or self.sasl_password is None:
                raise ConfigError(f"security.protocol {self.security_protocol} needs sasl.username and sasl.password")
        if (self.ssl_certificate_pem is None) != (self.ssl_key_pem is None):
            raise ConfigError("ssl.certificate.pem and ssl.key.pem go together")
        if self.ssl_certificate_pem is not None and (self.ssl_certificate_location or self.ssl_keystore_location):
            raise ConfigError("ssl.certificate.pem and ssl.certificate.location (or ssl.keystore.location) are two "
                              "ways to give the client certificate: set one")
        if self.ssl_keystore_location and self.ssl_certificate_location:
            raise ConfigError("ssl.keystore.location (PKCS12) and ssl.certificate.location (PEM) are two ways to give "
                              "the client certificate: set one")
        if self.ssl_endpoint_identification_algorithm not in ("https", "none", ""):
            raise ConfigError("ssl.endpoint.identification.algorithm must be https or none")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith(("_ms", "_bytes", "_size", "_memory")) and isinstance(value, int) and value < 0:
                raise ConfigError(f"{f.name} must not be negative (got {value})")

    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> "ClientConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in options.items():
            name = _ALIASES.get(key, key).replace(".", "_").replace("-", "_")
            if name not in names:
                raise ConfigError(f"unknown {cls.__name__} option {key!r}")
            kwargs[name] = value
        return cls(**kwargs)

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


@dataclass(kw_only=True)
class ProducerConfig(ClientConfig):
    acks: int | str = "all"
    enable_idempotence: bool | None = None  # None: on, unless acks is not "all"
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    max_request_size: int = 1_048_576
    compression_type: str = "none"
    compression_level: int | None = None
    max_in_flight_requests_per_connection: int = 5
    retries: int = 2_147_483_647
    delivery_timeout_ms: int = 120_000
    partitioner: str = "default"  # "default" (murmur2 + sticky), "round_robin" or "random"
    transactional_id: str | None = None  # set: a transactional producer (init_transactions, begin/commit/abort)
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.transactional_id is not None:
            if not self.transactional_id:
                raise ConfigError("transactional_id must not be empty")
            if self.enable_idempotence is False or self.required_acks != -1:
                raise ConfigError("a transactional producer is idempotent: it needs acks=all and enable_idempotence")
        if self.required_acks not in (-1, 0, 1):
            raise ConfigError(f"acks must be 0, 1 or all (got {self.acks!r})")
        if self.compression_type not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise ConfigError(f"unknown compression_type {self.compression_type!r}")
        if self.enable_idempotence and self.required_acks != -1:
            raise ConfigError("enable_idempotence needs acks=all")
        if self.idempotent and not 1 <= self.max_in_flight_requests_per_connection <= 5:
            raise ConfigError("an idempotent producer allows 1 to 5 requests in flight per connection")
        if self.max_in_flight_requests_per_connection < 1:
            raise ConfigError("max_in_flight_requests_per_connection must be at least 1")
        if self.partitioner not in ("default", "round_robin", "random"):
            raise ConfigError(f"unknown partitioner {self.partitioner!r}")

    @property
    def required_acks(self) -> int:
        if isinstance(self.acks, str):
            if self.acks.lower() == "all":
                return -1
            try:
                return int(self.acks)
            except ValueError:
                return -99
        return self.acks

    @property
    def idempotent(self) -> bool:
        if self.transactional_id is not None:
            return True
        if self.enable_idempotence is None:
            return self.required_acks == -1
        return self.enable_idempotence


@dataclass(kw_only=True)
class ConsumerConfig(ClientConfig):
    group_id: str | None = None
    group_instance_id: str | None = None
    auto_offset_reset: str = "latest"  # earliest, latest or none
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    isolation_level: str = "read_uncommitted"  # or read_committed
    check_crcs: bool = True
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int | None = None  # None: max_poll_interval_ms
    partition_assignment_strategy: str | list[str] = "range,cooperative-sticky"
    exclude_internal_topics: bool = True
    prefetch_bytes: int = 4 * 1_048_576  # buffered records per partition before fetching stops

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.auto_offset_reset not in ("earliest", "latest", "none"):
            raise ConfigError(f"auto_offset_reset must be earliest, latest or none (got {self.auto_offset_reset!r})")
        if self.isolation_level not in ("read_uncommitted", "read_committed"):
            raise ConfigError(f"isolation_level must be read_uncommitted or read_committed (got {self.isolation_level!r})")
        for name in self.assignor_names:
            if name not in ASSIGNORS:
                raise ConfigError(f"unknown partition assignment strategy {name!r} (known: {', '.join(ASSIGNORS)})")

    @property
    def assignor_names(self) -> list[str]:
        strategy = self.partition_assignment_strategy
        names = strategy.split(",") if isinstance(strategy, str) else list(strategy)
        return [n.strip() for n in names if n.strip()]
