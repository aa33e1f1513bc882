"""Injected I/O errors: a test's way to make one log directory's disk fail under a running broker.

Theory of operation
-------------------
A failing disk is hard to make on demand (a full one is easy: a small tmpfs), so the tests that prove a
broker survives an I/O error on one log directory arm this shim instead: `arm(directory, after_bytes)`
makes every segment append under `directory` raise `OSError(EIO)` once `after_bytes` more bytes have been
appended there, as a disk that dies mid-run would. Nothing else is faked: the error takes the same road as
a real one (segment.append truncates what it may have half written and re-raises; the replica manager,
the follower fetcher or the replica mover hands the directory to the log directories, which take it
offline). The broker arms it only from the environment variable `ODRADEK_TEST_FAIL_WRITES`
(`<directory>:<bytes>[,...]`, read once at start, broker/components.py), which no deployment sets.

The hot path pays one falsy check of `ARMED` per segment append when nothing is armed.
"""

from __future__ import annotations

import errno
import os

ARMED: dict[str, int] = {}  # directory (absolute, no trailing separator) -> bytes still allowed


def arm(directory: str, after_bytes: int = 0) -> None:
    ARMED[os.path.abspath(directory)] = max(0, after_bytes)


def disarm() -> None:
    ARMED.clear()


def parse(spec: str) -> dict[str, int]:
    """`<directory>:<bytes>[,<directory>:<bytes>...]` (bytes optional: 0) as {directory: bytes}; a
    malformed item raises ValueError naming it."""
    out: dict[str, int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        path, sep, count = item.rpartition(":")
        if not sep or not count.isdigit():
            path, count = item, "0"
        if not path:
            raise ValueError(f"{item!r}: expected <directory>:<bytes>")
        out[os.path.abspath(path)] = int(count)
    return out


def check(path: str, nbytes: int) -> None:
    """Raise OSError(EIO) if `path` is under an armed directory whose allowance `nbytes` exceeds."""
    for directory, left in ARMED.items():
        if path.startswith(directory + os.sep):
            if nbytes > left:
                ARMED[directory] = 0
                raise OSError(errno.EIO, "Input/output error (injected)", path)
            ARMED[directory] = left - nbytes
            return
