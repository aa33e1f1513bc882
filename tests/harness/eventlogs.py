"""Reading a real broker's log lines back as events: JSON lines (`log.format=json`) and structlog's console
lines (the default), each as {"event", "level", "logger", field: value}, and a bounded wait for an event."""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Callable, Iterable

# 2026-11-27T18:19:43.846894Z [info     ] broker registered   [odradek.controller] broker=1 listeners=['P://h:1']
_CONSOLE = re.compile(r"^(?P<timestamp>\S+) \[(?P<level>\w+)\s*\] (?P<event>.*?)\s+\[(?P<logger>[\w.]+)\](?P<rest>.*)$")
_PAIR = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\]]*\]|\S+)")


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_console(line: str) -> dict | None:
    """A console line as an event dict (values read back as Python literals where they are), or None for a
    line that is not a structlog line (the daemon's "listening on" line, a traceback)."""
    m = _CONSOLE.match(line.rstrip("\n"))
    if m is None:
        return None
    event = {"timestamp": m["timestamp"], "level": m["level"], "event": m["event"], "logger": m["logger"]}
    for key, value in _PAIR.findall(m["rest"]):
        event[key] = _value(value)
    return event


def parse_json_lines(lines: Iterable[str]) -> list[dict]:
    """Every line as a JSON object; a line that is not one fails the caller's assertion with the line."""
    events = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as e:
            raise AssertionError(f"not a JSON line: {line!r} ({e})") from None
        assert isinstance(event, dict), line
        events.append(event)
    return events


def matching(events: Iterable[dict], name: str, **fields) -> list[dict]:
    return [e for e in events if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())]


def wait_for(read: Callable[[], list[dict]], name: str, *, timeout_s: float = 60.0, count: int = 1,
             what: Callable[[], str] = lambda: "", **fields) -> list[dict]:
    """Poll `read()` until `count` events named `name` with `fields` are there (a bounded wait, never a
    timed assertion); return them."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = matching(read(), name, **fields)
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {count} {name!r} events with {fields} within {timeout_s}s; found {found}\n{what()}")
        time.sleep(0.2)
