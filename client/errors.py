"""Exceptions raised by the bundled clients.

Every client error derives from `OdradekError`. A broker's error code becomes a `KafkaError` carrying the
`ErrorCode` member, so callers test `e.code is ErrorCode.TOPIC_ALREADY_EXISTS` or `e.retriable` rather
than parsing text. Failures that never reached a broker answer have their own classes:
`KafkaConnectionError` (a socket failed; retriable), `NoBrokersAvailable` (no bootstrap server answered),
`KafkaTimeoutError` (a deadline passed), `UnsupportedVersionError` (no version both sides speak),
`ClientClosedError` and `ConfigError`.

`retriable` follows Kafka's Java exception classes (see `protocol.errors.ErrorCode`); a
`KafkaConnectionError` and a request timeout are retriable too, because the Java client retries them.
"""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode, KafkaApiError

__all__ = [
    "ClientClosedError", "ConfigError", "ErrorCode", "KafkaConnectionError", "KafkaError", "KafkaTimeoutError",
    "NoBrokersAvailable", "OdradekError", "RecordTooLargeError", "UnsupportedVersionError", "error_for",
    "raise_for",
]


class OdradekError(Exception):
    """Base of every error the clients raise."""

    retriable: bool = False
    invalid_metadata: bool = False


class KafkaError(OdradekError, KafkaApiError):
    """A broker answered with an error code: `code` is its `ErrorCode` member, `error_code` the number (as on
    every KafkaApiError, so `protocol.errors.error_code_of` reads a client's error as it reads a layer's)."""

    def __init__(self, code: int | ErrorCode, message: str | None = None, *, context: str | None = None,
                 retriable: bool | None = None):
        self.code = ErrorCode.for_code(int(code))
        self._retriable = retriable
        self.message = message
        self.context = context
        text = self.code.name
        if context:
            text = f"{context}: {text}"
        if message:
            text = f"{text} ({message})"
        super().__init__(text)

    @property
    def error_code(self) -> int:  # type: ignore[override]
        return int(self.code)

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return bool(self.code.retriable) if self._retriable is None else self._retriable

    @property
    def invalid_metadata(self) -> bool:  # type: ignore[override]
        return bool(self.code.invalid_metadata)


class KafkaConnectionError(OdradekError):
    """A connection to a broker could not be opened, or broke while requests were in flight. `refused`: the
    address answered the connection with a reset (nothing listens there), which a bootstrap may report at
    once rather than retry (`ClientConfig.bootstrap_retry_refused`)."""

    retriable = True
    invalid_metadata = True

    def __init__(self, *args: object, refused: bool = False) -> None:
        super().__init__(*args)
        self.refused = refused


class NoBrokersAvailable(KafkaConnectionError):
    """None of the bootstrap servers (or known brokers) could be reached."""


class AuthenticationError(OdradekError):
    """The TLS handshake or the SASL authentication with a broker failed (bad credentials, an untrusted
    certificate, a mechanism the broker does not enable). Not retriable: retrying would fail the same way."""


class KafkaTimeoutError(OdradekError):
    """A request or an operation did not complete before its deadline."""

    retriable = True


class UnsupportedVersionError(OdradekError):
    """The broker and this client share no version of an API."""


class ClientClosedError(OdradekError):
    """The client was closed."""


class ConfigError(OdradekError, ValueError):
    """A configuration value is invalid."""


class RecordTooLargeError(OdradekError):
    """A record is larger than `max_request_size` or `buffer_memory` allows."""


def error_for(code: int, message: str | None = None, *, context: str | None = None) -> KafkaError:
    return KafkaError(code, message, context=context)


def raise_for(code: int, message: str | None = None, *, context: str | None = None) -> None:
    """Raise a KafkaError unless `code` is 0."""
    if code:
        raise KafkaError(code, message, context=context)
