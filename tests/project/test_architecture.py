"""Architecture rules that keep the clients thin and the daemon's layers apart.

* ``palaced`` and ``palace_client`` are folders by layer (LAYERS, CLIENT_LAYERS, lowest
  first) and no module imports a later layer of its package;
* the clients (``palace_client``) use only the daemon's ``wire`` layer, which loads nothing heavy;
* no import cycles in ``palaced`` or ``palace_client`` (function-level and type-checking
  imports count: an import moved into a function to dodge a cycle is still a cycle);
* op handlers reach the daemon only through their context, never ``palaced.daemon.core``;
* SQL runs only in ``palaced/store/``; no module is longer than MAX_CODE_LINES;
* the storage/retrieval core is synchronous (no anyio: the daemon runs it in threads);
* importing the clients loads no database, vector, model or numeric library;
* usearch and onnxruntime coexist in one process (usearch 2.26 segfaulted there);
* CI runs exactly the test command the README documents, and the service files are sane;
* tests/ mirrors the packages: each test module in the folder of what it tests (TEST_FOLDERS).
"""

from __future__ import annotations

import ast
import configparser
import functools
import plistlib
import re
import subprocess
import sys
from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "palace_client"
DAEMON_DIR = REPO / "palaced"

# The daemon's layers, lowest first (docs/development.md): a module imports only from its own
# folder and the folders before it. Only the entry points sit directly under palaced/.
LAYERS = ("wire", "config", "text", "engine", "store", "index", "palace", "memory",
          "retrieval", "capture", "maintenance", "ops", "daemon")
ENTRY_POINTS = frozenset({"__init__.py", "__main__.py", "cli.py"})
# The same for palace_client, whose entry points are the package, ``__main__`` and ``entry``.
CLIENT_LAYERS = ("transport", "api", "render", "models", "importers", "agents", "service",
                 "hooks", "mcp", "http", "cli")
CLIENT_ENTRY_POINTS = frozenset({"__init__.py", "__main__.py", "entry.py"})
# The layers that run in the daemon's worker threads, synchronous through and through (no
# anyio); SYNC_EDGES are the modules of those layers that work on an open palace (its
# ``Palace`` handle, its services) on the event loop's side.
SYNC_LAYERS = ("wire", "config", "text", "store", "index", "retrieval")
SYNC_EDGES = frozenset({"palaced/retrieval/recall.py", "palaced/retrieval/sections.py",
                        "palaced/retrieval/recall_caches.py"})
# What palace_client may import from palaced: the wire layer and the version string.
CLIENT_ALLOWED_NAMES = frozenset({"__version__"})
HEAVY = frozenset({"apsw", "usearch", "fastembed", "numpy", "tiktoken", "anyio"})
CLIENT_FORBIDDEN_AT_RUNTIME = ("apsw", "usearch", "fastembed", "numpy", "onnxruntime")
TEST_COMMAND = ("pip install -e '.[test]' && ruff check palaced palace_client && mypy "
                "&& python -m pytest -q -n 2 --dist loadfile")


@dataclass(frozen=True)
class _Scan:
    """What the rules below read from one module (each field is described where it is read)."""

    imports: tuple[tuple[int, str], ...]
    relative: tuple[tuple[int, str | None, tuple[str, ...]], ...]
    flavour: tuple[str, ...]
    runs_sql: bool
    ddl: tuple[int, ...]
    code_lines: int


