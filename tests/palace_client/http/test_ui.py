"""The web app of ``palace ui`` in process (Starlette's TestClient, a fake daemon pool): the
CSRF rule on its form posts, autoescaping, and what ``palace serve`` alone does not serve."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from palace_client.http.app import ClientPool, build_app
from palace_client.http.security import COOKIE, Keys
from palaced.wire import errors as E

BASE = "http://127.0.0.1:8765"
XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"


class _Pool(ClientPool):
    """Answers like a daemon holding drawer 1 (whose text is ``XSS``); records every call."""

    def __init__(self) -> None:
        super().__init__(lambda: None)  # type: ignore[arg-type,return-value]
        self.calls: list[tuple[str, str | None, Any]] = []
        self.buggy = True  # daemon.status fails as a bug would

    def call(self, agent: str, op: str, palace: str | None, args: Any) -> dict[str, Any]:
        self.calls.append((op, palace, dict(args)))
        if op == "daemon.status":
            if self.buggy:
                raise RuntimeError("boom")
            return {"mode": "hybrid", "palaces": [
                {"name": "down", "path": "/p/down",
                 "error": "StoreUnavailable: the team palace's server does not answer"},
                {"name": "fine", "path": "/p/fine", "drawers": 7,
                 "embedder": "fastembed:m:384"}]}
        if op == "palace.list":
            return {"palaces": [{"name": n, "path": f"/p/{n}", "open": True}
                                for n in ("down", "fine", "buggy")]}
        if op == "palace.info" and palace == "down":
            raise E.StoreUnavailable("the team palace's server does not answer")
        if op == "palace.info" and palace == "buggy":
            raise RuntimeError("boom")
        if op == "palace.info":
            return {"drawers": 7, "embedder": "fastembed:m:384", "recall_mode": "hybrid"}
        if op == "memory.get":
            return {"drawer": {"id": 1, "text": XSS, "wing": "w", "room": "r", "tags": [XSS],
                               "source": XSS, "versions": 1, "history": [],
                               "superseded_by": 2}}
        if op == "memory.conflicts":  # drawer 1 lost to drawer 2, and 3 vs 4 is elsewhere
            return {"total": 2, "conflicts": [
                {"id": 9, "older_id": 1, "newer_id": 2, "reason": f"{XSS} vs bob",
                 "resolved_ms": 1_700_000_000_000, "resolution": "supersede"},
                {"id": 8, "older_id": 3, "newer_id": 4, "reason": "other", "resolved_ms": None}]}
        return {"id": args.get("id"), "updated": True}


@pytest.fixture
def ui() -> tuple[TestClient, Keys, _Pool]:
    keys, pool = Keys(), _Pool()
    client = TestClient(build_app(keys, 8765, pool, ui=True), base_url=BASE)
    client.cookies.set(COOKIE, keys.session)
    return client, keys, pool


def _writes(pool: _Pool) -> list[str]:
    return [op for op, _, _ in pool.calls if op not in ("memory.get", "memory.conflicts")]


def test_a_form_post_with_the_csrf_field_edits(ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, keys, pool = ui
    response = client.post("/p/pal/d/1/edit", data={"csrf": keys.csrf, "text": "new",
                                                     "tags": "a, b,,"}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/p/pal/d/1"
    assert pool.calls == [("memory.update", "pal", {"id": 1, "text": "new", "tags": ["a", "b"]})]


@pytest.mark.parametrize("path", ["/p/pal/d/1/edit", "/p/pal/d/1/forget", "/p/pal/d/1/restore"])
@pytest.mark.parametrize("csrf", [None, "", "0" * 64])
def test_a_form_post_without_the_right_csrf_value_is_refused(
        ui: tuple[TestClient, Keys, _Pool], path: str, csrf: str | None) -> None:
    client, _, pool = ui
    data = {"text": "hijacked"} if csrf is None else {"text": "hijacked", "csrf": csrf}
    response = client.post(path, data=data, follow_redirects=False)
    assert response.status_code == 403, response.text
    assert "X-Palace-CSRF" in response.text and pool.calls == []


def test_a_cross_site_form_post_is_refused_even_with_the_csrf_value(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, keys, pool = ui
    response = client.post("/p/pal/d/1/forget", data={"csrf": keys.csrf},
                           headers={"Origin": "http://evil.example"}, follow_redirects=False)
    assert response.status_code == 403 and pool.calls == []


def test_the_csrf_header_htmx_sends_is_accepted(ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, keys, pool = ui
    response = client.post("/p/pal/d/1/forget", data={"from": "htmx"}, follow_redirects=False,
                           headers={"X-Palace-CSRF": keys.csrf})
    assert response.status_code == 303 and _writes(pool) == ["memory.forget"]


def test_writes_are_never_a_get(ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, pool = ui
    for action in ("edit", "forget", "restore"):
        assert client.get(f"/p/pal/d/1/{action}").status_code == 405
    assert pool.calls == []


def test_a_page_without_the_cookie_is_401(ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, pool = ui
    client.cookies.clear()
    for path in ("/", "/p/pal", "/p/pal/d/1", "/p/pal/trash"):
        response = client.get(path)
        assert response.status_code == 401 and "UNAUTHORIZED" in response.text
    assert pool.calls == []


def test_drawer_text_renders_escaped_under_a_no_inline_script_csp(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, _ = ui
    response = client.get("/p/pal/d/1")
    assert response.status_code == 200
    assert "<script>alert" not in response.text and "<img src=x" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "style-src 'self'" in csp and "form-action 'self'" in csp
    assert client.get("/static/htmx.min.js").text.startswith("/*! htmx 2.0.11")


def test_palace_serve_alone_serves_no_pages() -> None:
    keys = Keys()
    client = TestClient(build_app(keys, 8765, _Pool()), base_url=BASE)
    headers = {"Authorization": f"Bearer {keys.secret}"}
    assert client.get("/", headers=headers).json()["openapi"] == "/api/v1/openapi.json"
    assert client.get("/p/pal", headers=headers).status_code == 404


def test_an_unexpected_exception_is_a_500_page_without_its_message(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, _ = ui
    page = client.get("/")
    assert page.status_code == 500 and "RuntimeError" in page.text  # a bug's page
    assert "boom" not in page.text  # the traceback goes to stderr only


def test_a_palace_whose_store_is_down_is_marked_on_the_list() -> None:
    keys, pool = Keys(), _Pool()
    pool.buggy = False
    client = TestClient(build_app(keys, 8765, pool, ui=True), base_url=BASE)
    client.cookies.set(COOKIE, keys.session)
    page = client.get("/")
    assert page.status_code == 200
    assert "the team palace&#39;s server does not answer" in page.text
    assert "fastembed:m:384" in page.text and ">7<" in page.text
    assert [op for op, _, _ in pool.calls] == ["daemon.status"]  # one op for every palace


def test_a_drawer_page_shows_its_own_conflicts_and_what_superseded_it(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, pool = ui
    page = client.get("/p/main/d/1")
    assert page.status_code == 200
    conflicts = page.text.split('<ul id="conflicts">', 1)[1].split("</ul>", 1)[0]
    # Its own conflict (drawer 1 is the older side), resolved, linking the newer drawer; the
    # palace's other conflict is not shown; the reason is escaped like any text.
    assert 'href="/p/main/d/2"' in conflicts and "resolved" in conflicts
    assert "supersede" in conflicts and "/d/4" not in conflicts
    assert XSS not in conflicts
    assert "superseded by" in page.text
    assert ("memory.conflicts", "main", {"include_resolved": True, "limit": 1000}) in pool.calls


def test_static_files_are_revalidated_not_refetched_and_pages_never_stored(
        ui: tuple[TestClient, Keys, _Pool]) -> None:
    client, _, _ = ui
    first = client.get("/static/cytoscape.min.js")
    assert first.status_code == 200 and first.headers["cache-control"] == "no-cache"
    assert "default-src 'none'" in first.headers["content-security-policy"]
    again = client.get("/static/cytoscape.min.js",
                       headers={"if-none-match": first.headers["etag"]})
    assert again.status_code == 304 and not again.content  # kept by the browser: no body
    assert client.get("/p/main/d/1").headers["cache-control"] == "no-store"
    # A path that only starts like the static folder is a page like any other.
    assert client.get("/staticx").headers["cache-control"] == "no-store"
