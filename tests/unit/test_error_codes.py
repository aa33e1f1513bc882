"""One error base class: every exception that carries a Kafka error code is a `protocol.errors.KafkaApiError`,
so a layer answering a client reads the code with `isinstance`/`error_code_of` instead of probing for the
attribute with getattr. Checked on the source (ast) and then on the classes themselves."""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

from odradek.client.errors import KafkaError
from odradek.protocol.errors import ErrorCode, KafkaApiError, error_code_of

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = ("protocol", "storage", "purgatory", "raft", "metadata", "replication", "coordinator", "broker", "client")


def _module_of(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("odradek",) + (parts[:-1] if parts[-1] == "__init__" else parts))


def _sets_error_code(cls: ast.ClassDef) -> bool:
    """The class names an `error_code` in its body, or assigns `self.error_code` in a method."""
    for node in cls.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "error_code" for t in targets):
            return True
        if isinstance(node, ast.FunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Assign, ast.AnnAssign)):
                    for t in inner.targets if isinstance(inner, ast.Assign) else [inner.target]:
                        if (isinstance(t, ast.Attribute) and t.attr == "error_code" and isinstance(t.value, ast.Name)
                                and t.value.id == "self"):
                            return True
    return False


def _classes_with_error_code() -> list[tuple[str, str]]:
    found = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and _sets_error_code(node):
                    found.append((_module_of(path), node.name))
    return found


CLASSES = _classes_with_error_code()


def test_the_scan_finds_the_error_classes():
    names = {name for _, name in CLASSES}
    assert {"StorageError", "ReplicationError", "MetadataError", "CoordinatorError", "ResourceError"} <= names


@pytest.mark.parametrize(("module", "name"), CLASSES, ids=[f"{m}.{n}" for m, n in CLASSES])
def test_every_exception_carrying_an_error_code_is_a_kafka_api_error(module, name):
    cls = getattr(importlib.import_module(module), name)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        assert issubclass(cls, KafkaApiError), f"{module}.{name} carries error_code: derive it from KafkaApiError"


def test_no_getattr_probe_for_an_error_code():
    """`getattr(e, "error_code", default)` on an exception is what `error_code_of(e, default)` replaces; a
    response's own field is read as a field."""
    probe = re.compile(r"""getattr\((\w+),\s*["']error_code["']""")
    problems = []
    for layer in LAYERS + ("pipeline",):
        for path in (ROOT / layer).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for match in probe.finditer(line):
                    if match.group(1) not in ("response", "resp"):
                        problems.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not problems, "\n".join(problems)


def test_error_code_of_reads_server_and_client_errors_alike():
    from odradek.replication.errors import NotLeaderOrFollowerError

    assert error_code_of(NotLeaderOrFollowerError("moved")) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert error_code_of(ValueError("not a Kafka error")) == ErrorCode.UNKNOWN_SERVER_ERROR
    assert error_code_of(ValueError("not a Kafka error"), ErrorCode.NONE) == ErrorCode.NONE
    client_error = KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, context="topic t")
    assert isinstance(client_error, KafkaApiError)
    assert client_error.code is ErrorCode.TOPIC_ALREADY_EXISTS  # the client's own spelling stays
    assert client_error.error_code == error_code_of(client_error) == int(ErrorCode.TOPIC_ALREADY_EXISTS)
