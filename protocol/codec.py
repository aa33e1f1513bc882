"""Turns `schema.Api` definitions into message classes and per-version codecs (filled in below)."""

from __future__ import annotations

import uuid as _uuid

from .schema import _NO_DEFAULT, F

ZERO_UUID = _uuid.UUID(int=0)

_TYPE_DEFAULTS = {
    "bool": False, "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": 0,
    "float64": 0.0, "string": "", "bytes": b"", "uuid": ZERO_UUID, "records": None,
}


def field_default(f: F):
    """The value a field has when absent from a version (Kafka's default, else the type's zero)."""
    if f.default is not _NO_DEFAULT:
        return f.default
    if f.is_array:
        return []
    if f.is_struct:
        return None  # replaced by a fresh default instance of the struct class
    return _TYPE_DEFAULTS[f.type]
