"""Imports run downward only:

    broker -> coordinator -> replication -> metadata -> raft -> purgatory / storage -> protocol

client/ and pipeline/ use protocol (pipeline also uses client), never broker internals; console/ (the web
console, a client of the cluster like any other) uses client and protocol only; protocol/ stays
sans-I/O; every layer below broker/ is synchronous and takes time as an argument (no event loop, sockets,
threads or clock); no module imports itself back through others, in any layer. Request handlers are
annotated and never import the broker's wiring, and neither they nor the wiring probe the services or the
broker with getattr/setattr/hasattr: what they use is a typed attribute of a typed object. Nothing assigns
an attribute of the broker from outside its class: the node's parts are one typed object (broker/node.py).
Checked on the source text with ast, so a violation fails here even if never executed.
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
    # the timing wheel, delayed operations and Deferred: what every layer above waits with
    "purgatory": {"protocol"},
    # the Raft quorum core: the replicated log of the cluster's metadata
    "raft": {"purgatory", "storage", "protocol"},
    # the metadata image, its records, log, publisher and snapshots, and the controller's decisions
    "metadata": {"raft", "purgatory", "storage", "protocol"},
    # the partition data path: partition state, the replica manager, delayed produce and fetch
    "replication": {"metadata", "purgatory", "storage", "protocol"},
    "coordinator": {"replication", "metadata", "raft", "purgatory", "storage", "protocol"},
    "broker": {"coordinator", "replication", "metadata", "raft", "purgatory", "storage", "protocol"},
    "client": {"protocol"},
    "pipeline": {"client", "protocol"},
    # the web console: a separate process that reads the cluster through the Kafka protocol (console/__init__)
    "console": {"client", "protocol"},
}
SANS_IO_FORBIDDEN = {"asyncio", "socket", "uvloop", "selectors", "time", "threading"}
# Below broker/ nothing runs an event loop, opens a socket, starts a thread or reads the clock: the broker
# drives these layers and passes now_ms. storage/ may take threading's locks (SYNC_LAYER_LOCKS): a log and
# its indexes are also used from the broker's worker threads (the cleaner, flushes, page-cache release).
SYNC_LAYERS = ("storage", "purgatory", "raft", "metadata", "replication", "coordinator")
SYNC_LAYER_FORBIDDEN = {"asyncio", "socket", "uvloop", "selectors", "time", "threading", "concurrent"}
SYNC_LAYER_LOCKS = {"storage": {"threading.Lock", "threading.RLock"}}
# The wiring: the modules that build the node's parts and connect them. Handlers get what they use from
# BrokerServices (broker/services.py), never from the wiring, so that the wiring can change under them.
WIRING = ("broker/*_wiring.py", "broker/components.py", "broker/node.py", "broker/server.py", "broker/daemon.py")
# Where a probe of the services or the broker is refused, and the names that hold them there.
NO_PROBES = ("broker/handlers/*.py", "broker/services.py", *WIRING)
PROBED_NAMES = {"services", "broker"}
# Probes left where the code is under rewrite, each with its reason; the entry goes when the rewrite lands.
PROBES_UNDER_REWRITE: dict[str, int] = {}  # file -> probes allowed while it is being rewritten (none now)


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


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] == "odradek":  # the package's own folder (odradek/cli.py is odradek.cli)
        parts = parts[1:]
    return ".".join(("odradek",) + (parts[:-1] if parts and parts[-1] == "__init__" else parts))


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines under `if TYPE_CHECKING:`, whose imports never run."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


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


def test_sync_layers_run_no_event_loop_socket_thread_or_clock():
    problems = []
    for layer in SYNC_LAYERS:
        allowed_uses = SYNC_LAYER_LOCKS.get(layer, set())
        allowed_modules = {name.split(".")[0] for name in allowed_uses}
        for path in (ROOT / layer).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for module, line in _imports(path):
                top = module.split(".")[0]
                if top in SYNC_LAYER_FORBIDDEN and top not in allowed_modules:
                    problems.append(f"{path.relative_to(ROOT)}:{line} ({layer}) imports {module}")
            for node in ast.walk(tree):
                # what a layer allowed a module for may use of it: threading.Lock, not threading.Thread
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in allowed_modules and f"{node.value.id}.{node.attr}" not in allowed_uses):
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno} ({layer}) uses {node.value.id}.{node.attr}")
                if isinstance(node, ast.ImportFrom) and node.module in allowed_modules:
                    for alias in node.names:
                        if f"{node.module}.{alias.name}" not in allowed_uses:
                            problems.append(f"{path.relative_to(ROOT)}:{node.lineno} ({layer}) imports "
                                            f"{node.module}.{alias.name}")
    assert not problems, "\n".join(problems)


def _import_graph(*folders: str) -> dict[str, set[str]]:
    """Module -> the modules of the folders it imports, anywhere in its body (a function's import is how
    a cycle hides), except under TYPE_CHECKING."""
    paths = {_module_name(path): path for folder in folders for path in (ROOT / folder).rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_lines(tree)
        targets = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skipped:
                continue
            for module in _imported_modules(node, path, paths):
                if module != name:
                    targets.add(module)
        graph[name] = targets
    return graph


def _imported_modules(node: ast.Import | ast.ImportFrom, path: pathlib.Path, modules) -> set[str]:
    """The modules among `modules` that an import statement loads for its names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = _module_name(path.parent / "__init__.py").split(".")
            base = ".".join(package[: len(package) - node.level + 1])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        # `from package import module` depends on the module; `from module import name` on the module
        submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in modules]
        names = submodules if len(submodules) == len(node.names) else submodules + [source]
    found = set()
    for module in names:
        while module and module not in modules:  # `import odradek.client.x.y`: the nearest module
            module = module.rpartition(".")[0]
        if module:
            found.add(module)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_anywhere():
    """One graph of every module of every layer (and the `odradek` package itself): no module may reach
    itself through its imports, inside a layer or across layers (imports under TYPE_CHECKING excepted)."""
    problems = [" <-> ".join(cycle) for cycle in _cycles(_import_graph(*ALLOWED, "odradek"))]
    assert not problems, "modules importing each other (move what they share to a module both import):\n" + \
        "\n".join(problems)


