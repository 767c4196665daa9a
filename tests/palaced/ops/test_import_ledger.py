"""The import ledger ops (source.sync/list/drop) and palace.import_records's refusals, on the daemon
core in-process (hashing embedder): op behaviour without a real model."""

from __future__ import annotations

from pathlib import Path

import pytest

from palaced.wire.errors import Forbidden, InvalidArgs, InvalidContent, PalaceNotEmpty
from palaced.wire.export_format import FORMAT, VERSION
from tests.support.inproc import InProcDaemon


def _items(*texts: str) -> list[dict[str, str]]:
    return [{"text": t, "room": "notes"} for t in texts]


def test_sync_replaces_a_sources_drawers(inproc: InProcDaemon) -> None:
    with inproc.client() as c:
        c.create_palace("ledger")
        first = c.sync_source("ledger", "markdown", "/d/a.md", "h1", _items("alpha", "beta"))
        assert (first["changed"], first["stored"], first["removed"]) == (True, 2, 0)
        again = c.sync_source("ledger", "markdown", "/d/a.md", "h1", _items("alpha", "beta"))
        assert (again["changed"], again["unchanged"], again["stored"]) == (False, 2, 0)
        # Another file files "beta" too: a drawer claimed twice.
        c.sync_source("ledger", "markdown", "/d/b.md", "h9", _items("beta"))
        changed = c.sync_source("ledger", "markdown", "/d/a.md", "h2", _items("alpha", "gamma"))
        assert (changed["stored"], changed["unchanged"], changed["removed"]) == (1, 1, 0)
        assert changed["ids"][0] == first["ids"][0]  # "alpha" kept its drawer
        texts = {d["text"] for d in c.drawers("ledger")["drawers"]}
        assert texts == {"alpha", "beta", "gamma"}  # beta: still b.md's
        assert c.drop_source("ledger", "markdown", "/d/b.md") == {"found": True, "removed": 1}
        assert c.drop_source("ledger", "markdown", "/d/b.md") == {"found": False, "removed": 0}
        listed = list(c.sources("ledger", "markdown", prefix="/d/", limit=1))
        assert [(s["key"], s["hash"], s["drawers"]) for s in listed] == [("/d/a.md", "h2", 2)]
        assert list(c.sources("ledger", "markdown", prefix="/elsewhere/")) == []
        assert list(c.sources("ledger", "chatgpt")) == []


def test_sync_with_a_bad_item_changes_nothing(inproc: InProcDaemon) -> None:
    with inproc.client() as c:
        c.create_palace("ledger-bad")
        c.sync_source("ledger-bad", "markdown", "/d/a.md", "h1", _items("alpha"))
        with pytest.raises(InvalidContent, match="item 1: text is empty"):
            c.sync_source("ledger-bad", "markdown", "/d/a.md", "h2", _items("beta", "  "))
        assert [s["hash"] for s in c.sources("ledger-bad", "markdown")] == ["h1"]
        assert {d["text"] for d in c.drawers("ledger-bad")["drawers"]} == {"alpha"}
        with pytest.raises(InvalidArgs, match="key"):
            c.sync_source("ledger-bad", "markdown", "", "h3", _items("x"))


def test_restore_refuses_what_is_no_restore(inproc: InProcDaemon) -> None:
    header = {"record": "header", "format": FORMAT, "version": VERSION, "palace": "x",
              "exported_ms": 1}
    drawer = {"record": "drawer", "id": 1, "text": "t", "wing": "w", "room": "r",
              "importance": 0.5, "created_ms": 1, "updated_ms": 1, "occurred_ms": 1}
    with inproc.client() as c:
        c.create_palace("target")
        with pytest.raises(InvalidContent, match="starts with the export's header"):
            c.import_records("target", [drawer])
        with pytest.raises(InvalidContent, match="newer"):
            c.import_records("target", [{**header, "version": VERSION + 1}, drawer])
        with pytest.raises(InvalidContent, match="not a palace export"):
            c.import_records("target", [{**header, "format": "other"}, drawer])
        assert c.palace_info("target")["drawers"] == 0
        bad = {**drawer, "id": 2, "text": "u", "superseded_by": 2}
        res = c.import_records("target", [header, drawer, bad, {"record": "nope"}])
        assert res["stored"] == 1 and [r["index"] for r in res["rejected"]] == [2, 3]
        c.create_palace("full")
        c.remember("full", "already here")
        with pytest.raises(PalaceNotEmpty):
            c.import_records("full", [header, drawer])
        # A drawer whose id is taken by another text is refused, the rest goes on.
        clash = {**drawer, "text": "another text"}
        res = c.import_records("target", [header, clash])
        assert res["resumed"] is True and res["rejected"][0]["name"] == "INVALID_CONTENT"


def test_imports_and_restores_follow_the_policy(inproc: InProcDaemon, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """source.sync writes, source.drop deletes, a backup restore over a palace needs its
    admin (docs/concepts.md); drawers a re-import no longer files are purged, and audited."""
    monkeypatch.setenv("PALACE_AGENT", "user:owner")
    with inproc.client() as c:
        c.create_palace("guarded")
        c.sync_source("guarded", "markdown", "/d/a.md", "h1", _items("alpha", "beta"))
        assert c.sync_source("guarded", "markdown", "/d/a.md", "h2", _items("alpha"))[
            "removed"] == 1
        purged = [e for e in c.audit("guarded", op="source.sync")["entries"]
                  if e["outcome"] == "purged"]
        assert [(e["agent"], e["detail"], len(e["drawer_ids"])) for e in purged] == [
            ("user:owner", {"importer": "markdown"}, 1)]
        assert c.trash("guarded")["total"] == 0
        path = c.backup("guarded", to=str(tmp_path / "bk"))["backups"][0]["path"]
        for permission in ("write", "delete", "admin"):
            c.set_policy("guarded", permission, ["user:owner"])
    monkeypatch.setenv("PALACE_AGENT", "mcp:rogue/1")
    with inproc.client() as c:
        with pytest.raises(Forbidden):
            c.sync_source("guarded", "markdown", "/d/a.md", "h3", _items("gamma"))
        with pytest.raises(Forbidden):
            c.drop_source("guarded", "markdown", "/d/a.md")
        with pytest.raises(Forbidden):
            c.memoir_create("guarded", "notes")
        with pytest.raises(Forbidden):  # restoring over the backed-up palace: its admin
            c.restore(path, force=True)
        with pytest.raises(Forbidden):
            c.restore(path, palace="guarded", force=True)
        assert c.restore(path, palace="guarded-copy")["palace"] == "guarded-copy"  # new
        assert len(list(c.export("guarded"))) > 2  # reading needs no permission
