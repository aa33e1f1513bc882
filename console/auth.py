"""Who is using the console, what they may do from a browser, and the record of what they did.

Sign-in follows the cluster's security. On a SASL listener every browser user signs in with a Kafka
principal's username and password (SCRAM-SHA-512 by default, `--sasl-mechanism`); the console opens that
user's own connections with them, so the cluster's ACLs decide every read and every change, exactly as for
the user's own clients, and the console holds no power of its own. The password is checked by the SASL
exchange itself (a refused login is the broker's answer, shown on the sign-in page) and kept only in the
session's client config, in memory, until sign-out or SESSION_IDLE_S of inactivity.

On an SSL listener that requires client certificates, `--auth mtls` signs each user in with their own
certificate and private key (PEM files chosen on the sign-in page, and the key's password if it is
encrypted). The console opens that session's connections with them, so the brokers see the certificate's
subject and map it with their own ssl.principal.mapping.rules: the ACLs decide as for the user's own
clients. The sign-in form is bounded (64 KiB) so its parts never leave memory; the PEMs are kept only in the
session's client config and TLS contexts (loaded through an anonymous memory file, never a path on disk;
client/connection.py), are never logged, and go at sign-out or expiry. A key that is not the certificate's,
or a wrong key password, is refused before any connection; a certificate the brokers do not trust is refused
by their TLS handshake, and the page says so. Not automatic on SSL: an SSL listener may not ask for client
certificates at all, and then the console's own connection is what the operator wants (`--auth none`, the
default there).

On a PLAINTEXT cluster (or SSL without --auth mtls) there is no per-user principal to sign in as: the
console uses its own connections and, by
default, binds 127.0.0.1 only; binding another address without sign-in is refused at start unless the
operator says `--allow-anonymous-remote`; with sign-in, an address beyond loopback needs HTTPS
(`--certfile/--keyfile`, and the cookie is then Secure) unless `--allow-plain-http`.

Cross-site requests: every mutating request is a POST that must carry the session's CSRF token (a hidden
form field, or the X-CSRF-Token header htmx sends) and, when the browser sends an Origin, an Origin equal to
the console's own; the session cookie is HttpOnly and SameSite=Strict. `--read-only` refuses every mutation
before any of this. Each mutation is logged once on the `odradek.console.audit` logger with the principal,
the action, its target and its outcome, and kept in a ring the Audit page shows.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from odradek.client.admin import Admin
from odradek.client.config import ClientConfig

SESSION_COOKIE = "odradek_console"
SESSION_IDLE_S = 30 * 60
MAX_SESSIONS = 200
AUDIT_KEPT = 500

audit_log = logging.getLogger("odradek.console.audit")


@dataclass
class Session:
    token: str
    csrf: str
    principal: str | None = None  # None: not signed in (where sign-in is required)
    config: ClientConfig | None = None
    admin: Admin | None = None
    last_used: float = field(default_factory=time.monotonic)
    flashes: list[tuple[str, str]] = field(default_factory=list)  # outcomes of changes, shown once

    async def forget(self) -> None:
        """Close the user's connections and drop their credentials (password, or certificate and key)."""
        admin, self.admin, self.config = self.admin, None, None
        if admin is not None:
            await admin.close()

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    """Browser sessions by cookie token; expired ones close their connections."""

    def __init__(self) -> None:
        self._by_token: dict[str, Session] = {}
        self._closing: list[Session] = []  # pushed out by MAX_SESSIONS, their connections still open

    def get(self, token: str | None) -> Session | None:
        session = self._by_token.get(token or "")
        if session is None:
            return None
        if time.monotonic() - session.last_used > SESSION_IDLE_S:
            return None  # expired: `expire` closes its connections
        session.last_used = time.monotonic()
        return session

    def new(self) -> Session:
        if len(self._by_token) >= MAX_SESSIONS:  # the least recently used goes; `expire` closes its admin
            oldest = min(self._by_token.values(), key=lambda s: s.last_used)
            self._by_token.pop(oldest.token, None)
            if oldest.admin is not None:
                self._closing.append(oldest)
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
        self._by_token[session.token] = session
        return session

    def drop(self, session: Session) -> None:
        self._by_token.pop(session.token, None)

    async def expire(self) -> None:
        """Close the admin clients of sessions idle for longer than SESSION_IDLE_S (also dropped ones)."""
        now = time.monotonic()
        closing, self._closing = self._closing, []
        for session in closing:
            await session.forget()
        for session in list(self._by_token.values()):
            if now - session.last_used > SESSION_IDLE_S:
                self._by_token.pop(session.token, None)
                await session.forget()

    async def close_all(self) -> None:
        for session in [*self._by_token.values(), *self._closing]:
            await session.forget()
        self._by_token.clear()


@dataclass
class AuditEntry:
    at: float
    principal: str
    action: str
    target: str
    outcome: str


class Audit:
    """Every mutation, once: the log line, the entry the Audit page lists, and the count on the console's own
    /metrics (`odradek_console_actions_total{action,outcome}`, outcome ok, failed or refused)."""

    def __init__(self) -> None:
        self.entries: deque[AuditEntry] = deque(maxlen=AUDIT_KEPT)
        self.registry = CollectorRegistry()
        self.actions = Counter("odradek_console_actions", "Changes and sign-ins asked through the console",
                               ["action", "outcome"], registry=self.registry)

    def record(self, principal: str, action: str, target: str, outcome: str, **details: Any) -> None:
        entry = AuditEntry(time.time(), principal, action, target, outcome)
        self.entries.appendleft(entry)
        self.actions.labels(action, outcome.split(":", 1)[0]).inc()
        extra = " ".join(f"{k}={v!r}" for k, v in details.items())
        audit_log.info("audit principal=%s action=%s target=%r outcome=%s%s", principal, action, target, outcome,
                       f" {extra}" if extra else "")


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def origin_ok(origin: str | None, host: str | None) -> bool:
    """A browser's Origin on a POST must be this console's own (scheme://host[:port]); absent is allowed
    (non-browser clients, and browsers that omit it on same-origin form posts), the CSRF token still holds."""
    if not origin:
        return True
    if origin == "null" or not host:
        return False
    return origin.split("://", 1)[-1] == host
