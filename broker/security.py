"""Listener security from Kafka's settings: TLS contexts, SASL mechanisms and users, certificate principals.

`listener_security(config, listener, scram_lookup)` reads, for one listener, what Kafka's broker reads:
the `ssl.*` and `sasl.*` settings, each overridable for that listener as `listener.name.<l>.<key>`, and
the JAAS text of each mechanism (`listener.name.<l>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`).
Key and trust stores are PEM or PKCS12 (read with `cryptography`). A setting this broker cannot honour
(a JKS store, GSSAPI as the only mechanism, a validator for signed OAUTHBEARER tokens, a bad mapping
rule) raises `ConfigError` at start, naming the key, rather than serving the listener some other way.

Principals: on an SSL listener the principal is the client certificate's subject as an RFC 2253
distinguished name (what Java's X500Principal.getName() gives) mapped by `ssl.principal.mapping.rules`,
or User:ANONYMOUS without a certificate; on a SASL listener it is the authenticated user name (for
OAUTHBEARER, the token's principal claim); on PLAINTEXT, User:ANONYMOUS. That is Kafka's
DefaultKafkaPrincipalBuilder.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import ssl
import tempfile
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from odradek.protocol.sasl import (
    OAUTHBEARER, PLAIN, ScramCredential, ScramMechanism, UnsecuredLoginOptions, UnsecuredValidatorOptions,
)

from .config import KERBEROS_REFUSAL, BrokerConfig, ConfigError
from .context import ANONYMOUS, KafkaPrincipal, SecurityProtocol

SERVED_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The OAUTHBEARER validator Kafka uses when none is configured (and the only one served here), under its
# old and current package names.
UNSECURED_VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler",
)

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


class StoreFormat(Enum):
    """What a key or trust store file holds, told from its first bytes rather than trusted from
    `ssl.*store.type`: Java's own loader does the same (a `JKS`-typed store that is really PKCS12 loads,
    keystore.type.compat), and Kafka's default type is JKS even where keytool wrote PKCS12."""

    PEM = "PEM"
    PKCS12 = "PKCS12"
    JKS = "JKS"  # 0xFEEDFEED; JCEKS (0xCECECECE) is refused the same way

    @classmethod
    def of(cls, data: bytes) -> "StoreFormat":
        if b"-----BEGIN" in data[: 64 * 1024]:
            return cls.PEM
        if data[:4] in (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce"):
            return cls.JKS
        return cls.PKCS12  # DER: a PKCS12 PFX is an ASN.1 SEQUENCE; anything else fails to parse below


def _read_store(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}", key=key) from None


def _refuse_store(kind: str, store_type: str, key: str) -> ConfigError:
    # No well-kept Python library reads JKS (pyjks is unmaintained): keytool converts it in one command.
    return ConfigError(
        f"{kind} type {store_type} is not readable by this broker: convert it to PKCS12 (`keytool -importkeystore "
        f"-srckeystore store.jks -destkeystore store.p12 -deststoretype PKCS12`) and set {key}=PKCS12, or to PEM "
        f"(`openssl pkcs12 -in store.p12 -nodes -out store.pem`) and set {key}=PEM",
        key=key,
    )


def _password(value: str | None) -> bytes | None:
    return value.encode("utf-8") if value else None


def _load_pkcs12(data: bytes, password: str | None, kind: str, key: str, location: str):
    """Parse a PKCS12 store; a wrong password and a damaged file both end here, and OpenSSL cannot tell
    them apart (the MAC check fails either way), so the message names both."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_pkcs12(data, _password(password))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"cannot load the PKCS12 {kind} {location}: wrong {key.replace('location', 'password')} or not a "
                          f"PKCS12 file ({e})", key=key.replace("location", "password")) from None


def _load_key_and_chain(ctx: ssl.SSLContext, private_key, chain: list) -> None:
    """Hand a private key and its certificate chain held in memory to `ctx`. `load_cert_chain` reads only
    files, so the key goes through one: encrypted (PKCS8, AES-256) under a random one-time password that
    never leaves this process, in a file only we can read (mode 0600, in a fresh 0700 directory), removed
    as soon as OpenSSL has read it. Whoever sees the file in that instant sees ciphertext."""
    from cryptography.hazmat.primitives import serialization

    one_time = secrets.token_bytes(32)
    pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.BestAvailableEncryption(one_time))
    pem += b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in chain)
    directory = tempfile.mkdtemp(prefix="odradek-key-")
    path = os.path.join(directory, "key.pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=one_time)
    finally:
        try:
            os.unlink(path)
        finally:
            os.rmdir(directory)


def _inline_key(ctx: ssl.SSLContext, key_pem: str, chain_pem: str, key_password: str | None) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        private_key = serialization.load_pem_private_key(key_pem.strip().encode("utf-8"), _password(key_password))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"cannot load ssl.keystore.key: {e}", key="ssl.keystore.key") from None
    try:
        chain = x509.load_pem_x509_certificates(chain_pem.strip().encode("utf-8"))
    except ValueError as e:
        raise ConfigError(f"cannot load ssl.keystore.certificate.chain: {e}", key="ssl.keystore.certificate.chain") from None
    _load_key_and_chain(ctx, private_key, chain)


def _load_keystore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str | None) -> bool:
    """Load the key and certificate chain into `ctx`; False when none is configured."""
    store_type = _setting(config, listener, "ssl.keystore.type")
    location = _setting(config, listener, "ssl.keystore.location")
    inline_key = _setting(config, listener, "ssl.keystore.key")
    inline_chain = _setting(config, listener, "ssl.keystore.certificate.chain")
    key_password = _setting(config, listener, "ssl.key.password") or None
    store_password = _setting(config, listener, "ssl.keystore.password") or None
    try:
        if inline_key or inline_chain:
            if not (inline_key and inline_chain):
                raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together", key="ssl.keystore.key")
            _inline_key(ctx, inline_key, inline_chain, key_password)
            return True
        if not location:
            return False
        data = _read_store(location, "ssl.keystore.location")
        found = StoreFormat.of(data)
        if store_type == "PEM" and found is not StoreFormat.PEM:
            raise ConfigError(f"ssl.keystore.type is PEM but {location} holds no PEM", key="ssl.keystore.type")
        if found is StoreFormat.JKS:
            raise _refuse_store("key store", "JKS", "ssl.keystore.type")
        if found is StoreFormat.PKCS12:
            store = _load_pkcs12(data, store_password, "key store", "ssl.keystore.location", location)
            if store.key is None or store.cert is None:
                raise ConfigError(f"the PKCS12 key store {location} holds no private key with its certificate",
                                  key="ssl.keystore.location")
            chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
            _load_key_and_chain(ctx, store.key, chain)
            return True
        ctx.load_cert_chain(location, password=key_password or store_password)
        return True
    except ssl.SSLError as e:
        raise ConfigError(f"cannot load the key store: {e.reason or e}", key="ssl.keystore.location") from None
    except OSError as e:
        raise ConfigError(f"cannot load the key store: {e.strerror or e}", key="ssl.keystore.location") from None


def _load_truststore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str | None) -> None:
    location = _setting(config, listener, "ssl.truststore.location")
    inline = _setting(config, listener, "ssl.truststore.certificates")
    try:
        if inline:
            ctx.load_verify_locations(cadata=inline)
        elif location:
            data = _read_store(location, "ssl.truststore.location")
            found = StoreFormat.of(data)
            if _setting(config, listener, "ssl.truststore.type") == "PEM" and found is not StoreFormat.PEM:
                raise ConfigError(f"ssl.truststore.type is PEM but {location} holds no PEM", key="ssl.truststore.type")
            if found is StoreFormat.JKS:
                raise _refuse_store("trust store", "JKS", "ssl.truststore.type")
            if found is StoreFormat.PKCS12:
                from cryptography.hazmat.primitives.serialization import Encoding

                # Trusted certificates need no temporary file: load_verify_locations takes DER in memory.
                store = _load_pkcs12(data, _setting(config, listener, "ssl.truststore.password") or None,
                                     "trust store", "ssl.truststore.location", location)
                certs = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
                if not certs:
                    raise ConfigError(f"the PKCS12 trust store {location} holds no certificate", key="ssl.truststore.location")
                for cert in certs:
                    ctx.load_verify_locations(cadata=cert.certificate.public_bytes(Encoding.DER))
            else:
                ctx.load_verify_locations(cafile=location)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH if ctx.check_hostname is False else ssl.Purpose.SERVER_AUTH)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"cannot load the trust store: {e}", key="ssl.truststore.location") from None


# The TLS 1.3 suites OpenSSL enables, all of them, always (see _versions_and_ciphers).
_TLS13_SUITES = frozenset({"TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"})


def _versions_and_ciphers(ctx: ssl.SSLContext, config: BrokerConfig, listener: str | None) -> None:
    enabled = _setting(config, listener, "ssl.enabled.protocols")
    versions = []
    for name in enabled:
        if name not in _PROTOCOL_VERSIONS:
            raise ConfigError(f"unknown TLS protocol {name!r} (TLSv1.2, TLSv1.3)", key="ssl.enabled.protocols")
        versions.append(_PROTOCOL_VERSIONS[name])
    suites = [s for s in _setting(config, listener, "ssl.cipher.suites") if s]
    # TLS 1.3 suites are not configurable through OpenSSL's cipher list (Python has no set_ciphersuites), so a
    # list is honoured as Java honours it where it can be: without TLS 1.3 suites no TLS 1.3 handshake is
    # possible (Java enables none), without TLS 1.2 suites no TLS 1.2 one; a list naming some TLS 1.3 suites
    # but not all of OpenSSL's would be ignored for TLS 1.3, and refuses the start instead.
    tls13 = {s for s in suites if s.startswith(("TLS_AES_", "TLS_CHACHA20_"))}
    tls12 = [_openssl_cipher_name(s) for s in suites if s not in tls13]
    if suites and versions:
        if tls13 and not tls13 >= _TLS13_SUITES and ssl.TLSVersion.TLSv1_3 in versions:
            raise ConfigError(
                f"lists the TLS 1.3 suites {', '.join(sorted(tls13))} but not {', '.join(sorted(_TLS13_SUITES - tls13))}: "
                "TLS 1.3 suites cannot be narrowed here; list all three, or none (and leave TLSv1.3 out of "
                "ssl.enabled.protocols) to serve TLS 1.2 only", key="ssl.cipher.suites")
        if not tls13:
            versions = [v for v in versions if v < ssl.TLSVersion.TLSv1_3]
        if not tls12:
            versions = [v for v in versions if v >= ssl.TLSVersion.TLSv1_3]
        if not versions:
            raise ConfigError("no cipher suite listed serves a protocol of ssl.enabled.protocols",
                              key="ssl.cipher.suites")
    if versions:
        ctx.minimum_version, ctx.maximum_version = min(versions), max(versions)
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
    oauthbearer: UnsecuredValidatorOptions | None = None
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
    if "GSSAPI" in enabled:
        # Served alongside the others it would be silently dropped: refused, naming the way out.
        raise ConfigError(f"listener {listener} ({protocol.value}): {KERBEROS_REFUSAL}", key="sasl.enabled.mechanisms")
    mechanisms = tuple(m for m in enabled if m in SERVED_MECHANISMS)
    unserved = [m for m in enabled if m not in SERVED_MECHANISMS]
    if unserved:
        raise ConfigError(f"listener {listener} ({protocol.value}) enables {', '.join(unserved)}, which this broker does not "
                          "serve (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)", key="sasl.enabled.mechanisms")
    if not mechanisms:
        raise ConfigError(
            f"listener {listener} ({protocol.value}) has no SASL mechanism this broker serves (enabled: "
            f"{', '.join(enabled) or 'none'}); set sasl.enabled.mechanisms to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and/or OAUTHBEARER",
            key="sasl.enabled.mechanisms",
        )
    security.mechanisms = mechanisms
    _refuse_other_callback_handlers(config, listener, mechanisms)
    if PLAIN in mechanisms:
        entry = jaas_for(config, listener, PLAIN)
        if entry is None:
            raise ConfigError(
                f"listener {listener} enables PLAIN but has no JAAS users: set listener.name.{listener.lower()}.plain.sasl.jaas.config "
                f'to {PLAIN_LOGIN_MODULE} required user_<name>="<password>" ...;',
                key=f"listener.name.{listener.lower()}.plain.sasl.jaas.config",
            )
        security.plain_users = {k[5:]: v for k, v in entry.options.items() if k.startswith("user_")}
    if OAUTHBEARER in mechanisms:
        security.oauthbearer = oauthbearer_validator(config, listener)
    security.scram_lookup = scram_lookup
    security.max_receive_bytes = config.listener_setting(listener, "sasl.server.max.receive.size")
    security.failed_authentication_delay_ms = config.connection_failed_authentication_delay_ms
    security.reauth_ms = config.listener_setting(listener, "connections.max.reauth.ms")
    return security


# Kafka's own server callback handlers, what it uses when none is configured: naming one is the same as not.
DEFAULT_SERVER_CALLBACK_HANDLERS = {
    PLAIN: ("org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler",),
    "SCRAM-SHA-256": ("org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler",),
    "SCRAM-SHA-512": ("org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler",),
    OAUTHBEARER: UNSECURED_VALIDATOR_CLASSES,
}


def _refuse_other_callback_handlers(config: BrokerConfig, listener: str, mechanisms: tuple[str, ...]) -> None:
    """A server callback handler of another class (an LDAP check for PLAIN, say) would be ignored here, and
    logins checked some other way than the operator asked: refused at start instead, naming the key."""
    defaults = {name for m in mechanisms for name in DEFAULT_SERVER_CALLBACK_HANDLERS[m]}
    general = config.listener_setting(listener, "sasl.server.callback.handler.class")
    if general and general not in defaults:
        raise ConfigError(f"{general} is not served: logins are checked by Kafka's default server callback handlers only",
                          key=f"listener.name.{listener.lower()}.sasl.server.callback.handler.class")
    for mechanism in mechanisms:
        key = f"{mechanism.lower()}.sasl.server.callback.handler.class"
        handler = config.listener_setting(listener, key)
        if handler and handler not in DEFAULT_SERVER_CALLBACK_HANDLERS[mechanism]:
            raise ConfigError(f"{handler} is not served: {mechanism} logins are checked by Kafka's default handler only "
                              f"({DEFAULT_SERVER_CALLBACK_HANDLERS[mechanism][0]})", key=f"listener.name.{listener.lower()}.{key}")


def oauthbearer_validator(config: BrokerConfig, listener: str) -> UnsecuredValidatorOptions:
    """The unsecured validator's options from the listener's OAuthBearerLoginModule JAAS entry. As Kafka,
    a listener serving OAUTHBEARER needs that entry; a validator class other than the unsecured one, or
    a JWKS endpoint (signed tokens), refuses to start rather than let unsigned tokens in."""
    jaas_key = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
    handler_key = "oauthbearer.sasl.server.callback.handler.class"
    handler = config.listener_setting(listener, handler_key) or config.listener_setting(listener, "sasl.server.callback.handler.class")
    if handler and handler not in UNSECURED_VALIDATOR_CLASSES:
        raise ConfigError(f"{handler} is not served: OAUTHBEARER checks unsecured JWTs only "
                          "(Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, the default)",
                          key=f"listener.name.{listener.lower()}.{handler_key}")
    if config.listener_setting(listener, "sasl.oauthbearer.jwks.endpoint.url"):
        raise ConfigError("signed OAUTHBEARER tokens (a JWKS endpoint) are not served: only unsecured JWTs",
                          key="sasl.oauthbearer.jwks.endpoint.url")
    entry = jaas_for(config, listener, OAUTHBEARER)
    if entry is None:
        raise ConfigError(f"listener {listener} enables OAUTHBEARER but has no JAAS entry: set {jaas_key} to "
                          f'{OAUTHBEARER_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="admin";', key=jaas_key)
    try:
        return UnsecuredValidatorOptions.from_jaas(entry.options)
    except ValueError as e:
        raise ConfigError(str(e), key=jaas_key) from None


# -- this node as a client of others --------------------------------------------------------------------


def node_security(config: BrokerConfig, listener: str, mechanism_key: str):
    """How this node connects to other nodes' `listener` (the inter-broker listener with
    `sasl.mechanism.inter.broker.protocol`, a controller listener with `sasl.mechanism.controller.protocol`):
    None for PLAINTEXT. The SASL credentials are the username/password of that listener's JAAS entry for
    the mechanism, as Kafka's brokers take them; for OAUTHBEARER, the unsecured token that entry describes
    (OAuthBearerLoginModule's unsecuredLogin* options), minted afresh for each connection."""
    from .node_client import NodeSecurity

    protocol = SecurityProtocol(config._protocol_map().get(listener.upper(), listener.upper()))
    if protocol is SecurityProtocol.PLAINTEXT:
        return None
    ssl_context = client_ssl_context(config, listener) if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL) else None
    if protocol in (SecurityProtocol.SSL,):
        return NodeSecurity(ssl_context=ssl_context)
    mechanism = str(config.get(mechanism_key)).upper()
    if mechanism == "GSSAPI":
        raise ConfigError(f"listener {listener} ({protocol.value}) is reached with {mechanism_key}=GSSAPI: {KERBEROS_REFUSAL}",
                          key=mechanism_key)
    if mechanism not in SERVED_MECHANISMS:
        raise ConfigError(
            f"listener {listener} ({protocol.value}) is reached with SASL mechanism {mechanism}, which this broker does "
            f"not speak; set {mechanism_key} to PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", key=mechanism_key)
    if mechanism == OAUTHBEARER:
        # As Kafka's OAuthBearerUnsecuredLoginCallbackHandler: the node mints its own unsecured token from
        # the listener's JAAS entry (unsecuredLoginStringClaim_sub="admin" ...).
        jaas_key = f"listener.name.{listener.lower()}.oauthbearer.sasl.jaas.config"
        entry = jaas_for(config, listener, OAUTHBEARER)
        if entry is None:
            raise ConfigError(f"listener {listener} is reached with SASL OAUTHBEARER, but {jaas_key} is not set: "
                              f'{OAUTHBEARER_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="<node principal>";',
                              key=jaas_key)
        try:
            login = UnsecuredLoginOptions.from_jaas(entry.options)
        except ValueError as e:
            raise ConfigError(str(e), key=jaas_key) from None
        return NodeSecurity(ssl_context=ssl_context, mechanism=mechanism, username=login.principal_name, oauth_login=login)
    credentials = client_credentials(config, listener, mechanism)
    if credentials is None:
        raise ConfigError(
            f"listener {listener} is reached with SASL {mechanism}, but listener.name.{listener.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config has no username=\"...\" password=\"...\" for this node to log in with",
            key=f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    return NodeSecurity(ssl_context=ssl_context, mechanism=mechanism, username=credentials[0], password=credentials[1])
