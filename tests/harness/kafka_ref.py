"""Apache Kafka 4.4 (the reference release) for integration tests: bench/kafka_ref.py's launcher with the
test suite's rules for a missing JVM side.

`kafka_cluster(tmp_path, nodes)` resolves the jars (Maven, on first use, into the ignored tests/jvm/kafka-lib/),
formats and starts the nodes, and stops them by PID when the block ends. A machine without java/mvn skips the
test with that reason, except in CI (CI=true), where it fails; a Maven Central that cannot be reached, or a
node that does not start, fails the test loudly with Maven's or Kafka's own words.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from bench import kafka_ref
from bench.kafka_ref import KafkaNode, KafkaUnavailable
from tests.harness.jvm import require_tools

__all__ = ["KafkaNode", "kafka_classpath", "kafka_cluster", "spawn_cluster"]


def kafka_classpath() -> str:
    require_tools()
    try:
        return kafka_ref.classpath()
    except KafkaUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def spawn_cluster(workdir: Path, nodes: int = 1, **settings) -> list[KafkaNode]:
    """Formats and spawns the nodes without waiting for them (so the caller can start something else while
    the JVMs start); wait with `node.wait_started()` and stop with `kafka_ref.stop(cluster)`."""
    cp = kafka_classpath()
    cluster = kafka_ref.plan(workdir, nodes, quick_jit=True, **settings)
    try:
        for node in cluster:
            node.format(cp)
        for node in cluster:
            node.spawn(cp)
    except KafkaUnavailable as exc:
        kafka_ref.stop(cluster)
        pytest.fail(str(exc), pytrace=False)
    return cluster


@contextmanager
def kafka_cluster(workdir: Path, nodes: int = 1, timeout_s: float = 180.0, **settings) -> Iterator[list[KafkaNode]]:
    cluster = spawn_cluster(workdir, nodes, **settings)
    try:
        try:
            for node in cluster:
                node.wait_started(timeout_s)
        except KafkaUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        yield cluster
    finally:
        kafka_ref.stop(cluster)
