"""The web app's page loads on a large palace, timed with a real HTTP client (issue 32).

A private palaced (keyword-only by default, ``--model`` for the MiniLM model in ``../shared``)
under a scratch ``PALACE_HOME`` gets a palace of --drawers drawers (``http_api.fill``) and
--trash of them forgotten; ``palace ui --no-browser --port 0`` serves it. httpx logs in as a
browser does (the printed URL, then the session cookie) and times, over one keep-alive
connection, complete GETs of: the palaces page ``/``, the empty search page ``/p/{palace}``,
the search round trip ``/p/{palace}?q=...`` over --queries varied queries, a drawer page
(varied drawers) and the trash; --loads of each other page after 3 to warm up. Then REST
recall against the Python client's (``http_api.compare_recall``). Prints a table of p50/p95.

    python bench/ui_load.py [--drawers 10000] [--trash 200] [--loads 30] [--queries 50]
                            [--calls 200] [--model] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from http_api import ROWS, WORDS, compare_recall, fill, pct, start_serve, stop

WARMUP = 3
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def queries(n: int) -> list[str]:
    """``n`` distinct queries of 1-3 of the corpus's words, some with a note number."""
    out: list[str] = []
    for q in range(n):
        words = [WORDS[(q * 7 + k * 5) % len(WORDS)] for k in range(1 + q % 3)]
        if q % 4 == 3:
            words.append(f"note {q * 137 % 1000}")
        out.append(" ".join(words))
    return out


def timed(get: Callable[[str], httpx.Response], urls: list[str], expect: str) -> list[float]:
    """Milliseconds of each GET of ``urls`` (the whole body read); every answer must be 200
    and hold ``expect``."""
    times: list[float] = []
    for url in urls:
        t0 = time.perf_counter()
        answer = get(url)
        times.append((time.perf_counter() - t0) * 1000)
        if answer.status_code != 200 or expect not in answer.text:
            raise RuntimeError(f"GET {url}: {answer.status_code} {answer.text[:300]}")
    return times


def browser_loads(login_url: str, urls: list[str]) -> dict[str, list[float]]:
    """Load ``urls`` in headless chromium after opening ``login_url``: per load, ms from the
    navigation's start to the response's end and to the load event's end."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--no-sandbox"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    timings: dict[str, list[float]] = {"response": [], "load": []}
    try:
        driver.get(login_url)
        for url in urls:
            driver.get(url)  # returns once the load event has fired
            nav = driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0];"
                "return [n.responseEnd - n.startTime, n.loadEventEnd - n.startTime];")
            timings["response"].append(float(nav[0]))
            timings["load"].append(float(nav[1]))
    finally:
        driver.quit()
    return timings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drawers", type=int, default=10000)
    ap.add_argument("--trash", type=int, default=200, help="drawers forgotten (the trash page)")
    ap.add_argument("--loads", type=int, default=30, help="loads of each page but search")
    ap.add_argument("--queries", type=int, default=50, help="search round trips, each distinct")
    ap.add_argument("--calls", type=int, default=200, help="REST vs client recalls")
    ap.add_argument("--browser", type=int, default=0,
                    help="also time N loads of the search page in headless chromium")
    ap.add_argument("--model", action="store_true", help="the real model (default: keyword-only)")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    daemon = PrivateDaemon("pal-uil-", DEFAULT_MODEL if opts.model else None, DEFAULT_TIKTOKEN)
    serve: subprocess.Popen[str] | None = None
    palace = "bench-ui"
    try:
        daemon.start()
        t0 = time.perf_counter()
        fill(daemon, palace, opts.drawers)
        with daemon.client("bench-ui") as c:
            for drawer in range(1, opts.trash + 1):
                c.call("memory.forget", palace, {"id": drawer * 7})
        filled_s = time.perf_counter() - t0
        serve, info, secret = start_serve(daemon, "ui", "--no-browser")
        pages: dict[str, list[float]] = {}
        with httpx.Client(base_url=info["base"], timeout=60) as browser:
            login = browser.get(info["url"].removeprefix(info["base"]))
            if login.status_code != 303:
                raise RuntimeError(f"login: {login.status_code}")
            warm = opts.loads + WARMUP
            # Drawers spread over the palace, none of the forgotten ones (multiples of 7).
            spread = [1 + i * 97 % opts.drawers for i in range(4 * warm)]
            drawers = [d for d in spread if d % 7][:warm]
            base = f"/p/{palace}"
            plan: list[tuple[str, list[str], str]] = [
                ("GET / (palaces)", ["/"] * warm, palace),
                ("GET /p/{palace} (search, empty)", [base] * warm, "<form"),
                ("GET /p/{palace}?q= (search)", [f"{base}?q={q}" for q in
                                                 queries(opts.queries + WARMUP)], "#"),
                ("GET /p/{palace}/d/{id} (drawer)", [f"{base}/d/{d}" for d in drawers], "note"),
                ("GET /p/{palace}/trash", [f"{base}/trash"] * warm, "note"),
            ]
            for name, urls, expect in plan:
                pages[name] = timed(browser.get, urls, expect)[WARMUP:]
        if opts.browser:
            searches = [f"{info['base']}{base}?q={q}"
                        for q in queries(opts.browser + WARMUP)]
            seen = browser_loads(info["url"], searches)
            pages["chromium: search, response end"] = seen["response"][WARMUP:]
            pages["chromium: search, load event"] = seen["load"][WARMUP:]
        with daemon.client("bench-ui") as c, httpx.Client(
                base_url=info["base"], headers={"Authorization": f"Bearer {secret}"}) as h:
            recall = compare_recall(c, h, palace, opts.calls)
        report: dict[str, Any] = {
            "drawers": opts.drawers, "trash": opts.trash, "filled_s": round(filled_s, 1),
            "mode": "hybrid" if opts.model else "keyword-only",
            "pages_ms": {name: {"n": len(t), "p50": pct(t, 50), "p95": pct(t, 95)}
                         for name, t in pages.items()},
            "recall": {"calls": opts.calls, **recall}}
        if opts.json:
            print(json.dumps(report))
        else:
            print(f"palace ui on {opts.drawers} drawers ({report['mode']}), {opts.trash} in "
                  f"the trash; httpx with the session cookie, one keep-alive connection")
            print(f"  {'page':<34} {'n':>4} {'p50 ms':>8} {'p95 ms':>8}")
            for name, row in report["pages_ms"].items():
                print(f"  {name:<34} {row['n']:>4} {row['p50']:8.1f} {row['p95']:8.1f}")
            print(f"recall, {opts.calls} calls each:")
            for name, key in ROWS:
                print(f"  {name:<34}      {recall[key]['p50']:8.1f} {recall[key]['p95']:8.1f}")
        return 0
    finally:
        stop(serve, daemon)


if __name__ == "__main__":
    sys.exit(main())
