"""The type checker, run as a test so that the README's one test command (which CI runs) runs it too.

mypy checks the modules in CHECKED with the `[tool.mypy]` configuration of pyproject.toml. Modules they
import are read for their types, their own errors unreported until they are listed here: the list grows
a layer at a time. A module under rewrite stays off it until the rewrite lands.

mypy finds modules by their import names, and ours are installed as `odradek.<layer>` from top-level
folders (pyproject's package-dir), a mapping it cannot read. So the test lays out a tree of links shaped as
the installed package (`.mypy_cache/tree/odradek/broker -> broker/`, ...) and points mypy at it; errors
are reported with the repository's paths. The tree sits in mypy's cache folder, at a fixed place, so the
incremental cache stays valid from one run to the next.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CACHE = ROOT / ".mypy_cache"

# Packages (every module under them, less those in NOT_YET) and single modules, by import name. Not yet
# listed: network (with the admission step); daemon (2 errors: uvloop's `run` assigned over asyncio's, the
# log levels' value type); broker/internal_topics.py (its reader yields what coordinator/runtime.py's
# PartitionWriter types as pairs: the runtime's question below), and pipeline/ (13 errors, PySpark's
# untyped API).
CHECKED = (
    "odradek.broker.handlers",
    "odradek.broker.services",
    "odradek.broker.context",
    "odradek.broker.txn_verification",
    "odradek.broker.authorizer",
    "odradek.broker.quotas",
    "odradek.broker.metrics",
    "odradek.broker.health_metrics",
    "odradek.broker.security",
    "odradek.broker.topic_config",
    "odradek.broker.logging",
    "odradek.broker.txn_wiring",
    "odradek.broker.topics",
    "odradek.broker.config",
    "odradek.broker.node_client",
    "odradek.broker.authenticator",
    "odradek.broker.replica_fetcher",
    "odradek.broker.cluster_tool",
    "odradek.broker.storage_tool",
    "odradek.broker.testing",
    "odradek.broker.pytest_plugin",
    "odradek.broker.node",
    "odradek.broker.components",
    "odradek.broker.server",
    "odradek.broker.quorum",
    "odradek.broker.controller_channel",
    "odradek.broker.groups_wiring",
    "odradek.broker.share",
    "odradek.broker.share.group_state",
    "odradek.broker.share.group_deletion",
    "odradek.broker.group_configs",
    "odradek.broker.log_dirs",
    "odradek.broker.hosting_driver",
    "odradek.broker.heap",
    "odradek.broker.controller_settings",
    "odradek.broker.dynamic_config",
    "odradek.purgatory",
    "odradek.protocol",
    "odradek.storage",
    "odradek.raft",
    "odradek.metadata",
    "odradek.replication",
    "odradek.coordinator",
    "odradek.client",
    "odradek.console",
    "odradek.pipeline.columnar",
)

# Modules under a CHECKED package left out, each with its reason. A name need not exist yet (a module
# another branch is adding stays out until its rewrite lands).
NOT_YET = (
    "odradek.metadata.loader",  # moving here from broker/quorum.py with the one metadata road
    # Under rewrite (the group/offsets write path). group/ passes as of this list; runtime.py does not: it
    # calls replay_transactional/replay_end_transaction on any shard S, which CoordinatorShard does not
    # declare (only the group shard has them), and its in-memory writer's log holds more than pairs.
    "odradek.coordinator.runtime",
    "odradek.coordinator.group",
    "odradek.client.cli",  # being edited (issue 27); 14 errors: Optional narrowing, matplotlib's missing stubs
)


def _link_tree() -> pathlib.Path:
    """`.mypy_cache/tree/odradek`, a folder of links laid out as the installed package; returns the tree."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tree = CACHE / "tree"
    top = tree / "odradek"
    top.mkdir(parents=True, exist_ok=True)
    wanted: dict[str, pathlib.Path] = {}
    for entry in (ROOT / package_dir["odradek"]).iterdir():
        if entry.suffix == ".py":
            wanted[entry.name] = entry
    for package, folder in package_dir.items():
        if package != "odradek":
            wanted[package.removeprefix("odradek.")] = ROOT / folder
    for name, target in wanted.items():
        link = top / name
        if link.is_symlink() and pathlib.Path(os.readlink(link)) == target:
            continue
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        elif link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=target.is_dir())
    return tree


def _left_out(name: str) -> bool:
    return any(name == other or name.startswith(other + ".") for other in NOT_YET)


def _targets(tree: pathlib.Path) -> list[str]:
    args = []
    for name in CHECKED:
        path = tree.joinpath(*name.split("."))
        if not path.is_dir() or any(other.startswith(name + ".") for other in CHECKED):
            args += ["-m", name]
        elif not any(other.startswith(name + ".") for other in NOT_YET):
            args += ["-p", name]
        else:  # the package's modules one by one, less those left out
            for module in sorted(path.rglob("*.py")):
                parts = module.relative_to(tree).with_suffix("").parts
                module_name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                if not _left_out(module_name):
                    args += ["-m", module_name]
    return args


def _repository_paths(report: str, tree: pathlib.Path) -> str:
    """mypy's report with the tree's paths written as the repository's (odradek/broker/x.py -> broker/x.py)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(package_dir.items(), key=lambda item: -len(item[0])):
        linked = tree.joinpath(*package.split("."))
        for prefix in (str(linked), os.path.relpath(linked)):  # mypy writes paths under the cwd relative
            report = report.replace(prefix + os.sep, str(ROOT / folder) + os.sep)
    return report.replace(str(ROOT) + os.sep, "")


def test_listed_modules_type_check():
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra: pip install -e '.[test]'")
    tree = _link_tree()
    stdout, stderr, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(CACHE), *_targets(tree)])
    assert status == 0, "mypy:\n" + _repository_paths(stdout + stderr, tree)
