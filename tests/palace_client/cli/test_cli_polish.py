"""What a person sees in the CLI (issue 29): help text at 80 columns, exit codes in help,
error texts naming the command's flags, ``palace get``, ``palaced -h``/``--version``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
import typer.rich_utils as ru
from typer.testing import CliRunner

from palace_client.cli import app
from palace_client.cli.common import (
    EXIT_INVALID,
    EXIT_NO_SERVICE_MANAGER,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
)
from tests.conftest import DaemonProc, base_env, short_home

pytestmark = pytest.mark.daemon


@pytest.fixture(scope="module")
def kd() -> Iterator[DaemonProc]:
    """One keyword-only daemon for the module, with palace ``p`` holding drawer 1."""
    import shutil

    path = short_home()
    d = DaemonProc(path, base_env(path, model=False))
    d.start()
    d.cli("create", "p", check=True)
    d.cli("remember", "-p", "p", "the frontend is built with React 18 and Vite", check=True)
    yield d
    d.stop()
    shutil.rmtree(path, ignore_errors=True)


def _error(res: object) -> str:
    import subprocess

    assert isinstance(res, subprocess.CompletedProcess)
    return str(res.stderr).strip()


@pytest.fixture
def width80(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Typer's rich help at 80 columns without colour, as a person's terminal shows it."""
    monkeypatch.setattr(ru, "MAX_WIDTH", 80)
    monkeypatch.setattr(ru, "FORCE_TERMINAL", False)
    monkeypatch.setattr(ru, "COLOR_SYSTEM", None)
    yield


def _help(*path: str) -> str:
    res = CliRunner().invoke(app, [*path, "--help"], prog_name="palace",
                             env={"COLUMNS": None, "PALACE": None})
    assert res.exit_code == 0, res.output
    return res.output


def _paths() -> list[list[str]]:
    """Every command path of ``palace``, as docs/gen.py walks them."""
    from tests.project.test_docs import _load_gen

    return [path for path, _ in _load_gen()._command_paths(typer.main.get_command(app))]


def test_help_prose_wraps_evenly_at_80_columns(width80: None) -> None:
    """A paragraph of help is wrapped by rich at the terminal's width, not at the source's
    line breaks: no prose line is cut short while the paragraph goes on."""
    ragged = []
    for path in _paths():
        lines = [ln.rstrip() for ln in _help(*path).splitlines()]
        for line, after in itertools.pairwise(lines):
            prose = line.strip() and line.lstrip()[:1] not in "╭│╰"
            goes_on = after.strip() and after.lstrip()[:1] not in "╭│╰"
            if prose and goes_on and len(line) < 45 and not line.lstrip().startswith("Usage"):
                ragged.append((" ".join(path), line, after))
    assert not ragged, ragged[:5]


def test_help_keeps_square_brackets(width80: None) -> None:
    """Rich markup must not eat ``[trash]`` or ``[stores.NAME]`` from the help."""
    assert "[trash] keep_days" in _help("trash")
    assert "[stores.NAME]" in " ".join(_help("create").split())


def test_doctor_help_states_the_exit_codes_it_uses(width80: None) -> None:
    text = " ".join(_help("doctor").split())
    assert f"{EXIT_UNHEALTHY} when a check failed" in text
    assert f"{EXIT_UNREACHABLE} when no daemon could be reached" in text
    assert EXIT_UNHEALTHY != EXIT_NO_SERVICE_MANAGER


@pytest.mark.parametrize(("args", "said"), [
    (["audit", "-p", "p", "--since", "bad"], "bad --since 'bad': use a duration back from now"),
    (["audit", "-p", "p", "--since", "2020-13-01"], "--since: invalid date '2020-13-01'"),
    (["remember", "-p", "p", "x", "--when", "bad"], "--when: invalid date 'bad'"),
    (["update", "-p", "p", "1"],
     "nothing to update: give --text, --wing, --room, --tag or --importance"),
])
def test_errors_name_the_commands_flags(kd: DaemonProc, args: list[str], said: str) -> None:
    """An error about an argument names the flag the person typed, not the protocol's name
    (``ttl``, ``occurred_at``, ``wing``)."""
    res = kd.cli(*args)
    assert res.returncode == EXIT_INVALID, res.stderr
    assert said in _error(res)
    assert "ttl" not in _error(res) and "occurred_at" not in _error(res)


