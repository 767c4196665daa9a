"""The upkeep page of ``palace ui`` (issue 32) in a real browser: a real keyword-only palaced,
a real ``palace ui --no-browser --port 0`` and Debian's headless chromium (the fixtures and
helpers of ``test_web_ui``). A seeded palace with a duplicate pair, a conflict and drawers
to forget in bulk: the conflict resolved (the older drawer superseded, as the Python client
sees it), the duplicates merged, a room consolidated, and a bulk forget previewed, refused
when the selection grew since its preview, confirmed, seen in the trash and one restored.
``PALACE_UI_SCREENSHOTS=DIR`` copies the screenshots there (docs/ui/ holds one set)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.wait import WebDriverWait

from palaced.wire import errors as E
from tests.conftest import DaemonProc, fresh_name
from tests.e2e.test_web_ui import _find, _seed, _shot, _texts, browser, ui

pytestmark = pytest.mark.daemon
__all__ = ["browser", "ui"]  # the fixtures, used by name

TUESDAYS, FRIDAYS = "the deploy runs on Tuesdays", "the deploy runs on Fridays"
SCRATCH = ("draft agenda for the offsite", "parking spot list for visitors",
           "coffee machine descaling reminder", "whiteboard photo of the old plan",
           "lunch order for the design review")
STANDUP = ("Ana shipped the billing export", "Ben is blocked on the staging database",
           "Chen reviews the onboarding flow", "Dana pairs with Ana on search",
           "Eli investigates the flaky login test", "Fay writes the incident report",
           "Gus prepares the quarterly demo")


def _go(driver: WebDriver, element: WebElement) -> None:
    """Click ``element`` and wait until its page is gone (a navigation), so that what is
    looked up next is on the new page (``_find`` could catch the old one mid-unload)."""
    element.click()
    WebDriverWait(driver, 15).until(EC.staleness_of(element))



def test_upkeep_resolves_merges_consolidates_and_forgets_what_was_previewed(
        ui: dict[str, Any], browser: WebDriver, shared_keyword_daemon: DaemonProc,
        tmp_path: Path) -> None:
    palace = fresh_name("upkeep")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    dup_a = _seed(ui, palace, text="Backups are kept for thirty days.", wing="ops",
                  room="backup")
    dup_b = _seed(ui, palace, text="backups are kept for thirty days", wing="ops",
                  room="backup", dedup=False, tags=["retention"])
    older = _seed(ui, palace, text=TUESDAYS, wing="ops", room="deploy")
    newer = _seed(ui, palace, text=FRIDAYS, wing="ops", room="deploy")
    scratch = [_seed(ui, palace, text=t, wing="scratch", room="tmp", tags=["tmp"])
               for t in SCRATCH]
    standup = [_seed(ui, palace, text=t, wing="team", room="standup") for t in STANDUP]
    base = f"{ui['base']}/p/{palace}"

    browser.get(ui["url"])
    browser.get(base)
    _go(browser, _find(browser, "nav a", "upkeep"))
    _find(browser, "#conflicts .conflict-item")
    assert browser.current_url == f"{base}/upkeep"

    # The duplicate pair, both texts side by side.
    pair = _find(browser, "#duplicates .pair")
    assert pair.get_attribute("data-ids") == f"{dup_a},{dup_b}"
    assert [e.text for e in pair.find_elements(By.CSS_SELECTOR, "pre.text")] == [
        "Backups are kept for thirty days.", "backups are kept for thirty days"]
    # The conflict: older and newer, and the words that differ.
    item = _find(browser, "#conflicts .conflict-item", "Fridays")
    assert item.find_element(By.CSS_SELECTOR, ".older .text").text == TUESDAYS
    assert item.find_element(By.CSS_SELECTOR, ".newer .text").text == FRIDAYS
    assert _texts(browser, "#conflicts .diff del") == ["Tuesdays"]
    assert _texts(browser, "#conflicts .diff ins") == ["Fridays"]
    # The room due a consolidation, its draft summary listing its drawers.
    hint = _find(browser, "#consolidation .hint")
    assert hint.get_attribute("data-room") == "team/standup"
    draft = hint.find_element(By.CSS_SELECTOR, "textarea[name=summary]")
    assert all(t in (draft.get_attribute("value") or "") for t in STANDUP)
    _shot(browser, shots, "upkeep-1-page")

    # Resolve the conflict: the newer supersedes the older (the client sees it retired).
    _go(browser, item.find_element(By.CSS_SELECTOR, "button[value=supersede]"))
    done = _find(browser, "#done", "resolved conflict")
    assert f"supersede; retired #{older}" in done.text
    assert browser.current_url.startswith(f"{base}/upkeep?done=")
    assert "No open conflict." in _find(browser, "#conflicts").text
    with shared_keyword_daemon.client() as c:
        assert c.get(palace, older)["superseded_by"] == newer
        assert c.get(palace, newer)["superseded_by"] is None
        assert c.conflicts(palace)["total"] == 0
    # The older drawer's own page says what replaced it and how its conflict ended.
    browser.get(f"{base}/d/{older}")
    mine = _find(browser, "#conflicts", "resolved")
    assert "supersede" in mine.text and f"#{newer}" in mine.text
    assert _find(browser, ".meta", "superseded by").text.count(f"#{newer}") == 1
    _shot(browser, shots, "upkeep-0-drawer-conflict")
    browser.get(f"{base}/upkeep")

    # Merge the duplicates: one drawer left, with both's tags; the other in the trash.
    _go(browser, _find(browser, "#duplicates form.merge button"))
    done = _find(browser, "#done", "merged")
    assert "No duplicate drawers." in _find(browser, "#duplicates").text
    with shared_keyword_daemon.client() as c:
        trashed = {d["id"] for d in c.trash(palace)["drawers"]}
        kept = dup_b if dup_a in trashed else dup_a
        assert trashed & {dup_a, dup_b} == {dup_a, dup_b} - {kept}
        assert c.get(palace, kept)["tags"] == ["retention"]

    # Consolidate the standup room with an edited summary.
    hint = _find(browser, "#consolidation .hint")
    draft = hint.find_element(By.CSS_SELECTOR, "textarea[name=summary]")
    draft.clear()
    draft.send_keys("Standup: billing export shipped; staging database blocks Ben.")
    _go(browser, hint.find_element(By.CSS_SELECTOR, "button"))
    done = _find(browser, "#done", "consolidates")
    assert "in team/standup consolidates 7 drawers" in done.text
    with shared_keyword_daemon.client() as c:
        summary = c.get(palace, int(done.text.split("#")[1].split()[0]))
        assert summary["text"].startswith("Standup: billing export shipped")
        assert {c.get(palace, i)["consolidated_into"] for i in standup} == {summary["id"]}

    # Bulk forget: the preview lists exactly the seeded drawers, and counts them.
    form = _find(browser, "#forget-filter")
    form.find_element(By.CSS_SELECTOR, "input[name=tags]").send_keys("tmp")
    _go(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert _find(browser, "#matched").text == str(len(SCRATCH))
    listed = [int(e.get_attribute("data-id") or 0)
              for e in browser.find_elements(By.CSS_SELECTOR, "#preview li")]
    assert sorted(listed) == sorted(scratch)
    assert "tags=tmp" in browser.current_url
    _shot(browser, shots, "upkeep-2-preview")

    # One more drawer matches before the confirmation: refused, nothing forgotten, and the
    # new preview shown.
    late = _seed(ui, palace, text="stale printer queue note", wing="scratch", room="tmp",
                 tags=["tmp"])
    _go(browser, _find(browser, "#confirm button"))
    assert "nothing was forgotten" in _find(browser, "#changed").text
    assert _find(browser, "#matched").text == str(len(SCRATCH) + 1)
    with shared_keyword_daemon.client() as c:
        assert all(c.get(palace, i)["id"] == i for i in [*scratch, late])

    # Confirmed: all of them in the trash as one batch.
    _go(browser, _find(browser, "#confirm button"))
    done = _find(browser, "#done", "to the trash as batch")
    assert done.text.startswith(f"moved {len(SCRATCH) + 1} drawers to the trash")
    _shot(browser, shots, "upkeep-3-forgotten")
    with shared_keyword_daemon.client() as c:
        for i in [*scratch, late]:
            with pytest.raises(E.MemoryNotFound):
                c.get(palace, i)
    _go(browser, done.find_element(By.CSS_SELECTOR, "a"))
    _find(browser, "#trash li", SCRATCH[0])
    assert browser.current_url == f"{base}/trash"
    entries = {int((e.find_element(By.CSS_SELECTOR, ".drawer").text).lstrip("#")): e
               for e in browser.find_elements(By.CSS_SELECTOR, "#trash li")}
    assert set(scratch) | {late} <= set(entries)

    # Restore one from the trash page: it is a drawer again, the others stay forgotten.
    _go(browser, entries[scratch[0]].find_element(By.CSS_SELECTOR, "form.restore button"))
    _find(browser, "#text", SCRATCH[0])
    with shared_keyword_daemon.client() as c:
        assert c.get(palace, scratch[0])["text"] == SCRATCH[0]
        assert scratch[1] in {d["id"] for d in c.trash(palace)["drawers"]}

    logged = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not [m for m in logged if "favicon" not in m], logged
    if target := os.environ.get("PALACE_UI_SCREENSHOTS"):
        shutil.copytree(shots, target, dirs_exist_ok=True)
