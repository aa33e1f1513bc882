"""One TCP connection to one broker, on asyncio streams around the sans-I/O `protocol.ClientConnection`.

Theory of operation
-------------------
`BrokerConnection.connect()` opens the socket, starts a reader task and negotiates versions: it sends
ApiVersions at our highest version; a broker that does not know that version answers with a v0 body
carrying UNSUPPORTED_VERSION and its own range (KIP-511), and we ask again at the highest version both
sides know. From then on `version_for(api_key)` is the highest version in both our range and the
broker's; our range is the protocol layer's, capped in `CLIENT_MAX_VERSIONS` where the client code
only speaks the older shape (topic names rather than topic ids).

`send()` frames a request and writes it at once (no await between numbering and writing, so the
requests of concurrent callers reach the socket in correlation order) and awaits its response future.
Kafka answers in request order on a connection, so the reader pops futures in order. A request that
times out leaves the stream in an unknown state: the connection is closed, which fails every request in
flight with `KafkaConnectionError` (retriable), as the Java client does.

Security (`ClientSecurity`, from the config's librdkafka-named settings): TLS wraps the stream from the
start; SASL runs after ApiVersions, as SaslHandshake v1 then SaslAuthenticate rounds, with the mechanisms
of protocol.sasl. A failure is `AuthenticationError`, which is not retried. When the broker gives the
session a lifetime (KIP-368), the connection reports itself unusable shortly before it ends, so the
client opens (and authenticates) a new one rather than re-authenticating this one mid-stream.
"""

from __future__ import annotations

import asyncio
import collections
import os
import secrets
import socket
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from odradek.protocol.connection import ClientConnection
from odradek.protocol.errors import ErrorCode, ProtocolError
from odradek.protocol.messages import REQUESTS
from odradek.protocol.sasl import (
    OAUTHBEARER, PLAIN, SaslAuthenticationFailed, ScramClient, ScramMechanism, oauthbearer_client_first, plain_token,
    unsecured_jwt,
)

from .errors import AuthenticationError, ClientClosedError, KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass
class ClientSecurity:
    """How to secure connections: a TLS context (None for PLAINTEXT/SASL_PLAINTEXT) and SASL credentials
    (mechanism None for PLAINTEXT/SSL)."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)
    check_hostname: bool = True
    oauth_token: Callable[[], tuple[str, dict[str, str]]] | None = field(default=None, repr=False)  # OAUTHBEARER

    @classmethod
    def from_config(cls, config) -> "ClientSecurity | None":
        protocol = config.security_protocol
        if protocol == "PLAINTEXT":
            return None
        security = cls()
        if protocol in ("SSL", "SASL_SSL"):
            ctx = ssl.create_default_context(cafile=config.ssl_ca_location)
            security.check_hostname = config.ssl_endpoint_identification_algorithm == "https"
            ctx.check_hostname = security.check_hostname
            if config.ssl_certificate_location:
                try:
                    ctx.load_cert_chain(config.ssl_certificate_location, config.ssl_key_location, config.ssl_key_password)
                except (ssl.SSLError, OSError) as e:
                    raise AuthenticationError(f"cannot load ssl.certificate.location/ssl.key.location: {e}") from None
            elif config.ssl_keystore_location:
                load_pkcs12_keystore(ctx, config.ssl_keystore_location, config.ssl_keystore_password)
            elif getattr(config, "ssl_certificate_pem", None):
                load_pem_in_memory(ctx, config.ssl_certificate_pem, config.ssl_key_pem, config.ssl_key_password)
            security.ssl_context = ctx
        if protocol.startswith("SASL_"):
            security.mechanism = config.sasl_mechanism
            security.username, security.password = config.sasl_username or "", config.sasl_password or ""
            if security.mechanism == OAUTHBEARER:
                security.oauth_token = lambda: oauthbearer_token(config)
        return security


def load_pkcs12_keystore(ctx: ssl.SSLContext, location: str, password: str | None) -> None:
    """A PKCS12 key store into `ctx`. `load_cert_chain` reads files only: the key goes through one, encrypted
    under a random one-time password held only here, in a fresh 0700 directory, removed once read (as the
    broker does, broker/security.py)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        with open(location, "rb") as f:
            data = f.read()
        if data[:4] in (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce"):
            raise AuthenticationError(f"{location} is a JKS key store: convert it with `keytool -importkeystore -srckeystore "
                                      f"{location} -destkeystore client.p12 -deststoretype PKCS12`")
        store = pkcs12.load_pkcs12(data, password.encode("utf-8") if password else None)
    except OSError as e:
        raise AuthenticationError(f"cannot read ssl.keystore.location {location}: {e.strerror}") from None
    except (ValueError, TypeError) as e:
        raise AuthenticationError(f"cannot load the PKCS12 key store {location}: wrong ssl.keystore.password or not "
                                  f"a PKCS12 file ({e})") from None
    if store.key is None or store.cert is None:
        raise AuthenticationError(f"the PKCS12 key store {location} holds no private key with its certificate")
    one_time = secrets.token_bytes(32)
    pem = store.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(one_time))
    pem += b"".join(c.certificate.public_bytes(serialization.Encoding.PEM) for c in (store.cert, *store.additional_certs))
    directory = tempfile.mkdtemp(prefix="odradek-key-")
    path = os.path.join(directory, "key.pem")
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=one_time)
    except ssl.SSLError as e:
        raise AuthenticationError(f"cannot use the PKCS12 key store {location}: {e}") from None
    finally:
        try:
            os.unlink(path)
        finally:
            os.rmdir(directory)


