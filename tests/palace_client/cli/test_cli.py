"""The CLI a person scripts: help on every parameter with its default, ``-h``, ``--version``,
shell completion, errors that name flags, ``remember -``, the ``drawers`` page footer and long
drawers, plurals, and ``palace daemon status|restart``.

In-process checks walk the real click command tree; everything that crosses the socket runs
the real CLI against a real keyword-only daemon.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner as ClickRunner
from typer.testing import CliRunner

from palace_client.cli import app
from palace_client.cli.common import flag_message, flag_names
from palace_client.cli.memory import page_footer
from palace_client.render.results import counted, excerpt
from palaced import __version__
from tests.conftest import DaemonProc, base_env, fresh_name
from tests.support.cli_commands import COMMANDS, ROOT
from tests.support.cli_inproc import InProcCliDaemonProc

CLI_SOURCES = [*sorted((Path(__file__).parents[3] / "palace_client" / "cli").glob("*.py")),
               Path(__file__).parents[3] / "palace_client" / "render" / "results.py"]




def _help(*args: str) -> str:
    # ROOT is the click command typer builds from ``app`` on each call, built once: the build
    # took 30 ms of the 45 of each of the 250 help pages these tests render.
    res = ClickRunner().invoke(ROOT, [*args], prog_name="palace",
                             env={"PALACE": None, "COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.output


def _shows_default(param: click.Parameter) -> bool:
    """Whether ``--help`` states what ``param`` is when it is not given."""
    if param.required or getattr(param, "envvar", None):
        return True
    if isinstance(param, click.Option) and param.is_flag and not param.secondary_opts:
        return True  # an on/off flag is off unless given (the app's help says so)
    if "default" in (getattr(param, "help", None) or "").lower():
        return True  # stated in the help text (palace mcp, palace init)
    show = getattr(param, "show_default", None)
    return isinstance(show, str) or (bool(show) and param.default not in (None, [], ()))


# -- help, -h, --version, completion ----------------------------------------------------------
@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_parameter_has_help_and_shows_its_default(path: str) -> None:
    command = COMMANDS[path]
    assert command.help, f"palace {path} has no help"
    expected_defaults = 0
    for param in command.params:
        where = f"palace {path}: {param.name}"
        assert (getattr(param, "help", None) or "").strip(), f"{where} has no help text"
        assert _shows_default(param), f"{where} shows no default (give op_option unset=...)"
        if isinstance(param, click.Option) and not param.required and not (
                param.is_flag and not param.secondary_opts) and not param.envvar \
                and "default" not in (param.help or "").lower():
            expected_defaults += 1
    text = _help(*path.split(), "--help")
    assert text.count("[default:") >= expected_defaults, text
    for param in command.params:
        if isinstance(param, click.Argument):
            assert param.help and param.help.split()[0] in text, f"{path}: argument help lost"


def test_root_and_groups_have_help() -> None:
    for param in ROOT.params:
        assert (getattr(param, "help", None) or "").strip(), param.name
    for name, group in ROOT.commands.items():  # type: ignore[attr-defined]
        if isinstance(group, click.Group):
            assert group.help, name


@pytest.mark.parametrize("group", ["", "model", "service", "import", "kg", "memoir"])
def test_command_listings_give_each_summary_on_its_own_row(group: str) -> None:
    # With room to spare, a listed command's summary is one row: a row in the Commands panel
    # that starts without a command name is a docstring's line break leaking into the help.
    res = CliRunner().invoke(app, [*group.split(), "--help"], prog_name="palace",
                             env={"PALACE": None, "COLUMNS": "1000"})
    text = res.output
    panel = text.split("Commands")[1].splitlines()[1:]
    rows = [line.strip("│ ") for line in panel if line.startswith("│")]
    node = ROOT
    for word in group.split():
        node = node.commands[word]  # type: ignore[attr-defined]
    names = set(node.commands)  # type: ignore[attr-defined]
    assert rows, text
    for row in rows:
        assert row.split()[0] in names, f"wrapped summary: {row!r}"


def test_dash_h_is_help_everywhere() -> None:
    assert _help("-h") == _help("--help")
    for path in ("remember", "kg assert", "daemon status", "init", "mcp"):
        assert _help(*path.split(), "-h") == _help(*path.split(), "--help")
    assert "-h" in _help("kg", "-h")


@pytest.mark.daemon
def test_version_is_the_clients_and_offline(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["--version"], prog_name="palace")
    assert res.exit_code == 0 and res.output == f"palace {__version__}\n"
    # As a real process, with a home where no daemon runs: nothing is started.
    env = base_env(tmp_path, model=False)
    out = subprocess.run([sys.executable, "-m", "palace_client", "--version"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"palace {__version__}\n"
    assert not (tmp_path / "run").exists()


@pytest.mark.daemon
def test_shell_completion_is_offered_and_completes() -> None:
    root = _help("--help")
    assert "--install-completion" in root and "--show-completion" in root
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    # The script --show-completion prints for bash (typer detects the shell from the process
    # tree, which a test run may not have: ask click's source mode, which it prints, directly).
    script = subprocess.run([sys.executable, "-m", "palace_client"], capture_output=True,
                            text=True, timeout=60, env={**env, "_PALACE_COMPLETE": "source_bash"})
    assert script.returncode == 0 and "_PALACE_COMPLETE=complete_bash" in script.stdout
    # What the installed script runs on TAB: commands and flags complete.
    for words, cword, want in (("palace rec", 1, "recall"), ("palace kg ne", 2, "neighbors"),
                               ("palace recall --to", 2, "--top-k"),
                               ("palace daemon re", 2, "restart")):
        res = subprocess.run([sys.executable, "-m", "palace_client"], capture_output=True,
                             text=True, timeout=60, env={**env, "_PALACE_COMPLETE":
                                                         "complete_bash", "COMP_WORDS": words,
                                                         "COMP_CWORD": str(cword)})
        assert want in res.stdout.split(), (words, res.stdout, res.stderr)


# -- errors name flags ------------------------------------------------------------------------
def test_flag_names_come_from_op_option() -> None:
    recall = flag_names(COMMANDS["recall"])
    assert recall["top_k"] == "--top-k" and recall["tags"] == "--tag"
    assert recall["palace"] == "--palace" and recall["query"] == "QUERY"
    assert recall["levels"] == "--levels"
    assert flag_names(COMMANDS["remember"])["occurred_at"] == "--when"
    assert flag_names(COMMANDS["kg invalidate"])["id"] == "FACT_ID"
    assert flag_names(COMMANDS["kg assert"])["object"] == "OBJECT"
    assert flag_names(COMMANDS["consolidate"])["ids"] == "--id"
    assert "as_json" not in flag_names(COMMANDS["recall"])


@pytest.mark.parametrize(("message", "arg", "shown", "want"), [
    ("memory.recall: argument 'top_k' must be 1..1000, got 5000", "top_k", "--top-k",
     "--top-k must be 1..1000, got 5000"),
    ("memory.recall: item 0 of argument 'tags' is longer than 1000 characters (1001)", "tags",
     "--tag", "item 0 of --tag is longer than 1000 characters (1001)"),
    ("bad ttl 'x': use seconds or 90s/15m/12h/7d/2w", "ttl", "--ttl",
     "bad --ttl 'x': use seconds or 90s/15m/12h/7d/2w"),
    ("ttl must be at least one second", "ttl", "--ttl", "--ttl must be at least one second"),
    ("text is empty", "text", "TEXT", "TEXT is empty"),
    ("--levels takes a comma list of 0-3, got 'x'", "levels", "--levels",
     "--levels takes a comma list of 0-3, got 'x'"),
    # Short names could be English words: only the quoted form is replaced.
    ("graph.link: argument 'a' is longer than 200 characters (201)", "a", "A",
     "A is longer than 200 characters (201)"),
    ("a concept cannot relate to itself", "a", "A", "a concept cannot relate to itself"),
])
def test_flag_message(message: str, arg: str, shown: str, want: str) -> None:
    assert flag_message(message, arg, shown) == want


@pytest.fixture
def kd(shared_keyword_daemon: DaemonProc) -> InProcCliDaemonProc:
    """The module's keyword-only daemon, its CLI run in-process (what these tests check is
    what the commands print; test_version_is_the_clients_and_offline and
    test_daemon_status_and_restart run the real entry point)."""
    return InProcCliDaemonProc.of(shared_keyword_daemon)


@pytest.fixture
def p(kd: InProcCliDaemonProc) -> str:
    """A palace of this test's own on the shared daemon."""
    name = fresh_name()
    kd.cli("create", name, check=True)
    return name


