"""`palace export` and `palace import jsonl` against real daemons: a palace using every
feature survives export -> import -> export unchanged (apart from the documented header
fields), is embedded again in the background with the real model, and bad input is
reported by line and skipped."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palaced.wire.errors import InvalidArgs
from palaced.wire.export_format import RECORDS
from tests.conftest import DaemonProc, base_env, short_home

# Header fields that describe the export itself, not the palace's memories.
EXPORT_ONLY = {"palace", "exported_at", "exported_ms"}


@pytest.fixture(scope="module")
def fast_daemon() -> Iterator[DaemonProc]:
    """A real daemon with the real model whose background work (embedding restored drawers,
    decay) starts half a second after the last write instead of five."""
    home = short_home()
    (home / "config.toml").write_text("[limits]\ncheckpoint_idle_s = 0.5\n")
    d = DaemonProc(home, base_env(home))
    d.start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _comparable(records: list[dict[str, Any]], skip: set[str] | None = None
                ) -> list[dict[str, Any]]:
    ignored = EXPORT_ONLY | (skip or set())
    return [{k: v for k, v in r.items() if not (r["record"] == "header" and k in ignored)}
            for r in records]


def _wait(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _rich_palace(d: DaemonProc, name: str, docs: Path) -> None:
    """A palace using every feature: tags, importance, sources, dates, TTL, a correction, a
    consolidation, a forgotten drawer, accesses, graph facts with closed intervals, a
    literal citing a drawer, an invalidated fact, a typed link, an import ledger and an
    edited identity."""
    with d.client() as c:
        c.create_palace(name)
        old = c.remember(name, "Staging Postgres listens on port 5432", room="infra",
                         tags=["db", "staging"], importance=0.8, source="runbook",
                         occurred_at="2024-03-01T10:00:00Z")
        new = c.remember(name, "Staging Postgres now listens on port 5433", room="infra",
                         tags=["db"], supersedes=old)
        c.remember(name, "The VPN certificate rotates this week", room="infra", ttl="7d",
                   importance=0.2)
        c.remember(name, "Deploys happen on Tuesdays", room="process")
        c.remember(name, "Every deploy needs two approvals", room="process",
                   importance="critical")
        c.consolidate(name, "process", "Deploy rules: Tuesdays, two approvals")
        c.recall(name, "deploy approvals")
        c.decay(name)  # flushes the recall's accesses and weighs every drawer
        c.kg_assert(name, "Alice", "works_at", "Acme", valid_from="2020-01-01")
        c.kg_assert(name, "Alice", "works_at", "Globex", valid_from="2023-06-01")
        c.kg_assert(name, "payments", "version", "2.4", literal=True, source_drawer=new,
                    confidence=0.9, source_agent="tests", source_url="https://example.com/x")
        fact = c.kg_assert(name, "payments", "owner", "Bob")
        c.kg_invalidate(name, fact["id"], at="2030-01-01")
        c.kg_link(name, "payments", "depends_on", "postgres")
    d.cli("import", "markdown", str(docs), "--palace", name, check=True)
    with d.client() as c:  # the newest id is forgotten: it must never be handed out again
        c.forget(name, c.remember(name, "A scratch note to forget", room="scratch"))
    identity = d.home / "palaces" / name / "identity.txt"
    identity.write_text("# edited\nThis palace holds the team's infra memories.\n")


def test_round_trip_keeps_every_field_and_reembeds(fast_daemon: DaemonProc,
                                                   tmp_path: Path, store: str | None) -> None:
    """A local palace exported, then imported into a new palace: a local one, then a team
    palace (PostgreSQL), whose export must be the same records."""
    d = fast_daemon
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "runbook.md").write_text("# Restart\n\nRestart the API with `make restart`.\n")
    rich, copy = ("rich", "copy") if store is None else ("rich-t", "copy-t")
    _rich_palace(d, rich, docs)
    if store is not None:
        with d.client() as c:
            c.create_palace(copy, store=store)
    first = tmp_path / "first.jsonl"
    d.cli("export", "--palace", rich, str(first), check=True)
    records = _lines(first)
    kinds = [r["record"] for r in records]
    assert kinds[0] == "header" and kinds[1] == "identity" and kinds[-1] == "end"
    assert {"drawer", "entity", "fact", "source"} <= set(kinds)
    for record in records:  # every line matches the format's own record spec
        assert set(record) <= set(RECORDS[record["record"]].args), record
    drawers = {r["text"]: r for r in records if r["record"] == "drawer"}
    old = drawers["Staging Postgres listens on port 5432"]
    assert old["superseded_by"] == drawers["Staging Postgres now listens on port 5433"]["id"]
    assert old["tags"] == ["db", "staging"] and old["source"] == "runbook"
    assert drawers["The VPN certificate rotates this week"]["expires_ms"] is not None
    summary = drawers["Deploy rules: Tuesdays, two approvals"]
    assert summary["kind"] == "summary"
    assert drawers["Deploys happen on Tuesdays"]["consolidated_into"] == summary["id"]
    assert any(r["access_count"] for r in drawers.values())
    assert records[0]["drawer_seq"] > max(r["id"] for r in drawers.values())  # the forgotten
    facts = [r for r in records if r["record"] == "fact"]
    assert any(f["valid_to_ms"] is not None and f["invalidated_ms"] is None for f in facts)
    assert any(f["invalidated_ms"] is not None for f in facts)
    # The format carries entity fields no op sets yet: edit them in to prove they survive.
    for r in records:
        if r["record"] == "entity" and r["name"] == "payments":
            r.update(type="service", definition="Takes the money", labels=["core", "pci"])
    first.write_text("".join(json.dumps(r) + "\n" for r in records))

    res = d.cli("import", "jsonl", str(first), "--palace", copy, "--json", check=True)
    out = json.loads(res.stdout)
    assert out["skipped"] == 0 and out["stored"] == len(records) - 2  # not header, end
    second = tmp_path / "second.jsonl"
    d.cli("export", "--palace", copy, str(second), check=True)
    again = _lines(second)
    assert again[0]["palace"] == copy
    skip = {"schema"} if store else set()  # the backend's own schema version
    assert _comparable(again, skip) == _comparable(records, skip)

    with d.client() as c:  # vectors come back in the background, then recall is hybrid
        _wait(lambda: c.palace_info(copy)["pending_embeddings"] == 0)
        info = c.palace_info(copy)
        assert info["vectors"] >= info["drawers"]
        assert info["consistent"] is (None if store else True)  # team: no local index
        found = c.recall_ex(copy, "which port does the database use?")
        assert found["mode"] == "hybrid"
        assert found["results"][0]["text"] == "Staging Postgres now listens on port 5433"
        # The forgotten drawer's id is not handed out again.
        assert c.remember(copy, "A new memory") > records[0]["drawer_seq"]
    # The restored import ledger knows the docs: importing them again stores nothing.
    res = d.cli("import", "markdown", str(docs), "--palace", copy, "--json", check=True)
    assert json.loads(res.stdout)["stored"] == 0
    # Importing the export again is a no-op; into another non-empty palace it is refused.
    res = d.cli("import", "jsonl", str(first), "--palace", copy, "--json", check=True)
    assert json.loads(res.stdout)["stored"] == 0
    res = d.cli("import", "jsonl", str(first), "--palace", rich)
    assert res.returncode == 6 and "PALACE_NOT_EMPTY" in res.stderr


def test_export_pages_are_bounded_and_resumable(keyword_daemon: DaemonProc) -> None:
    with keyword_daemon.client() as c:
        c.create_palace("paged")
        c.remember_many("paged", [{"text": f"memory number {i}"} for i in range(7)])
        pages, cursor = [], None
        while True:
            page = c.call("palace.export", "paged", {"cursor": cursor, "limit": 3})
            assert len(page["records"]) <= 3
            pages.append(page["records"])
            cursor = page["next"]
            if cursor is None:
                break
        flat = [r for p in pages for r in p]
        assert [r["record"] for r in flat] == ["header", "identity", *["drawer"] * 7, "end"]
        assert flat == [{**r, "exported_ms": flat[0]["exported_ms"],
                         "exported_at": flat[0]["exported_at"]} if r["record"] == "header"
                        else r for r in c.export("paged")]
        with pytest.raises(InvalidArgs, match="bad export cursor"):
            c.call("palace.export", "paged", {"cursor": "drawer:x"})


def test_malformed_lines_are_reported_and_skipped(keyword_daemon: DaemonProc,
                                                  tmp_path: Path) -> None:
    d = keyword_daemon
    with d.client() as c:
        c.create_palace("orig")
        for i in range(3):
            c.remember("orig", f"fact number {i}", room="r")
    path = tmp_path / "x.jsonl"
    d.cli("export", "--palace", "orig", str(path), check=True)
    lines = path.read_text().splitlines()
    bad_daemon = json.loads(lines[2])
    bad_daemon.update(id=99, wing="bad\x01wing")  # passes the record spec, not the daemon
    lines[3:3] = ["{not json", '{"record": "nonsense"}',
                  json.dumps({**json.loads(lines[2]), "importance": "high"}),
                  json.dumps(bad_daemon), ""]
    path.write_text("\n".join(lines[:-1]) + "\n")  # and the end record is cut off

    dry = d.cli("import", "jsonl", str(path), "--palace", "dry", "--dry-run", "--json")
    assert dry.returncode == 10
    assert json.loads(dry.stdout)["stored"] == 0
    with d.client() as c:
        assert "dry" not in {p["name"] for p in c.list_palaces()}

    res = d.cli("import", "jsonl", str(path), "--palace", "copy")
    assert res.returncode == 10, res.stderr
    for where in ("x.jsonl:4: not JSON", "x.jsonl:5: not an export record",
                  "x.jsonl:6:", "x.jsonl:7: wing must be", "x.jsonl: no end record"):
        assert f"palace: skipped {where}" in res.stderr, res.stderr
    assert "4 stored" in res.stdout and "5 skipped" in res.stdout  # the identity too
    with d.client() as c:
        assert c.palace_info("copy")["drawers"] == 3
    res = d.cli("import", "jsonl", str(path), "--palace", "copy", "--json")
    out = json.loads(res.stdout)
    assert set(out) == {"importer", "unit", "source", "palace", "dry_run", "read", "records",
                        "stored", "unchanged", "removed", "skipped", "redacted", "problems",
                        "notes", "elapsed_s"}
    assert out["stored"] == 0 and out["skipped"] == 5 and res.returncode == 10
    assert [p["line"] for p in out["problems"]] == [4, 5, 6, 7, None]
