"""The browse pages of ``palace ui`` (``palace_client.http.pages_pages``) in process: a fake
daemon pool records the ops each page runs and answers like a small palace. The real daemon
and browser are in tests/e2e/test_web_ui_pages.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from palace_client.http.app import ClientPool, build_app
from palace_client.http.pages_pages import verdict
from palace_client.http.security import COOKIE, Keys

BASE = "http://127.0.0.1:8765"
DAY = 86_400_000
T0 = 1_796_400_000_000  # 2026-12-04 UTC


def _drawer(i: int, ms: int, by: str) -> dict[str, Any]:
    return {"id": i, "text": f"drawer <b>{i}</b>", "wing": "w", "room": "r", "tags": [],
            "created_ms": ms, "occurred_ms": ms, "created_by": by}


class _Pool(ClientPool):
    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]
        self.calls: list[tuple[str, str | None, dict[str, Any]]] = []

    def call(self, agent: str, op: str, palace: str | None, args: Any) -> dict[str, Any]:
        self.calls.append((op, palace, dict(args)))
        if op == "daemon.status":
            return {"mode": "keyword-only", "palaces": [
                {"name": "api", "path": "/h/palaces/api", "drawers": 3, "embedder": None}]}
        if op == "palace.doctor":
            return {"checks": [
                {"name": "tokenizer", "status": "warn", "detail": "chars/4", "palace": None},
                {"name": "sqlite", "status": "ok", "detail": "quick_check ok", "palace": "api"},
                {"name": "fts", "status": "fail", "detail": "2 drawers missing", "palace": "api"},
            ]}
        if op == "palace.info":
            return {"drawers": 6, "rooms": [
                {"wing": "birds", "room": "herons", "drawers": 2},
                {"wing": "birds", "room": "swallows", "drawers": 3},
                {"wing": "code", "room": "api", "drawers": 1}]}
        if op == "memory.list":
            drawers = [_drawer(3, T0 + DAY + 5, "mcp:claude"), _drawer(2, T0 + DAY, "cli:x"),
                       _drawer(1, T0, "mcp:claude")]
            return {"drawers": drawers, "total": 120, "next_offset": args.get("offset", 0) + 50}
        if op == "palace.audit":
            return {"entries": [{"id": 9, "at_ms": T0, "agent": "http:palace-ui",
                                 "op": "memory.forget", "drawer_ids": [2], "fact_ids": [],
                                 "outcome": "trashed", "detail": {"reason": "forget"}}],
                    "total": 1, "next_offset": None}
        if op == "memory.recall":
            return {"mode": "keyword", "results": [{
                **_drawer(2, T0, "cli:x"), "score": 0.9, "rank_score": 0.42,
                "lexical": 1.5, "vector": None, "below_floor": False, "conflicts_with": 7}]}
        raise AssertionError(f"unexpected op {op}")


@pytest.fixture
def app() -> tuple[TestClient, _Pool]:
    keys, pool = Keys(), _Pool()
    client = TestClient(build_app(keys, 8765, pool, ui=True), base_url=BASE)
    client.cookies.set(COOKIE, keys.session)
    return client, pool


def test_the_verdict_is_the_worst_of_the_palaces_own_checks_and_names_its_first_problem(
        ) -> None:
    got = verdict(_Pool().call("", "palace.doctor", "api", {})["checks"], "api")
    assert got["status"] == "fail" and got["problem"] == "fts: 2 drawers missing"
    assert [c["name"] for c in got["checks"]] == ["sqlite", "fts"]  # not the daemon's
    assert verdict([], "api") == {"status": "ok", "checks": [], "problem": ""}


def test_the_palaces_page_is_one_op_with_the_project_and_a_lazy_doctor_cell(
        app: tuple[TestClient, _Pool], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client, pool = app
    monkeypatch.setenv("PALACE_HOME", str(tmp_path))
    (tmp_path / "projects.json").write_text(json.dumps(
        {"version": 1, "projects": {"/src/api": "api", "/src/web": "web"}}))
    page = client.get("/")
    assert page.status_code == 200
    assert "<code>/src/api</code>" in page.text and "/src/web" not in page.text
    assert 'hx-get="/p/api/doctor"' in page.text and 'hx-trigger="load"' in page.text
    assert [op for op, _, _ in pool.calls] == ["daemon.status"]  # the doctor comes later
    cell = client.get("/p/api/doctor", headers={"HX-Request": "true"})
    assert cell.text.strip().startswith('<span class="verdict fail">fail</span>')
    assert "<html" not in cell.text and "fts: 2 drawers missing" in cell.text
    assert pool.calls[-1] == ("palace.doctor", "api", {})  # never repair
    whole = client.get("/p/api/doctor")  # without htmx: the palace's whole report
    assert "<html" in whole.text and "quick_check ok" in whole.text


def test_an_unreadable_project_map_leaves_the_palaces_page_up(
        app: tuple[TestClient, _Pool], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client, _ = app
    monkeypatch.setenv("PALACE_HOME", str(tmp_path))
    (tmp_path / "projects.json").write_text("{not json")
    page = client.get("/")
    assert page.status_code == 200 and 'href="/p/api"' in page.text


def test_rooms_group_by_wing_with_counts_and_link_the_filtered_search(
        app: tuple[TestClient, _Pool]) -> None:
    client, _ = app
    page = client.get("/p/pal/rooms").text
    assert '<a class="wing" href="/p/pal?wing=birds">birds</a> <span class="count">5</span>' \
        in page
    assert 'href="/p/pal?wing=birds&amp;room=swallows">swallows</a> <span class="count">3' \
        in page


def test_the_timeline_groups_by_day_filters_by_agent_and_pages_by_cursor(
        app: tuple[TestClient, _Pool]) -> None:
    client, pool = app
    page = client.get("/p/pal/timeline?agent=mcp:claude&cursor=50").text
    assert pool.calls == [("memory.list", "pal",
                           {"limit": 50, "offset": 50, "created_by": "mcp:claude"})]
    assert page.index("<h2>2026-12-05</h2>") < page.index("<h2>2026-12-04</h2>")
    assert "drawer &lt;b&gt;3&lt;/b&gt;" in page  # escaped
    assert 'id="next" href="/p/pal/timeline?agent=mcp%3Aclaude&amp;cursor=100"' in page
    assert client.get("/p/pal/timeline?cursor=-1").status_code == 400


def test_the_audit_log_filters_by_action_and_agent(app: tuple[TestClient, _Pool]) -> None:
    client, pool = app
    page = client.get("/p/pal/audit?action=memory.*&agent=http:*").text
    assert pool.calls == [("palace.audit", "pal", {"limit": 50, "offset": 0,
                                                   "op": "memory.*", "agent": "http:*"})]
    assert "memory.forget" in page and 'href="/p/pal/d/2"' in page and "reason=forget" in page
    assert '<option value="memory.forget">' in page  # the actions offered
    assert 'id="next"' not in page


def test_search_sends_tags_and_dates_and_shows_why_a_hit_ranked(
        app: tuple[TestClient, _Pool]) -> None:
    client, pool = app
    page = client.get("/p/pal?q=heron&tag=a,+b&since=2026-01-01&until=2026-12-01").text
    assert pool.calls[0] == ("memory.recall", "pal", {
        "query": "heron", "tags": ["a", "b"], "since": "2026-01-01", "until": "2026-12-01"})
    why = page[page.index('<p class="why">'):]
    assert "rank 0.420" in why and "keyword 1.5" in why and "vector none" in why
    assert "conflicts with #7" in why and "by cli:x" in why
    # Filters without a query: the matching drawers, newest first.
    client.get("/p/pal?wing=birds&room=herons")
    assert ("memory.list", "pal", {"wing": "birds", "room": "herons"}) in pool.calls


def test_the_pages_need_the_session_and_write_nothing(app: tuple[TestClient, _Pool]) -> None:
    client, pool = app
    for path in ("/p/pal/rooms", "/p/pal/timeline", "/p/pal/audit", "/p/pal/doctor"):
        assert client.post(path, data={"csrf": "x"}).status_code in (403, 405)
    client.cookies.clear()
    for path in ("/p/pal/rooms", "/p/pal/timeline", "/p/pal/audit", "/p/pal/doctor"):
        assert client.get(path).status_code == 401
    assert pool.calls == []
