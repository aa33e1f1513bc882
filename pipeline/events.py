"""The reference pipeline's events: a small, seeded generator of web-shop click-stream events.

An event is JSON, keyed by user id, and its record timestamp is the event time:

    {"event_id": "7-1234", "ts": 1718000000000, "user": "u17", "type": "purchase", "page": "/p/42",
     "amount": 19.99, "v": 1}

Two imperfections are generated on purpose, so that the pipeline has something to be wrong about:

* a few events are not JSON at all (`bad_ratio`): the raw topic keeps them unmodified; the transform
  drops them;
* some purchases come from a "legacy client" that sends the amount as text with a currency,
  `"amount": "19.99 EUR"` (`legacy_ratio`). Transform logic version 1 reads the amount as a number and
  so loses these amounts; version 2, the corrected logic, parses them. The replay job re-runs history
  with version 2.

`expected_aggregates()` computes in plain Python what the pipeline should produce, for the tests and
for `run all`'s summary.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator

TYPES = ("view", "click", "add_to_cart", "purchase")
TYPE_WEIGHTS = (60, 25, 10, 5)
PAGES = ("/", "/search", "/cart", "/checkout") + tuple(f"/p/{n}" for n in range(50))
SECTIONS = {"/": "home", "/search": "search", "/cart": "cart", "/checkout": "checkout"}
WINDOW_MS = 3_600_000  # aggregates per hour


@dataclass(frozen=True)
class GeneratedEvent:
    key: bytes
    value: bytes
    timestamp_ms: int


def section_of(page: str) -> str:
    return SECTIONS.get(page, "product" if page.startswith("/p/") else "other")


def generate_events(count: int, *, seed: int = 0, start_ms: int, span_ms: int, users: int = 200,
                    bad_ratio: float = 0.01, legacy_ratio: float = 0.2) -> Iterator[GeneratedEvent]:
    """`count` events with times spread evenly (with a little jitter) over [start_ms, start_ms + span_ms)."""
    rng = random.Random(seed)
    step = span_ms / max(count, 1)
    for i in range(count):
        ts = start_ms + int(i * step + rng.random() * step)
        user = f"u{rng.randrange(users)}"
        kind = rng.choices(TYPES, TYPE_WEIGHTS)[0]
        page = rng.choice(PAGES)
        event: dict = {"event_id": f"{seed}-{i}", "ts": ts, "user": user, "type": kind, "page": page, "v": 1}
        if kind == "purchase":
            amount = round(rng.uniform(1, 200), 2)
            event["amount"] = f"{amount:.2f} EUR" if rng.random() < legacy_ratio else amount
        if rng.random() < bad_ratio:
            value = f"{{event {i} from a broken client".encode()
        else:
            value = json.dumps(event, separators=(",", ":")).encode()
        yield GeneratedEvent(user.encode(), value, ts)


_LEADING_NUMBER = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)")


def parse_amount(raw: object, logic_version: int) -> float | None:
    """What the transform makes of an event's amount (mirrors the Spark SQL in jobs.py)."""
    if raw is None:
        return None
    if isinstance(raw, (int, float)):
        return float(raw)
    if logic_version < 2:
        try:
            return float(str(raw))
        except ValueError:
            return None
    m = _LEADING_NUMBER.match(str(raw))
    return float(m.group(1)) if m else None


def parse_event(value: bytes) -> dict | None:
    try:
        event = json.loads(value)
    except ValueError:
        return None
    if not isinstance(event, dict) or not event.get("event_id"):
        return None
    return event


def expected_aggregates(events: list[GeneratedEvent], logic_version: int) -> dict[tuple[int, str], tuple[int, float]]:
    """(window start ms, type) -> (events, summed amount) for the valid events."""
    out: dict[tuple[int, str], list] = defaultdict(lambda: [0, 0.0])
    for e in events:
        event = parse_event(e.value)
        if event is None:
            continue
        window = event["ts"] - event["ts"] % WINDOW_MS
        slot = out[(window, event["type"])]
        slot[0] += 1
        slot[1] += parse_amount(event.get("amount"), logic_version) or 0.0
    return {k: (v[0], round(v[1], 2)) for k, v in out.items()}
