"""A simulated crash: a write that raises after a given number of calls, to test what recovery finds."""

from __future__ import annotations

import os


class Crash(Exception):
    pass


def crash_after(monkeypatch, calls: int):
    """Make the `calls`-th os.replace/os.unlink raise, and every later one (the process is gone)."""
    state = {"n": 0, "crashed": False}

    def guard(real):
        def call(*args, **kwargs):
            if state["crashed"]:
                raise Crash()
            state["n"] += 1
            if state["n"] == calls:
                state["crashed"] = True
                raise Crash()
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(os, "replace", guard(os.replace))
    monkeypatch.setattr(os, "unlink", guard(os.unlink))
    return state