def test_daemon_errors_name_the_flags(kd: InProcCliDaemonProc, p: str) -> None:
    # Values the CLI's own checks let through; the daemon refuses them (INVALID_ARGS).
    res = kd.cli("remember", "x", "-p", p, "--ttl", "0s")
    assert res.returncode == 5
    assert "--ttl must be at least one second" in res.stderr, res.stderr
    res = kd.cli("recall", "x", "-p", p, "--wing", "w" * 201)
    assert res.returncode == 5
    assert "--wing is longer than 200 characters" in res.stderr, res.stderr
    assert "'wing'" not in res.stderr and "memory.recall" not in res.stderr
    res = kd.cli("recall", "x", "-p", p, "--levels", "9", "--json")
    assert res.returncode == 5
    err = json.loads(res.stdout)["error"]
    assert err["details"]["arg"] == "levels" and err["details"]["flag"] == "--levels"
    assert err["message"].startswith("item 0 of --levels must be"), err
    # The CLI's own range check already names the flag (a usage error, nothing sent).
    res = kd.cli("recall", "x", "-p", p, "--top-k", "0")
    assert res.returncode == 2 and "--top-k" in res.stderr


# -- remember - ---------------------------------------------------------------------------------
def test_remember_dash_reads_stdin(kd: InProcCliDaemonProc, p: str) -> None:
    assert "- reads it from stdin" in " ".join(_help("remember", "-h").split())
    text = "Line one of a long note.\n\n  Line three, indented.\n"
    res = kd.cli("remember", "-", "-p", p, "--json", input=text, check=True)
    got = json.loads(kd.cli("get", str(json.loads(res.stdout)["id"]), "-p", p, "--json",
                            check=True).stdout)
    assert "Line one of a long note." in got["text"] and "Line three, indented." in got["text"]
    empty = kd.cli("remember", "-", "-p", p, input="")
    assert empty.returncode == 5 and "TEXT is empty" in empty.stderr, empty.stderr


