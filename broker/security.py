"""Listener security from Kafka's settings: TLS contexts, SASL mechanisms and users, certificate principals.

`listener_security(config, listener, scram_lookup)` reads, for one listener, what Kafka's broker reads:
the `ssl.*` and `sasl.*` settings, each overridable for that listener as `listener.name.<l>.<key>`, and
the JAAS text of each mechanism (`listener.name.<l>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`).
A setting this broker cannot honour (a JKS key store, GSSAPI as the only mechanism, a bad mapping rule)
raises `ConfigError` at start, naming the key, rather than serving the listener some other way.

Principals: on an SSL listener the principal is the client certificate's subject as an RFC 2253
distinguished name (what Java's X500Principal.getName() gives) mapped by `ssl.principal.mapping.rules`,
or User:ANONYMOUS without a certificate; on a SASL listener it is the authenticated user name; on
PLAINTEXT, User:ANONYMOUS. That is Kafka's DefaultKafkaPrincipalBuilder.
"""

from __future__ import annotations

import hmac
import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from odradek.protocol.sasl import PLAIN, ScramCredential, ScramMechanism

from .config import BrokerConfig, ConfigError
from .context import ANONYMOUS, KafkaPrincipal, SecurityProtocol

SERVED_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

ScramLookup = Callable[[ScramMechanism, str], ScramCredential | None]


# -- JAAS ---------------------------------------------------------------------------------------------

