"""SASL mechanisms, sans-I/O: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and OAUTHBEARER
with unsecured JWTs (RFC 7628, KIP-255), both sides.

Each side is a small state machine fed the peer's tokens and answering with its own, with no sockets,
clocks or randomness of its own: nonces and salts are arguments, so the RFC's test vectors replay exactly.
The broker wraps the server side (broker/authenticator.py) and the bundled clients the client side
(client/connection.py), both over SaslAuthenticate (or raw frames after a v0 SaslHandshake).

SCRAM in one paragraph: the server never holds the password, only, per user and mechanism, a salt, an
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword,
"Server Key"), where SaltedPassword = PBKDF2(password, salt, iterations). The client proves it knows
ClientKey by sending ClientKey XOR HMAC(StoredKey, AuthMessage); the server recovers ClientKey, hashes it
and compares with StoredKey in constant time; it then proves it knows ServerKey with HMAC(ServerKey,
AuthMessage), which the client checks. AuthMessage is the three messages exchanged so far, so a replayed
proof fails under a fresh server nonce.

A failed authentication raises `SaslAuthenticationFailed` with the text the client is shown (Kafka's own
wording, so that clients' logs read the same); a malformed token raises it too: the connection ends the
same way either way.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable

__all__ = [
    "PLAIN", "SaslAuthenticationFailed", "ScramMechanism", "ScramCredential", "ScramServer", "ScramClient",
    "PlainServer", "plain_token", "salted_password", "scram_credential", "MIN_ITERATIONS", "MAX_ITERATIONS",
    "OAUTHBEARER", "OAuthBearerServer", "OAuthBearerInvalidToken", "UnsecuredValidatorOptions", "UnsecuredJwt",
    "parse_unsecured_jws", "validate_unsecured_token", "unsecured_jwt", "oauthbearer_client_first",
    "UnsecuredLoginOptions",
]

PLAIN = "PLAIN"
# Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations; AlterUserScramCredentials' maximum).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class SaslAuthenticationFailed(Exception):
    """The peer did not authenticate; `str(e)` is what the client is told."""


class ScramMechanism(IntEnum):
    """Kafka's ids for the SCRAM mechanisms (ScramMechanism.java: the `mechanism` int8 on the wire)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def from_name(cls, name: str) -> "ScramMechanism":
        try:
            return cls[name.upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps for one user and mechanism. Never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs and tracebacks
        return f"ScramCredential(iterations={self.iterations}, salt=<{len(self.salt)} bytes>)"


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802 (PBKDF2 with HMAC-H). SASLprep is not applied: Kafka's
    Java implementation does not apply it either, so passwords compare as their UTF-8 bytes."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    server_key = _hmac(mechanism, salted, b"Server Key")
    return ScramCredential(bytes(salt), stored_key, server_key, iterations)


def scram_credential(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    return credential_from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise SaslAuthenticationFailed(f"Invalid SCRAM {what}") from None


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape_name(text: str) -> str:
    # "=" may appear only as =2C or =3D (RFC 5802 §5.1)
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            code = text[i : i + 3]
            if code == "=2C":
                out.append(",")
            elif code == "=3D":
                out.append("=")
            else:
                raise SaslAuthenticationFailed("Invalid SCRAM username encoding")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _attributes(message: str) -> list[tuple[str, str]]:
    attrs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationFailed("Invalid SCRAM message format")
        attrs.append((part[0], part[2:]))
    return attrs


def _decode(token: bytes) -> str:
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailed("Invalid SCRAM message: not UTF-8") from None


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


class ScramServer:
    """The server side of one SCRAM exchange: `step(client_first)` -> server_first, `step(client_final)` ->
    server_final, then `complete` and `username`. `lookup(username)` gives the user's credential, or None.
    `server_nonce` must be fresh random printable text (no commas) per exchange."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None], server_nonce: str):
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._state = 0  # 0: expect client-first, 1: expect client-final, 2: done
        self.username: str | None = None
        self.token_authenticated = False  # the client asked for delegation-token auth (not served)
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""

    @property
    def complete(self) -> bool:
        return self._state == 2

    def _fail(self) -> SaslAuthenticationFailed:
        self._state = 3
        return SaslAuthenticationFailed(
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self.mechanism.mechanism_name}"
        )

    def step(self, token: bytes) -> bytes:
        if self._state == 0:
            return self._client_first(_decode(token))
        if self._state == 1:
            return self._client_final(_decode(token))
        raise SaslAuthenticationFailed("Unexpected SCRAM message after the exchange ended")

    def _client_first(self, message: str) -> bytes:
        # gs2-header: "n,," or "y,," (no channel binding), optionally "n,a=authzid,"
        parts = message.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise SaslAuthenticationFailed("Invalid SCRAM client first message")
        authzid = _unescape_name(parts[1][2:]) if parts[1] else ""
        self._gs2_header = f"{parts[0]},{parts[1]},"
        bare = parts[2]
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise SaslAuthenticationFailed("Invalid SCRAM client first message")
        username = _unescape_name(attrs[0][1])
        extensions = dict(attrs[2:])
        if extensions.get("tokenauth", "").lower() == "true":
            self.token_authenticated = True
            raise self._fail()  # delegation tokens are not served
        if authzid and authzid != username:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id that is different from username")
        credential = self._lookup(username)
        if credential is None:
            raise self._fail()
        self.username = username
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._state = 1
        return self._server_first.encode("ascii")

    def _client_final(self, message: str) -> bytes:
        attrs = _attributes(message)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise SaslAuthenticationFailed("Invalid SCRAM client final message")
        if _unb64(attrs[0][1], "channel binding") != self._gs2_header.encode("utf-8"):
            raise self._fail()
        # The nonce must end with the combined one the server sent, as Kafka 3.x's ScramSaslServer checks
        # (newer Kafka wants equality): librdkafka 2.0 (kcat 1.7's) sends its own nonce again in front.
        # Still safe: the proof covers the nonce as sent, and the server's part is fresh.
        if not attrs[1][1].endswith(self._nonce):
            raise self._fail()
        proof = _unb64(attrs[-1][1], "proof")
        without_proof = message[: message.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        credential = self._credential
        if credential is None:  # (set by the client's first message, which this one follows)
            raise self._fail()
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._fail()
        client_key = _xor(proof, signature)
        computed = hashlib.new(self.mechanism.hash_name, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise self._fail()
        self._state = 2
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode("ascii")


class ScramClient:
    """The client side: `first()` -> client-first, `final(server_first)` -> client-final,
    `verify(server_final)` raises unless the server proved it knows the credential."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, client_nonce: str):
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._client_nonce = client_nonce
        self._client_first_bare = f"n={_escape_name(username)},r={client_nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        text = _decode(server_first)
        attrs = dict(_attributes(text))
        if "e" in attrs:
            raise SaslAuthenticationFailed(f"SCRAM server error: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", ""), "salt"), int(attrs.get("i", "0"))
        if not nonce.startswith(self._client_nonce) or iterations < 1:
            raise SaslAuthenticationFailed("Invalid SCRAM server first message")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = hashlib.new(self.mechanism.hash_name, client_key).digest()
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode("utf-8")
        proof = _xor(client_key, _hmac(self.mechanism, stored_key, auth_message))
        self._server_signature = _hmac(self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attributes(_decode(server_final)))
        if "e" in attrs:
            raise SaslAuthenticationFailed(f"SCRAM server error: {attrs['e']}")
        if not hmac.compare_digest(_unb64(attrs.get("v", ""), "server signature"), self._server_signature):
            raise SaslAuthenticationFailed("Invalid SCRAM server signature")


class PlainServer:
    """PLAIN (RFC 4616): one token, `authzid NUL authcid NUL passwd`. `verify(username, password)` decides;
    it must compare in constant time (see broker/authenticator.py)."""

    def __init__(self, verify: Callable[[str, str], bool]):
        self._verify = verify
        self.username: str | None = None
        self.complete = False

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Unexpected PLAIN message after the exchange ended")
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id that is different from username")
        if not self._verify(username, password):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        self.username = username
        self.complete = True
        return b""


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\x00{username}\x00{password}".encode("utf-8")


# -- OAUTHBEARER (RFC 7628, KIP-255) with unsecured JWTs ---------------------------------------------------
#
# The client's one message is a GS2 header and key=value pairs separated by ^A (0x01):
#
#     n,a=alice,^Aauth=Bearer <token>^Aext=value^A^A
#
# The server answers an empty token on success. On failure it answers, with no error yet, a JSON status
# ({"status":"invalid_token"}); the client must then send a lone ^A, and only that is refused with
# SASL_AUTHENTICATION_FAILED (RFC 7628 §3.2.2; Kafka's OAuthBearerSaslServer does the same). The token
# is checked as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler checks it: an unsecured JWS (header
# alg "none", empty signature), a string principal claim, `exp` required and in the future (within the
# allowed clock skew), `iat` if present not in the future and before `exp`, and the required scope.
# Unsecured means anyone can mint a token for any name: for development and tests, as in Kafka.

OAUTHBEARER = "OAUTHBEARER"
_CTRL_A = "\x01"
_SASLNAME = r"(?:[\x01-\x7F](?<![=,])|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class OAuthBearerInvalidToken(Exception):
    """Why a token was refused (for the broker's log; the client is told only the JSON status).
    `scope` is set when the token lacked a required scope: the status is then insufficient_scope."""

    def __init__(self, reason: str, scope: str | None = None):
        super().__init__(reason)
        self.scope = scope


@dataclass(frozen=True, slots=True)
class UnsecuredValidatorOptions:
    """The JAAS options of Kafka's unsecured validator (OAuthBearerLoginModule's entry on the broker)."""

    principal_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: dict[str, str]) -> "UnsecuredValidatorOptions":
        """Raises ValueError for an allowable clock skew that is not a non-negative integer."""
        skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs must be an integer (got {skew_text!r})") from None
        if skew < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew_text}")
        return cls(
            principal_claim_name=options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub",
            scope_claim_name=options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
            required_scope=tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
            allowable_clock_skew_ms=skew,
        )


