"""The data source's own error, in a module of its own: options.py and offsets.py both raise it."""

from __future__ import annotations

__all__ = ["OptionError"]


class OptionError(ValueError):
    """An option of the data source is missing, malformed or not allowed here."""
