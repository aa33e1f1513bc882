"""Imports run downward only: broker -> coordinator -> replication -> storage -> protocol.

client/ and pipeline/ use protocol (pipeline also uses client), never broker internals; protocol/ stays
sans-I/O. Checked on the source text with ast, so a violation fails here even if never executed.
"""

from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# layer -> layers it may import (besides itself)
ALLOWED = {
    "protocol": set(),
    "storage": {"protocol"},
    "replication": {"storage", "protocol"},
    "coordinator": {"replication", "storage", "protocol"},
    "broker": {"coordinator", "replication", "storage", "protocol"},
    "client": {"protocol"},
    "pipeline": {"client", "protocol"},
}
SANS_IO_FORBIDDEN = {"asyncio", "socket", "uvloop", "selectors", "time", "threading"}


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                package = path.relative_to(ROOT).parent.parts[: len(path.relative_to(ROOT).parent.parts) - node.level + 1]
                base = ".".join(("odradek",) + package)
                found.append((f"{base}.{node.module}" if node.module else base, node.lineno))
            elif node.module:
                found.append((node.module, node.lineno))
    return found


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "odradek" and len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return None


def test_layers_import_downward_only():
    problems = []
    for layer, allowed in ALLOWED.items():
        for path in (ROOT / layer).rglob("*.py"):
            for module, line in _imports(path):
                target = _layer_of(module)
                if target is not None and target != layer and target not in allowed:
                    problems.append(f"{path.relative_to(ROOT)}:{line} ({layer}) imports {module} ({target})")
    assert not problems, "\n".join(problems)


def test_protocol_is_sans_io():
    problems = []
    for path in (ROOT / "protocol").rglob("*.py"):
        source = path.read_text()
        for module, line in _imports(path):
            if module.split(".")[0] in SANS_IO_FORBIDDEN:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
        if "open(" in source.replace("_open(", ""):
            problems.append(f"{path.relative_to(ROOT)} calls open()")
    assert not problems, "\n".join(problems)


def test_every_package_is_listed_for_installation():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = config["package-dir"]
    expected = set()
    for package, folder in dirs.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            expected.add(".".join((package,) + rel))
    assert expected <= listed, f"add to pyproject packages: {sorted(expected - listed)}"
