"""The upkeep page of ``palace ui`` in process (Starlette's TestClient, a fake daemon pool):
which op each form post runs with which arguments, the CSRF rule on every one of them, no
write on a GET, the one-line result of the 303, escaping, and a confirmed bulk forget carrying
its preview's selection token."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from palace_client.http.app import ClientPool, build_app
from palace_client.http.pages_upkeep import word_diff
from palace_client.http.security import COOKIE, Keys
from palaced.wire import errors as E

BASE = "http://127.0.0.1:8765"
XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"
POSTS = ["/p/pal/upkeep/forget", "/p/pal/upkeep/restore-batch", "/p/pal/upkeep/merge",
         "/p/pal/upkeep/keep", "/p/pal/upkeep/conflicts/3", "/p/pal/upkeep/consolidate"]


class _Pool(ClientPool):
    """Answers like a daemon with one duplicate pair, one conflict, one room due a summary
    (every text ``XSS``); ``grown`` makes a bulk forget's expect fail. Records every call."""

    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]
        self.calls: list[tuple[str, str | None, Any]] = []
        self.grown = False

    def call(self, agent: str, op: str, palace: str | None, args: Any) -> dict[str, Any]:
        self.calls.append((op, palace, dict(args)))
        room = {"wing": "w", "room": "r", "unconsolidated": 7, "duplicates": [
            {"ids": [1, 2], "kind": "exact", "similarity": 1.0}], "hint": "consider it"}
        drawer = {"id": args.get("id"), "text": XSS, "wing": "w", "room": "r", "tags": [XSS],
                  "created_by": XSS, "kind": "drawer", "consolidated_into": None,
                  "superseded_by": None}
        answers: dict[str, Any] = {
            "memory.health": {"totals": {"drawers": 9, "rooms": 1, "duplicates": 1},
                              "rooms": [room]},
            "memory.get": {"drawer": drawer},
            "memory.list": {"drawers": [{**drawer, "id": 5}, {**drawer, "id": 6}]},
            "memory.conflicts": {"total": 1, "conflicts": [{
                "id": 3, "newer_id": 2, "older_id": 1, "reason": XSS, "wing": "w",
                "room": "r", "found_ms": 0, "older_text": "runs on Tuesdays " + XSS,
                "newer_text": "runs on Fridays " + XSS}]},
            "memory.resolve_conflict": {"id": 3, "resolution": args.get("resolution"),
                                        "retired": [1], "merged_id": None},
            "memory.merge": {"kept": 1, "merged": [2], "batch": "merge-x-abcdef"},
            "memory.forget": {"id": args.get("id"), "trashed": True},
            "memory.restore_batch": {"batch": args.get("batch"), "restored": [5, 6],
                                     "conflicts": []},
            "memory.consolidate": {"summary_id": 9, "wing": "w", "room": "r",
                                   "source_ids": [5, 6]},
        }
        if op == "memory.forget_many":
            if args.get("expect") and self.grown:
                raise E.InvalidArgs("the selection changed", details={"arg": "expect"})
            return {"dry_run": args.get("dry_run", False), "matched": 2,
                    "forgotten": 0 if args.get("dry_run") else 2,
                    "batch": None if args.get("dry_run") else "forget-x-abcdef",
                    "drawers": [{"id": 5, "wing": "w", "room": "r", "preview": XSS,
                                 "created_ms": 0}], "selection": "sel-0123abcd"}
        answer: dict[str, Any] = answers[op]
        return answer


@pytest.fixture
def ui() -> tuple[TestClient, Keys, _Pool]:
    keys, pool = Keys(), _Pool()
    client = TestClient(build_app(keys, 8765, pool, ui=True), base_url=BASE)
    client.cookies.set(COOKIE, keys.session)
    return client, keys, pool


def _done(response: Any) -> str:
    assert response.status_code == 303, response.text
    location = urlsplit(response.headers["location"])
    assert location.path == "/p/pal/upkeep"
    return parse_qs(location.query)["done"][0]


