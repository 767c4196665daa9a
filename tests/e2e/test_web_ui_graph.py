"""The graph pages of ``palace ui`` in a real browser (docs/ui.md#the-knowledge-graph-and-
memoirs): a real keyword-only palaced with a few entities and facts (one replaced over time)
and a memoir, a real ``palace ui``, Debian's headless chromium. The vendored cytoscape.js
draws; ``static/graph.js`` marks the container with the counts it drew. Screenshots go to
the test's tmp folder (``PALACE_UI_SCREENSHOTS=DIR`` copies them; docs/ui/ holds one set)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from tests.conftest import fresh_name
from tests.e2e import test_web_ui as web

pytestmark = pytest.mark.daemon

# The same fixtures as test_web_ui (a module-scoped ``palace ui``, a headless chromium).
ui = web.ui
browser = web.browser
HOSTILE = "<img src=x onerror=alert(1)>"


def _op(ui: dict[str, Any], op: str, palace: str, **args: Any) -> dict[str, Any]:
    response = httpx.post(f"{ui['base']}/api/v1/ops/{op}", json={"palace": palace, "args": args},
                          headers={"Authorization": f"Bearer {ui['secret']}"}, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _drawn(driver: WebDriver) -> tuple[int, int]:
    """The counts graph.js set once cytoscape.js laid the graph out (waits up to 20 s)."""
    box = driver.find_element(By.ID, "graph")
    WebDriverWait(driver, 20).until(lambda d: box.get_attribute("data-nodes") is not None)
    assert box.find_elements(By.TAG_NAME, "canvas"), "cytoscape drew no canvas"
    return int(box.get_attribute("data-nodes") or 0), int(box.get_attribute("data-edges") or 0)


def _edges(driver: WebDriver) -> set[tuple[str, str, str]]:
    """The drawn edges as (source label, edge label, target label), read from cytoscape."""
    found = driver.execute_script(
        "return document.getElementById('graph').palaceGraph.edges().map(function (e) {"
        " return [e.source().data('label'), e.data('label'), e.target().data('label')]; });")
    return {(s, p, o) for s, p, o in found}


def _click_node(driver: WebDriver, label: str) -> None:
    """A real mouse click on the node labelled ``label``, where cytoscape drew it."""
    box = driver.find_element(By.ID, "graph")
    x, y = driver.execute_script(
        "var label = arguments[0], cy = document.getElementById('graph').palaceGraph;"
        "var p = cy.nodes().filter(function (n) { return n.data('label') === label; })"
        ".renderedPosition(); return [p.x, p.y];", label)
    size = box.size
    ActionChains(driver).move_to_element_with_offset(
        box, int(x - size["width"] / 2), int(y - size["height"] / 2)).click().perform()


def test_the_knowledge_graph_and_a_memoir_drawn_in_a_real_browser(
        ui: dict[str, Any], browser: WebDriver, tmp_path: Path) -> None:
    palace = fresh_name("graph")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    note = _op(ui, "memory.remember", palace, text="Alice joined Acme in January 2020 as an "
               "engineer.", wing="people", room="alice")["id"]
    _op(ui, "graph.assert", palace, subject="Alice", predicate="works_at", object="Acme",
        valid_from="2020-01-01", source_drawer=note)
    _op(ui, "graph.assert", palace, subject="Alice", predicate="role", object="engineer",
        literal=True, valid_from="2020-01-01")
    _op(ui, "graph.assert", palace, subject="Acme", predicate="located_in", object="Paris",
        valid_from="2019-01-01")
    _op(ui, "graph.assert", palace, subject="Globex", predicate="located_in", object="Berlin",
        valid_from="2019-01-01")
    # A new employer closes the old fact: the graph now and as of 2021 differ.
    _op(ui, "graph.assert", palace, subject="Alice", predicate="works_at", object="Globex",
        valid_from="2023-06-01")
    _op(ui, "graph.link", palace, a=HOSTILE, relation="depends_on", b="Globex")
    base = f"{ui['base']}/p/{palace}"

    browser.get(ui["url"])
    browser.get(f"{base}/graph")
    assert _drawn(browser) == (7, 5)  # 6 entities and the literal "engineer"; 5 facts
    edges = _edges(browser)
    assert ("Alice", "works_at", "Globex") in edges
    assert ("Alice", "works_at", "Acme") not in edges
    assert (HOSTILE, "depends_on", "Globex") in edges  # the label as text on the canvas
    assert "7 nodes and 5 edges drawn" in browser.find_element(By.ID, "graph-status").text
    web._no_alert(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    web._shot(browser, shots, "graph-1-now")

    # Click Alice: her facts, the closed one too, with the source drawer linked.
    _click_node(browser, "Alice")
    row = web._find(browser, "#detail table.facts tr.ended", "Acme")
    assert "2023-06-01" in row.text  # valid to: the day Globex replaced it
    assert row.find_element(By.CSS_SELECTOR, "a.drawer").get_attribute("href") == (
        f"{base}/d/{note}")
    web._find(browser, "#detail table.facts tr", "Globex")
    browser.execute_script("document.getElementById('detail').scrollIntoView();")
    web._shot(browser, shots, "graph-2-entity")

    # As of a day in 2021: the older employer's edge, drawn dashed (it ended since).
    box = web._find(browser, "#asof input[name=as_of]")
    browser.execute_script("arguments[0].value = '2021-03-01';", box)
    web._find(browser, "#asof button").click()
    WebDriverWait(browser, 10).until(lambda d: "as_of=2021-03-01" in d.current_url)
    assert _drawn(browser) == (6, 4)
    edges = _edges(browser)
    assert ("Alice", "works_at", "Acme") in edges
    assert ("Alice", "works_at", "Globex") not in edges
    assert HOSTILE not in {s for s, _, _ in edges}  # linked today, not in 2021
    assert "2021-03-01 23:59" in web._find(browser, "#graph-when").text
    web._shot(browser, shots, "graph-3-as-of-2021")
    # The days the graph changed link to it as of each: before Alice, only the two companies.
    changes = web._find(browser, "#changes")
    assert "2023-06-01 · 2020-01-01 · 2019-01-01" in changes.text
    changes.find_element(By.LINK_TEXT, "2019-01-01").click()
    WebDriverWait(browser, 10).until(lambda d: "as_of=2019-01-01" in d.current_url)
    assert _drawn(browser) == (4, 2)
    assert _edges(browser) == {("Acme", "located_in", "Paris"), ("Globex", "located_in", "Berlin")}
    # The entity page on its own, as of then: the fact valid then is the highlighted row.
    browser.get(f"{base}/graph/entity?name=Alice&as_of=2021-03-01")
    assert "Acme" in web._find(browser, "table.facts tr.then").text

    # A memoir: its concepts and links drawn, the hostile name inert, the refined revision.
    memoir = "architecture"
    _op(ui, "memoir.create", palace, memoir=memoir, description="How the service is built")
    _op(ui, "memoir.add_concept", palace, memoir=memoir, name="cache",
        definition="Keeps hot rows in memory.", labels=["domain:perf"], sources=[note])
    _op(ui, "memoir.add_concept", palace, memoir=memoir, name="database",
        definition="Stores the rows.")
    _op(ui, "memoir.add_concept", palace, memoir=memoir, name=HOSTILE,
        definition=HOSTILE)
    _op(ui, "memoir.add_concept", palace, memoir=memoir, name="loner", definition="No links.")
    _op(ui, "memoir.link", palace, memoir=memoir, name="cache", relation="depends_on",
        to="database")
    _op(ui, "memoir.link", palace, memoir=memoir, name=HOSTILE, relation="related_to",
        to="cache")
    _op(ui, "memoir.refine", palace, memoir=memoir, name="database",
        definition="Stores the rows, replicated.")
    browser.get(f"{base}/memoirs")
    web._find(browser, "#memoirs a.memoir", memoir).click()
    assert _drawn(browser) == (4, 2)
    assert _edges(browser) == {("cache", "depends_on", "database"),
                               (HOSTILE, "related_to", "cache")}
    row = web._find(browser, "#concepts tr", "replicated")
    assert row.find_elements(By.CSS_SELECTOR, "td")[4].text == "2"  # the revision
    assert web._find(browser, "#concepts tr", "No links.")
    hostile = web._find(browser, "#concepts tr", "onerror")
    assert HOSTILE in hostile.text and hostile.find_elements(By.TAG_NAME, "img") == []
    web._no_alert(browser)
    web._shot(browser, shots, "graph-4-memoir")

    # Nothing the CSP blocked (cytoscape's own <style> is kept out), no script error.
    logged = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not [m for m in logged if "favicon" not in m], logged
    if target := os.environ.get("PALACE_UI_SCREENSHOTS"):
        shutil.copytree(shots, target, dirs_exist_ok=True)
