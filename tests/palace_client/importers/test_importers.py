"""`palace import chatgpt` and `palace import markdown` against a real (keyword-only) daemon:
what they store, idempotence, updates of changed sources and deletion of gone ones, dry runs,
malformed input, and the progress bar on a terminal."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProc, base_env, short_home

FIXTURES = Path(__file__).parents[2] / "fixtures"
CHATGPT = FIXTURES / "chatgpt_conversations.json"


@pytest.fixture(scope="module")
def kw() -> Iterator[DaemonProc]:
    """One keyword-only daemon for the module (each test uses its own palaces)."""
    home = short_home()
    d = DaemonProc(home, base_env(home, model=False))
    d.start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def _json(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert res.stdout, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def _drawers(d: DaemonProc, palace: str) -> list[dict[str, Any]]:
    with d.client() as c:
        return list(c.drawers(palace, limit=1000)["drawers"])


# -- chatgpt ------------------------------------------------------------------------------------
def test_chatgpt_exchanges_of_the_current_branch(kw: DaemonProc) -> None:
    out = _json(kw.cli("import", "chatgpt", str(CHATGPT), "--palace", "gpt", "--json"))
    assert (out["read"], out["records"], out["stored"], out["skipped"]) == (4, 6, 6, 0)
    drawers = {d["text"]: d for d in _drawers(kw, "gpt")}
    first = drawers["User: Which port does the staging Postgres listen on?\n\n"
                    "Assistant: Staging Postgres 16 listens on port 5433."]
    assert (first["wing"], first["room"]) == ("chatgpt", "postgres-staging-setup")
    assert first["occurred_ms"] == 1709290801000  # the question's create_time
    assert first["source"] == "chatgpt_conversations.json#00000000-0000-0000-0000-000000000001"
    texts = "\n".join(drawers)
    assert "Tuesdays after the standup" in texts and "Fridays" not in texts  # current branch
    assert "pandas" not in texts and "count 12" not in texts  # tool call and its output
    assert ("User: [image]\nWhat does this signup chart show?\n\n"
            "Assistant: Signups doubled in February.") in drawers
    assert "vpn.example.com" in texts  # no current_node: the last branch
    again = _json(kw.cli("import", "chatgpt", str(CHATGPT), "--palace", "gpt", "--json"))
    assert (again["stored"], again["unchanged"], again["removed"]) == (0, 6, 0)


def test_chatgpt_changed_conversation_is_replaced(kw: DaemonProc, tmp_path: Path) -> None:
    kw.cli("import", "chatgpt", str(CHATGPT), "--palace", "gpt2", check=True)
    data = json.loads(CHATGPT.read_text())
    data[1]["current_node"] = "q2a"  # the user went back to the first answer's branch
    changed = tmp_path / "conversations.json"
    changed.write_text(json.dumps(data))
    out = _json(kw.cli("import", "chatgpt", str(changed), "--palace", "gpt2", "--json"))
    assert (out["stored"], out["removed"]) == (2, 2), out
    texts = "\n".join(d["text"] for d in _drawers(kw, "gpt2"))
    assert "Fridays" in texts and "Tuesdays" not in texts
    assert len(_drawers(kw, "gpt2")) == 6


def test_chatgpt_malformed_conversations_are_skipped(kw: DaemonProc) -> None:
    res = kw.cli("import", "chatgpt", str(FIXTURES / "chatgpt_malformed.json"),
                 "--palace", "gptbad")
    assert res.returncode == 10, res.stderr
    assert "skipped chatgpt_malformed.json: conversation 1 (00000000-0000-0000-0000-0000000" \
           "00009) has no message mapping" in res.stderr
    assert "skipped chatgpt_malformed.json: conversation 2 is not a JSON object" in res.stderr
    assert "3 stored" in res.stdout and "2 skipped" in res.stdout
    bad = kw.cli("import", "chatgpt", str(FIXTURES / "nope.json"), "--palace", "gptbad")
    assert bad.returncode == 5 and "cannot read" in bad.stderr
    assert "No such file or directory [SOURCE_UNREADABLE]" in bad.stderr


def test_chatgpt_reads_the_export_zip(kw: DaemonProc, tmp_path: Path) -> None:
    archive = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("user.json", "{}")
        z.write(CHATGPT, "conversations.json")
    out = _json(kw.cli("import", "chatgpt", str(archive), "--dry-run", "--json"))
    assert (out["read"], out["records"], out["stored"], out["palace"]) == (4, 6, 0, None)
    (tmp_path / "other.zip").write_bytes(archive.read_bytes().replace(b"conversations",
                                                                      b"something_els"))
    res = kw.cli("import", "chatgpt", str(tmp_path / "other.zip"), "--dry-run")
    assert res.returncode == 5 and "without conversations.json" in res.stderr


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_chatgpt_deep_json_is_invalid_content(kw: DaemonProc, tmp_path: Path) -> None:
    """JSON nested 100000 deep (Python's parser recurses per level): a typed input error."""
    deep = tmp_path / "conversations.json"
    deep.write_text(_deep(100_000))
    res = kw.cli("import", "chatgpt", str(deep), "--dry-run")
    assert res.returncode == 5, res.stderr
    assert "nests JSON arrays or objects deeper than palace reads" in res.stderr
    assert "[INVALID_CONTENT]" in res.stderr and "a bug in palace" not in res.stderr


def test_chatgpt_reads_at_most_its_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    """conversations.json, alone or in the export's zip, is read up to the cap + 1 byte:
    a larger one (a few MB of zip can hold GBs) is refused before it is parsed."""
    from palace_client.importers import chatgpt
    from palaced.wire.errors import InvalidContent

    monkeypatch.setattr(chatgpt, "MAX_JSON_BYTES", 1 << 20, raising=False)
    big = "[" + " " * (2 << 20) + "]"
    plain = tmp_path / "conversations.json"
    plain.write_text(big)
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("conversations.json", big)
    assert archive.stat().st_size < 20_000
    for path in (plain, archive):
        with pytest.raises(InvalidContent, match="larger than 1 MiB"):
            chatgpt.ChatGptImport(str(path))
    # Just under the cap is read as before.
    plain.write_text("[" + " " * ((1 << 20) - 2) + "]")
    assert chatgpt.ChatGptImport(str(plain)).total() == 0


def test_chatgpt_fifo_is_refused_not_waited_on(kw: DaemonProc, tmp_path: Path) -> None:
    fifo = tmp_path / "conversations.json"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "palace_client", "import", "chatgpt", str(fifo),
                          "--dry-run"], env=kw.env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 5, res.stderr
    assert "it is a fifo, not a regular file [SOURCE_UNREADABLE]" in res.stderr


