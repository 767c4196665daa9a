"""Editing and upkeep through the daemon: ``memory.update`` with its history, the substring
fallback of keyword search, consolidation hints, and the MCP ``upkeep`` tool.

One real palaced with the real model serves the module, configured so that hints and
touches show quickly (``[upkeep] consolidate_hint_at = 3``, ``[limits] checkpoint_idle_s``).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator

import pytest

from palaced.wire import errors as E
from tests.conftest import DaemonProc, base_env, short_home
from tests.palace_client.mcp.test_mcp_knowledge import Bridge

CONFIG = """\
[limits]
checkpoint_idle_s = 0.3

[upkeep]
consolidate_hint_at = 3
promote_after = 2
"""


def tuned_daemon(config: str = CONFIG, *, model: bool = True) -> Iterator[DaemonProc]:
    path = short_home()
    (path / "config.toml").write_text(config)
    d = DaemonProc(path, base_env(path, model=model))
    d.start()
    yield d
    d.stop()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def tuned() -> Iterator[DaemonProc]:
    yield from tuned_daemon()


def _palace(d: DaemonProc, stem: str, store: str | None = None) -> str:
    """A new palace: local, or a team palace in PostgreSQL (``store``: see conftest)."""
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    with d.client() as c:
        c.create_palace(name, store=store)
    return name


OLD = "The staging database is Postgres 16 on port 5433"
NEW = "The staging database is MySQL 8 on port 3306"


def test_update_in_place_reembeds_and_keeps_history(tuned: DaemonProc, store: str | None) -> None:
    p = _palace(tuned, "edit", store)
    with tuned.client() as c:
        a = c.remember(p, OLD, room="infra", tags=["db"])
        b = c.remember(p, "Deploys happen on Tuesdays after the standup", room="process")
        res = c.update(p, a, text=NEW, importance="high")
        assert res == {"id": a, "changed": ["text", "importance"], "version": 2,
                       "embedded": True}
        got = c.get(p, a, history=True)
        assert (got["text"], got["importance"], got["versions"]) == (NEW, 0.8, 2)
        [old] = got["history"]
        assert (old["version"], old["text"], old["room"], old["tags"], old["importance"]) == (
            1, OLD, "infra", ["db"], 0.5)
        assert old["replaced_ms"] >= got["created_ms"]
        # The new text's vector replaced the old one, in the database and in the index.
        info = c.palace_info(p)
        # A team palace has no local index to agree with (pgvector serves it): None.
        assert (info["drawers"], info["vectors"], info["consistent"]) == (
            2, 2, None if store else True)
        hit = c.recall(p, NEW, top_k=1)[0]
        assert hit["id"] == a and hit["vector"] > 0.99 and hit["lexical"] is not None
        stale = next(r for r in c.recall(p, OLD, top_k=2) if r["id"] == a)
        assert stale["vector"] < 0.99
        # The replaced text is history: keyword search no longer finds it.
        assert all(r["lexical"] is None for r in c.recall(p, "Postgres 5433") if r["id"] == a)
        # The same values again change nothing and add no version.
        assert c.update(p, a, importance=0.8)["changed"] == []
        assert c.get(p, a)["versions"] == 2
        assert c.update(p, a, tags=["db", "mysql"])["changed"] == ["tags"]
        moved = c.update(p, a, room="databases")
        assert (moved["changed"], moved["version"]) == (["room"], 4)
        assert [d["id"] for d in c.drawers(p, room="databases")["drawers"]] == [a]
        assert [r["id"] for r in c.recall(p, "MySQL", room="databases")] == [a]
        # Another drawer's text in the same room is refused, and nothing changes.
        with pytest.raises(E.InvalidContent, match=f"drawer {a} already holds"):
            c.update(p, b, text=NEW, room="databases")
        assert c.get(p, b)["versions"] == 1
        with pytest.raises(E.MemoryNotFound):
            c.update(p, 999_999, text="anything")
        with pytest.raises(E.InvalidArgs, match="nothing to update"):
            c.call("memory.update", p, {"id": a})
        with pytest.raises(E.InvalidArgs):
            c.update(p, a, importance="urgent")
        assert c.get(p, a)["versions"] == 4

    r = tuned.cli("update", str(b), "--text", "-", "--importance", "low", "-p", p,
                  input="Deploys happen on Thursdays now\n", check=True)
    assert r.stdout.strip() == f"updated drawer {b} (text, importance); now version 2"
    r = tuned.cli("get", str(b), "-p", p, "--history", check=True)
    assert "version 2" in r.stdout and "earlier versions, newest first:" in r.stdout
    assert "Deploys happen on Tuesdays after the standup" in r.stdout
    r = tuned.cli("update", str(b), "--tag", "x", "--clear-tags", "-p", p)
    assert r.returncode == 5 and "not both" in r.stderr
    assert tuned.cli("update", "999999", "--text", "x", "-p", p).returncode == 4
    r = tuned.cli("update", str(b), "-p", p, "--json")
    assert r.returncode == 5 and json.loads(r.stdout)["error"]["name"] == "INVALID_ARGS"


def test_update_to_a_long_text_is_embedded_in_the_background(tuned: DaemonProc,
                                                             store: str | None) -> None:
    p = _palace(tuned, "long", store)
    long_text = " ".join(f"Runbook step {n}: check the pump {n} pressure gauge and log it."
                         for n in range(400))  # ~25k characters: beyond the inline chunks
    with tuned.client() as c:
        a = c.remember(p, OLD)
        res = c.update(p, a, text=long_text)
        assert res["changed"] == ["text"] and res["embedded"] is False
        assert [r["id"] for r in c.recall(p, "pump pressure gauge")][:1] == [a]
        deadline = time.monotonic() + 60
        while not c.get(p, a)["embedded"] and time.monotonic() < deadline:
            time.sleep(0.2)
        info = c.palace_info(p)
        assert c.get(p, a)["embedded"] and info["vectors"] > 16
        assert info["consistent"] is (None if store else True)


def test_update_without_a_model_is_found_by_keywords(keyword_daemon: DaemonProc,
                                                     store: str | None) -> None:
    p = _palace(keyword_daemon, "kwedit", store)
    with keyword_daemon.client() as c:
        a = c.remember(p, OLD)
        res = c.update(p, a, text=NEW)
        assert res["changed"] == ["text"] and res["embedded"] is False
        assert [r["id"] for r in c.recall(p, "MySQL 3306")] == [a]
        assert c.recall(p, "Postgres") == []
        assert c.get(p, a)["embedded"] is False


def test_substring_fallback(tuned: DaemonProc, store: str | None) -> None:
    p = _palace(tuned, "sub", store)
    with tuned.client() as c:
        pg = c.remember(p, OLD, room="infra")
        c.remember(p, "Alice owns the payment gateway integration", room="people")
        found = c.recall_ex(p, "gres")
        assert found["substring"] is True and found["results"][0]["id"] == pg
        top = found["results"][0]
        assert top["score"] == 1.0 and not top["below_floor"] and not found["nothing_relevant"]
        # A word match is no fallback.
        assert "substring" not in c.recall_ex(p, "Postgres")
        # Query syntax is data, in both searches; words under 3 characters cannot match.
        for hostile in ('"gres" OR NEAR(x', "*", "gr", "^ - : ()", 'gres" AND "x'):
            c.recall_ex(p, hostile)
        assert c.recall_ex(p, 'gres" AND "x')["results"][0]["id"] == pg
        # Filters hold; the index follows edits and deletions (its triggers).
        assert all(r["id"] != pg for r in c.recall(p, "gres", room="people"))
        c.update(p, pg, text=NEW)
        assert all(r["id"] != pg or r["lexical"] is None for r in c.recall(p, "gres"))
        assert c.recall_ex(p, "ysq")["results"][0]["id"] == pg
        c.forget(p, pg)
        assert all(r["id"] != pg for r in c.recall(p, "ysq"))
    r = tuned.cli("recall", "ateway", "-p", p, check=True)
    assert "substring matches" in r.stderr and "payment gateway" in r.stdout


def test_consolidation_hint(tuned: DaemonProc, store: str | None) -> None:
    p = _palace(tuned, "hint", store)
    with tuned.client() as c:
        first = [c.remember_ex(p, f"Release {n} shipped on day {n}", room="releases")
                 for n in (1, 2)]
        assert all("consolidate" not in r for r in first)
        third = c.remember_ex(p, "Release 3 shipped on day 3", room="releases")
        assert third["consolidate"]["drawers"] == 3
        assert third["consolidate"]["room"] == "releases"
        assert "palace consolidate --room releases" in third["consolidate"]["hint"]
        room = next(r for r in c.health(p)["rooms"] if r["room"] == "releases")
        assert room["hint"] is not None and "3 unconsolidated" in room["hint"]
        c.consolidate(p, "releases", "Releases 1-3 shipped on days 1-3")
        assert "consolidate" not in c.remember_ex(p, "Release 4 shipped", room="releases")
    r = tuned.cli("remember", "Release 5 shipped", "--room", "releases", "-p", p, check=True)
    assert "hint:" not in r.stderr
    r = tuned.cli("remember", "Release 6 shipped", "--room", "releases", "-p", p, check=True)
    assert r.stdout.strip().startswith("stored drawer") and "hint: " in r.stderr


def test_mcp_upkeep_tool(tuned: DaemonProc) -> None:
    p = _palace(tuned, "mcp")
    b = Bridge(tuned.env, p)
    try:
        for n in (1, 2):
            assert "upkeep" not in b.ok("remember", text=f"Sprint {n} goal met", room="sprints")
        hinted = b.ok("remember", text="Sprint 3 goal met", room="sprints")
        assert "upkeep action='consolidate' room=\"sprints\" summary=" in hinted
        did = int(hinted.split("#")[1].split(" ")[0])
        text = b.ok("upkeep", action="update", id=did, text="Sprint 3 goal missed",
                    importance=0.8)
        assert f"Updated drawer #{did}" in text and "version 2" in text
        with tuned.client() as c:
            assert c.get(p, did, history=True)["history"][0]["text"] == "Sprint 3 goal met"
        assert "already says that" in b.ok("upkeep", action="update", id=did, importance=0.8)
        err, text = b.call("upkeep", action="update", text="no id")
        assert err and "needs id" in text
        err, text = b.call("upkeep", action="health", id=did)
        assert err and "does not take id" in text
        err, text = b.call("upkeep", action="update", id=did)
        assert err and "nothing to update" in text
        err, text = b.call("upkeep", action="consolidate", room="sprints", text="a summary")
        assert err and "does not take text" in text and "summary" in text
        err, text = b.call("upkeep", action="prune")
        assert err and "INVALID_ARGS" in text
        health = b.ok("upkeep", action="health")
        assert health.startswith(f"Health of palace '{p}'") and "[general/sprints]" in health
        done = b.ok("upkeep", action="consolidate", room="sprints",
                    summary="Sprints 1-3 reviewed")
        assert "consolidates 3 drawer(s)" in done
        assert "Nothing to tidy" in b.ok("upkeep", action="health")
    finally:
        b.close()

