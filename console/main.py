"""`odradek console`: serve the web console for a cluster.

    odradek console --bootstrap-server localhost:9092            -> http://127.0.0.1:9080/
    odradek console -b broker:9093 -X security.protocol=SASL_SSL -X ssl.ca.location=ca.pem   (users sign in)
    odradek console -b broker:9094 -X security.protocol=SSL -X ssl.ca.location=ca.pem --auth mtls
                                                     (users sign in with their own client certificate)

Options: --host/--port where the console listens (127.0.0.1:9080 by default), --read-only, --metrics-url
(repeatable; Odradek brokers' /metrics are found by themselves), --sample-interval, --sasl-mechanism for
sign-in, and the client CLI's -X key=value / --command-config FILE for the connection settings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from odradek.client.cli.properties import client_properties
from odradek.client.config import ClientConfig, default_bootstrap
from odradek.client.errors import ConfigError

from .auth import is_loopback

if TYPE_CHECKING:
    from .app import ConsoleSettings


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="odradek console", description="The web console of a Kafka cluster.")
    parser.add_argument("--bootstrap-server", "-b", default=None, help="HOST:PORT[,...] (default "
                        "$ODRADEK_BOOTSTRAP_SERVERS, else localhost:9092)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9080, help="port to listen on (default 9080; 0: any free port)")
    parser.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                        help="a broker's Prometheus /metrics to chart (repeatable; Odradek brokers' are found)")
    parser.add_argument("--sample-interval", type=float, default=5.0, metavar="S",
                        help="seconds between lag and metrics samples (default 5)")
    parser.add_argument("--browse-seconds", type=float, default=30.0, metavar="S",
                        help="the time bound of one record browse, besides its record bounds (default 30, at most 600)")
    parser.add_argument("--auth", choices=("auto", "none", "sasl", "mtls"), default="auto",
                        help="how users sign in: sasl (username and password, the default on SASL_* listeners), "
                             "mtls (each user's client certificate and key, on an SSL listener), none (the "
                             "console's own connection, the default otherwise)")
    parser.add_argument("--sasl-mechanism", default=None,
                        help="mechanism users sign in with on a SASL cluster (default SCRAM-SHA-512)")
    parser.add_argument("--allow-anonymous-remote", action="store_true",
                        help="serve a cluster without sign-in on an address other than loopback")
    parser.add_argument("--certfile", default=None, metavar="PEM",
                        help="serve HTTPS with this certificate (chain) file; needed beyond loopback with sign-in")
    parser.add_argument("--keyfile", default=None, metavar="PEM", help="the private key of --certfile")
    parser.add_argument("--allow-plain-http", action="store_true",
                        help="serve sign-in over plain HTTP beyond loopback (passwords cross the network in clear)")
    parser.add_argument("-X", dest="properties", action="append", default=[], metavar="KEY=VALUE",
                        type=lambda text: tuple(text.split("=", 1)) if "=" in text else _bad_property(text),
                        help="a client property (security.protocol, ssl.ca.location, ...)")
    parser.add_argument("--command-config", default=None, metavar="FILE", help="client properties file")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def _bad_property(text: str) -> tuple[str, str]:
    raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")


def settings_from(args: argparse.Namespace) -> "ConsoleSettings":
    from .app import ConsoleSettings

    properties = client_properties(argparse.Namespace(command_config=args.command_config, properties=args.properties))
    bootstrap = args.bootstrap_server or properties.pop("bootstrap_servers", None) or default_bootstrap()
    own_user = properties.get("sasl_username")
    protocol = str(properties.get("security_protocol", "PLAINTEXT")).upper()
    auth = args.auth if args.auth != "auto" else "sasl" if protocol.startswith("SASL_") else "none"
    if auth == "sasl" and not protocol.startswith("SASL_"):
        raise ConfigError(f"--auth sasl needs a SASL listener (-X security.protocol=SASL_SSL or SASL_PLAINTEXT), "
                          f"not {protocol}")
    if auth == "mtls" and protocol != "SSL":
        raise ConfigError(f"--auth mtls signs users in with their client certificates on an SSL listener "
                          f"(-X security.protocol=SSL), not {protocol}: on SASL_SSL the brokers authorize the "
                          "SASL user, whatever the certificate")
    if auth == "none" and protocol.startswith("SASL_") and not own_user:
        raise ConfigError("--auth none on a SASL listener needs the console's own principal "
                          "(-X sasl.username=... -X sasl.password=...)")
    if auth == "mtls":
        # the console's own certificate (if any) serves the console's own connections (the sampler); a user's
        # session replaces it with theirs
        own_user = properties.get("ssl_certificate_location") or properties.get("ssl_keystore_location")
    signin = auth in ("sasl", "mtls")
    if auth == "sasl" and not own_user:
        # The sessions fill in their user's name and password; the console itself connects with none
        # (nothing starts a client from this template before a user signs in).
        properties.update(sasl_username="", sasl_password="")
    # A page waits for the cluster at most this long (each request, and a request's retries): an answer that
    # does not come is an error on the page, not a browser left spinning for the clients' default minute.
    timeouts = {"request_timeout_ms": 15_000, "default_api_timeout_ms": 15_000, "bootstrap_retry_refused": False}
    config = ClientConfig(**{"bootstrap_servers": bootstrap, "client_id": "odradek-console", **timeouts,
                             **_typed(properties)})
    if auth == "mtls" and not is_loopback(args.host) and args.certfile is None and not args.allow_plain_http:
        raise ConfigError(f"mTLS sign-in on {args.host!r} over plain HTTP would send private keys in clear: give "
                          "--certfile/--keyfile (HTTPS), bind a loopback address, or --allow-plain-http")
    if auth == "sasl":
        mechanism = args.sasl_mechanism or (config.sasl_mechanism if "sasl_mechanism" in properties else "SCRAM-SHA-512")
        config = config.replace(sasl_mechanism=mechanism)
        if mechanism == "OAUTHBEARER":
            raise ConfigError("users sign in with a username and password: OAUTHBEARER sign-in is not supported")
        if not is_loopback(args.host) and args.certfile is None and not args.allow_plain_http:
            raise ConfigError(f"sign-in on {args.host!r} over plain HTTP would send passwords in clear: give "
                              "--certfile/--keyfile (HTTPS), bind a loopback address, or --allow-plain-http")
    elif not is_loopback(args.host) and not args.allow_anonymous_remote:
        raise ConfigError(f"the cluster is {config.security_protocol} (no sign-in): the console binds a loopback "
                          f"address only, not {args.host!r}, unless --allow-anonymous-remote")
    if (args.certfile is None) != (args.keyfile is None):
        raise ConfigError("--certfile and --keyfile go together")
    for path in (args.certfile, args.keyfile):
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"no such file: {path}")
    if args.sample_interval < 0.5:
        raise ConfigError("--sample-interval is at least 0.5 s")
    if not 1 <= args.browse_seconds <= 600:
        raise ConfigError("--browse-seconds is 1 to 600")
    return ConsoleSettings(config, signin, auth=auth, read_only=args.read_only, metrics_urls=list(args.metrics_url),
                           sample_interval_s=args.sample_interval, own_credentials=bool(own_user),
                           browse_seconds=args.browse_seconds, certfile=args.certfile, keyfile=args.keyfile)


def _typed(properties: dict[str, Any]) -> dict[str, Any]:
    """Client properties (text, from -X or a file) as ClientConfig's typed fields; a name it does not have is
    an error that names it."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(ClientConfig)}
    out: dict[str, Any] = {}
    for name, raw in properties.items():
        if name not in fields:
            raise ConfigError(f"unknown client property {name.replace('_', '.')!r} (the console uses the "
                              "connection and security settings only)")
        kinds = fields[name].replace(" ", "").split("|")
        if not isinstance(raw, str):
            out[name] = raw
        elif "bool" in kinds:
            if raw.lower() not in ("true", "false"):
                raise ConfigError(f"{name.replace('_', '.')} expects true or false, got {raw!r}")
            out[name] = raw.lower() == "true"
        elif "int" in kinds and "str" not in kinds:
            try:
                out[name] = int(raw)
            except ValueError:
                raise ConfigError(f"{name.replace('_', '.')} expects a whole number, got {raw!r}") from None
        else:
            out[name] = raw
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from(args)
    except (ConfigError, OSError) as e:
        print(f"odradek console: error: {e}", file=sys.stderr)
        return 2
    return asyncio.run(serve(settings, args.host, args.port))


async def serve(settings: "ConsoleSettings", host: str, port: int) -> int:
    import uvicorn

    from .app import Console, build_app

    console = Console(settings)
    app = build_app(console)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                            server_header=False, timeout_graceful_shutdown=5,
                            ssl_certfile=settings.certfile, ssl_keyfile=settings.keyfile)
    server = uvicorn.Server(config)
    log = logging.getLogger("odradek.console")

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.05)
        for s in server.servers:
            for sock in s.sockets:
                bound_host, bound_port = sock.getsockname()[:2]
                shown = f"[{bound_host}]" if ":" in bound_host else bound_host
                mode = {"sasl": "sign-in with a Kafka principal (SASL)",
                        "mtls": "sign-in with each user's client certificate (mTLS)"}.get(settings.auth, "no sign-in")
                log.info("console listening on %s://%s:%d/ for %s (%s%s)", scheme, shown, bound_port,
                         settings.config.bootstrap_servers, mode, ", read-only" if settings.read_only else "")
                print(f"odradek console: {scheme}://{shown}:{bound_port}/", flush=True)

    scheme = "https" if settings.certfile else "http"
    watcher = asyncio.create_task(announce())
    await server.serve()
    watcher.cancel()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main())
