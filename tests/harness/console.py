"""The web console as tests drive it: `odradek console` as a real process, and Debian's chromium through
Playwright (its own browser download is never used: .ci/run installs the `chromium` package).

A machine without /usr/bin/chromium or the playwright package skips the browser tests with that reason,
except in CI (CI=true), where they fail: the proof must not vanish quietly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Screenshots of each page, kept as test artifacts (the folder is in .gitignore).
ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts" / "console"
_URL = re.compile(r"odradek console: (http://\S+)")


def browser_or_skip() -> Any:
    """Playwright's sync API and the launched chromium (the caller closes both: `(playwright, browser)`)."""
    reason = None
    if not os.path.exists(CHROMIUM):
        reason = f"no {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            reason = "no playwright package (pip install -e '.[test]')"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason + ": CI must have it", pytrace=False)
        pytest.skip(reason)
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
    return playwright, browser


class ConsoleProcess:
    """`python -m odradek console ... --port 0`; `url` is read from its first line of output."""

    def __init__(self, bootstrap: str, *args: str):
        self.args = [sys.executable, "-m", "odradek", "console", "--bootstrap-server", bootstrap, "--port", "0",
                     "--sample-interval", "1", *args]
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []
        self.url = ""

    def start(self, timeout_s: float = 40.0) -> "ConsoleProcess":
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        ready = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = _URL.search(line)
                if m and not ready.is_set():
                    self.url = m.group(1).rstrip("/")
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("console did not start:\n" + "".join(self.output[-40:]))
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        return "".join(self.output)


def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def open_page(page: Any, url: str, wait_for: str = "main") -> Any:
    """Load `url` and wait for `wait_for` to be in it; the page (truthy, so a poll can call it in a predicate)."""
    page.goto(url)
    page.wait_for_selector(wait_for)
    return page


def table_rows(page: Any, selector: str) -> list[list[str]]:
    """The text of each cell of each row of the table `selector`, header row included: one round trip to the
    browser for the whole table, where a locator per cell would make one per cell."""
    rows: list[list[str]] = page.eval_on_selector(
        selector, "t => Array.from(t.rows).map(r => Array.from(r.cells).map(c => c.innerText.trim()))")
    return rows