def test_the_page_shows_pairs_conflicts_and_hints_escaped(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, pool = ui
    html = client.get("/p/pal/upkeep").text
    assert XSS not in html and "&lt;script&gt;" in html
    assert html.count('class="pair"') == 1 and 'id="conflict-3"' in html
    assert "<del>Tuesdays</del>" in html and "<ins>Fridays</ins>" in html
    assert 'name="ids" value="5,6"' in html  # the consolidation covers what it listed
    assert 'href="/p/pal/upkeep">upkeep</a>' in html  # the nav line
    assert {op for op, _, _ in pool.calls} == {"memory.health", "memory.get", "memory.list",
                                               "memory.conflicts"}


@pytest.mark.parametrize(("path", "form", "op", "args", "line"), [
    ("/p/pal/upkeep/conflicts/3", {"resolution": "supersede", "text": "ignored"},
     "memory.resolve_conflict", {"id": 3, "resolution": "supersede"},
     "resolved conflict 3: supersede; retired #1"),
    ("/p/pal/upkeep/conflicts/3", {"resolution": "merge", "text": "on Fridays"},
     "memory.resolve_conflict", {"id": 3, "resolution": "merge", "text": "on Fridays"},
     "resolved conflict 3: merge; retired #1"),
    ("/p/pal/upkeep/merge", {"ids": "1,2"}, "memory.merge", {"ids": [1, 2]},
     "merged #2 into drawer #1 (the trash holds #2 as batch merge-x-abcdef)"),
    ("/p/pal/upkeep/keep", {"keep": "1", "drop": "2"}, "memory.forget", {"id": 2},
     "kept drawer #1; moved its duplicate #2 to the trash"),
    ("/p/pal/upkeep/consolidate", {"wing": "w", "room": "r", "summary": "S", "ids": "5,6"},
     "memory.consolidate", {"wing": "w", "room": "r", "summary": "S", "ids": [5, 6]},
     "summary drawer #9 in w/r consolidates 2 drawers"),
    ("/p/pal/upkeep/restore-batch", {"batch": "forget-x-abcdef"}, "memory.restore_batch",
     {"batch": "forget-x-abcdef"}, "restored 2 drawers of batch forget-x-abcdef"),
])
def test_each_form_runs_its_op_and_303s_back_with_one_line(
        ui: tuple[TestClient, Keys, _Pool], path: str, form: dict[str, str], op: str,
        args: dict[str, Any], line: str) -> None:
    client, keys, pool = ui
    response = client.post(path, data={"csrf": keys.csrf, **form}, follow_redirects=False)
    assert _done(response) == line
    assert pool.calls == [(op, "pal", args)]


def test_a_confirmed_bulk_forget_carries_the_previews_token_and_count(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, keys, pool = ui
    html = client.get("/p/pal/upkeep/forget", params={"tags": "tmp, old", "wing": " "}).text
    assert pool.calls == [("memory.forget_many", "pal",
                           {"tags": ["tmp", "old"], "dry_run": True, "show": 50})]
    assert 'name="expect" value="sel-0123abcd"' in html and 'name="count" value="2"' in html
    assert 'name="tags" value="tmp, old"' in html and XSS not in html
    pool.calls.clear()
    response = client.post("/p/pal/upkeep/forget", follow_redirects=False, data={
        "csrf": keys.csrf, "tags": "tmp, old", "expect": "sel-0123abcd", "count": "2"})
    assert _done(response) == "moved 2 drawers to the trash as batch forget-x-abcdef"
    assert parse_qs(urlsplit(response.headers["location"]).query)["batch"] == [
        "forget-x-abcdef"]
    assert pool.calls == [("memory.forget_many", "pal", {
        "tags": ["tmp", "old"], "expect": "sel-0123abcd", "max_drawers": 2, "show": 0})]


def test_a_selection_changed_since_its_preview_goes_back_to_a_new_preview(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, keys, pool = ui
    pool.grown = True
    response = client.post("/p/pal/upkeep/forget", follow_redirects=False, data={
        "csrf": keys.csrf, "room": "r", "wing": "", "expect": "sel-0123abcd", "count": "2"})
    assert response.status_code == 303
    location = urlsplit(response.headers["location"])
    assert location.path == "/p/pal/upkeep/forget" and location.query == "room=r&changed=1"
    assert "nothing was forgotten" in client.get(response.headers["location"]).text


@pytest.mark.parametrize("form", [{"room": "r", "count": "2"},
                                  {"room": "r", "expect": "sel-1", "count": "0"}])
def test_a_bulk_forget_without_a_preview_is_refused(
        ui: tuple[TestClient, Keys, _Pool], form: dict[str, str]) -> None:
    client, keys, pool = ui
    response = client.post("/p/pal/upkeep/forget", data={"csrf": keys.csrf, **form})
    assert response.status_code == 400 and pool.calls == []


def test_a_preview_without_a_selector_says_so_beside_the_form(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, pool = ui
    pool.call = lambda *a: (_ for _ in ()).throw(  # type: ignore[method-assign]
        E.InvalidArgs("a bulk forget needs a selector"))
    response = client.get("/p/pal/upkeep/forget")
    assert response.status_code == 400 and "needs a selector" in response.text
    assert 'id="forget-filter"' in response.text and 'id="confirm"' not in response.text


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize("csrf", [None, "", "0" * 64])
def test_every_upkeep_post_without_the_csrf_value_is_refused(
        ui: tuple[TestClient, Keys, _Pool], path: str, csrf: str | None) -> None:
    client, _, pool = ui
    data = {"ids": "1,2", "resolution": "supersede", "expect": "sel-1", "count": "1",
            "room": "r", "summary": "s", "keep": "1", "drop": "2", "batch": "forget-x-abcdef"}
    if csrf is not None:
        data["csrf"] = csrf
    response = client.post(path, data=data, follow_redirects=False)
    assert response.status_code == 403 and pool.calls == []


@pytest.mark.parametrize("path", [p for p in POSTS if not p.endswith("/forget")])
def test_no_upkeep_write_answers_a_get(ui: tuple[TestClient, Keys, _Pool], path: str) -> None:
    client, _, pool = ui
    assert client.get(path).status_code == 405 and pool.calls == []


def test_a_bad_resolution_or_id_list_is_a_400_before_any_op(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, keys, pool = ui
    assert client.post("/p/pal/upkeep/conflicts/3",
                       data={"csrf": keys.csrf, "resolution": "delete"}).status_code == 400
    assert client.post("/p/pal/upkeep/merge",
                       data={"csrf": keys.csrf, "ids": "1,x"}).status_code == 400
    assert pool.calls == []


def test_word_diff_marks_what_each_side_alone_says() -> None:
    assert word_diff("the deploy runs on Tuesdays", "the deploy runs on Fridays") == [
        ("same", "the deploy runs on"), ("del", "Tuesdays"), ("ins", "Fridays")]
    assert word_diff("a b", "a b") == [("same", "a b")]