@dataclass(frozen=True, slots=True)
class UnsecuredJwt:
    principal_name: str
    scope: frozenset[str]
    lifetime_ms: int  # when it expires, ms since the epoch (Kafka's OAuthBearerToken.lifetimeMs)
    start_time_ms: int | None
    claims: dict = field(repr=False, hash=False, compare=False)


def _b64url_json(part: str) -> dict:
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(decoded)
    # binascii.Error and JSONDecodeError are ValueErrors; arrays nested thousands deep exhaust the recursion
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise OAuthBearerInvalidToken("malformed Base64 URL encoded value or JSON") from None
    if not isinstance(value, dict):
        raise OAuthBearerInvalidToken("malformed JSON: not an object")
    return value


def _number_claim(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OAuthBearerInvalidToken(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number):  # JSON's Infinity and NaN, which Python's parser accepts
        raise OAuthBearerInvalidToken(f"The '{name}' claim is not a finite number: {value!r:.40}")
    return number


_LONG_MAX = 2**63 - 1


def _ms(seconds: float) -> int:
    """A claim's seconds as whole milliseconds, saturating as Java's Math.round does (exp=1e308 is "never")."""
    ms = seconds * 1000
    return _LONG_MAX if ms >= _LONG_MAX else -_LONG_MAX - 1 if ms <= -_LONG_MAX - 1 else round(ms)


def parse_unsecured_jws(token: str, principal_claim_name: str = "sub", scope_claim_name: str = "scope") -> UnsecuredJwt:
    """An unsecured JWS compact serialization (`header.claims.`, both base64url JSON, alg "none")."""
    if ".." in token:
        raise OAuthBearerInvalidToken("Malformed compact serialization contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise OAuthBearerInvalidToken("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
    if header.get("alg") != "none":
        raise OAuthBearerInvalidToken("Unsecured JWS must have 'none' for an algorithm")
    if parts[2]:
        raise OAuthBearerInvalidToken("Unsecured JWS must not contain a digital signature")
    raw_scope = claims.get(scope_claim_name)
    if isinstance(raw_scope, str):
        scope = frozenset([raw_scope.strip()]) if raw_scope.strip() else frozenset()
    elif isinstance(raw_scope, list):
        scope = frozenset(str(s).strip() for s in raw_scope if str(s).strip())
    elif raw_scope is None:
        scope = frozenset()
    else:
        raise OAuthBearerInvalidToken(f"The '{scope_claim_name}' claim was not of type List: {type(raw_scope).__name__}")
    exp = _number_claim(claims, "exp")
    if exp is None:
        raise OAuthBearerInvalidToken("No expiration time in JWT")
    principal = claims.get(principal_claim_name)
    if principal is not None and not isinstance(principal, str):
        raise OAuthBearerInvalidToken(f"The {principal_claim_name} claim had the incorrect type: {type(principal).__name__}")
    if not principal or not principal.strip():
        raise OAuthBearerInvalidToken(f"No principal name in JWT claim: {principal_claim_name}")
    iat = _number_claim(claims, "iat")
    return UnsecuredJwt(principal, scope, _ms(exp), None if iat is None else _ms(iat), claims)


def validate_unsecured_token(token: str, options: UnsecuredValidatorOptions, now_ms: int) -> UnsecuredJwt:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: raises OAuthBearerInvalidToken, else the token."""
    jwt = parse_unsecured_jws(token, options.principal_claim_name, options.scope_claim_name)
    skew = options.allowable_clock_skew_ms
    iat = _number_claim(jwt.claims, "iat")
    # Compared in whole milliseconds (as the token's times are kept): iat * 1000 in floating point can land a
    # hair above the millisecond the client wrote (librdkafka writes "%.3f" seconds).
    if iat is not None and _ms(iat) > now_ms + skew:
        raise OAuthBearerInvalidToken(f"The Issued At value ({iat:f} seconds) was after the indicated time ({now_ms} ms) "
                                      f"plus allowable clock skew ({skew} ms)")
    exp = _number_claim(jwt.claims, "exp")
    if exp is None:  # (parse_unsecured_jws refuses such a token already)
        raise OAuthBearerInvalidToken("No expiration time in JWT")
    if now_ms - skew >= _ms(exp):
        raise OAuthBearerInvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on "
                                      f"or after the Expiration Time value ({exp:f} seconds)")
    if iat is not None and exp <= iat:
        raise OAuthBearerInvalidToken(f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time ({iat:f} seconds)")
    for required in options.required_scope:
        if required not in jwt.scope:
            listed = "[" + ", ".join(options.required_scope) + "]"
            raise OAuthBearerInvalidToken(f"The provided scope ({sorted(jwt.scope)}) was missing a required scope "
                                          f"({required}).  All required scope elements: {listed}", scope=listed)
    return jwt


class OAuthBearerServer:
    """The server side of OAUTHBEARER: `step(client_first)` answers b"" (done) or a JSON error status, after
    which `step(b"\\x01")` raises. `wall_clock_ms()` is the time tokens are checked against (epoch ms: JWT
    times are wall-clock times); the tests pass a fixed one."""

    def __init__(self, options: UnsecuredValidatorOptions, wall_clock_ms: Callable[[], int]):
        self._options = options
        self._wall_clock_ms = wall_clock_ms
        self.username: str | None = None
        self.complete = False
        self.token: UnsecuredJwt | None = None
        self.failure_reason: str | None = None  # why the token was refused, for the broker's log
        self.extensions: dict[str, str] = {}
        self._error: str | None = None

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the token expires (epoch ms): a session must not outlive it (KIP-368)."""
        return None if self.token is None else self.token.lifetime_ms

    def step(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Unexpected OAUTHBEARER message after the exchange ended")
        if self._error is not None:  # the client's ^A (or anything else) after our error status
            raise SaslAuthenticationFailed(self._error)
        try:
            message = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER client first message") from None
        m = _CLIENT_FIRST.fullmatch(message)
        if m is None:
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER client first message")
        pairs = {}
        for pair in m.group("pairs").split(_CTRL_A)[:-1]:
            key, value = pair.split("=", 1)
            pairs[key] = value
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER client first message: 'auth' not specified")
        a = _AUTH.fullmatch(auth)
        if a is None:
            raise SaslAuthenticationFailed("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if a.group("scheme").lower() != "bearer":
            raise SaslAuthenticationFailed(f"Invalid scheme in OAUTHBEARER client first message: {a.group('scheme')}")
        self.extensions = pairs  # the unsecured validator accepts every extension, as Kafka's does
        try:
            jwt = validate_unsecured_token(a.group("token"), self._options, self._wall_clock_ms())
        except OAuthBearerInvalidToken as e:
            self.failure_reason = str(e)
            status = {"status": "insufficient_scope" if e.scope is not None else "invalid_token"}
            if e.scope is not None:
                status["scope"] = e.scope
            # Kafka's layout exactly ({"status":"...", "scope":"..."}), so clients log the same text.
            self._error = "{" + ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in status.items()) + "}"
            return self._error.encode("utf-8")
        authzid = m.group("authzid")
        if authzid and _unescape_name(authzid) != jwt.principal_name:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({_unescape_name(authzid)}) that is "
                f"different from the token's principal name ({jwt.principal_name})")
        self.token = jwt
        self.username = jwt.principal_name
        self.complete = True
        return b""


_LOGIN_PREFIX = "unsecuredLogin"


@dataclass(frozen=True, slots=True)
class UnsecuredLoginOptions:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: what a node (or Java client) logging in with
    OAUTHBEARER puts in its own unsecured token, from the JAAS options unsecuredLoginStringClaim_<name>,
    unsecuredLoginNumberClaim_<name>, unsecuredLoginListClaim_<name> (the value's first character is the
    list's separator), unsecuredLoginExtension_<name>, unsecuredLoginPrincipalClaimName (sub) and
    unsecuredLoginLifetimeSeconds (3600). `token(now_ms)` adds iat and exp."""

    claims: tuple[tuple[str, object], ...]
    principal_claim_name: str = "sub"
    lifetime_s: float = 3600
    extensions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_jaas(cls, options: dict[str, str]) -> "UnsecuredLoginOptions":
        """Raises ValueError naming the option for a setting Kafka would refuse."""
        claims: dict[str, object] = {}
        extensions: dict[str, str] = {}
        for key, value in options.items():
            kind, _, name = key.partition("_")
            if not kind.startswith(_LOGIN_PREFIX) or not name:
                continue
            if name in ("iat", "exp") and kind != f"{_LOGIN_PREFIX}Extension":
                raise ValueError(f"{key}: the {name} claim is set by the login itself")
            if kind == f"{_LOGIN_PREFIX}StringClaim":
                claims[name] = value
            elif kind == f"{_LOGIN_PREFIX}NumberClaim":
                try:
                    claims[name] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
                except ValueError:
                    raise ValueError(f"{key}: not a number: {value!r}") from None
            elif kind == f"{_LOGIN_PREFIX}ListClaim":
                claims[name] = [item for item in value[1:].split(value[0])] if value else []
            elif kind == f"{_LOGIN_PREFIX}Extension":
                extensions[name] = value
        principal_claim = options.get(f"{_LOGIN_PREFIX}PrincipalClaimName", "").strip() or "sub"
        principal = claims.get(principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise ValueError(f"{_LOGIN_PREFIX}StringClaim_{principal_claim} is required: the principal name")
        lifetime_text = options.get(f"{_LOGIN_PREFIX}LifetimeSeconds", "").strip() or "3600"
        try:
            lifetime_s = float(lifetime_text)
        except ValueError:
            raise ValueError(f"{_LOGIN_PREFIX}LifetimeSeconds: not a number: {lifetime_text!r}") from None
        if lifetime_s <= 0:
            raise ValueError(f"{_LOGIN_PREFIX}LifetimeSeconds must be positive: {lifetime_text}")
        if lifetime_s.is_integer():
            lifetime_s = int(lifetime_s)
        return cls(tuple(claims.items()), principal_claim, lifetime_s, tuple(extensions.items()))

    @property
    def principal_name(self) -> str:
        return str(dict(self.claims)[self.principal_claim_name])  # (a str: checked when the login was made)

    def token(self, now_ms: int) -> str:
        # iat in whole seconds, rounded down: never "issued in the future" to a broker without clock skew.
        iat_s = now_ms // 1000
        return unsecured_jwt({**dict(self.claims), "iat": iat_s, "exp": iat_s + self.lifetime_s})


def unsecured_jwt(claims: dict) -> str:
    """An unsecured JWS (alg "none") carrying `claims`: what Kafka's OAuthBearerUnsecuredLoginCallbackHandler
    and librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` make."""
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode("utf-8")).rstrip(b"=").decode("ascii")
    return f"{part({'alg': 'none'})}.{part(claims)}."


def oauthbearer_client_first(token: str, authzid: str = "", extensions: dict[str, str] | None = None) -> bytes:
    """The client's message: `n,[a=authzid],^Aauth=Bearer <token>[^Akey=value...]^A^A`."""
    pairs = "".join(f"{_CTRL_A}{k}={v}" for k, v in (extensions or {}).items())
    gs2 = f"n,a={_escape_name(authzid)}," if authzid else "n,,"
    return f"{gs2}{_CTRL_A}auth=Bearer {token}{pairs}{_CTRL_A}{_CTRL_A}".encode("utf-8")
