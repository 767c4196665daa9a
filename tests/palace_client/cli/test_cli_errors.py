"""Every failing ``palace`` command, usage errors included, exits with its documented code and
prints exactly one JSON document on stdout under ``--json``; none prints a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from palace_client.cli import app
from palace_client.cli.failures import run, wants_json
from tests.conftest import DaemonProc, base_env, short_home
from tests.support.cli_commands import COMMANDS, ROOT
from tests.support.cli_inproc import run_cli


@pytest.fixture(scope="module")
def kd() -> Iterator[DaemonProc]:
    import shutil

    path = short_home()
    d = DaemonProc(path, base_env(path, model=False))
    d.start()
    d.cli("create", "errs", check=True)
    d.cli("remember", "a first drawer", "--palace", "errs", check=True)
    yield d
    d.stop()
    shutil.rmtree(path, ignore_errors=True)


# (command line, stdin, exit code, error name, text in the message)
CASES: list[tuple[list[str], str | None, int, str, str]] = [
    (["get", "abc"], None, 2, "USAGE_ERROR", "'abc' is not a valid integer"),
    (["get"], None, 2, "USAGE_ERROR", "Missing argument 'DRAWER_ID'"),
    (["recall", "x", "--top-k", "0"], None, 2, "USAGE_ERROR", "not in the range"),
    (["recall", "x", "--bogus"], None, 2, "USAGE_ERROR", "No such option"),
    (["remember"], None, 2, "USAGE_ERROR", "Missing argument 'TEXT'"),
    (["frobnicate"], None, 2, "USAGE_ERROR", "No such command 'frobnicate'"),
    (["kg", "query"], None, 2, "USAGE_ERROR", "Missing argument"),
    (["drawers", "--limit", "many"], None, 2, "USAGE_ERROR", "'many' is not a valid integer"),
    (["init", "--agent", "bogus"], None, 2, "USAGE_ERROR", "unknown agent 'bogus'"),
    (["init", "--scope", "galaxy"], None, 2, "USAGE_ERROR", "'galaxy' is not one of"),
    (["get", "999"], None, 4, "MEMORY_NOT_FOUND", "999"),
    (["info", "--palace", "nope"], None, 4, "PALACE_NOT_FOUND", "nope"),
    (["create", "Bad Name"], None, 5, "INVALID_PALACE_NAME", "kebab-case"),
    (["create", "errs"], None, 6, "PALACE_EXISTS", "errs"),
    (["delete", "errs"], None, 5, "INVALID_ARGS", "--yes"),
    (["recall", "x", "--levels", "a,b"], None, 5, "INVALID_ARGS", "--levels"),
    (["drawers", "--tag", " "], None, 5, "INVALID_ARGS", "tag must be 1-200 printable"),
    # Out of the op's range: refused before sending, the range the daemon's spec states.
    (["drawers", "--tag", "t", "--limit", "-1"], None, 2, "USAGE_ERROR", "-1 is not in the "
     "range 1<=x<=1000"),
    (["health", "--limit", "0"], None, 2, "USAGE_ERROR", "0 is not in the range 1<=x<=1000"),
    (["health", "--stale-days", "-1"], None, 2, "USAGE_ERROR", "not in the range 0.0<=x"),
    (["kg", "neighbors", "x", "--max-nodes", "0"], None, 2, "USAGE_ERROR",
     "0 is not in the range 1<=x"),
    (["remember-many"], '{"text": "ok"}\n\n{"room": "r"}\n', 5, "INVALID_ARGS",
     "line 3: missing required argument 'text'"),
    (["remember-many"], '{"text": "ok"}\n{"text": 5}\n', 5, "INVALID_ARGS",
     "line 2: argument 'text' must be str"),
    (["remember-many"], '{"text": "ok"}\n{oops\n', 5, "INVALID_ARGS", "line 2: not JSON"),
    (["remember-many"], '[1, 2]\n', 5, "INVALID_ARGS", "line 1: expected a JSON object"),
    (["remember-many"], '{"text": "ok"}\n{"text": "b", "colour": 1}\n', 5, "INVALID_ARGS",
     "line 2: unknown argument(s)"),
    # Checked by the daemon; the item number comes back as the line number.
    (["remember-many"], '\n{"text": "ok"}\n{"text": "   "}\n', 5, "INVALID_CONTENT",
     "line 3: text is empty"),
    (["remember", "-"], "\udcff", 5, "INVALID_ARGS", "stdin is not UTF-8"),
]


# The real entry point, as a process, for one case of each kind (usage, daemon, stdin); the
# rest run in-process (``run_cli``: the same ``failures.run`` the console script calls).
AS_PROCESS = frozenset({"get abc", "get 999", "create errs", "remember - <stdin>"})


def _case_id(case: tuple[list[str], str | None, int, str, str]) -> str:
    return " ".join(case[0]) + (" <stdin>" if case[1] else "")


@pytest.mark.parametrize(("args", "stdin", "code", "name", "text", "as_process"), [
    pytest.param(*case, _case_id(case) in AS_PROCESS,
                 id=_case_id(case) + (" [process]" if _case_id(case) in AS_PROCESS else ""))
    for case in CASES])
def test_bad_invocations_exit_with_their_code_and_one_json_document(
        kd: DaemonProc, args: list[str], stdin: str | None, code: int, name: str,
        text: str, as_process: bool) -> None:
    needs_palace = args[0] in ("get", "recall", "remember-many", "remember", "drawers")
    full = [*args, *(["--palace", "errs"] if needs_palace else []), "--json"]
    data = stdin.encode("utf-8", "surrogateescape") if stdin is not None else None
    if as_process:
        proc = subprocess.run([sys.executable, "-m", "palace_client", *full], env=kd.env,
                              input=data, capture_output=True, timeout=60)
        returncode, out, err = proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    else:
        res = run_cli(kd.env, *full, input=data)
        returncode, out, err = res.returncode, res.stdout, res.stderr
    assert returncode == code, err
    doc = json.loads(out)  # exactly one document: json.loads refuses anything more
    assert doc["ok"] is False and doc["error"]["name"] == name, doc
    assert text in doc["error"]["message"], doc
    assert "Traceback" not in err
    assert err.startswith("palace: error: ") and err.rstrip().endswith(f"[{name}]")


def test_nothing_was_stored_by_a_bad_batch(kd: DaemonProc) -> None:
    listed = json.loads(kd.cli("drawers", "--palace", "errs", "--json", check=True).stdout)
    assert [d["text"] for d in listed["drawers"]] == ["a first drawer"]


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_reports_a_usage_error_as_one_json_document(
        path: str, capsys: pytest.CaptureFixture[str]) -> None:
    # ROOT, the click command typer builds from ``app`` on each call, built once (30 ms a build)
    code = run(ROOT, "palace", [*path.split(), "--no-such-flag", "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    error = json.loads(out)["error"]
    assert error["name"] == "USAGE_ERROR" and error["code"] == 606
    assert "No such option" in error["message"]
    assert error["details"]["command"] == f"palace {path}"
    assert err.startswith("palace: error: No such option")


def test_without_json_a_usage_error_keeps_typers_display(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert run(app, "palace", ["get", "abc"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Usage: palace get" in err and "'abc'" in err


def test_an_unexpected_exception_is_one_line_not_a_traceback(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    broken = typer.Typer()

    @broken.command()
    def boom(as_json: bool = typer.Option(False, "--json")) -> None:
        raise RuntimeError("gears")

    @broken.command()
    def other() -> None:  # two commands: boom is a subcommand, as in palace
        pass

    monkeypatch.delenv("PALACE_DEBUG", raising=False)
    assert run(broken, "palace", ["boom", "--json"]) == 1
    out, err = capsys.readouterr()
    error: dict[str, Any] = json.loads(out)["error"]
    assert error["name"] == "CLIENT_ERROR" and "RuntimeError: gears" in error["message"]
    assert "PALACE_DEBUG=1" in err and "Traceback" not in err
    monkeypatch.setenv("PALACE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="gears"):
        run(broken, "palace", ["boom"])


def test_wants_json() -> None:
    assert wants_json(["get", "1", "--json"])
    assert not wants_json(["remember", "--", "--json"])
    assert not wants_json(["get", "1"])


@pytest.mark.parametrize("args", [["list"], ["drawers", "--limit", "1000", "--json"]],
                         ids=["small", "large"])
def test_a_closed_output_pipe_ends_the_command_quietly(kd: DaemonProc, args: list[str]
                                                       ) -> None:
    if args[0] == "drawers":
        lines = "".join(json.dumps({"text": f"drawer {i} " + "words " * 100}) + "\n"
                        for i in range(200))
        kd.cli("remember-many", "--palace", "errs", input=lines, check=True)
        args = [*args, "--palace", "errs"]
    # Like `| head` once head has gone: a pipe nobody reads (EPIPE on the first write).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-m", "palace_client", *args], env=kd.env,
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert res.returncode == 1
    assert res.stderr == "", res.stderr