_JAAS_OPTION = re.compile(r'\s*([A-Za-z_][\w.-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(repr=False)  # passwords: kept out of repr


def parse_jaas(text: str, *, key: str = "sasl.jaas.config") -> JaasEntry:
    """One JAAS login module entry as Kafka's `sasl.jaas.config` holds it:
    `<LoginModule class> <required|requisite|sufficient|optional> key="value" ... ;`"""
    text = text.strip()
    head = re.match(r"([\w.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if head is None:
        raise ConfigError("expected '<LoginModule class> required key=\"value\" ...;'", key=key)
    pos, options = head.end(), {}
    while True:
        m = _JAAS_OPTION.match(text, pos)
        if m is None:
            break
        value = m.group(2) if m.group(2) is not None else m.group(3)
        options[m.group(1)] = re.sub(r"\\(.)", r"\1", value) if m.group(2) is not None else value
        pos = m.end()
    rest = text[pos:].strip()
    if rest not in (";", ""):
        raise ConfigError(f"cannot parse the JAAS options from {rest[:20]!r} on (values with spaces need quotes; end with ';')", key=key)
    return JaasEntry(head.group(1), head.group(2), options)


def jaas_for(config: BrokerConfig, listener: str, mechanism: str) -> JaasEntry | None:
    """The JAAS entry of `mechanism` on `listener`: `listener.name.<l>.<mechanism>.sasl.jaas.config`, else
    `listener.name.<l>.sasl.jaas.config`, else `sasl.jaas.config`."""
    for key in (f"{mechanism.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        text = config.listener_setting(listener, key)
        if text:
            return parse_jaas(text, key=f"listener.name.{listener.lower()}.{key}")
    return None


def client_credentials(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str] | None:
    """The `username`/`password` this node logs in with over `listener` (inter-broker and controller
    connections), from the JAAS entry of `mechanism`."""
    entry = jaas_for(config, listener, mechanism)
    if entry is None or "username" not in entry.options or "password" not in entry.options:
        return None
    return entry.options["username"], entry.options["password"]


# -- principals from certificates ---------------------------------------------------------------------

_RDN_NAMES = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}


def _escape_rdn_value(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(peer_cert: dict | None) -> str | None:
    """A certificate's subject as RFC 2253 text, most specific RDN first ("CN=alice,OU=eng,O=Org,C=US"),
    from `SSLObject.getpeercert()`; None without a certificate."""
    if not peer_cert or "subject" not in peer_cert:
        return None
    rdns = []
    for rdn in reversed(peer_cert["subject"]):
        rdns.append("+".join(f"{_RDN_NAMES.get(name, name)}={_escape_rdn_value(value)}" for name, value in rdn))
    return ",".join(rdns)


_RULE_PARSER = re.compile(r"((DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?).*?|(.*?))(,\s*|$)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class PrincipalMapper:
    """`ssl.principal.mapping.rules` (KIP-371): the first rule whose pattern matches the whole DN gives the
    user name (replacement with $1.., then L/U case); DEFAULT gives the DN unchanged."""

    def __init__(self, rules: str):
        self.rules: list[_Rule] = []
        for m in _RULE_PARSER.finditer(rules.strip()):
            if m.group(0) == "" and m.end() == len(rules.strip()):
                break
            if m.group(6):
                raise ConfigError(f"invalid rule: {m.group(6)!r}", key="ssl.principal.mapping.rules")
            if m.group(2):
                self.rules.append(_Rule(None))
            elif m.group(1):
                try:
                    pattern = re.compile(m.group(3).replace("\\/", "/"))
                except re.error as e:
                    raise ConfigError(f"invalid pattern {m.group(3)!r}: {e}", key="ssl.principal.mapping.rules") from None
                replacement = re.sub(r"\$(\d)", r"\\g<\1>", m.group(4).replace("\\/", "/"))
                self.rules.append(_Rule(pattern, replacement, m.group(5)))
            if m.end() >= len(rules.strip()):
                break
        if not self.rules:
            self.rules.append(_Rule(None))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            if rule.pattern is None:
                return dn
            m = rule.pattern.fullmatch(dn)
            if m is not None:
                name = m.expand(rule.replacement)
                return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {dn!r}")

    def principal(self, peer_cert: dict | None) -> KafkaPrincipal:
        dn = distinguished_name(peer_cert)
        return ANONYMOUS if dn is None else KafkaPrincipal("User", self.name(dn))


# -- TLS contexts -------------------------------------------------------------------------------------

_PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
                      "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1": ssl.TLSVersion.TLSv1}


def _setting(config: BrokerConfig, listener: str | None, key: str):
    return config.get(key) if listener is None else config.listener_setting(listener, key)


def _looks_pem(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return b"-----BEGIN" in f.read(64 * 1024)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}", key="ssl.keystore.location") from None


def _refuse_store(kind: str, store_type: str, key: str) -> ConfigError:
    return ConfigError(
        f"{kind} type {store_type} is not readable by this broker: convert it to PEM (e.g. `keytool -importkeystore "
        f"-destkeystore store.p12 -deststoretype PKCS12` then `openssl pkcs12 -in store.p12 -nodes -out store.pem`) "
        f"and set {key}=PEM",
        key=key,
    )


def _load_keystore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str | None) -> bool:
    """Load the key and certificate chain into `ctx`; False when none is configured."""
    store_type = _setting(config, listener, "ssl.keystore.type")
    location = _setting(config, listener, "ssl.keystore.location")
    inline_key = _setting(config, listener, "ssl.keystore.key")
    inline_chain = _setting(config, listener, "ssl.keystore.certificate.chain")
    key_password = _setting(config, listener, "ssl.key.password") or None
    try:
        if inline_key or inline_chain:
            if not (inline_key and inline_chain):
                raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together", key="ssl.keystore.key")
            # load_cert_chain reads files only: a private temporary file, removed at once.
            fd, path = tempfile.mkstemp(prefix="odradek-key-", suffix=".pem")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(inline_key.strip() + "\n" + inline_chain.strip() + "\n")
                ctx.load_cert_chain(path, password=key_password)
            finally:
                os.unlink(path)
            return True
        if not location:
            return False
        if store_type != "PEM" and not _looks_pem(location):
            raise _refuse_store("key store", store_type, "ssl.keystore.type")
        ctx.load_cert_chain(location, password=key_password or _setting(config, listener, "ssl.keystore.password") or None)
        return True
    except ssl.SSLError as e:
        raise ConfigError(f"cannot load the key store: {e.reason or e}", key="ssl.keystore.location") from None
    except OSError as e:
        raise ConfigError(f"cannot load the key store: {e.strerror or e}", key="ssl.keystore.location") from None


def _load_truststore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str | None) -> None:
    store_type = _setting(config, listener, "ssl.truststore.type")
    location = _setting(config, listener, "ssl.truststore.location")
    inline = _setting(config, listener, "ssl.truststore.certificates")
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
        elif location:
            if store_type != "PEM" and not _looks_pem(location):
                raise _refuse_store("trust store", store_type, "ssl.truststore.type")
            ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if ctx.check_hostname is False else ssl.Purpose.SERVER_AUTH)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"cannot load the trust store: {e}", key="ssl.truststore.location") from None


