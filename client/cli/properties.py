"""Client configs from the command line: `--command-config FILE` (Kafka's properties format), `-X key=value`,
then the command's own options, merged into the bundled client's config dataclasses."""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any

from ..admin import Admin
from ..config import ClientConfig, ConsumerConfig, ProducerConfig
from .common import UsageError, print_warning

def _common(args: argparse.Namespace) -> dict[str, Any]:
    """--timeout is every wait's bound: connecting, each request (a long poll or a JoinGroup adds its own wait to
    it, as the clients do), an admin call's retries; the command as a whole is bounded by it too (cli main)."""
    timeout_ms = max(1, int(args.timeout * 1000))
    return dict(bootstrap_servers=args.bootstrap_server, client_id=args.client_id,
                default_api_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms,
                connect_timeout_ms=min(timeout_ms, 10_000),
                bootstrap_retry_refused=False)  # nothing listening is reported at once


# Security settings are accepted in the client-properties syntax so that a properties file written for
# Kafka's tools is understood; only what the bundled client can do is allowed through.
_PROPERTY_ALIASES = {"sasl.mechanisms": "sasl.mechanism"}
_JAVA_ONLY = {"ssl.truststore.location": "ssl.ca.location"}  # ssl.keystore.location is librdkafka's too (PKCS12)


def _read_properties(path: str) -> dict[str, str]:
    """A Java properties file as Kafka's tools read it: key=value or key: value, # and ! comments."""
    props = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if cut <= 0:
                raise UsageError(f"{path}:{number}: expected key=value, got {line!r}")
            props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def client_properties(args: argparse.Namespace) -> dict[str, Any]:
    """--command-config FILE, then -X key=value, as ClientConfig field names (dotted names to snake_case)."""
    props: dict[str, str] = _read_properties(args.command_config) if args.command_config else {}
    props.update(dict(args.properties))
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key == "sasl.jaas.config":  # Kafka's tools: username="..." password="..." of the login module
            for option, text in re.findall(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"', value):
                out[f"sasl_{option}"] = re.sub(r"\\(.)", r"\1", text)
            continue
        if key in _JAVA_ONLY:  # Java key/trust store settings: say what librdkafka's names are
            raise UsageError(f"{key} is a Java client setting; use {_JAVA_ONLY[key]} (PEM files) instead")
        key = _PROPERTY_ALIASES.get(key, key)
        out[key.replace(".", "_").replace("-", "_")] = value
    return out


def client_config(cls: type, args: argparse.Namespace, defaults: dict[str, Any] | None = None, **options: Any) -> Any:
    """A client config: the command's defaults, then client properties, then options typed on the line.

    `options` holds the command's own settings; a None there means "not given" and yields to a property.
    A property of another kind of client (acks for a consumer) is ignored with a note, as Kafka's tools
    ignore configs they do not use, so that one properties file serves every command; a name no client
    knows is a usage error (a typo).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    merged: dict[str, Any] = {**_common(args), **(defaults or {})}
    for name, raw in args.client_properties.items():
        if name not in fields:
            if any(name in {f.name for f in dataclasses.fields(other)} for other in (ProducerConfig, ConsumerConfig)):
                print_warning(f"ignoring client property {name.replace('_', '.')!r}: this command does not use it")
                continue
            raise UsageError(f"unknown client property {name.replace('_', '.')!r}")
        merged[name] = _convert(name, raw, fields[name].type)
    merged.update({k: v for k, v in options.items() if v is not None})
    return cls(**merged)


def _convert(name: str, raw: str, annotation: Any) -> Any:
    """A property's text as the field's type (the dataclass annotations are strings: "int | None", ...)."""
    kinds = str(annotation).replace(" ", "").split("|")
    if "bool" in kinds:
        if raw.lower() not in ("true", "false"):
            raise UsageError(f"{name.replace('_', '.')} expects true or false, got {raw!r}")
        return raw.lower() == "true"
    if "int" in kinds and "str" not in kinds:
        try:
            return int(raw)
        except ValueError:
            raise UsageError(f"{name.replace('_', '.')} expects a whole number, got {raw!r}") from None
    return raw


def admin_for(args: argparse.Namespace) -> Admin:
    return Admin(client_config(ClientConfig, args))
