"""Drive load generator processes and measure the server around their measured window."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from .procs import REPO_ROOT, Server, bench_env, pinned
from .stats import machine_busy_s


class LoadgenError(RuntimeError):
    pass


class Loadgen:
    """A `python -m bench.loadgen` process speaking READY / GO / RESULT over its stdin and stdout."""

    def __init__(self, spec: dict, cpus: set[int] | None):
        self.spec = spec
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.loadgen", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=bench_env(), cwd=REPO_ROOT, preexec_fn=pinned(cpus),
        )
        self.lines: list[str] = []
        self.stderr: list[str] = []
        self._ready = threading.Event()
        self._done = threading.Event()
        self.result: dict | None = None
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if line == "READY":
                self._ready.set()
            elif line.startswith("RESULT "):
                self.result = json.loads(line[7:])
                self._done.set()
        self._ready.set()
        self._done.set()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            if len(self.stderr) < 200:
                self.stderr.append(line)

    def wait_ready(self, timeout_s: float) -> None:
        if not self._ready.wait(timeout_s) or self.proc.poll() is not None and self.result is None and "READY" not in self.lines:
            self.kill()
            raise LoadgenError(f"load generator not ready ({self.spec['mode']}): {self.tail()}")
        if "READY" not in self.lines:
            self.kill()
            raise LoadgenError(f"load generator failed before READY ({self.spec['mode']}): {self.tail()}")

    def send(self, word: str) -> None:
        try:
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def wait_result(self, timeout_s: float) -> dict:
        if not self._done.wait(timeout_s):
            self.kill()
            raise LoadgenError(f"load generator timed out ({self.spec['mode']}): {self.tail()}")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()
        if self.result is None:
            raise LoadgenError(f"load generator gave no result ({self.spec['mode']}): {self.tail()}")
        if "failed" in self.result:
            raise LoadgenError(f"load generator failed ({self.spec['mode']}): {self.result['failed']}")
        return self.result

    def tail(self) -> str:
        return ("".join(self.stderr[-15:]) + "\n".join(self.lines[-5:]))[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def measured_run(server: Server, spec: dict, cpus: set[int] | None, timeout_s: float) -> dict:
    """One load generator against `server`: server CPU and memory are read at GO and at RESULT."""
    gen = Loadgen(spec, cpus)
    try:
        gen.wait_ready(60)
        busy0, cpu0, t0 = machine_busy_s(), server.cpu(), time.perf_counter()
        gen.send("GO")
        result = gen.wait_result(timeout_s)
        cpu1, wall, busy1 = server.cpu(), time.perf_counter() - t0, machine_busy_s()
    finally:
        gen.kill()
    result["server_cpu_s"] = cpu1 - cpu0
    result["server_wall_s"] = wall
    # Busy CPU of the whole machine that was neither the server nor the load generator: other work.
    result["other_cpu_s"] = max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - result.get("client_cpu_s", 0.0))
    result["server_memory_kib"] = server.memory()
    return result


def latency_run(server: Server, producer_spec: dict, consumer_spec: dict | None, cpus: set[int] | None, timeout_s: float) -> dict:
    """A fixed-rate producer and (when the server serves Fetch) a consumer in a second process."""
    consumer = Loadgen(consumer_spec, cpus) if consumer_spec is not None else None
    producer = Loadgen(producer_spec, cpus)
    try:
        producer.wait_ready(60)
        if consumer is not None:
            consumer.wait_ready(60)
        busy0, cpu0, t0 = machine_busy_s(), server.cpu(), time.perf_counter()
        producer.send("GO")
        result = producer.wait_result(timeout_s)
        cpu1, wall, busy1 = server.cpu(), time.perf_counter() - t0, machine_busy_s()
        if consumer is not None:
            # The consumer stops by itself once it has every record; give the tail a few seconds.
            if not consumer._done.wait(10):
                consumer.send("STOP")
            result["consumer"] = consumer.wait_result(15)
    finally:
        producer.kill()
        if consumer is not None:
            consumer.kill()
    result["server_cpu_s"] = cpu1 - cpu0
    result["server_wall_s"] = wall
    client = result.get("client_cpu_s", 0.0) + result.get("consumer", {}).get("client_cpu_s", 0.0)
    result["other_cpu_s"] = max(0.0, (busy1 - busy0) - (cpu1 - cpu0) - client)
    result["server_memory_kib"] = server.memory()
    return result