# -- drawers: the footer and long drawers --------------------------------------------------------
def test_page_footer() -> None:
    assert page_footer(0, 2, 5, 2) == "(showing 1-2 of 5; next: --offset 2)"
    assert page_footer(4, 1, 5, None) == "(showing 5 of 5)"
    assert page_footer(2, 3, 5, None) == "(showing 3-5 of 5)"
    assert page_footer(100, 0, 20, None) == "(none at --offset 100; 20 drawers in all)"
    assert page_footer(100, 0, 1, None) == "(none at --offset 100; 1 drawer in all)"
    assert page_footer(0, 0, 0, None) == "(no drawers)"


def test_drawers_pages_and_cuts_long_drawers(kd: InProcCliDaemonProc, p: str) -> None:
    lines = "\n".join(json.dumps({"text": f"note number {i}"}) for i in range(5))
    kd.cli("remember-many", "-p", p, input=lines, check=True)
    first = kd.cli("drawers", "-p", p, "--limit", "2", check=True).stdout.splitlines()
    assert first[-1] == "(showing 1-2 of 5; next: --offset 2)"
    last = kd.cli("drawers", "-p", p, "--limit", "2", "--offset", "4", check=True).stdout
    assert last.splitlines()[-1] == "(showing 5 of 5)"
    beyond = kd.cli("drawers", "-p", p, "--offset", "100", check=True).stdout
    assert beyond.splitlines() == ["(none at --offset 100; 5 drawers in all)"]
    long_text = " ".join(f"word{i}" for i in range(20_000))  # ~129k characters
    big = json.loads(kd.cli("remember", "-", "-p", p, "--json", input=long_text,
                            check=True).stdout)["id"]
    listing = kd.cli("drawers", "-p", p, "--limit", "1", check=True).stdout
    assert len(listing) < 600, listing
    assert f"… ({len(long_text):,} chars; `palace get {big}` for all)" in listing
    assert kd.cli("get", str(big), "-p", p, check=True).stdout.count("word19999") == 1
    whole = json.loads(kd.cli("drawers", "-p", p, "--limit", "1", "--json",
                              check=True).stdout)
    assert whole["drawers"][0]["text"] == long_text  # --json keeps the whole text


