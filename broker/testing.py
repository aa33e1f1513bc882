"""An in-process broker for tests, and a raw protocol client for poking at it.

In an async test:

    from odradek.broker.testing import running_broker

    async def test_roundtrip(tmp_path):
        async with running_broker(tmp_path, num_partitions=3) as kafka:
            producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
            ...

In a sync test, the `odradek_broker` pytest fixture (broker/pytest_plugin.py, installed with the package)
runs one in a background thread with its own event loop; `BrokerThread` is the same thing for fixtures of
your own (a session-scoped one, say):

    with BrokerThread(tmp_path) as kafka:
        Producer({"bootstrap.servers": kafka.bootstrap})

The broker listens on 127.0.0.1 on a port the OS picks. Overrides are broker properties, spelled with
dots (`**{"log.segment.bytes": 1 << 20}`) or with underscores (`log_segment_bytes=1 << 20`).

`RawClient` is a blocking socket speaking the wire protocol through `odradek.protocol`: send a request
message, get the decoded response; or send any bytes at all and see whether the broker hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from odradek.protocol.connection import ClientConnection

__all__ = ["BrokerThread", "RawClient", "RunningBroker", "broker_config", "running_broker"]


def broker_config(data_dir: str | Path, **overrides: Any):
    """A BrokerConfig for a test broker: 127.0.0.1 on port 0, data in `data_dir`, no rebalance delay."""
    from .config import BrokerConfig

    properties: dict[str, Any] = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(data_dir),
        "group.initial.rebalance.delay.ms": 0,
    }
    for key, value in overrides.items():
        properties[key if "." in key else key.replace("_", ".")] = value
    return BrokerConfig.from_properties(properties)


@dataclass
class RunningBroker:
    """A started broker and where to reach it."""

    broker: Any  # odradek.broker.server.Broker
    host: str
    port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


@contextlib.asynccontextmanager
async def running_broker(tmp_path: str | Path, **overrides: Any) -> AsyncIterator[RunningBroker]:
    """Start a `Broker` on the running loop; stop it (gracefully) on the way out."""
    from .server import Broker

    data_dir = Path(tmp_path)
    broker = Broker(broker_config(data_dir, **overrides))
    try:
        await broker.start()
        _, host, port = broker.bound[0]
        yield RunningBroker(broker, host, port, data_dir)
    finally:
        await broker.stop()


class BrokerThread:
    """A broker on its own event loop in a daemon thread, for synchronous code."""

    def __init__(self, tmp_path: str | Path, *, start_timeout_s: float = 30.0, **overrides: Any):
        self.data_dir = Path(tmp_path)
        self.overrides = overrides
        self.start_timeout_s = start_timeout_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self.broker = None
        self.host = ""
        self.port = 0
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "BrokerThread":
        self._thread = threading.Thread(target=self._run, name="odradek-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            raise RuntimeError(f"the in-process broker did not start within {self.start_timeout_s}s")
        if self._error is not None:
            self._thread.join(5)
            self._thread = None
            raise RuntimeError(f"the in-process broker failed to start: {self._error!r}") from self._error
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._thread is None:
            return
        if self.loop is not None and self._stopped is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already finished
                self.loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"the in-process broker did not stop within {timeout_s}s")
        self._thread = None
        if self._error is not None:
            raise RuntimeError(f"the in-process broker failed while stopping: {self._error!r}") from self._error

    def call(self, fn: Callable[[], Any], timeout_s: float = 10.0) -> Any:
        """Run `fn()` on the broker's event loop thread (where its state may be touched) and return its result."""

        async def run() -> Any:
            return fn()

        if self.loop is None:
            raise RuntimeError("the in-process broker is not running: start() it first")
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout_s)

    def __enter__(self) -> "BrokerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        loop = self.loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main())
        except BaseException as e:  # noqa: BLE001 - reported to the starting thread
            self._error = e
        finally:
            self._ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        async with running_broker(self.data_dir, **self.overrides) as running:
            self.broker, self.host, self.port = running.broker, running.host, running.port
            self._ready.set()
            await self._stopped.wait()


class RawClient:
    """A blocking Kafka protocol connection: `request(message, version)` returns the decoded response."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10.0, client_id: str | None = "odradek-raw"):
        host, _, port = bootstrap.rpartition(":")
        self.timeout_s = timeout_s
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = ClientConnection(client_id=client_id)

    def request(self, message, version: int):
        self.send(message, version)
        return self.receive()

    def send(self, message, version: int, *, expect_response: bool = True) -> int:
        correlation_id, data = self.conn.send_request(message, version, expect_response=expect_response)
        self.sock.sendall(data)
        return correlation_id

    def receive(self, timeout_s: float | None = None):
        """The next response, decoded. Raises ConnectionError if the broker closes the connection first."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no response from the broker in time")
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            events = self.conn.receive_data(data)
            if events:
                return events[0].response

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """Wait up to `timeout_s` for the broker to hang up; True if it did (any bytes first are skipped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except (socket.timeout, TimeoutError):
                return False
            if not data:
                return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