def test_jsonl_deep_json_is_skipped_or_refused(kw: DaemonProc, tmp_path: Path) -> None:
    """A 100000-deep line is one malformed record (skipped, reported); as the header, the
    file is no export (INVALID_CONTENT). Neither is "a bug in palace"."""
    from palaced.wire.export_format import FORMAT, VERSION

    header = json.dumps({"record": "header", "format": FORMAT, "version": VERSION})
    export = tmp_path / "deep.jsonl"
    export.write_text(f"{header}\n{_deep(100_000)}\n")
    res = kw.cli("import", "jsonl", str(export), "--dry-run")
    assert res.returncode == 10, res.stderr
    assert "skipped deep.jsonl:2: JSON nested deeper than palace reads" in res.stderr
    export.write_text(f"{_deep(100_000)}\n")
    res = kw.cli("import", "jsonl", str(export), "--dry-run")
    assert res.returncode == 5, res.stderr
    assert "not a palace export" in res.stderr and "[INVALID_CONTENT]" in res.stderr


def test_jsonl_reads_no_line_past_its_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """A line longer than the cap is a skipped record, read in chunks rather than whole; the
    lines after it are read on, their numbers right."""
    from palace_client.importers import jsonl
    from palace_client.importers.runner import Problem, Unit
    from palaced.wire.export_format import FORMAT, VERSION

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 1024, raising=False)
    header = json.dumps({"record": "header", "format": FORMAT, "version": VERSION})
    end = json.dumps({"record": "end"})
    export = tmp_path / "long.jsonl"
    export.write_text(f"{header}\n{'[' + ' ' * 5000 + ']'}\n{end}\n")
    got = list(jsonl.JsonlImport(str(export)).parse())
    assert isinstance(got[1], Problem) and got[1].line == 2
    assert got[1].message == "longer than 1024 bytes: no record of an export is"
    assert isinstance(got[2], Unit) and got[2].line == 3 and got[2].items == [{"record": "end"}]
    assert len(got) == 3


