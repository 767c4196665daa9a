"""The browse pages of ``palace ui`` (issue 32) in a real browser: the palaces page with each
palace's project and doctor verdict, search filters (tags, dates) and why each hit ranked, the
rooms, the timeline by agent, the audit log. A real keyword-only palaced, a real ``palace ui
--no-browser --port 0`` and Debian's headless chromium, as tests/e2e/test_web_ui.py (whose
fixtures and helpers this reuses). ``PALACE_UI_SCREENSHOTS=DIR`` copies the screenshots
(``pages-*.png``) there; docs/ui/ holds one set."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from tests.conftest import DaemonProc, fresh_name
from tests.e2e import test_web_ui as web

pytestmark = pytest.mark.daemon

ui = web.ui  # the module's `palace ui` (a fixture)
browser = web.browser  # a headless chromium (a fixture)
_find, _shot = web._find, web._shot


def _remember(ui: dict[str, Any], palace: str, agent: str, **args: Any) -> int:
    """Store a drawer through the REST API as ``agent`` (``X-Palace-Agent``)."""
    response = httpx.post(f"{ui['base']}/api/v1/ops/memory.remember",
                          json={"palace": palace, "args": args}, timeout=30,
                          headers={"Authorization": f"Bearer {ui['secret']}",
                                   "X-Palace-Agent": agent})
    assert response.status_code == 200, response.text
    return int(response.json()["id"])



def test_palaces_search_filters_rooms_timeline_and_audit_in_a_real_browser(
        ui: dict[str, Any], browser: WebDriver, shared_keyword_daemon: DaemonProc,
        tmp_path: Path) -> None:
    palace = fresh_name("pages")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    nest = _remember(ui, palace, "mcp:claude-code", text="The heron nests by the old mill.",
                     wing="birds", room="herons", tags=["spring"])
    gone = _remember(ui, palace, "mcp:claude-code", text="The heron left the old mill.",
                     wing="birds", room="herons", occurred_at="2020-03-01")
    _remember(ui, palace, "mcp:claude-code", text="Swallows arrive in April.",
              wing="birds", room="swallows")
    api = _remember(ui, palace, "cli:codex", text="The API listens on port 8080.",
                    wing="code", room="api")
    # The project this palace serves, as `palace init` records it.
    (shared_keyword_daemon.home / "projects.json").write_text(json.dumps(
        {"version": 1, "projects": {"/src/birdwatch": palace}}))
    base, p = ui["base"], f"{ui['base']}/p/{palace}"

    # Palaces: the project, the count, and the doctor's verdict loaded into the row.
    browser.get(ui["url"])
    row = _find(browser, "#palaces tr", palace)
    assert "/src/birdwatch" in row.find_element(By.CSS_SELECTOR, ".project").text
    assert row.find_element(By.CSS_SELECTOR, ".num").text == "4"
    verdict = _find(browser, f"#palaces tr:has(a[href='/p/{palace}']) .health .verdict")
    assert verdict.text == "ok"
    _shot(browser, shots, "pages-1-palaces")
    browser.get(f"{base}/p/{palace}/doctor")
    assert "quick_check ok" in _find(browser, "#checks").text
    _shot(browser, shots, "pages-6-doctor")

    # Search: why each hit ranked; a date filter and a tag filter narrow the hits.
    browser.get(f"{p}?q=heron+mill")
    hits = _find(browser, "#results .hits")
    assert "nests" in hits.text and "left" in hits.text
    why = _find(browser, "#results .hit .why")
    assert "keyword" in why.text and "vector none" in why.text and "stored" in why.text
    assert "by mcp:claude-code" in why.text
    _shot(browser, shots, "pages-2-search-why")
    browser.get(f"{p}?q=heron+mill&since=2021-01-01")
    assert "nests" in _find(browser, "#results").text
    assert "left the old mill" not in _find(browser, "#results").text
    browser.get(f"{p}?q=heron+mill&until=2021-01-01")
    assert "left the old mill" in _find(browser, "#results").text
    assert "nests" not in _find(browser, "#results").text
    browser.get(p)
    _find(browser, "#search input[name=q]").send_keys("heron mill")
    _find(browser, "#search input[name=tag]").send_keys("spring")
    _find(browser, "#search button").click()
    WebDriverWait(browser, 10).until(lambda d: "tag=spring" in d.current_url)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results .hit")) == 1
    assert f"#{nest}" in _find(browser, "#results .hit").text

    # Rooms: wings with counts; a room links to its drawers.
    _find(browser, "nav a", "rooms").click()
    birds = _find(browser, "#wings li.wing", "birds")
    assert birds.find_element(By.CSS_SELECTOR, ".count").text == "3"
    assert "herons 2" in birds.text and "swallows 1" in birds.text
    _shot(browser, shots, "pages-3-rooms")
    _find(browser, "#wings li.room a", "swallows").click()
    _find(browser, "#results .hit", "Swallows")
    assert "heron" not in _find(browser, "#results").text

    # Timeline: both agents, newest first; an agent's link filters to its drawers.
    _find(browser, "nav a", "timeline").click()
    agents = web._texts(browser, "#timeline .entry .agent")
    assert agents == ["cli:codex", "mcp:claude-code", "mcp:claude-code", "mcp:claude-code"]
    _shot(browser, shots, "pages-4-timeline")
    _find(browser, "#timeline .entry .agent", "cli:codex").click()
    _find(browser, "h1", "by cli:codex")
    assert web._texts(browser, "#timeline .entry .agent") == ["cli:codex"]
    _find(browser, "#timeline .entry a.drawer").click()
    assert _find(browser, "#text").text == "The API listens on port 8080."
    assert browser.current_url == f"{p}/d/{api}"

    # Forget a drawer in the app; the audit log shows it, and the action filter narrows.
    browser.get(f"{p}/d/{gone}")
    _find(browser, "#forget button").click()
    _find(browser, "#trash")
    _find(browser, "nav a", "audit").click()
    actions = web._texts(browser, "#audit .entry .action")
    assert actions[0] == "memory.forget" and actions.count("memory.remember") == 4
    first = _find(browser, "#audit .entry")
    assert "http:palace-ui" in first.text and f"#{gone}" in first.text
    _find(browser, "#audit-filter input[name=action]").send_keys("memory.forget")
    _find(browser, "#audit-filter button").click()
    WebDriverWait(browser, 10).until(lambda d: "action=memory.forget" in d.current_url)
    assert web._texts(browser, "#audit .entry .action") == ["memory.forget"]
    assert _find(browser, "h1", "entry").text.endswith("1 entry")
    _shot(browser, shots, "pages-5-audit")

    logged = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not [m for m in logged if "favicon" not in m], logged
    if target := os.environ.get("PALACE_UI_SCREENSHOTS"):
        shutil.copytree(shots, target, dirs_exist_ok=True)
