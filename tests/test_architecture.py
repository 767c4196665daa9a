"""Architecture rules that keep the clients thin and the daemon's layers apart.

* the clients (``palace_client``) use only the daemon's wire leaf modules;
* those leaf modules pull in none of the heavy daemon dependencies;
* the storage/retrieval core is synchronous (no anyio: the daemon runs it in threads);
* importing the clients loads no database, vector, model or numeric library;
* usearch and onnxruntime coexist in one process (usearch 2.26 segfaulted there);
* CI runs exactly the test command the README documents, and the service files are sane.
"""

from __future__ import annotations

import ast
import configparser
import plistlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLIENT_DIR = REPO / "palace_client"
DAEMON_DIR = REPO / "palaced"

# What palace_client may import from palaced: the wire leaf modules and the version string.
CLIENT_ALLOWED = frozenset({"palaced.errors", "palaced.protocol", "palaced.paths",
                            "palaced.specs", "palaced.vocab"})
CLIENT_ALLOWED_NAMES = frozenset({"__version__"})
LEAF_MODULES = ("protocol.py", "errors.py", "paths.py", "specs.py", "vocab.py")
HEAVY = frozenset({"apsw", "usearch", "fastembed", "numpy", "tiktoken", "anyio"})
SYNC_CORE = ("store/*.py", "index.py", "embedder.py", "fusion.py", "packing.py", "search.py",
             "chunking.py", "topics.py", "tokens.py", "rules.py", "timeparse.py")
CLIENT_FORBIDDEN_AT_RUNTIME = ("apsw", "usearch", "fastembed", "numpy", "onnxruntime")
TEST_COMMAND = ("pip install -e '.[test]' && ruff check palaced palace_client && mypy "
                "&& python -m pytest -q")


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute module a file imports (at any depth), as ``(line, dotted name)``.

    ``from pkg import name`` yields ``pkg.name`` so that submodule imports written that way
    (``from palaced import errors``) are seen; relative imports are skipped.
    """
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _sync_core_files() -> list[Path]:
    files = sorted({p for pattern in SYNC_CORE for p in DAEMON_DIR.glob(pattern)})
    assert len(files) >= len(SYNC_CORE), files
    return files


# -- (a) clients import only the wire leaf modules of the daemon --------------------------------
def test_client_imports_only_wire_modules_of_palaced() -> None:
    files = sorted(CLIENT_DIR.glob("*.py"))
    assert len(files) >= 5
    bad: list[str] = []
    for path in files:
        for line, name in _imports(path):
            if _top(name) != "palaced":
                continue
            if name == "palaced":  # plain `import palaced` reaches everything: not allowed
                bad.append(f"{path.name}:{line} import palaced")
                continue
            second = ".".join(name.split(".")[:2])
            if second in CLIENT_ALLOWED or name in {f"palaced.{n}" for n in CLIENT_ALLOWED_NAMES}:
                continue
            bad.append(f"{path.name}:{line} {name}")
    assert not bad, ("palace_client may import only the wire modules and __version__:\n"
                     + "\n".join(bad))


def test_import_scanner_sees_nested_and_from_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from palaced import errors as E, __version__\n"
                      "def f():\n    import palaced.store.db\n    from . import x\n")
    assert _imports(sample) == [(1, "palaced.errors"), (1, "palaced.__version__"),
                                (3, "palaced.store.db")]


# -- (b) the leaf modules stay light ------------------------------------------------------------
@pytest.mark.parametrize("name", LEAF_MODULES)
def test_wire_leaf_modules_import_nothing_heavy(name: str) -> None:
    heavy = [(line, mod) for line, mod in _imports(DAEMON_DIR / name) if _top(mod) in HEAVY]
    assert not heavy, f"palaced/{name} imports {heavy}"


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


def test_sync_core_does_not_load_anyio_transitively() -> None:
    modules = sorted({".".join(p.relative_to(REPO).with_suffix("").parts)
                      for p in _sync_core_files()})
    assert _loaded_after("\n".join(f"import {m}" for m in modules), ("anyio",)) == []


# -- (d) importing the clients loads no heavy library -------------------------------------------
def test_client_import_loads_no_heavy_library() -> None:
    loaded = _loaded_after("import palace_client, palace_client.cli, palace_client.mcp_bridge",
                           (*CLIENT_FORBIDDEN_AT_RUNTIME, "anyio", "tiktoken"))
    assert loaded == []


# -- (e) usearch + onnxruntime in one process ---------------------------------------------------
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
    assert setup.startswith("pip install -e '.[test]' && palace create demo --exist-ok && palace remember")
    assert "palace recall" in setup
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
def test_systemd_unit() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((REPO / "systemd" / "palaced.service").read_text("utf-8"))
    service = unit["Service"]
    assert service["Type"] == "simple"
    assert service["ExecStart"] == "%h/.local/bin/palaced run"
    assert service["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"


def test_launchd_agent() -> None:
    with (REPO / "launchd" / "dev.palace.palaced.plist").open("rb") as fh:
        agent = plistlib.load(fh)
    assert agent["Label"] == "dev.palace.palaced"
    assert Path(agent["ProgramArguments"][0]).name == "palaced"
    assert agent["ProgramArguments"][1:] == ["run"]
    assert agent["KeepAlive"] and agent["RunAtLoad"] is True
    assert agent["StandardOutPath"] and agent["StandardErrorPath"]