@functools.cache
def _scan(path: Path) -> _Scan:
    """``path`` parsed once per run and walked once for every rule (a dozen tests read every
    module). Only the facts are kept: the syntax trees of every module (millions of nodes)
    kept alive made each later garbage collection of the test process seconds long."""
    source = path.read_text("utf-8")
    imports: list[tuple[int, str]] = []
    relative: list[tuple[int, str | None, tuple[str, ...]]] = []
    flavour: list[str] = []
    runs_sql = False
    ddl: list[int] = []
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            imports.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                relative.append((node.level, node.module,
                                 tuple(alias.name for alias in node.names)))
            elif node.module:
                imports.extend((node.lineno, f"{node.module}.{alias.name}")
                               for alias in node.names)
        elif isinstance(node, ast.Call):
            runs_sql = runs_sql or (isinstance(node.func, ast.Attribute)
                                    and node.func.attr in ("execute", "executemany"))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and DDL_RE.match(node.value)):
            ddl.append(node.lineno)
        if (name := _named(node)) in FLAVOUR_NAMES:
            flavour.append(f"{getattr(node, 'lineno', 0)} {name}")
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            end = body[0].end_lineno or body[0].lineno
            docstrings.update(range(body[0].lineno, end + 1))
    code_lines = sum(1 for number, line in enumerate(source.splitlines(), 1)
                     if line.strip() and not line.strip().startswith("#")
                     and number not in docstrings)
    return _Scan(tuple(imports), tuple(relative), tuple(flavour), runs_sql, tuple(sorted(ddl)),
                 code_lines)


def _named(node: ast.AST) -> str | None:
    """The name a Name, an Attribute or an imported alias mentions."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.alias):
        return node.asname or node.name.rsplit(".", 1)[-1]
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute module a file imports (at any depth), as ``(line, dotted name)``.

    ``from pkg import name`` yields ``pkg.name`` so that submodule imports written that way
    (``from palaced import errors``) are seen; relative imports are skipped.
    """
    return list(_scan(path).imports)


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _sync_core_files() -> list[Path]:
    assert all((REPO / edge).exists() for edge in SYNC_EDGES), SYNC_EDGES
    files = sorted(p for layer in SYNC_LAYERS for p in (DAEMON_DIR / layer).rglob("*.py")
                   if p.relative_to(REPO).as_posix() not in SYNC_EDGES)
    assert len(files) >= 60, files
    return files


def _layer(module: str) -> int | None:
    """The position of a module's folder in its package's layers (LAYERS for palaced,
    CLIENT_LAYERS for palace_client); None for the packages and their entry points."""
    parts = module.split(".")
    layers = {"palaced": LAYERS, "palace_client": CLIENT_LAYERS}.get(parts[0])
    if layers is None or len(parts) < 3:
        return None
    return layers.index(parts[1])


# -- (a) the layers: folders in order, nothing imports upward ---------------------------------
@pytest.mark.parametrize(("root", "layers", "entry"), [
    (DAEMON_DIR, LAYERS, ENTRY_POINTS), (CLIENT_DIR, CLIENT_LAYERS, CLIENT_ENTRY_POINTS)])
def test_packages_are_folders_by_layer(root: Path, layers: tuple[str, ...],
                                       entry: frozenset[str]) -> None:
    loose = sorted(p.name for p in root.glob("*.py") if p.name not in entry)
    assert not loose, f"modules directly under {root.name}/ (put each in a layer folder): {loose}"
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(layers), f"layer folders {folders} differ from {layers}"
    for layer in layers:
        assert (root / layer / "__init__.py").exists(), layer


# A layer folder that grew past a screenful of modules is split into rooms by concept (issue
# 28: store/ had 35 modules in one folder), each a sub-package of about 4-9 modules; the layer
# rule above counts a room as its layer (palaced.store.rows.drawers is layer "store").
ROOM_SIZES = range(4, 10)
MAX_FLAT_MODULES = 15


