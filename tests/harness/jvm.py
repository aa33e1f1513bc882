"""The Java client, resolved by Maven and driven as one long-lived JVM per test module.

Resolution is cached in two ignored folders under tests/jvm/:
- lib/: the jars tests/jvm/pom.xml names (kafka-clients and its codecs, an SLF4J binding that keeps quiet),
  copied there by `mvn dependency:copy-dependencies`. A stamp file holds the pom's hash: the jars are resolved
  on first use and again only when the pom changes. Maven's own ~/.m2 cache sits under that.
- classes/<hash>/: tests/jvm/src/*.java compiled with plain javac against lib/; the folder's name is the hash of
  the sources and the jar names, so an edited source compiles once into a new folder.
Both steps hold a file lock, so parallel pytest workers resolve and compile once between them.

A missing Maven Central (or anything else that stops Maven) raises JvmUnavailable naming what could not be
resolved: the tests fail loudly. A machine without java/javac/mvn skips them with that reason, except in CI
(CI=true), where it fails them too.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

JVM_DIR = Path(__file__).resolve().parent.parent / "jvm"
LIB = JVM_DIR / "lib"
CLASSES = JVM_DIR / "classes"
POM = JVM_DIR / "pom.xml"
SOURCES = JVM_DIR / "src"
TOOLS_POM = JVM_DIR / "tools" / "pom.xml"
TOOLS_LIB = JVM_DIR / "tools-lib"
STREAMS_POM = JVM_DIR / "streams" / "pom.xml"
STREAMS_LIB = JVM_DIR / "streams-lib"
STREAMS_SOURCES = JVM_DIR / "streams-src"
STREAMS_CLASSES = JVM_DIR / "streams-classes"


class JvmUnavailable(RuntimeError):
    pass


@contextmanager
def _locked(name: str):
    JVM_DIR.mkdir(exist_ok=True)
    with open(JVM_DIR / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def resolve(pom: Path = POM, lib: Path = LIB, marker: str = "kafka-clients-") -> list[Path]:
    """The classpath's jars, resolved through Maven on first use (or after the pom changed), else from `lib`.

    `marker` names the jar whose absence after resolution means Maven resolved the wrong thing."""
    stamp = lib / ".pom-hash"
    want = _digest(pom.read_bytes())
    with _locked(f"resolve-{lib.name}"):
        if not (stamp.exists() and stamp.read_text() == want and any(lib.glob("*.jar"))):
            shutil.rmtree(lib, ignore_errors=True)
            try:
                done = subprocess.run(
                    ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={lib}"],
                    capture_output=True, text=True, timeout=240)  # inside pytest-timeout's 300 s
            except subprocess.TimeoutExpired as exc:
                raise JvmUnavailable(f"mvn did not resolve {pom} in 240 s (is Maven Central reachable?)") from exc
            if done.returncode != 0:
                output = done.stdout + done.stderr
                lines = output.splitlines()
                reasons = [line for line in lines if "Could not" in line] or [line for line in lines if "ERROR" in line][:8]
                raise JvmUnavailable(
                    f"Maven could not resolve the artifacts of {pom} (exit {done.returncode}):\n"
                    + "\n".join(reasons or output.splitlines()[-20:]))
            stamp.write_text(want)
    jars = sorted(lib.glob("*.jar"))
    if not any(j.name.startswith(marker) for j in jars):
        raise JvmUnavailable(f"no {marker}*.jar in {lib} after resolution: {[j.name for j in jars]}")
    return jars


def compile_sources(jars: list[Path], source_dir: Path = SOURCES, classes: Path = CLASSES) -> Path:
    """`source_dir` (tests/jvm/src) compiled once per source hash; returns the classes folder."""
    sources = sorted(source_dir.glob("*.java"))
    key = _digest(*(s.name.encode() + s.read_bytes() for s in sources), *(j.name.encode() for j in jars))
    out = classes / key
    with _locked(f"compile-{classes.name}"):
        if not (out / ".complete").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            done = subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", os.pathsep.join(map(str, jars)),
                                   *map(str, sources)], capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                raise AssertionError(f"javac failed on {source_dir}:\n" + done.stdout + done.stderr)
            (out / ".complete").write_text("")
            for stale in classes.iterdir():
                if stale != out and stale.is_dir():
                    shutil.rmtree(stale, ignore_errors=True)
    return out


def require_tools() -> None:
    missing = [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"the Java client tests need {', '.join(missing)} on PATH (a JDK 17+ and Maven)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason + ": CI must have them", pytrace=False)
    pytest.skip(reason)


def classpath() -> str:
    """Tools present, artifacts resolved, sources compiled: the java -cp value. Fails loudly when Maven fails."""
    require_tools()
    try:
        jars = resolve()
    except JvmUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    return os.pathsep.join([str(compile_sources(jars)), *map(str, jars)])


def tools_classpath() -> str:
    """Kafka's own command-line tools (tests/jvm/tools/pom.xml, org.apache.kafka:kafka-tools) as a java -cp
    value, resolved into tests/jvm/tools-lib/ on first use; fails loudly when Maven fails, like `classpath`."""
    require_tools()
    try:
        jars = resolve(TOOLS_POM, TOOLS_LIB, "kafka-tools-")
    except JvmUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    return os.pathsep.join(map(str, jars))


def streams_classpath() -> str:
    """Kafka Streams (tests/jvm/streams/pom.xml: kafka-streams and RocksDB, resolved into tests/jvm/streams-lib/)
    with tests/jvm/streams-src compiled against it, as a java -cp value; fails loudly when Maven fails."""
    require_tools()
    try:
        jars = resolve(STREAMS_POM, STREAMS_LIB, "kafka-streams-")
    except JvmUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    return os.pathsep.join([str(compile_sources(jars, STREAMS_SOURCES, STREAMS_CLASSES)), *map(str, jars)])


class JavaDriver:
    """One JVM running tests/jvm/src/Interop.java: `call` sends a command, returns its one JSON answer."""

    def __init__(self, cp: str) -> None:
        self.cp = cp
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(
            ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.cp, "Interop"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.version = self._next(60)["ready"]

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line)
        sink(None)

    def _next(self, timeout_s: float) -> dict:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            # A late answer would be taken for the next command's: this JVM is done, the next call gets a new one.
            stderr = "".join(filter(None, self.stderr[-30:]))
            self._kill()
            self._start()
            raise AssertionError(f"the JVM answered nothing in {timeout_s} s (restarted); stderr:\n{stderr}") from None
        if line is None:
            raise AssertionError("the JVM exited; stderr:\n" + "".join(filter(None, self.stderr[-30:])))
        return json.loads(line)

    def call(self, command: str, timeout_s: float = 90.0, **settings) -> dict:
        """Runs one command; `cfg={...}` passes client configuration. Returns the answer, ok or not."""
        config = settings.pop("cfg", {})
        tokens = [command, *(f"{k}={v}" for k, v in settings.items()), *(f"cfg.{k}={v}" for k, v in config.items())]
        assert all("\t" not in t and "\n" not in t for t in tokens), tokens
        self.proc.stdin.write("\t".join(tokens) + "\n")
        self.proc.stdin.flush()
        return self._next(timeout_s)

    def ok(self, command: str, **settings) -> dict:
        answer = self.call(command, **settings)
        assert answer["ok"], f"Java client {command} failed: {answer['error']} <- {answer.get('causes')}"
        return answer

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