def load_pem_in_memory(ctx: ssl.SSLContext, certificate_pem: str, key_pem: str, password: str | None) -> None:
    """A client certificate (chain) and private key given as PEM text into `ctx`, without a file on disk.

    `load_cert_chain` reads paths only, so the two PEMs are written to an anonymous memory file
    (`memfd_create`: RAM, no name in any file system, gone when closed) and read back through
    /proc/self/fd; the descriptor is closed before this returns. Where there is no memfd_create (not Linux),
    this refuses rather than put a private key in a file."""
    if not hasattr(os, "memfd_create"):
        raise AuthenticationError("ssl.certificate.pem needs memfd_create (Linux): give ssl.certificate.location")
    if "PRIVATE KEY-----" not in key_pem:
        raise AuthenticationError("ssl.key.pem holds no PEM private key (-----BEGIN ... PRIVATE KEY-----)")
    if "-----BEGIN CERTIFICATE-----" not in certificate_pem:
        raise AuthenticationError("ssl.certificate.pem holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    data = (certificate_pem.strip() + "\n" + key_pem.strip() + "\n").encode("utf-8")
    fd = os.memfd_create("odradek-client-key", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        # an encrypted key without a password gets "" (never OpenSSL's prompt on the terminal)
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=password or (lambda: ""))
    except ssl.SSLError as e:
        reason = str(e.reason or e)
        encrypted = "ENCRYPTED" in key_pem
        hint = (" (the private key is not the certificate's)" if "MISMATCH" in reason.upper() else
                " (the key is encrypted: a wrong or missing key password)" if encrypted else
                " (not a PEM certificate and key OpenSSL can read)")
        raise AuthenticationError(f"cannot use the client certificate and key: {reason}{hint}") from None
    finally:
        os.close(fd)


def oauthbearer_token(config) -> tuple[str, dict[str, str]]:
    """The token and SASL extensions for one OAUTHBEARER login: oauth_cb's, or an unsecured JWT made now
    from sasl.oauthbearer.config as librdkafka makes it (iat now, exp lifeSeconds later)."""
    from .config import unsecured_jwt_settings

    if config.oauth_cb is not None:
        try:
            result = config.oauth_cb(config.sasl_oauthbearer_config)
        except Exception as e:  # the user's callback: its failure is this login's
            raise AuthenticationError(f"oauth_cb failed: {e!r}") from None
        extensions = result[3] if len(result) > 3 and result[3] else {}
        return str(result[0]), {str(k): str(v) for k, v in dict(extensions).items()}
    settings = unsecured_jwt_settings(config.sasl_oauthbearer_config)
    # Whole seconds, rounded down: an iat a fraction of a millisecond ahead of the broker's clock (rounding
    # up, or float error in iat * 1000) is "issued in the future" to a broker allowing no clock skew.
    now = int(time.time())
    claims: dict[str, Any] = {settings["principalClaimName"]: settings["principal"], "iat": now,
                              "exp": now + settings["lifeSeconds"]}
    if settings["scope"]:
        claims[settings["scopeClaimName"]] = settings["scope"]
    return unsecured_jwt(claims), settings["extensions"]

API_VERSIONS = 18


async def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether `host:port` completes a TLS handshake (certificates unchecked: this only asks what the listener
    speaks, after it closed a plaintext connection unanswered, as a TLS listener does)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), min(timeout_s, 5.0))
    except ssl.SSLError as e:  # a TLS alert is TLS too (e.g. the listener wants a client certificate)
        return "alert" in str(e).lower()
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ssl.SSLError):
        pass
    return True