def test_rooms_of_a_layer_hold_four_to_nine_modules() -> None:
    store = DAEMON_DIR / "store"
    rooms = sorted(p for p in store.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms, "palaced/store/ is split into rooms"
    loose = sorted(p.name for p in store.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules directly under palaced/store/ (put each in a room): {loose}"
    for folder in [*(DAEMON_DIR / layer for layer in LAYERS), *rooms]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if folder in rooms:
            assert (folder / "__init__.py").exists(), folder
            assert len(modules) in ROOM_SIZES, f"{folder.name}: {len(modules)} modules"
        else:
            assert len(modules) <= MAX_FLAT_MODULES, f"{folder.name}: split it into rooms"


def test_no_layer_imports_a_later_one() -> None:
    graph = _import_graph()
    bad = sorted(f"{module} imports {dep}, a later layer" for module, deps in graph.items()
                 if (mine := _layer(module)) is not None for dep in deps
                 if _top(dep) == _top(module) and (theirs := _layer(dep)) is not None
                 and theirs > mine)
    assert not bad, "imports up the layer order (docs/development.md):\n" + "\n".join(bad)
    entry = sorted(f"{module} imports {dep}" for module, deps in graph.items()
                   if _layer(module) is not None for dep in deps
                   if dep in ("palaced.cli", "palaced.__main__", "palace_client.entry",
                              "palace_client.__main__"))
    assert not entry, entry


def test_layer_rule_sees_an_upward_import() -> None:
    assert _layer("palaced.store.conn.db") == LAYERS.index("store")
    assert _layer("palaced.cli") is None and _layer("palaced") is None
    assert _layer("palaced.wire.errors") == 0
    assert _layer("palace_client.cli.common") == CLIENT_LAYERS.index("cli")
    assert _layer("palace_client.entry") is None


def test_client_imports_only_wire_modules_of_palaced() -> None:
    files = sorted(CLIENT_DIR.rglob("*.py"))
    assert len(files) >= 5
    bad: list[str] = []
    for path in files:
        for line, name in _imports(path):
            if _top(name) != "palaced":
                continue
            if name == "palaced":  # plain `import palaced` reaches everything: not allowed
                bad.append(f"{path.relative_to(REPO)}:{line} import palaced")
                continue
            if name.startswith("palaced.wire.") or name in {
                    f"palaced.{n}" for n in CLIENT_ALLOWED_NAMES}:
                continue
            bad.append(f"{path.relative_to(REPO)}:{line} {name}")
    assert not bad, ("palace_client may import only palaced.wire and __version__:\n"
                     + "\n".join(bad))


def test_import_scanner_sees_nested_and_from_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from palaced.wire import errors as E\nfrom palaced import __version__\n"
                      "def f():\n    import palaced.store.conn.db\n    from . import x\n")
    assert _imports(sample) == [(1, "palaced.wire.errors"), (2, "palaced.__version__"),
                                (4, "palaced.store.conn.db")]


# -- (b) the wire layer stays light: the clients load it -------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in (DAEMON_DIR / "wire").glob("*.py")))
def test_wire_modules_import_nothing_heavy(name: str) -> None:
    heavy = [(line, mod) for line, mod in _imports(DAEMON_DIR / "wire" / name)
             if _top(mod) in HEAVY]
    assert not heavy, f"palaced/wire/{name} imports {heavy}"


# -- (b') the import graph: no cycles, ops apart from the daemon ---------------------------------
# Cycles that helpers restructuring those modules are removing right now; the final merge
# empties this list (the test fails on an entry that is no longer a cycle).
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_files() -> list[Path]:
    return sorted([*DAEMON_DIR.rglob("*.py"), *CLIENT_DIR.rglob("*.py")])


def _resolve(name: str, known: set[str]) -> str | None:
    """The module of ours that importing ``name`` loads (``pkg.mod.attr`` -> ``pkg.mod``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _relative_imports(path: Path) -> list[str]:
    """Modules named by relative imports (``from .x import y`` -> ``pkg.x.y``)."""
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for level, module, names in _scan(path).relative:
        base = package[:len(package) - level + 1]
        stem = ".".join([*base, *([module] if module else [])])
        found.extend(f"{stem}.{name}" for name in names)
    return found


@functools.cache
def _import_graph() -> dict[str, frozenset[str]]:
    """Module -> the modules of ours it imports, at any depth (functions, TYPE_CHECKING)."""
    files = {_module_name(p): p for p in _source_files()}
    known = set(files)
    graph: dict[str, frozenset[str]] = {}
    for module, path in files.items():
        names = [name for _, name in _imports(path)] + _relative_imports(path)
        deps = {_resolve(name, known) for name in names}
        graph[module] = frozenset(d for d in deps if d is not None and d != module)
    return graph


def _cycles(graph: Mapping[str, Set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_and_module_resolution() -> None:
    graph: dict[str, set[str]] = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [frozenset({"a", "b", "c"})]
    assert _resolve("palaced.ops.table.dispatch", {"palaced", "palaced.ops.table"}) == (
        "palaced.ops.table")


def test_no_import_cycles() -> None:
    cycles = _cycles(_import_graph())
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not new, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in new)
    assert not gone, f"no longer cycles, remove them from KNOWN_CYCLES: {gone}"


def test_ops_reach_the_daemon_only_through_their_context() -> None:
    graph = _import_graph()
    forbidden = {"palaced.daemon.core", "palaced.daemon.server", "palaced.daemon.scheduler", "palaced.cli"}
    bad = sorted(f"{module} imports {dep}" for module, deps in graph.items()
                 if module.startswith("palaced.ops") for dep in deps & forbidden)
    assert not bad, "\n".join(bad)
    ops = [m for m in graph if m.startswith("palaced.ops.")]
    assert len(ops) >= 7, ops


# -- (b''') the storage flavour is asked, never tested for ----------------------------------------
# Only palaced/palace/ (the storage strategies, ``storage.py`` and ``team.py``) and
# palaced/store/ (the SQL dialect, ``store/conn/dialect.py``) may know which flavour a
# palace is; everything else asks ``palace.storage`` (issue 28).
FLAVOUR_NAMES = frozenset({"TeamPalace", "is_pg", "TeamStorage", "LocalStorage", "PgStore"})
FLAVOUR_HOMES = ("palace", "store")


def _flavour_tests(path: Path) -> list[str]:
    """Where a file names a storage flavour (an import, a name, an attribute), as
    ``line name``: an ``isinstance`` on a palace class or a dialect check."""
    return list(_scan(path).flavour)


def test_flavour_scanner_sees_isinstance_and_dialect_checks(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("from palaced.palace.team import TeamPalace\n"
                      "from palaced.store import dialect\n"
                      "def f(p, c):\n    return isinstance(p, TeamPalace) or dialect.is_pg(c)\n")
    assert sorted(_flavour_tests(sample)) == ["1 TeamPalace", "4 TeamPalace", "4 is_pg"]


def test_no_flavour_checks_outside_palace_and_store() -> None:
    bad = [f"{p.relative_to(REPO).as_posix()}:{hit}" for p in sorted(DAEMON_DIR.rglob("*.py"))
           if p.relative_to(DAEMON_DIR).parts[0] not in FLAVOUR_HOMES
           for hit in _flavour_tests(p)]
    assert not bad, ("outside palaced/palace/ and palaced/store/, ask palace.storage instead "
                     "of testing the flavour (isinstance, is_pg):\n" + "\n".join(bad))


# -- (b'') SQL only in the store, modules that hold a concept whole -----------------------------
# Modules outside palaced/store/ that still run SQL; the list only shrinks (the test fails on
# an entry that no longer offends).
SQL_OUTSIDE_STORE: frozenset[str] = frozenset()
# The cap counts code lines (docstrings, comments and blank lines aside): high enough that a
# concept fits whole in one module, low enough to flag one that holds two.
MAX_CODE_LINES = 600


def _runs_sql(path: Path) -> bool:
    """Whether ``path`` calls ``.execute`` or ``.executemany``."""
    return _scan(path).runs_sql


def test_sql_runs_only_in_the_store() -> None:
    offenders = {p.relative_to(REPO).as_posix() for p in DAEMON_DIR.rglob("*.py")
                 if "store" not in p.relative_to(DAEMON_DIR).parts[:1] and _runs_sql(p)}
    assert not offenders - SQL_OUTSIDE_STORE, (
        "SQL (.execute/.executemany) outside palaced/store/: "
        f"{sorted(offenders - SQL_OUTSIDE_STORE)}")
    assert not SQL_OUTSIDE_STORE - offenders, (
        f"no SQL left, remove from SQL_OUTSIDE_STORE: {sorted(SQL_OUTSIDE_STORE - offenders)}")


DDL_RE = re.compile(r"^\s*(CREATE|ALTER|DROP)\s+(TABLE|INDEX|TRIGGER|VIEW|VIRTUAL|UNIQUE|"
                    r"TEMP|SCHEMA|SEQUENCE|EXTENSION|FUNCTION)", re.I)


def _ddl_strings(path: Path) -> list[int]:
    """Lines of string constants in ``path`` that start a DDL statement."""
    return list(_scan(path).ddl)


def test_ddl_lives_in_store_schema() -> None:
    """Issue 28: the schema has one home; every DDL statement of SQLite and PostgreSQL is in
    palaced/store/schema/ (the tables other modules own too: ``schema/tables.py``)."""
    home = DAEMON_DIR / "store" / "schema"
    bad = {p.relative_to(REPO).as_posix(): lines for p in sorted(DAEMON_DIR.rglob("*.py"))
           if not p.is_relative_to(home) and (lines := _ddl_strings(p))}
    assert not bad, f"DDL outside palaced/store/schema/: {bad}"
    assert _ddl_strings(home / "sqlite.py") and _ddl_strings(home / "pg.py")


def _code_lines(path: Path) -> int:
    """Lines holding code: not blank, not only a comment, not inside a docstring."""
    return _scan(path).code_lines


def test_code_line_counter(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text('"""Doc.\n\nMore."""\n\n# a comment\nx = 1\n\ndef f():\n'
                      '    """Doc."""\n    return x  # why\n')
    assert _code_lines(sample) == 3


def test_no_module_is_too_long() -> None:
    long = {p.relative_to(REPO).as_posix(): n for p in _source_files()
            if (n := _code_lines(p)) > MAX_CODE_LINES}
    assert not long, f"modules over {MAX_CODE_LINES} code lines: {long}"


# -- (c) the storage/retrieval core is synchronous ----------------------------------------------
def test_sync_core_does_not_import_anyio() -> None:
    bad = [f"{path.relative_to(REPO)}:{line} {mod}"
           for path in _sync_core_files()
           for line, mod in _imports(path) if _top(mod) == "anyio"]
    assert not bad, "the sync core must not use anyio:\n" + "\n".join(bad)


def _loaded_after(imports: str, watch: tuple[str, ...]) -> list[str]:
    """Top-level packages among ``watch`` loaded by running ``imports`` in a fresh interpreter."""
    code = (f"import sys\n{imports}\n"
            f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(watch)!r})))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    return [m for m in res.stdout.strip().split(",") if m]


@pytest.mark.daemon
def test_sync_core_does_not_load_anyio_transitively() -> None:
    modules = sorted({".".join(p.relative_to(REPO).with_suffix("").parts)
                      for p in _sync_core_files()})
    assert _loaded_after("\n".join(f"import {m}" for m in modules), ("anyio",)) == []


# -- (d) importing the clients loads no heavy library -------------------------------------------
@pytest.mark.daemon
def test_client_import_loads_no_heavy_library() -> None:
    loaded = _loaded_after("import palace_client, palace_client.cli, palace_client.mcp.stdio",
                           (*CLIENT_FORBIDDEN_AT_RUNTIME, "anyio", "tiktoken"))
    assert loaded == []


# -- (e) usearch + onnxruntime in one process ---------------------------------------------------
@pytest.mark.daemon
def test_usearch_then_onnxruntime_does_not_crash() -> None:
    code = (
        "import numpy as np\n"
        "import usearch.index\n"
        "import onnxruntime\n"
        "index = usearch.index.Index(ndim=4, metric='cos')\n"
        "index.add(1, np.ones(4, dtype=np.float32))\n"
        "assert int(index.search(np.ones(4, dtype=np.float32), 1).keys[0]) == 1\n"
        "print(onnxruntime.get_available_providers()[0])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, (
        f"usearch + onnxruntime crashed (returncode {res.returncode}; usearch 2.26 segfaults "
        f"here, pyproject pins <2.26): {res.stderr[-2000:]}")
    assert res.stdout.strip().endswith("ExecutionProvider")


# -- (f) CI runs the README's test command ------------------------------------------------------
def _readme_commands() -> list[str]:
    """The command lines of the README's first fenced code block (which opens the file)."""
    text = (REPO / "README.md").read_text("utf-8")
    match = re.match(r"\A```(?:bash|sh|shell)?\n(.*?)\n```\n", text, re.S)
    assert match, "README.md must start with a code block holding the two main commands"
    return [ln for ln in match.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def _ci_commands() -> list[str]:
    lines = (REPO / ".ci" / "run").read_text("utf-8").splitlines()
    return [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_readme_starts_with_the_setup_and_test_commands() -> None:
    setup, test = _readme_commands()
    # Command 1 installs for the user into a venv of its own (no PEP 668 clash, no test
    # extras); command 2 the test extras, into the development venv .ci/run makes.
    assert setup.startswith("python3 -m venv ~/.local/palace && ~/.local/palace/bin/pip "
                            "install . && ")
    assert "[test]" not in setup
    assert "create demo --exist-ok && $P remember" in setup and "$P recall" in setup
    assert test == TEST_COMMAND


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    readme_test = _readme_commands()[1]
    ci = _ci_commands()
    assert ci[0] == "set -euo pipefail"
    # The test command is the script's last command, so its status is the script's status
    # even though `set -e` does not stop inside an && list.
    assert ci[-1] == readme_test == TEST_COMMAND
    assert not any("mcp_clients" in ln for ln in ci), "the npm MCP client checks are not CI"


def test_ci_script_is_executable_bash() -> None:
    script = REPO / ".ci" / "run"
    assert script.read_text("utf-8").startswith("#!/usr/bin/env bash\n")
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, res.stderr


# -- service files ------------------------------------------------------------------------------
def _unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((REPO / "systemd" / name).read_text("utf-8"))
    return unit


def test_systemd_units() -> None:
    socket_unit = _unit("palaced.socket")
    assert socket_unit["Socket"]["ListenStream"] == "%t/palace/palaced.sock"
    assert socket_unit["Socket"]["FileDescriptorName"] == "palaced"
    assert socket_unit["Socket"]["SocketMode"] == "0600"
    assert socket_unit["Install"]["WantedBy"] == "sockets.target"
    unit = _unit("palaced.service")
    service = unit["Service"]
    assert service["Type"] == "notify"
    assert service["ExecStart"] == "%h/.local/bin/palaced run"
    assert service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    assert "%t/palace" in service["ReadWritePaths"].split()
    assert set(service["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert unit["Unit"]["Requires"] == "palaced.socket"
    assert unit["Install"]["WantedBy"] == "default.target"


def test_launchd_agent() -> None:
    with (REPO / "launchd" / "dev.palace.palaced.plist").open("rb") as fh:
        agent = plistlib.load(fh)
    assert agent["Label"] == "dev.palace.palaced"
    assert Path(agent["ProgramArguments"][0]).name == "palaced"
    assert agent["ProgramArguments"][1:] == ["run"]
    assert agent["Sockets"]["palaced"]["SockPathName"].endswith("/palaced.sock")
    assert agent["Sockets"]["palaced"]["SockPathMode"] == 0o600
    assert agent["KeepAlive"] == {"SuccessfulExit": False} and agent["RunAtLoad"] is True
    assert agent["StandardOutPath"] and agent["StandardErrorPath"]


# -- (g) tests/ mirrors the packages ------------------------------------------------------------
TESTS_DIR = REPO / "tests"
# The folder map: a test module lives in the folder of what it tests, and its text shows it.
# tests/palaced/L/ holds the tests of palaced/L/ (they name ``palaced.L`` or ``palaced/L/``),
# likewise tests/palace_client/L/; tests/e2e/ the end-to-end tests (real processes through
# daemon, CLI, MCP, agents), tests/project/ those of the project's own files (docs, bench,
# CI), tests/support/ the helper modules every test shares (and the tests of those).
TEST_FOLDERS = {
    **{f"palaced/{layer}": rf"\bpalaced[./]{layer}\b" for layer in LAYERS},
    **{f"palace_client/{layer}": rf"\bpalace_client[./]{layer}\b" for layer in CLIENT_LAYERS},
    "e2e": r"DaemonProc|mark\.daemon|\b(daemon|shared_daemon|keyword_daemon|pg_url)\s*:",
    # Real agent binaries from npm (tests/agents/package.json) against a model stand-in.
    "e2e/agents": r"DaemonProc|mark\.daemon",
    "project": r"\b(bench|docs)\b|README",
    "support": r"\btests[./]support\b",
}
# A layer also shows through the tool that drives it.
EXTRA_EVIDENCE = {
    "palaced/ops": r"\binproc\s*:",  # the daemon core in-process runs the ops
    "palace_client/cli": r"\.cli\(|CliRunner",
    "palace_client/mcp": r"\"mcp\"|palace mcp",
}
DATA_FOLDERS = frozenset({"fixtures", "__pycache__"})


def _misplaced_tests(root: Path) -> list[str]:
    """What under ``root`` (a tests/ folder) breaks the folder map TEST_FOLDERS."""
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        folder = rel.parent.as_posix()
        if rel.parts[0] in DATA_FOLDERS or path.name == "__init__.py":
            continue
        if folder == ".":
            if path.name != "conftest.py":
                bad.append(f"{rel}: directly under tests/ (put it in its folder)")
        elif folder not in TEST_FOLDERS:
            bad.append(f"{rel}: {folder}/ mirrors no package folder")
        elif not (path.parent / "__init__.py").exists():
            bad.append(f"{rel}: {folder}/ has no __init__.py (test basenames repeat)")
        elif not path.name.startswith("test_"):
            if folder != "support":
                bad.append(f"{rel}: helper modules live in tests/support/")
        elif not any(re.search(pattern, path.read_text("utf-8")) for pattern in
                     (TEST_FOLDERS[folder], EXTRA_EVIDENCE.get(folder, TEST_FOLDERS[folder]))):
            bad.append(f"{rel}: names nothing of {folder}")
    return bad


def test_tests_mirror_the_packages() -> None:
    assert len(list(TESTS_DIR.rglob("test_*.py"))) >= 90
    bad = _misplaced_tests(TESTS_DIR)
    assert not bad, ("each test module lives in the folder of what it tests "
                     "(docs/development.md, TEST_FOLDERS):\n" + "\n".join(bad))


def test_test_folder_rule_sees_a_misplaced_module(tmp_path: Path) -> None:
    modules = {"conftest.py": "", "test_loose.py": "", "palaced/test_half.py": "",
               "palaced/store/test_ok.py": "from palaced.store import db\n",
               "palaced/text/test_wrong.py": "from palaced.store import db\n",
               "palaced/ops/test_inproc.py": "def test_x(inproc: InProcDaemon) -> None: ...\n",
               "palaced/nowhere/test_x.py": "", "e2e/helper.py": "",
               "e2e/test_ok.py": "def test_x(keyword_daemon: DaemonProc) -> None: ...\n",
               "project/test_unpackaged.py": "README", "support/helper.py": ""}
    for name, text in modules.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if path.parent != tmp_path and name != "project/test_unpackaged.py":
            (path.parent / "__init__.py").write_text("")
    assert _misplaced_tests(tmp_path) == [
        "e2e/helper.py: helper modules live in tests/support/",
        "palaced/nowhere/test_x.py: palaced/nowhere/ mirrors no package folder",
        "palaced/test_half.py: palaced/ mirrors no package folder",
        "palaced/text/test_wrong.py: names nothing of palaced/text",
        "project/test_unpackaged.py: project/ has no __init__.py (test basenames repeat)",
        "test_loose.py: directly under tests/ (put it in its folder)",
    ]