def _versions_and_ciphers(ctx: ssl.SSLContext, config: BrokerConfig, listener: str | None) -> None:
    enabled = _setting(config, listener, "ssl.enabled.protocols")
    versions = []
    for name in enabled:
        if name not in _PROTOCOL_VERSIONS:
            raise ConfigError(f"unknown TLS protocol {name!r} (TLSv1.2, TLSv1.3)", key="ssl.enabled.protocols")
        versions.append(_PROTOCOL_VERSIONS[name])
    if versions:
        ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
    suites = [s for s in _setting(config, listener, "ssl.cipher.suites") if s]
    # TLS 1.3 suites are not configurable through OpenSSL's cipher list (Python has no set_ciphersuites).
    tls12 = [_openssl_cipher_name(s) for s in suites if not s.startswith(("TLS_AES_", "TLS_CHACHA20_"))]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"none of the cipher suites {', '.join(suites)} is available", key="ssl.cipher.suites") from None


def _openssl_cipher_name(name: str) -> str:
    """IANA names (what Java and Kafka's docs use) to OpenSSL's, for the common ECDHE/DHE AEAD suites."""
    m = re.fullmatch(r"TLS_(ECDHE|DHE)_(RSA|ECDSA)_WITH_(AES_(128|256)_GCM|CHACHA20_POLY1305)_(SHA256|SHA384)", name)
    if m is None:
        return name
    kx, auth, cipher = m.group(1), m.group(2), m.group(3)
    if cipher.startswith("CHACHA20"):
        return f"{kx}-{auth}-CHACHA20-POLY1305"
    head = "ECDHE-" + auth if kx == "ECDHE" else "DHE-" + auth
    head = head.replace("ECDHE-RSA", "ECDHE-RSA").replace("DHE-RSA", "DHE-RSA")
    return f"{head}-AES{m.group(4)}-GCM-{m.group(5)}"


def server_ssl_context(config: BrokerConfig, listener: str, protocol: SecurityProtocol) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if not _load_keystore(ctx, config, listener):
        raise ConfigError(
            f"listener {listener} ({protocol.value}) needs a key store: ssl.keystore.location (PEM with the key and "
            "certificate chain) or ssl.keystore.key and ssl.keystore.certificate.chain",
            key="ssl.keystore.location",
        )
    _versions_and_ciphers(ctx, config, listener)
    # KIP-684: on SASL_SSL listeners only a listener-prefixed ssl.client.auth applies.
    if protocol is SecurityProtocol.SASL_SSL:
        client_auth = config._listener_settings.get(f"{listener.lower()}.ssl.client.auth", "none").lower()
    else:
        client_auth = config.listener_setting(listener, "ssl.client.auth")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[client_auth]
    if ctx.verify_mode != ssl.CERT_NONE:
        _load_truststore(ctx, config, listener)
    return ctx


def client_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context this node connects to others' `listener` with (inter-broker, controller)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = bool(config.listener_setting(listener, "ssl.endpoint.identification.algorithm"))
    _load_truststore(ctx, config, listener)
    _load_keystore(ctx, config, listener)  # a certificate for peers that ask for one (mTLS)
    _versions_and_ciphers(ctx, config, listener)
    return ctx


# -- SASL ---------------------------------------------------------------------------------------------


