"""The documentation holds: generated parts current, links resolve, the quick start prints as shown.

* ``docs/gen.py`` regenerated in memory equals the committed files (CLI help, error and exit
  codes, ops, config keys, environment variables, client methods, MCP tools, tuning constants;
  for the CLI help, its content: another rich version may draw the same help differently);
* every relative link (and ``#anchor``) in ``README.md`` and ``docs/*.md`` points at something;
* the README starts with the two commands, then the title, and stays a short landing page;
* the README's quick start, run command by command against a cold keyword-only daemon under a
  fresh ``PALACE_HOME``, prints exactly what the README shows (pids and the scratch path masked).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import short_home

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 250
QUICKSTART_MARK = "<!-- quickstart: tests/project/test_docs.py runs this block -->"


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", DOCS / "gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- generated reference ------------------------------------------------------------------------
def _help_content(text: str) -> str:
    """``--help`` text without box drawing and line wrapping (which rich versions change)."""
    return " ".join(re.sub(r"[╭╮╰╯│─]", " ", text).split())


@pytest.mark.slow
def test_generated_docs_are_current() -> None:
    gen = _load_gen()
    rendered: dict[Path, str] = gen.render_all()
    stale = []
    for path, text in rendered.items():
        current = path.read_text("utf-8") if path.is_file() else ""
        if path.name == "cli.md" and _help_content(current) == _help_content(text):
            continue  # same commands, options and help; only the rendering differs
        if current != text:
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(),
                                        f"{path.name} (committed)", f"{path.name} (code)",
                                        lineterm="", n=1)
            stale.append("\n".join(list(diff)[:40]))
    assert not stale, ("docs/ is stale: run python docs/gen.py and commit the result\n\n"
                       + "\n\n".join(stale))


def test_generator_covers_every_command_and_error() -> None:
    from palaced.wire import errors

    cli = (DOCS / "cli.md").read_text("utf-8")
    for name in ("remember", "recall", "wake-up", "kg assert", "daemon stop", "init", "mcp"):
        assert f"## palace {name}\n" in cli
    assert "## palaced run\n" in cli and "\x1b[" not in cli
    assert cli.count("\n## palace ") >= 30  # every command, subcommands included
    protocol = (DOCS / "protocol.md").read_text("utf-8")
    for code, cls in errors.error_classes().items():
        assert f"| {code} | `{cls.name}` |" in protocol


def test_generated_region_markers_are_required() -> None:
    gen = _load_gen()
    text = "a\n<!-- BEGIN GENERATED: x -->\nold\n<!-- END GENERATED: x -->\nb\n"
    assert gen.replace_sections(text, {"x": "new\n"}, "t.md") == (
        "a\n<!-- BEGIN GENERATED: x -->\nnew\n<!-- END GENERATED: x -->\nb\n")
    with pytest.raises(gen.GenError, match="y"):
        gen.replace_sections(text, {"y": "new"}, "t.md")


# -- links --------------------------------------------------------------------------------------
_FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _without_code_blocks(text: str) -> str:
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in _HEADING.finditer(_without_code_blocks(path.read_text("utf-8"))):
        slug = _slug(match.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_doc_files_exist() -> None:
    names = {p.name for p in DOCS.glob("*.md")}
    assert {"cli.md", "concepts.md", "python-api.md", "agents.md", "configuration.md",
            "protocol.md", "benchmarks.md", "development.md"} <= names


def test_relative_links_resolve() -> None:
    bad: list[str] = []
    checked = 0
    for doc in _doc_files():
        for target in _LINK.findall(_without_code_blocks(doc.read_text("utf-8"))):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            checked += 1
            where = f"{doc.relative_to(REPO)} -> {target}"
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                bad.append(f"{where}: no such file")
                continue
            if not anchor:
                continue
            if dest.suffix == ".md":
                if anchor not in _anchors(dest):
                    bad.append(f"{where}: no heading with anchor #{anchor}")
            elif re.fullmatch(r"L\d+", anchor):
                lines = dest.read_text("utf-8").count("\n") + 1
                if int(anchor[1:]) > lines:
                    bad.append(f"{where}: the file has {lines} lines")
            else:
                bad.append(f"{where}: cannot check anchor #{anchor}")
    assert checked > 30
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_slug_matches_github() -> None:
    assert _slug("`palace init`") == "palace-init"
    assert _slug("Context levels L0-L3") == "context-levels-l0-l3"
    assert _slug("Protocol v1, errors and exit codes") == "protocol-v1-errors-and-exit-codes"
    assert _slug("What a score means") == "what-a-score-means"


# -- README shape -------------------------------------------------------------------------------
def test_readme_is_a_short_landing_page() -> None:
    text = README.read_text("utf-8")
    lines = text.splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    block_end = lines.index("```", 1)
    assert lines[0].startswith("```") and block_end <= 6, "README must open with the commands"
    title = next(i for i, ln in enumerate(lines) if i > block_end and ln.startswith("# "))
    assert lines[title] == "# palace" and title == block_end + 2
    assert "╭─" not in text, "pasted command help belongs in docs/cli.md"


# -- quick start --------------------------------------------------------------------------------
_SCRATCH = re.compile(r"/tmp/tmp\.[A-Za-z0-9]+")
_PID = re.compile(r"\bpid \d+")


def _quickstart() -> list[tuple[str, list[str]]]:
    """The README quick start as ``(command, expected output lines)`` pairs."""
    text = README.read_text("utf-8")
    assert QUICKSTART_MARK in text, "README.md lost its quick start marker"
    block = text.split(QUICKSTART_MARK, 1)[1]
    match = re.match(r"\s*```console\n(.*?)\n```", block, re.S)
    assert match, "the quick start marker must precede a ```console block"
    steps: list[tuple[str, list[str]]] = []
    for line in match.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before the first command: {line!r}"
            steps[-1][1].append(line)
    return steps


def _mask(text: str, home: Path | None = None) -> str:
    if home is not None:
        text = text.replace(str(home), "$PALACE_HOME")
    # Recall and wake-up heads show the day a drawer was stored: today, whenever this runs.
    return _DAY.sub(r"\1 YYYY-MM-DD", _PID.sub("pid N", _SCRATCH.sub("$PALACE_HOME", text)))


_DAY = re.compile(r"(?<=^- #)(\d+ \[.*) \d{4}-\d{2}-\d{2}$")


@pytest.mark.daemon
@pytest.mark.slow
def test_readme_quickstart_prints_what_it_shows() -> None:
    steps = _quickstart()
    assert steps[0][0].startswith("export PALACE_HOME=$(mktemp -d)"), steps[0][0]
    home = short_home()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PALACE") and k != "TIKTOKEN_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    expected: list[str] = []
    actual: list[str] = []
    try:
        for command, output in steps:
            words = shlex.split(command.replace("$(mktemp -d)", str(home)))
            expected += [f"$ {command}", *output]
            actual.append(f"$ {command}")
            if words[0] == "export":
                for assignment in words[1:]:
                    key, _, value = assignment.partition("=")
                    env[key] = value
                continue
            assert words[0] == "palace", f"the quick start may only run palace: {command}"
            if words[1:3] == ["create", "demo"]:
                assert not (home / "run" / "palaced.sock").exists(), "the daemon is not cold"
            res = subprocess.run([sys.executable, "-m", "palace_client", *words[1:]], env=env,
                                 capture_output=True, text=True, timeout=60, cwd=home)
            actual += (res.stderr + res.stdout).splitlines()
            assert res.returncode == 0, f"{command} exited {res.returncode}: {res.stderr}"
    finally:
        _stop(home, env)
    want = [_mask(line) for line in expected]
    got = [_mask(line, home) for line in actual]
    assert got == want, "README quick start output differs (fix README.md or the code):\n" + (
        "\n".join(difflib.unified_diff(want, got, "README.md", "actual", lineterm="")))


def _stop(home: Path, env: dict[str, str]) -> None:
    """Stop the daemon the quick start started if it still runs, then remove its home."""
    if (home / "run" / "palaced.sock").exists():
        subprocess.run([sys.executable, "-m", "palace_client", "daemon", "stop"], env=env,
                       capture_output=True, timeout=60, cwd=home)
    shutil.rmtree(home, ignore_errors=True)
