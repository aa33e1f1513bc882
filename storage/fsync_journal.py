"""A test hook that makes a power loss reproducible: what was fsync'd survives, the rest of a log does not.

A process killed with SIGKILL loses nothing it wrote: the page cache belongs to the kernel, and the next
process reads every byte. A machine losing power loses what no fsync (or fdatasync) had pushed to the disk.
To test what the cluster does then (KIP-966's unclean-shutdown rules, the durability promises in the
README), a broker process started with `ODRADEK_TEST_FSYNC_JOURNAL=<dir>` (honoured only under pytest,
broker/daemon.py) calls `install(dir)`: every `os.fsync` and `os.fdatasync` of a regular file then appends
the file's path and its size at that moment to `<dir>/fsync-<pid>.journal` (one `os.write` on an O_APPEND
descriptor: it survives the process being killed). After killing the process, the test calls
`drop_unflushed(dir, root)`, which cuts every segment file (`*.log`) under `root` back to the size its last
fsync saw (a segment never fsync'd loses everything), as the disk would hold it after the power came back.

Only segment files are cut: they are where unflushed records live. Checkpoints, indexes and metadata are
written by replacing whole files after an fsync, or rebuilt by recovery, and are left as they are; a file
truncated (a follower's truncation) after its last fsync keeps the smaller of the two sizes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

__all__ = ["drop_unflushed", "install"]

_installed: list[str] = []


def install(journal_dir: str) -> None:
    """Record every fsync/fdatasync of this process in `journal_dir` (see the module doc). Idempotent."""
    if _installed:
        return
    os.makedirs(journal_dir, exist_ok=True)
    journal = os.open(
        os.path.join(journal_dir, f"fsync-{os.getpid()}.journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
    )
    _installed.append(journal_dir)

    def recording(real: Callable[[Any], None]) -> Callable[[Any], None]:
        def call(fd: Any) -> None:  # an int or an object with fileno(), as os.fsync takes
            real(fd)
            if not isinstance(fd, int):
                fd = fd.fileno()
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    path = os.readlink(f"/proc/self/fd/{fd}")
                    os.write(journal, f"{st.st_size} {path}\n".encode())
            except OSError:
                pass  # a descriptor closed under us: nothing to record

        return call

    os.fsync = recording(os.fsync)  # type: ignore[assignment]  # (the hook replaces them on purpose)
    os.fdatasync = recording(os.fdatasync)  # type: ignore[assignment]


def synced_sizes(journal_dir: str) -> dict[str, int]:
    """Every journaled file and the size its last fsync saw (the journals of every process, in order)."""
    sizes: dict[str, int] = {}
    if not os.path.isdir(journal_dir):
        return sizes
    entries = sorted(os.scandir(journal_dir), key=lambda e: e.stat().st_mtime_ns)
    for entry in entries:
        if not entry.name.endswith(".journal"):
            continue
        with open(entry.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                size, _, path = line.rstrip("\n").partition(" ")
                if path and size.isdigit():
                    sizes[path] = int(size)
    return sizes


def drop_unflushed(journal_dir: str, root: str) -> dict[str, int]:
    """Cut every `*.log` under `root` back to its last fsync'd size; answers path -> bytes dropped (only the
    files that lost something). Call it only while no process has the files open (after a kill)."""
    sizes = synced_sizes(journal_dir)
    dropped: dict[str, int] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".log"):
                continue
            path = os.path.abspath(os.path.join(directory, name))
            size = os.path.getsize(path)
            keep = min(size, sizes.get(path, 0))
            if keep < size:
                os.truncate(path, keep)
                dropped[path] = size - keep
    return dropped
