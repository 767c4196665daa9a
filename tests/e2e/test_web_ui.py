"""``palace ui`` in a real browser: a real keyword-only palaced, a real ``palace ui
--no-browser --port 0``, and Debian's headless chromium driven by Selenium through Debian's
chromedriver (docs/ui.md). Screenshots of every page go to the test's tmp folder; set
``PALACE_UI_SCREENSHOTS=DIR`` to also copy them there (docs/ui/ holds one set)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.wait import WebDriverWait

from tests.conftest import DaemonProc, fresh_name

pytestmark = pytest.mark.daemon

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
XSS = "<script>window.pwned = 1; alert(1)</script><img src=x onerror=\"window.pwned = 2\"> heron"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ui(shared_keyword_daemon: DaemonProc) -> Iterator[dict[str, Any]]:
    proc = subprocess.Popen([sys.executable, "-m", "palace_client", "ui", "--no-browser",
                             "--port", "0", "--json"], env=shared_keyword_daemon.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert first, proc.stderr.read() if proc.stderr else ""
    info = json.loads(first)
    info["secret"] = Path(info["secret_file"]).read_text().strip()
    yield info
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), (
        "apt-get install chromium chromium-driver (as .ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--window-size=1100,1000",
                "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(arg)
    if os.geteuid() == 0:  # chromium refuses to run its sandbox as root
        options.add_argument("--no-sandbox")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def _seed(ui: dict[str, Any], palace: str, **args: Any) -> int:
    response = httpx.post(f"{ui['base']}/api/v1/ops/memory.remember",
                          json={"palace": palace, "args": args},
                          headers={"Authorization": f"Bearer {ui['secret']}"}, timeout=30)
    assert response.status_code == 200, response.text
    return int(response.json()["id"])


def _find(driver: WebDriver, css: str, text: str | None = None) -> WebElement:
    """The first element ``css`` (holding ``text``), waiting up to 15 s for it."""
    def found(d: WebDriver) -> WebElement | bool:
        for element in d.find_elements(By.CSS_SELECTOR, css):
            if text is None or text in element.text:
                return element
        return False
    try:
        element: WebElement = WebDriverWait(driver, 15).until(found)
    except TimeoutException:
        raise AssertionError(f"no {css} holding {text!r} at {driver.current_url}: "
                             f"{driver.find_element(By.TAG_NAME, 'body').text[:2000]}") from None
    return element


def _texts(driver: WebDriver, css: str) -> list[str]:
    """The text of every element ``css`` selects, in page order."""
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def _shot(driver: WebDriver, folder: Path, name: str) -> None:
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 2000, name


def _no_alert(driver: WebDriver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018 (raises when no alert is open)


def test_browse_search_edit_forget_restore_in_a_real_browser(
        ui: dict[str, Any], browser: WebDriver, tmp_path: Path) -> None:
    palace = fresh_name("ui")
    shots = tmp_path / "screenshots"
    shots.mkdir()
    heron = _seed(ui, palace, text="The heron nests by the old mill, every spring.",
                  wing="birds", room="herons", tags=["spring"], source="field notes")
    _seed(ui, palace, text="Swallows arrive in April; the heron leaves the pond.",
          wing="birds", room="swallows")
    xss = _seed(ui, palace, text=XSS, wing="web", room="hostile")
    base = ui["base"]

    # Login: the token leaves the address bar at once; the palaces page lists ours.
    browser.get(ui["url"])
    link = _find(browser, "#palaces a.palace", palace)
    assert browser.current_url == f"{base}/" and "token" not in browser.current_url
    assert browser.execute_script("return typeof htmx") == "object"  # the vendored file ran
    _shot(browser, shots, "1-palaces")

    # Search (htmx swaps the results in and pushes the URL).
    link.click()
    box = _find(browser, "#search input[name=q]")
    box.send_keys("heron")
    _find(browser, "#search button").click()
    hit = _find(browser, "#results .hit", "old mill")
    assert _find(browser, "#results .hit", "old mill").find_element(
        By.CSS_SELECTOR, ".place").text == "birds/herons"
    assert float(hit.find_element(By.CSS_SELECTOR, ".score").text) > 0
    assert hit.find_element(By.CSS_SELECTOR, ".date").text[:2] == "20"
    WebDriverWait(browser, 10).until(EC.url_contains("q=heron"))
    # The hostile drawer is found and shown as text: no script ran, no element was made.
    hostile = _find(browser, "#results .hit", "<script>")
    assert "window.pwned = 1" in hostile.text
    assert browser.find_elements(By.CSS_SELECTOR, "#results script, #results img") == []
    assert browser.execute_script("return window.pwned === undefined")
    _no_alert(browser)
    _shot(browser, shots, "2-search")

    # The wing filter leaves only that wing's drawers.
    browser.get(f"{base}/p/{palace}?q=heron&wing=web")
    _find(browser, "#results .hit", "<script>")
    assert "old mill" not in _find(browser, "#results").text

    # The hostile drawer's own page: its text inert too.
    browser.get(f"{base}/p/{palace}/d/{xss}")
    assert _find(browser, "#text").text == XSS
    assert browser.execute_script("return window.pwned === undefined")
    _no_alert(browser)

    # A drawer: source, tags; edit it, the old text goes to its history.
    browser.get(f"{base}/p/{palace}?q=mill")
    _find(browser, "#results .hit", "old mill").find_element(By.CSS_SELECTOR, "a.drawer").click()
    assert _find(browser, "#source").text == "field notes"
    assert _find(browser, "#tags").text == "spring"
    _shot(browser, shots, "3-drawer")
    textarea = _find(browser, "#edit textarea[name=text]")
    textarea.clear()
    textarea.send_keys("The heron nests by the new mill since 2026.")
    tags = _find(browser, "#edit input[name=tags]")
    tags.clear()
    tags.send_keys("spring, mill")
    _find(browser, "#edit button").click()
    _find(browser, "#history li", "old mill")
    assert _find(browser, "#text").text == "The heron nests by the new mill since 2026."
    assert _find(browser, "#tags").text == "spring mill"
    assert browser.current_url == f"{base}/p/{palace}/d/{heron}"
    _shot(browser, shots, "4-drawer-edited")

    # Forget: to the trash page, which lists it; restore brings it back.
    _find(browser, "#forget button").click()
    entry = _find(browser, "#trash li", "new mill")
    assert browser.current_url == f"{base}/p/{palace}/trash"
    _shot(browser, shots, "5-trash")
    entry.find_element(By.CSS_SELECTOR, "form.restore button").click()
    _find(browser, "#text", "new mill")
    assert browser.current_url == f"{base}/p/{palace}/d/{heron}"
    browser.get(f"{base}/p/{palace}/trash")
    _find(browser, "#trash")
    assert "new mill" not in browser.find_element(By.TAG_NAME, "main").text

    # Nothing the CSP blocked, no script error, on any page.
    logged = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not [m for m in logged if "favicon" not in m], logged

    if target := os.environ.get("PALACE_UI_SCREENSHOTS"):
        shutil.copytree(shots, target, dirs_exist_ok=True)


def test_without_the_cookie_a_page_is_401_and_a_form_post_without_csrf_is_403(
        ui: dict[str, Any], browser: WebDriver) -> None:
    palace = fresh_name("ui")
    drawer = _seed(ui, palace, text="kept safe", wing="w", room="r")
    browser.get(f"{ui['base']}/p/{palace}/d/{drawer}")  # a fresh browser: no cookie
    assert _find(browser, "#error").text.startswith("no credentials")
    assert "kept safe" not in browser.page_source
    # With the cookie but not the CSRF value (what a cross-site form could send): refused.
    with httpx.Client(base_url=ui["base"], timeout=30) as c:
        assert c.get(f"/p/{palace}").status_code == 401
        assert c.get(ui["url"].removeprefix(ui["base"])).status_code == 303
        refused = c.post(f"/p/{palace}/d/{drawer}/forget", data={"x": "1"})
        assert refused.status_code == 403 and "X-Palace-CSRF" in refused.text
        assert "kept safe" in c.get(f"/p/{palace}/d/{drawer}").text  # not forgotten


def test_palace_ui_opens_the_browser_on_the_login_url(
        shared_keyword_daemon: DaemonProc, tmp_path: Path) -> None:
    # webbrowser runs $BROWSER's command first (%s: the URL): a "browser" that writes it down.
    opened = tmp_path / "opened"
    record = f"import sys, pathlib; pathlib.Path({str(opened)!r}).write_text(sys.argv[1])"
    env = {**shared_keyword_daemon.env, "BROWSER": f'{sys.executable} -c "{record}" %s'}
    proc = subprocess.Popen([sys.executable, "-m", "palace_client", "ui", "--port", "0",
                             "--json"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert opened.read_text() == info["url"] and "/login?token=" in info["url"]
        with httpx.Client(base_url=info["base"], timeout=30) as c:
            assert c.get(info["url"]).status_code == 303  # the login: the cookie, then to /
            assert "<h1>Palaces</h1>" in c.get("/").text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