def _broker_files(patterns) -> list[pathlib.Path]:
    return sorted({path for pattern in patterns for path in ROOT.glob(pattern)})


def test_handlers_do_not_import_the_wiring():
    wiring = {_module_name(path) for path in _broker_files(WIRING)}
    problems = []
    for path in _broker_files(["broker/handlers/*.py"]):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for module in _imported_modules(node, path, wiring):
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {module}")
    assert not problems, "handlers reach the wiring (use BrokerServices, or a module both import):\n" + \
        "\n".join(problems)


def test_handlers_are_annotated():
    """Every registered handler says what it takes and answers: `(services: BrokerServices, ctx:
    RequestContext, request: <its Request class>) -> Answer` (type-checked by tests/test_typecheck.py)."""
    problems = []
    for path in _broker_files(["broker/handlers/*.py"]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not any(
                    isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "handles"
                    for d in node.decorator_list):
                continue
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            bare = [a.arg for a in args if a.annotation is None] + (["return"] if node.returns is None else [])
            if bare:
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {', '.join(bare)}")
    assert not problems, "handlers without annotations:\n" + "\n".join(problems)


def _probed(node: ast.AST) -> str | None:
    """The name a getattr/setattr/hasattr call probes, when it is the services or the broker (`services`,
    `broker`, `self.broker`, `self.services`)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr") and node.args):
        return None
    target = node.args[0]
    name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
    return ast.unparse(target) if name in PROBED_NAMES else None


def test_no_attribute_probes_on_the_services_or_the_broker():
    problems, left = [], {}
    for path in _broker_files(NO_PROBES):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            probed = _probed(node)
            if probed is not None:
                left[rel] = left.get(rel, 0) + 1
                if rel not in PROBES_UNDER_REWRITE:
                    problems.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    assert not problems, "probes of an untyped attribute (declare it on the class and use it):\n" + \
        "\n".join(problems)
    # An entry whose probes are gone goes too (and one whose file gained a probe fails).
    assert left == PROBES_UNDER_REWRITE, f"probes left under rewrite: {left}, listed: {PROBES_UNDER_REWRITE}"


def _broker_assignments(tree: ast.AST) -> list[ast.AST]:
    """Assignments to an attribute of a name `broker` (`broker.x = ...`, `broker.x += ...`, and as one target
    of a tuple or a chain)."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets.extend(target.elts)
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                  and target.value.id == "broker"):
                found.append(node)
    return found


def test_nothing_assigns_the_brokers_attributes_from_outside_its_class():
    """The broker's state is its own (broker/server.py's Broker assigns `self.x`); the node's parts are built
    by broker/components.py into one typed object, and no module sets `broker.x` in any layer."""
    problems = []
    for folder in ALLOWED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in _broker_assignments(tree):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not problems, "attributes of the broker assigned from outside its class:\n" + "\n".join(problems)


def test_the_assignment_finder_sees_the_assignments():
    found = _broker_assignments(ast.parse(
        "broker.a = 1\nbroker.b += 1\nx, broker.c = 1, 2\nself.broker.d = 1\nbroker = 1\nb.e = broker.f"))
    assert sorted(node.lineno for node in found) == [1, 2, 3]


def test_the_probe_finder_sees_the_probes():
    found = [_probed(node) for node in ast.walk(ast.parse(
        "getattr(services, 'x'); setattr(self.broker, 'y', 1); hasattr(broker, 'z'); getattr(request, 'w')"))]
    assert [f for f in found if f] == ["services", "self.broker", "broker"]


def test_the_cycle_finder_sees_function_level_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# A test module imports helpers only from modules that hold no tests (tests/harness/, tests/pki.py, ...):
# importing another test module drags in its marks and module-level setup (timeouts, importorskip) and ties
# the two files' edits together. The pairs below are the last ones left: the metadata-log helpers drive the
# local metadata log that the one-road work replaces, and move with it.
TEST_IMPORTS_LEFT = {
    ("tests/unit/test_controller_channel.py", "tests.unit.test_metadata_log"),
    ("tests/unit/test_metadata_snapshot.py", "tests.unit.test_metadata_log"),
}


def _test_modules_imported(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                package = path.relative_to(ROOT).parent.parts
                base = ".".join(package[: len(package) - node.level + 1])
                source = f"{base}.{source}" if source else base
            candidates = [source] + [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in candidates:
            if module.split(".")[-1].startswith("test_") and (ROOT / (module.replace(".", "/") + ".py")).is_file():
                found.add(module)
    return found


def test_no_test_module_imports_another():
    problems = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for module in sorted(_test_modules_imported(path)):
            if (str(path.relative_to(ROOT)), module) not in TEST_IMPORTS_LEFT:
                problems.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not problems, "move what they share to tests/harness/:\n" + "\n".join(problems)
