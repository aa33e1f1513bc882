"""The server side of a SASL listener's authentication, per connection (Kafka's SaslServerAuthenticator).

    HANDSHAKE --SaslHandshake v1--> AUTHENTICATE --SaslAuthenticate*--> AUTHENTICATED
        |      --SaslHandshake v0--> RAW (tokens as bare size-prefixed frames) --> AUTHENTICATED
        +-- anything else, a mechanism not enabled, a bad token --> FAILED (the connection closes)

Before AUTHENTICATED the network (broker/network.py) answers only ApiVersions, SaslHandshake and
SaslAuthenticate, through this object, and closes the connection on any other request. After it,
a SaslHandshake starts re-authentication (KIP-368): the same mechanism, then SaslAuthenticate, and the
principal must not change. `session_expiry_ms` (when connections.max.reauth.ms is set) is when the
connection must have re-authenticated; the network closes it at the first other request after that.

No I/O and no clock: `now_ms` is an argument, nonces come from `nonce()`. The mechanisms themselves are
protocol.sasl's.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from odradek.protocol.errors import ErrorCode
from odradek.protocol.sasl import PLAIN, PlainServer, SaslAuthenticationFailed, ScramMechanism, ScramServer

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


def _nonce() -> str:
    return secrets.token_urlsafe(24)


class Authenticator:
    def __init__(self, security: ListenerSecurity, nonce: Callable[[], str] = _nonce):
        self.security = security
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.session_expiry_ms: int | None = None
        self._nonce = nonce
        self._server: ScramServer | PlainServer | None = None

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
        scram = ScramMechanism.from_name(mechanism)
        return ScramServer(scram, lambda name: self.security.scram_credential(scram, name), self._nonce())

    def authenticate(self, token: bytes, now_ms: int) -> AuthStep:
        """One SaslAuthenticate token (or raw token after a v0 handshake)."""
        if self.state not in (SaslState.AUTHENTICATE, SaslState.RAW, SaslState.REAUTH_AUTHENTICATE):
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="SaslAuthenticate before a SaslHandshake")
        server = self._server
        try:
            answer = server.step(token)
        except SaslAuthenticationFailed as e:
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e))
        if not server.complete:
            return AuthStep(token=answer)
        principal = KafkaPrincipal("User", server.username)
        if self.state is SaslState.REAUTH_AUTHENTICATE and principal != self.principal:
            self.state = SaslState.FAILED
            return AuthStep(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                            error_message="Cannot change principals during re-authentication")
        self.principal = principal
        self.state = SaslState.AUTHENTICATED
        lifetime = self.security.reauth_ms
        self.session_expiry_ms = now_ms + lifetime if lifetime > 0 else None
        return AuthStep(token=answer, session_lifetime_ms=lifetime, done=True)

    def expired(self, now_ms: int) -> bool:
        return self.session_expiry_ms is not None and now_ms > self.session_expiry_ms