# -- markdown -----------------------------------------------------------------------------------
def _docs(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "build").mkdir()
    (root / ".gitignore").write_text("build/\n*.secret.md\n")
    (root / "README.md").write_text(
        "Palace notes.\n\n# Install\n\nRun `pip install palace`.\n\n```sh\n# not a heading\n"
        "make\n```\n\n## Configure\n\nSet PALACE_HOME.\n\nUsage\n-----\n\nCall recall.\n")
    (root / "notes.txt").write_text("Plain notes about staging.\n\nSecond paragraph.\n")
    (root / "sub" / "guide.rst").write_text("=====\nGuide\n=====\n\nIntro.\n\nStep one\n"
                                            "--------\n\nDo it.\n")
    (root / "sub" / ".gitignore").write_text("!keep.secret.md\n")
    (root / "sub" / "keep.secret.md").write_text("# Kept\n\nRe-included by sub/.gitignore.\n")
    (root / "private.secret.md").write_text("# Secret\n\nignored\n")
    (root / "build" / "out.md").write_text("# Built\n\nignored\n")
    (root / "image.png").write_bytes(b"\x89PNG")
    return root


def test_markdown_sections_gitignore_and_sources(kw: DaemonProc, tmp_path: Path) -> None:
    root = _docs(tmp_path / "docs")
    dry = _json(kw.cli("import", "markdown", str(root), "--palace", "md", "--dry-run",
                       "--json"))
    assert (dry["read"], dry["records"], dry["stored"]) == (4, 8, 0)
    with kw.client() as c:
        assert "md" not in {p["name"] for p in c.list_palaces()}
    out = _json(kw.cli("import", "markdown", str(root), "--palace", "md", "--json"))
    assert (out["read"], out["stored"], out["skipped"]) == (4, 8, 0)
    drawers = {d["source"]: d for d in _drawers(kw, "md")}
    assert set(drawers) == {
        "README.md", "README.md#Install", "README.md#Configure", "README.md#Usage",
        "notes.txt", "sub/guide.rst#Guide", "sub/guide.rst#Step one",
        "sub/keep.secret.md#Kept"}
    install = drawers["README.md#Install"]
    assert install["text"].startswith("# Install") and "# not a heading" in install["text"]
    assert (install["wing"], install["room"]) == ("docs", "README")
    assert drawers["sub/guide.rst#Step one"]["room"] == "sub/guide"
    assert "ignored" not in "\n".join(d["text"] for d in drawers.values())
    again = _json(kw.cli("import", "markdown", str(root), "--palace", "md", "--json"))
    assert (again["stored"], again["unchanged"], again["removed"]) == (0, 8, 0)


def test_markdown_rerun_replaces_changed_and_removes_deleted(kw: DaemonProc,
                                                             tmp_path: Path) -> None:
    root = _docs(tmp_path / "docs")
    kw.cli("import", "markdown", str(root), "--palace", "md2", check=True)
    before = {d["source"]: d["id"] for d in _drawers(kw, "md2")}
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("Set PALACE_HOME.", "Set PALACE_HOME first."))
    (root / "notes.txt").unlink()
    (root / "build" / "extra.md").write_text("# Still ignored\n\ntext\n")
    out = _json(kw.cli("import", "markdown", str(root), "--palace", "md2", "--json"))
    # README: its changed section replaced, the others kept; notes.txt's drawer deleted.
    assert (out["read"], out["stored"], out["removed"]) == (3, 1, 2), out
    after = {d["source"]: d for d in _drawers(kw, "md2")}
    assert "notes.txt" not in after
    assert "Set PALACE_HOME first." in after["README.md#Configure"]["text"]
    assert after["README.md#Install"]["id"] == before["README.md#Install"]  # untouched
    assert after["README.md#Configure"]["id"] != before["README.md#Configure"]


def test_markdown_unreadable_file_is_skipped_and_kept(kw: DaemonProc, tmp_path: Path) -> None:
    root = _docs(tmp_path / "docs")
    kw.cli("import", "markdown", str(root), "--palace", "md3", check=True)
    (root / "notes.txt").write_bytes(b"caf\xe9 au lait\n")  # Latin-1, not UTF-8
    res = kw.cli("import", "markdown", str(root), "--palace", "md3")
    assert res.returncode == 10
    assert "palace: skipped notes.txt: not UTF-8 text (byte 3)" in res.stderr
    # Its drawers of the previous run stay: a file that cannot be read is not a deleted file.
    assert "notes.txt" in {d["source"] for d in _drawers(kw, "md3")}


# -- the runner on a terminal ------------------------------------------------------------------
def test_progress_bar_on_a_terminal(kw: DaemonProc, tmp_path: Path) -> None:
    root = _docs(tmp_path / "docs")
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "palace_client", "import", "markdown",
                                 str(root), "--palace", "mdtty"], env={**kw.env, "COLUMNS": "160"},
                                stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert proc.returncode == 0
    screen = drawn.decode("utf-8", "replace")
    assert "4/4" in screen and "files" in screen and "stored" in screen, screen
    assert out.startswith("imported 4 files from ") and "8 stored" in out
