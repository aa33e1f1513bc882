"""The server side of a SASL listener's authentication, per connection (Kafka's SaslServerAuthenticator).

    HANDSHAKE --SaslHandshake v1--> AUTHENTICATE --SaslAuthenticate*--> AUTHENTICATED
        |      --SaslHandshake v0--> RAW (tokens as bare size-prefixed frames) --> AUTHENTICATED
        +-- anything else, a mechanism not enabled, a bad token --> FAILED (the connection closes)

Before AUTHENTICATED the network (broker/network.py) answers only ApiVersions, SaslHandshake and
SaslAuthenticate, through this object, and closes the connection on any other request. After it,
a SaslHandshake starts re-authentication (KIP-368): the same mechanism, then SaslAuthenticate, and the
principal must not change. `session_expiry_ms` (when connections.max.reauth.ms is set, or the credential
expires) is when the connection must have re-authenticated; the network closes it at the first other
request after that.

No sockets, and time only from outside: `now_ms` is an argument (the network's monotonic clock, for
session expiry), nonces come from `nonce()`, and OAUTHBEARER's token times are checked against the
injected `wall_clock_ms()` (JWT `exp` and `iat` are epoch seconds; tests pass a fixed clock). The
mechanisms themselves are protocol.sasl's.

A session's lifetime (sent to the client, which re-authenticates before it ends) is
`connections.max.reauth.ms`, and for OAUTHBEARER at most what is left of the token's own lifetime, as in
Kafka's SaslServerAuthenticator: a connection does not outlive the credential that opened it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import (
    OAUTHBEARER, PLAIN, OAuthBearerServer, PlainServer, SaslAuthenticationFailed, ScramMechanism, ScramServer,
)

from .context import KafkaPrincipal
from .security import ListenerSecurity


class SaslState(Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW = "raw"  # after a v0 handshake
    AUTHENTICATED = "authenticated"
    REAUTH_AUTHENTICATE = "reauth"  # re-authenticating (KIP-368) after a handshake on a live session
    FAILED = "failed"


@dataclass(slots=True)
class AuthStep:
    """The answer to one token: the server's token, or the error (then the connection closes)."""

    token: bytes = b""
    error_code: int = 0
    error_message: str | None = None
    session_lifetime_ms: int = 0
    done: bool = False  # authentication (or re-authentication) completed with this step


log = structlog.get_logger("odradek.authenticator")


def _nonce() -> str:
    return secrets.token_urlsafe(24)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Authenticator:
    def __init__(self, security: ListenerSecurity, nonce: Callable[[], str] = _nonce,
                 wall_clock_ms: Callable[[], int] = _wall_clock_ms):
        self.security = security
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.session_expiry_ms: int | None = None
        self._nonce = nonce
        self._wall_clock_ms = wall_clock_ms
        self._server: ScramServer | PlainServer | OAuthBearerServer | None = None
        self.failure_reason: str | None = None  # a refused OAUTHBEARER token's details, for the log

    @property
    def authenticated(self) -> bool:
        return self.state in (SaslState.AUTHENTICATED, SaslState.REAUTH_AUTHENTICATE)

    def handshake(self, mechanism: str, version: int) -> tuple[int, list[str]]:
        """SaslHandshake: (error code, the enabled mechanisms). A non-zero code ends the connection."""
        enabled = list(self.security.mechanisms)
        if self.state is SaslState.AUTHENTICATED:  # KIP-368 re-authentication
            if version == 0 or mechanism != self.mechanism:
                self.state = SaslState.FAILED
                return ErrorCode.ILLEGAL_SASL_STATE if version == 0 else ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
            self._server = self._new_server(mechanism)
            self.state = SaslState.REAUTH_AUTHENTICATE
            return 0, enabled
        if self.state is not SaslState.HANDSHAKE:
            self.state = SaslState.FAILED
            return ErrorCode.ILLEGAL_SASL_STATE, enabled
        if mechanism not in enabled:
            self.state = SaslState.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = SaslState.RAW if version == 0 else SaslState.AUTHENTICATE
        return 0, enabled

    def _new_server(self, mechanism: str):
        if mechanism == PLAIN:
            return PlainServer(self.security.verify_plain)
        if mechanism == OAUTHBEARER:
            assert self.security.oauthbearer is not None  # a listener enabling OAUTHBEARER has its validator
            return OAuthBearerServer(self.security.oauthbearer, self._wall_clock_ms)
        scram = ScramMechanism.from_name(mechanism)
        return ScramServer(scram, lambda name: self.security.scram_credential(scram, name), self._nonce())

    def authenticate(self, token: bytes, now_ms: int) -> AuthStep:
        """One SaslAuthenticate token (or raw token after a v0 handshake)."""
        if self.state not in (SaslState.AUTHENTICATE, SaslState.RAW, SaslState.REAUTH_AUTHENTICATE):
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="SaslAuthenticate before a SaslHandshake")
        server = self._server
        assert server is not None  # chosen at the handshake, with the state checked above
        try:
            answer = server.step(token)
        except SaslAuthenticationFailed as e:
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e))
        if not server.complete:
            if isinstance(server, OAuthBearerServer) and server.failure_reason is not None:
                # The client is told only the JSON status (RFC 7628); the reason is for the operator.
                self.failure_reason = server.failure_reason
                log.info("OAUTHBEARER token refused", listener=self.security.name, reason=server.failure_reason)
            return AuthStep(token=answer)
        assert server.username is not None  # a completed exchange has named its user
        principal = KafkaPrincipal("User", server.username)
        if self.state is SaslState.REAUTH_AUTHENTICATE and principal != self.principal:
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                            error_message="Cannot change principals during re-authentication")
        self.principal = principal
        self.state = SaslState.AUTHENTICATED
        lifetime = self._session_lifetime_ms(server)
        self.session_expiry_ms = now_ms + lifetime if lifetime is not None else None
        return AuthStep(token=answer, session_lifetime_ms=lifetime or 0, done=True)

    def _session_lifetime_ms(self, server) -> int | None:
        """None: the session does not expire."""
        reauth_ms = self.security.reauth_ms
        expiry_ms = server.credential_expiry_ms if isinstance(server, OAuthBearerServer) else None
        if expiry_ms is None:
            return reauth_ms if reauth_ms > 0 else None
        left_ms = max(0, expiry_ms - self._wall_clock_ms())
        return min(left_ms, reauth_ms) if reauth_ms > 0 else left_ms

    def expired(self, now_ms: int) -> bool:
        return self.session_expiry_ms is not None and now_ms > self.session_expiry_ms

    def session_admits(self, now_ms: int) -> bool:
        """Whether the session serves a request now (other than SaslHandshake/SaslAuthenticate): it is
        authenticated, not being renewed (KIP-368: a re-authentication begun and unfinished serves nothing),
        and not past its lifetime."""
        return self.state is SaslState.AUTHENTICATED and not self.expired(now_ms)
