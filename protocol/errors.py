"""Errors of the protocol layer, and (below) Kafka's error codes.

Blame is explicit, as in h11: `RemoteProtocolError` means the peer sent something we cannot accept (close
the connection or answer with an error); `LocalProtocolError` means our own code misused the API (a bug).
"""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every protocol-layer error."""


class RemoteProtocolError(ProtocolError):
    """The peer sent malformed or unacceptable bytes. The connection should be closed."""


class LocalProtocolError(ProtocolError):
    """Our own code asked for something the protocol cannot express (e.g. a field absent in a version)."""


class CorruptRecordError(RemoteProtocolError):
    """A record batch failed validation (layout, magic, length or CRC): Kafka's CORRUPT_MESSAGE."""


class RecordTooLargeError(RemoteProtocolError):
    """Decompression would exceed the configured bound."""
