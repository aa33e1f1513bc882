"""The data source's own error and its bool option parser, in a module with no imports: options.py and
offsets.py raise the error, and the planning steps that run before any I/O (`schema()`, the choice of
reader) need both without importing the client (datasource.py says why that matters)."""

from __future__ import annotations

from typing import Any

__all__ = ["OptionError", "parse_bool"]


class OptionError(ValueError):
    """An option of the data source is missing, malformed or not allowed here."""


def parse_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false (got {value!r})")