def test_excerpt() -> None:
    assert excerpt("short", 300, 8) is None
    cut = excerpt("alpha " * 100, 300, 8)
    assert cut is not None and len(cut) <= 300 and cut.endswith("alpha")
    assert excerpt("\n".join("x" * 9), 300, 8) == "\n".join("x" * 8)


# -- plurals ------------------------------------------------------------------------------------
def test_counted() -> None:
    assert counted(1, "drawer") == "1 drawer" and counted(0, "drawer") == "0 drawers"
    assert counted(2, "entry", "entries") == "2 entries"


def test_no_count_is_printed_with_a_fixed_plural() -> None:
    """``f"{n} drawers"`` prints "1 drawers": counts go through ``render.counted``."""
    fixed = re.compile(r"\}\)? (drawers|palaces|facts|vectors|rooms|paths|entities|"
                       r"embeddings|pending embeddings|duplicate pairs|path\(s\))\b")
    bad = [f"{src.name}:{n}: {line.strip()}" for src in CLI_SOURCES
           for n, line in enumerate(src.read_text("utf-8").splitlines(), 1)
           if fixed.search(line)]
    assert not bad, "\n".join(bad)


def test_counts_in_the_output_agree_in_number(kd: InProcCliDaemonProc, p: str) -> None:
    one = kd.cli("remember-many", "-p", p, input=json.dumps({"text": "only one"}) + "\n",
                 check=True)
    assert one.stdout.strip() == "stored 1 drawer"
    info = kd.cli("info", "-p", p, check=True).stdout
    assert "1 drawer," in info and "1 drawers" not in info
    assert "general/general: 1 drawer" in info


# -- palace daemon status|restart ----------------------------------------------------------------
@pytest.mark.daemon
def test_daemon_status_and_restart(home: Path) -> None:
    d = DaemonProc(home, base_env(home, model=False))
    try:
        off = d.cli("daemon", "status")
        assert off.returncode == 3 and off.stdout.startswith("palaced is not running"), off
        off_json = d.cli("daemon", "status", "--json")
        assert off_json.returncode == 3
        assert json.loads(off_json.stdout) == {"running": False, "socket": str(d.socket)}
        assert not d.socket.exists(), "daemon status must not start a daemon"
        started = json.loads(d.cli("daemon", "restart", "--json", check=True).stdout)
        assert started["running"] and not started["restarted"] and started["old_pid"] is None
        on = json.loads(d.cli("daemon", "status", "--json", check=True).stdout)
        assert on["running"] and on["pid"] == started["pid"] == d.pid()
        assert on["socket"] == str(d.socket) and on["uptime_s"] >= 0
        assert on["model"]["state"] == "unavailable"
        human = d.cli("daemon", "status", check=True).stdout
        assert f"pid      {on['pid']}" in human and "model    unavailable" in human
        again = d.cli("daemon", "restart", check=True).stdout
        assert re.match(rf"palaced restarted \(pid {on['pid']} -> \d+, socket ", again), again
        new = json.loads(d.cli("daemon", "status", "--json", check=True).stdout)
        assert new["pid"] != on["pid"] and new["pid"] == d.pid()
    finally:
        d.stop()