@dataclass
class ListenerSecurity:
    """What the network needs to secure one listener's connections."""

    name: str
    protocol: SecurityProtocol
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)
    scram_lookup: ScramLookup | None = None
    principal_mapper: PrincipalMapper | None = None
    max_receive_bytes: int = 524288
    failed_authentication_delay_ms: int = 100
    reauth_ms: int = 0

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def sasl(self) -> bool:
        return self.protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    def verify_plain(self, username: str, password: str) -> bool:
        """Constant time in the password; an unknown user costs the same compare as a known one."""
        expected = self.plain_users.get(username)
        ok = hmac.compare_digest((expected if expected is not None else "\x00" + password).encode("utf-8"), password.encode("utf-8"))
        return ok and expected is not None

    def scram_credential(self, mechanism: ScramMechanism, username: str) -> ScramCredential | None:
        return None if self.scram_lookup is None else self.scram_lookup(mechanism, username)


def listener_security(config: BrokerConfig, listener: str, protocol: SecurityProtocol, scram_lookup: ScramLookup | None = None) -> ListenerSecurity:
    security = ListenerSecurity(listener, protocol)
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        security.ssl_context = server_ssl_context(config, listener, protocol)
        security.principal_mapper = PrincipalMapper(config.listener_setting(listener, "ssl.principal.mapping.rules"))
    if not security.sasl:
        return security
    enabled = tuple(m.upper() for m in config.listener_setting(listener, "sasl.enabled.mechanisms"))
    mechanisms = tuple(m for m in enabled if m in SERVED_MECHANISMS)
    if not mechanisms:
        raise ConfigError(
            f"listener {listener} ({protocol.value}) has no SASL mechanism this broker serves (enabled: "
            f"{', '.join(enabled) or 'none'}); set sasl.enabled.mechanisms to PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512",
            key="sasl.enabled.mechanisms",
        )
    security.mechanisms = mechanisms
    if PLAIN in mechanisms:
        entry = jaas_for(config, listener, PLAIN)
        if entry is None:
            raise ConfigError(
                f"listener {listener} enables PLAIN but has no JAAS users: set listener.name.{listener.lower()}.plain.sasl.jaas.config "
                f'to {PLAIN_LOGIN_MODULE} required user_<name>="<password>" ...;',
                key=f"listener.name.{listener.lower()}.plain.sasl.jaas.config",
            )
        security.plain_users = {k[5:]: v for k, v in entry.options.items() if k.startswith("user_")}
    security.scram_lookup = scram_lookup
    security.max_receive_bytes = config.sasl_server_max_receive_size
    security.failed_authentication_delay_ms = config.connection_failed_authentication_delay_ms
    security.reauth_ms = config.listener_setting(listener, "connections.max.reauth.ms")
    return security


# -- this node as a client of others --------------------------------------------------------------------


def node_security(config: BrokerConfig, listener: str, mechanism_key: str):
    """How this node connects to other nodes' `listener` (the inter-broker listener with
    `sasl.mechanism.inter.broker.protocol`, a controller listener with `sasl.mechanism.controller.protocol`):
    None for PLAINTEXT. The SASL credentials are the username/password of that listener's JAAS entry for
    the mechanism, as Kafka's brokers take them."""
    from .node_client import NodeSecurity

    protocol = SecurityProtocol(config._protocol_map().get(listener.upper(), listener.upper()))
    if protocol is SecurityProtocol.PLAINTEXT:
        return None
    ssl_context = client_ssl_context(config, listener) if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL) else None
    if protocol in (SecurityProtocol.SSL,):
        return NodeSecurity(ssl_context=ssl_context)
    mechanism = str(config.get(mechanism_key)).upper()
    if mechanism not in SERVED_MECHANISMS:
        raise ConfigError(
            f"listener {listener} ({protocol.value}) is reached with SASL mechanism {mechanism}, which this broker does "
            f"not speak; set {mechanism_key} to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", key=mechanism_key)
    credentials = client_credentials(config, listener, mechanism)
    if credentials is None:
        raise ConfigError(
            f"listener {listener} is reached with SASL {mechanism}, but listener.name.{listener.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config has no username=\"...\" password=\"...\" for this node to log in with",
            key=f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    return NodeSecurity(ssl_context=ssl_context, mechanism=mechanism, username=credentials[0], password=credentials[1])
