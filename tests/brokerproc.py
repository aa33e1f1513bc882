"""Real broker processes for integration tests: start, stop (SIGTERM), kill -9, restart on the same data."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")
# log.format=json: the same as a `listening` event ({..., "url": "PLAINTEXT://host:port", "event": "listening"})
_LISTENING_JSON = re.compile(r'"url": "(\w+)://([^:\s"]+):(\d+)".*"event": "listening"')


class BrokerProcess:
    def __init__(self, data_dir: Path, *overrides: str, node_id: int = 1):
        self.data_dir = Path(data_dir)
        self.overrides = list(overrides)
        self.node_id = node_id
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        listen_port = self.port or 0
        args = [
            sys.executable, "-m", "odradek", "broker", "start",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{listen_port}",
            "--override", f"log.dirs={self.data_dir}",
            "--override", f"node.id={self.node_id}",
            "--override", "group.initial.rebalance.delay.ms=0",
        ]
        for o in self.overrides:
            args += ["--override", o]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        ready = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.output.append(line)
                m = _LISTENING.search(line) or _LISTENING_JSON.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(3))
                    ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "".join(self.output[-50:]))
        return self

    def stop(self, timeout_s: float = 20.0) -> int:
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._join()
        return code

    def kill(self) -> None:
        """kill -9: no shutdown, no flush, no clean marker."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._join()

    def restart(self, *, hard: bool = False) -> "BrokerProcess":
        self.kill() if hard else self.stop()
        return self.start()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
        self.proc = None

    def log_text(self) -> str:
        return "".join(self.output)
