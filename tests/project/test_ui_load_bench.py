"""``bench/ui_load.py`` on a tiny palace: every page of its table is timed and REST recall is
compared with the client's (the 10k-drawer numbers in docs/benchmarks.md come from it)."""

from __future__ import annotations

import json

import pytest

from tests.project.test_bench_checks import _run

pytestmark = pytest.mark.daemon


def test_ui_load_bench_small_run_times_every_page() -> None:
    res = _run("ui_load.py", "--drawers", "300", "--trash", "10", "--loads", "2",
               "--queries", "4", "--calls", "5", "--browser", "2", "--json", timeout=110)
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    pages = report["pages_ms"]
    assert [name.split(" (")[0] for name in pages] == [
        "GET /", "GET /p/{palace}", "GET /p/{palace}?q=", "GET /p/{palace}/d/{id}",
        "GET /p/{palace}/trash", "chromium: search, response end",
        "chromium: search, load event"]
    assert pages["GET /p/{palace}?q= (search)"]["n"] == 4
    assert all(row["n"] == 2 and 0 < row["p50"] <= row["p95"] for name, row in pages.items()
               if "?q=" not in name)
    assert report["recall"]["calls"] == 5 and report["recall"]["rest_ms"]["p50"] > 0
