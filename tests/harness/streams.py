"""Kafka Streams 4.4 applications for the integration suite, run as their own JVMs.

tests/jvm/streams/pom.xml names org.apache.kafka:kafka-streams (which brings kafka-clients and RocksDB); Maven
resolves it into the ignored tests/jvm/streams-lib/ on first use, tests/jvm/streams/src/*.java compile with
javac into the ignored tests/jvm/streams-classes/<hash>/, with tests/harness/jvm.py's cache, lock and loud
failure (a missing Maven Central fails the test; no JDK skips it, except in CI).

`StreamsApp` runs one application (a main class of those sources) and reads what it prints: one "STATE <s>"
line per KafkaStreams state change, "ERROR <exception>" for an uncaught one. `stop` closes stdin (the app
closes KafkaStreams cleanly), `kill` is kill -9.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.harness.jvm import JVM_DIR, JvmUnavailable, _digest, _locked, require_tools, resolve

STREAMS_POM = JVM_DIR / "streams" / "pom.xml"
STREAMS_LIB = JVM_DIR / "streams-lib"
STREAMS_SOURCES = JVM_DIR / "streams" / "src"
STREAMS_CLASSES = JVM_DIR / "streams-classes"


def streams_classpath() -> str:
    """kafka-streams resolved and the sources compiled: a java -cp value. Fails loudly when Maven fails."""
    require_tools()
    try:
        jars = resolve(STREAMS_POM, STREAMS_LIB, "kafka-streams-")
    except JvmUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    sources = sorted(STREAMS_SOURCES.glob("*.java"))
    key = _digest(*(s.name.encode() + s.read_bytes() for s in sources), *(j.name.encode() for j in jars))
    out = STREAMS_CLASSES / key
    with _locked("compile-streams"):
        if not (out / ".complete").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            done = subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", os.pathsep.join(map(str, jars)),
                                   *map(str, sources)], capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise AssertionError("javac failed on tests/jvm/streams/src:\n" + done.stdout + done.stderr)
            (out / ".complete").write_text("")
            for stale in STREAMS_CLASSES.iterdir():
                if stale != out and stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
    return os.pathsep.join([str(out), *map(str, jars)])


class StreamsApp:
    """One Kafka Streams application JVM (`main` with `args`); its log (WARN and above) goes to `workdir`."""

    def __init__(self, cp: str, main: str, args: list[str], workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{main}.log"
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", f"-Dorg.slf4j.simpleLogger.logFile={self.log_path}",
             "-cp", cp, main, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def states(self) -> list[str]:
        return [line.split(" ", 1)[1] for line in self.lines if line.startswith("STATE ")]

    @property
    def errors(self) -> list[str]:
        return [line for line in self.lines if line.startswith("ERROR ")]

    def tail(self, n: int = 40) -> str:
        try:
            log = self.log_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            log = []
        return "\n".join(["-- stdout:", *self.lines[-n:], "-- log:", *log])

    def wait_state(self, state: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while state not in self.states:
            if self.proc.poll() is not None:
                raise AssertionError(f"the Streams app exited ({self.proc.returncode}) before {state}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the Streams app not {state} after {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