# Highest version the client code speaks where it is below the protocol layer's: these versions switch
# from topic names to topic ids, which this client does not use, or to Transactions V2 (KIP-890 part 2: an
# epoch bump per transaction, partitions added by their leaders), which it does not speak either: it adds
# its partitions itself and keeps its epoch, as the Java client does with transaction.version 1.
CLIENT_MAX_VERSIONS = {
    0: 11,  # Produce v12: Transactions V2 (the leader adds the partition); v13: topic ids
    1: 12,  # Fetch v13: topic ids
    26: 4,  # EndTxn v5: Transactions V2 (the epoch bump)
    28: 4,  # TxnOffsetCommit v5: Transactions V2 (the group coordinator adds the offsets partition)
    8: 9,  # OffsetCommit v10: topic ids
    9: 9,  # OffsetFetch v10: topic ids
}

CLIENT_SOFTWARE_NAME = "odradek-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"


def client_range(api_key: int) -> tuple[int, int]:
    low, high = REQUESTS[api_key].VALID_VERSIONS
    return low, min(high, CLIENT_MAX_VERSIONS.get(api_key, high))


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int,
        client_id: str | None = "odradek",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
        security: ClientSecurity | None = None,
    ):
        self.security = security
        self.session_expires_at: float | None = None  # time.monotonic() after which a new connection is due
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._conn = ClientConnection(client_id=client_id)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task | None = None
        self._pending: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self._closed = False
        self._close_reason: BaseException | None = None
        self._answers = 0  # responses read on this connection
        self._negotiated_answers: int | None = None  # responses read by the end of connect()

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        if self.session_expires_at is not None and time.monotonic() > self.session_expires_at:
            return False  # the SASL session is about to end (KIP-368): the client makes a new connection
        return self._writer is not None and not self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self) -> "BrokerConnection":
        ssl_context = self.security.ssl_context if self.security is not None else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=ssl_context,
                                        server_hostname=self.host if ssl_context is not None else None),
                self.connect_timeout_ms / 1000
            )
            self._reader, self._writer = reader, writer
        except asyncio.TimeoutError:
            raise KafkaConnectionError(f"connecting to {self.address} timed out") from None
        except (ConnectionResetError, ssl.SSLEOFError) as e:
            # The connection ended before the handshake did, with no TLS alert: the broker went away (or a
            # proxy in front of it could not reach it). A refused certificate is an alert (below) or, under
            # TLS 1.3, an end after the handshake (after _negotiate). Retried, as Kafka's clients retry a
            # disconnect.
            what = "during the TLS handshake" if ssl_context is not None else "connecting"
            raise KafkaConnectionError(f"{self.address} closed the connection {what}: {e.strerror or str(e) or 'reset'}") from None
        except ssl.SSLError as e:
            raise AuthenticationError(f"TLS handshake with {self.address} failed: {e.reason or e}") from None
        except ConnectionRefusedError as e:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {e.strerror or e}", refused=True) from None
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {self.address}: {e.strerror or e}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            try:
                await self._negotiate()
            except KafkaConnectionError as e:
                if ssl_context is None:
                    if self._answers == 0 and await _speaks_tls(self.host, self.port, self.connect_timeout_ms / 1000):
                        raise AuthenticationError(
                            f"{self.address} is a TLS listener: it closed this plaintext connection unanswered; set "
                            "security.protocol=SSL (or SASL_SSL) and ssl.ca.location") from None
                    raise
                # Under TLS 1.3 a broker checks the client's certificate after the client's handshake is done:
                # one it does not trust ends the connection before the first answer.
                raise AuthenticationError(
                    f"{self.address} ended the TLS connection before answering ({e}): it may not trust this "
                    "client's certificate (ssl.certificate.location), or require one") from None
            security = self.security
            if security is not None and security.mechanism is not None:
                await self._authenticate(security, security.mechanism)
            self._negotiated_answers = self._answers
        except BaseException:
            await self.close()
            raise
        return self

    async def _sasl_mechanisms(self) -> list[str]:
        """The SASL mechanisms the listener at our address asks for (a SaslHandshake on a new connection),
        or [] if it does not use SASL (a plain listener answers ILLEGAL_SASL_STATE) or cannot be asked."""
        probe = BrokerConnection(self.host, self.port, node_id=self.node_id, client_id=self.client_id,
                                 request_timeout_ms=min(self.request_timeout_ms, 5_000),
                                 connect_timeout_ms=min(self.connect_timeout_ms, 5_000), security=self.security)
        try:
            await probe.connect()
            answer = await probe.send(REQUESTS[SASL_HANDSHAKE](mechanism=PLAIN), version=1)
        except Exception:  # noqa: BLE001 - a probe that fails tells nothing: the original error stands
            return []
        finally:
            await probe.close()
        if answer.error_code in (0, ErrorCode.UNSUPPORTED_SASL_MECHANISM):
            return list(answer.mechanisms)
        return []

    async def _authenticate(self, security: ClientSecurity, mechanism: str) -> None:
        """SaslHandshake v1, then SaslAuthenticate rounds until the mechanism is done."""
        handshake = await self.send(REQUESTS[SASL_HANDSHAKE](mechanism=mechanism), version=1)
        if handshake.error_code:
            raise AuthenticationError(
                f"{self.address} refused SASL mechanism {mechanism} ({ErrorCode.for_code(handshake.error_code).name}; "
                f"enabled: {', '.join(handshake.mechanisms) or 'none'})"
            )
        version = self.version_for(SASL_AUTHENTICATE, max_version=2)

        async def round_trip(token: bytes):
            response = await self.send(REQUESTS[SASL_AUTHENTICATE](auth_bytes=token), version=version)
            if response.error_code:
                raise AuthenticationError(
                    f"SASL authentication with {self.address} failed: {ErrorCode.for_code(response.error_code).name}"
                    + (f" ({response.error_message})" if response.error_message else "")
                )
            return response

        try:
            if mechanism == PLAIN:
                response = await round_trip(plain_token(security.username, security.password))
            elif mechanism == OAUTHBEARER:
                assert security.oauth_token is not None  # from_config gives OAUTHBEARER its token source
                token, extensions = security.oauth_token()
                response = await round_trip(oauthbearer_client_first(token, extensions=extensions))
                if response.auth_bytes:  # the broker's JSON error status: answer ^A (RFC 7628), which it refuses
                    status = bytes(response.auth_bytes).decode("utf-8", "replace")
                    try:
                        await round_trip(b"\x01")
                    except AuthenticationError:
                        pass
                    raise AuthenticationError(f"SASL authentication with {self.address} failed: the broker refused "
                                              f"the OAUTHBEARER token: {status}")
            else:
                client = ScramClient(ScramMechanism.from_name(mechanism), security.username, security.password,
                                     secrets.token_urlsafe(18))
                first = await round_trip(client.first())
                response = await round_trip(client.final(bytes(first.auth_bytes)))
                client.verify(bytes(response.auth_bytes))
        except SaslAuthenticationFailed as e:
            raise AuthenticationError(f"SASL authentication with {self.address} failed: {e}") from None
        lifetime_ms = getattr(response, "session_lifetime_ms", 0) or 0
        if lifetime_ms > 0:
            # As the Java client: re-authenticate between 85% and 95% of the lifetime; here by reconnecting.
            self.session_expires_at = time.monotonic() + lifetime_ms / 1000 * (0.85 + 0.1 * secrets.randbelow(1000) / 1000)

    async def _negotiate(self) -> None:
        cls = REQUESTS[API_VERSIONS]
        low, version = client_range(API_VERSIONS)
        request = cls(client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION)
        response = await self.send(request, version=version)
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            their_low, their_high = theirs.get(API_VERSIONS, (0, 0))
            version = min(version, their_high)
            if version < max(low, their_low):
                raise UnsupportedVersionError(f"{self.address} speaks no ApiVersions version we know")
            response = await self.send(request, version=version)
        if response.error_code:
            raise KafkaConnectionError(
                f"{self.address} refused ApiVersions: {ErrorCode.for_code(response.error_code).name}"
            )
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def supports(self, api_key: int) -> bool:
        try:
            self.version_for(api_key)
        except UnsupportedVersionError:
            return False
        return True

    def version_for(self, api_key: int, max_version: int | None = None, min_version: int | None = None) -> int:
        """The highest version of `api_key` both sides speak (optionally within [min_version, max_version])."""
        low, high = client_range(api_key)
        if max_version is not None:
            high = min(high, max_version)
        if min_version is not None:
            low = max(low, min_version)
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersionError(f"broker {self.address} does not serve {REQUESTS[api_key].API_NAME}")
        version = min(high, theirs[1])
        if version < max(low, theirs[0]):
            raise UnsupportedVersionError(
                f"no common version of {REQUESTS[api_key].API_NAME}: client {low}-{high}, "
                f"broker {theirs[0]}-{theirs[1]}"
            )
        return version

    async def send(
        self,
        request: Any,
        *,
        version: int | None = None,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send `request` and return its decoded response (None when no response is expected)."""
        if self._closed or self._writer is None:
            if isinstance(self._close_reason, KafkaConnectionError):
                raise KafkaConnectionError(f"connection to {self.address} is closed: {self._close_reason}")
            raise ClientClosedError(f"connection to {self.address} is closed")
        if version is None:
            version = self.version_for(request.API_KEY)
        correlation_id, data = self._conn.send_request(request, version, expect_response=expect_response)
        future: asyncio.Future | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending.append((correlation_id, future))
        self._writer.write(data)
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as e:
            self._fail(KafkaConnectionError(f"write to {self.address} failed: {e}"))
        if future is None:
            return None
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except KafkaConnectionError:
            # Closed unanswered on the first request after ApiVersions, by a broker we did not authenticate
            # to: a SASL listener does exactly that (it serves only ApiVersions and the SASL requests before
            # authentication). Ask it, on a new connection, whether it wants SASL; if so, say that.
            if (self._negotiated_answers is not None and self._answers == self._negotiated_answers
                    and (self.security is None or self.security.mechanism is None)
                    and request.API_KEY not in (SASL_HANDSHAKE, SASL_AUTHENTICATE)):
                mechanisms = await self._sasl_mechanisms()
                if mechanisms:
                    protocol = "SASL_SSL" if self.security is not None and self.security.ssl_context else "SASL_PLAINTEXT"
                    raise AuthenticationError(
                        f"{self.address} is a SASL listener (mechanisms {', '.join(mechanisms)}): it closed the "
                        f"unauthenticated connection; set security.protocol={protocol}, sasl.mechanism, "
                        "sasl.username and sasl.password") from None
            raise
        except asyncio.TimeoutError:
            self._fail(KafkaConnectionError(f"request to {self.address} timed out"))
            raise KafkaTimeoutError(
                f"{type(request).__name__} to {self.address} got no response within {timeout:g} s"
            ) from None

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        error: BaseException
        try:
            while True:
                data = await reader.read(1 << 18)
                if not data:
                    error = KafkaConnectionError(f"{self.address} closed the connection")
                    break
                for event in self._conn.receive_data(data):
                    self._answers += 1
                    while self._pending:
                        correlation_id, future = self._pending.popleft()
                        if correlation_id == event.correlation_id:
                            if not future.done():
                                future.set_result(event.response)
                            break
        except ProtocolError as e:
            error = KafkaConnectionError(f"bad response from {self.address}: {e}")
        except (OSError, asyncio.IncompleteReadError) as e:
            error = KafkaConnectionError(f"connection to {self.address} failed: {e}")
        except Exception as e:  # never leave requests waiting on a reader that died
            error = KafkaConnectionError(f"reading from {self.address} failed: {type(e).__name__}: {e}")
        except asyncio.CancelledError:
            error = ClientClosedError(f"connection to {self.address} closed")
            self._fail(error, cancel_reader=False)
            raise
        self._fail(error, cancel_reader=False)

    def _fail(self, error: BaseException, *, cancel_reader: bool = True) -> None:
        if not self._closed:
            self._closed = True
            self._close_reason = error
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(error)
                future.exception()  # mark retrieved: a shielded waiter may have gone
        if self._writer is not None:
            self._writer.close()
        if cancel_reader and self._read_task is not None and not self._read_task.done():
            self._read_task.cancel()

    async def close(self) -> None:
        self._fail(ClientClosedError(f"connection to {self.address} closed"))
        if self._read_task is not None:
            try:
                await self._read_task
            except BaseException:
                pass
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except (OSError, RuntimeError):
                pass