@pytest.mark.parametrize("kind", ["markdown", "chatgpt", "claude-code"])
def test_a_missing_import_source_is_source_unreadable(kd: DaemonProc, kind: str) -> None:
    """Every importer reports a source that is not there alike: SOURCE_UNREADABLE, exit 5."""
    res = kd.cli("import", kind, "-p", "p", str(kd.home / "no-such-thing"))
    assert res.returncode == EXIT_INVALID, res.stderr
    assert _error(res).endswith("[SOURCE_UNREADABLE]")


def test_palaced_has_short_help_and_version() -> None:
    """``palaced -h`` and ``palaced --version`` work as ``palace``'s do, starting nothing."""
    import subprocess
    import sys

    from palaced import __version__

    env = base_env(short_home(), model=False)
    for flags in (["-h"], ["run", "-h"]):
        res = subprocess.run([sys.executable, "-m", "palaced", *flags], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "Usage: palaced" in res.stdout
    res = subprocess.run([sys.executable, "-m", "palaced", "--version"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout) == (0, f"palaced {__version__}\n"), res.stderr
    assert not (Path(env["PALACE_HOME"]) / "run").exists()  # no daemon was started


def test_backup_to_relative_and_tilde(kd: DaemonProc, tmp_path: Path) -> None:
    """``--to DIR`` relative is the current directory's, as documented; ``--to=~/DIR`` (which
    no shell expands) is under the home directory, not a directory named ``~``."""
    import json
    import subprocess
    import sys

    env = {**kd.env, "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    for to, under in (("rel", tmp_path / "cwd" / "rel"), ("~/bk", tmp_path / "home" / "bk")):
        res = subprocess.run([sys.executable, "-m", "palace_client", "backup", "-p", "p",
                              f"--to={to}", "--json"], env=env, cwd=tmp_path / "cwd",
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        path = Path(json.loads(res.stdout)["backups"][0]["path"])
        assert path.parent.parent == under, path
    assert not (tmp_path / "cwd" / "~").exists()


def test_daemon_leaves_a_users_own_files_in_palace_home_alone() -> None:
    """The daemon makes its own files private at start, not whatever else a person keeps in
    ``PALACE_HOME`` (which is also the config directory there)."""
    import os
    import shutil

    path = short_home()
    path.mkdir(parents=True, exist_ok=True)
    notes, config = path / "notes.md", path / "config.toml"
    notes.write_text("my own notes\n")
    config.write_text("")
    for f in (notes, config):
        os.chmod(f, 0o644)
    d = DaemonProc(path, base_env(path, model=False))
    d.start()
    try:
        assert os.stat(notes).st_mode & 0o777 == 0o644
        assert os.stat(config).st_mode & 0o777 == 0o600  # palace's own file still is
        assert os.stat(path).st_mode & 0o777 == 0o700
    finally:
        d.stop()
        shutil.rmtree(path, ignore_errors=True)


def test_get_shows_source_supersession_and_expiry(kd: DaemonProc) -> None:
    """``palace get`` (text) says where a drawer came from, what replaced it and when it
    expires: what ``--json`` always had."""
    import re

    first = kd.cli("remember", "-p", "p", "the office wifi is on channel 6", "--source",
                   "notes.md", "--ttl", "7d", check=True).stdout
    old = re.search(r"drawer (\d+)", first)
    assert old
    second = kd.cli("remember", "-p", "p", "the office wifi is on channel 11", "--supersedes",
                    old.group(1), check=True).stdout
    new = re.search(r"drawer (\d+)", second)
    assert new
    shown = kd.cli("get", "-p", "p", old.group(1), check=True).stdout
    assert re.search(rf"source notes\.md  superseded by \[{new.group(1)}\]  expires "
                     r"\d{4}-\d\d-\d\dT", shown), shown
    assert f"supersedes [{old.group(1)}]" in kd.cli("get", "-p", "p", new.group(1),
                                                   check=True).stdout


def test_provenance_says_expired_once_past() -> None:
    from palace_client.render.details import provenance

    assert provenance({"kind": "drawer", "expires_ms": 1000}, now_ms=2000) == (
        "    expired 1970-01-01T00:00:01Z")
    assert provenance({"kind": "drawer", "source": None, "supersedes": []}) is None


def test_a_missing_model_is_explained_without_a_python_exception() -> None:
    """With no model installed (and no download), status and the keyword-only notice say
    where the model was looked for, not fastembed's ``ValueError: Could not load model``."""
    import json
    import shutil

    path = short_home()
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.toml").write_text("[embedder]\nallow_download = false\n")
    env = base_env(path, model=False)
    del env["PALACE_EMBED_MODEL"]  # the default model, which is not installed here
    d = DaemonProc(path, env)
    d.start()
    try:
        model = json.loads(d.cli("status", "--json", check=True).stdout)["model"]
        assert model["state"] == "unavailable"
        assert "not in the fastembed cache" in model["reason"], model
        d.cli("create", "m", check=True)
        notice = d.cli("recall", "-p", "m", "anything", check=True).stderr
        assert "keyword-only" in notice
        for said in (model["reason"], notice):
            assert "Error" not in said and "Could not load" not in said, said
    finally:
        d.stop()
        shutil.rmtree(path, ignore_errors=True)


def test_doctor_reports_an_invalid_config_once_and_points_at_check_config() -> None:
    """A config file that is valid TOML but that the daemon refuses (``threads = "two"``):
    doctor's config check fails with the daemon's own words, instead of "ok ... parses" beside
    the daemon's failure, and the advice names ``palaced check-config``, not the log."""
    import json
    import shutil

    path = short_home()
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.toml").write_text('[embedder]\nthreads = "two"\n')
    d = DaemonProc(path, base_env(path, model=False))
    try:
        res = d.cli("doctor", "--json")
        assert res.returncode == EXIT_UNREACHABLE, res.stderr
        checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
        assert checks["config"]["status"] == "fail"
        assert "threads must be an integer" in checks["config"]["detail"]
        assert "palaced check-config" in checks["config"]["advice"]
        assert "config" in checks["daemon"]["advice"]
        assert "daemon log" not in checks["daemon"]["advice"]
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _chatgpt_export(path: Path, n: int) -> Path:
    import json

    convs = [{"id": f"c{i}", "title": f"conversation {i}", "create_time": 1700000000 + i,
              "mapping": {
                  "a": {"id": "a", "parent": None, "children": ["b"], "message": {
                      "author": {"role": "user"}, "create_time": 1700000000 + i,
                      "content": {"content_type": "text",
                                  "parts": [f"question {i} about deploying billing"]}}},
                  "b": {"id": "b", "parent": "a", "children": [], "message": {
                      "author": {"role": "assistant"}, "create_time": 1700000001 + i,
                      "content": {"content_type": "text",
                                  "parts": [f"answer {i}: blue green with a canary"]}}}}}
             for i in range(n)]
    path.write_text(json.dumps(convs))
    return path


def test_import_progress_fits_80_columns(kd: DaemonProc, tmp_path: Path) -> None:
    """``palace import`` on an 80-column terminal draws a line that fits: the count, the
    totals and the counts whole, not ``━━ 2… conversations … 0:…``."""
    import fcntl
    import os
    import pty
    import re
    import struct
    import subprocess
    import sys
    import termios

    export = _chatgpt_export(tmp_path / "chatgpt-export-conversations-2026-12-05.json", 40)
    kd.cli("create", "imp", check=True)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "palace_client", "import", "chatgpt", "-p", "imp", str(export)],
        env={**kd.env, "COLUMNS": "80", "TERM": "xterm"}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    raw = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    assert proc.wait(60) == 0
    assert proc.stdout is not None and "40 stored" in proc.stdout.read().decode()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode("utf-8", "replace"))
    frames = [f.rstrip() for f in re.split(r"[\r\n]", text) if "/40" in f]
    assert frames, text
    for frame in frames:
        assert len(frame) <= 80, frame
        assert "…" not in frame.split("━")[-1], frame  # only the file's name may be cut
    assert any(re.search(r"40/40 40 stored", f) for f in frames), frames


def test_import_progress_fits_every_width() -> None:
    import io

    from rich.console import Console

    from palace_client.importers.progress import Progress

    for width in (60, 80, 100, 131, 132, 200):
        console = Console(file=io.StringIO(), width=width, force_terminal=True,
                          color_system=None)
        bar = Progress(True, "chatgpt /home/someone/Downloads/chatgpt-export-2026.json",
                       "conversation", 3000, console=console)
        for _ in range(3000):
            bar.advance(stored=2999, unchanged=1, skipped=3000)
        out = Console(file=io.StringIO(), width=width, color_system=None)
        out.print(bar.render())
        line = out.file.getvalue().rstrip("\n")  # type: ignore[attr-defined]
        assert "\n" not in line and len(line) <= width, (width, line)
        assert "3000/3000" in line, (width, line)
        assert "2999 stored, 1 unchanged, 3000 skipped" in line, (width, line)
