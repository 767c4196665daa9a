"""Latency of ``palace ui``'s upkeep pages (docs/ui.md § Upkeep) on a large palace.

A private palaced (keyword-only by default) under a scratch ``PALACE_HOME`` gets a palace of
--drawers drawers (12 random words each, 5 wings x 4 rooms, seeded), then a ``palace ui
--no-browser --port 0`` process serves it. Then --calls GETs (httpx, one keep-alive
connection, Bearer secret) of the upkeep page (``memory.health`` over every drawer,
``memory.conflicts``, a consolidation draft per room due one) and of a bulk forget's preview
of one wing (``memory.forget_many`` dry run), and the REST ``memory.health`` alone (the
page's floor): p50/p95 of each, after 3 warm-up calls.

    python bench/ui_upkeep.py [--drawers 10000] [--calls 40] [--model] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon
from http_api import pct

VOCAB = ("amber basin cedar delta ember fjord grove harbor inlet juniper kestrel lagoon "
         "meadow nectar orchid prairie quartz ridge summit thicket upland valley willow "
         "yarrow zephyr beacon canyon dune estuary falcon glacier heron island jetty "
         "kelp lichen marsh nettle").split()


def fill(daemon: PrivateDaemon, palace: str, drawers: int) -> None:
    """``drawers`` notes of 12 random words (no digits: no conflicts between them)."""
    rng = random.Random(32)
    with daemon.client("bench-ui") as c:
        for start in range(0, drawers, 500):
            items = [{"text": " ".join(rng.choice(VOCAB) for _ in range(12)),
                      "wing": f"w{i % 5}", "room": f"r{i % 4}"}
                     for i in range(start, min(drawers, start + 500))]
            c.remember_many(palace, items)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drawers", type=int, default=10_000)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--model", action="store_true", help="the real model (default: keyword-only)")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    daemon = PrivateDaemon("pal-uiu-", DEFAULT_MODEL if opts.model else None, DEFAULT_TIKTOKEN)
    ui: subprocess.Popen[str] | None = None
    try:
        daemon.start()
        palace = "bench-upkeep"
        fill(daemon, palace, opts.drawers)
        ui = subprocess.Popen([sys.executable, "-m", "palace_client", "ui", "--no-browser",
                               "--port", "0", "--json"], env=daemon.env,
                              stdout=subprocess.PIPE, text=True)
        assert ui.stdout is not None
        info = json.loads(ui.stdout.readline())
        secret = Path(info["secret_file"]).read_text().strip()
        pages = {"upkeep page": f"/p/{palace}/upkeep",
                 "bulk forget preview (one wing)": f"/p/{palace}/upkeep/forget?wing=w0",
                 "memory.health alone (REST)": "/api/v1/ops/memory.health"}
        report: dict[str, object] = {"drawers": opts.drawers, "calls": opts.calls,
                                     "mode": "hybrid" if opts.model else "keyword-only"}
        with httpx.Client(base_url=info["base"], timeout=120,
                          headers={"Authorization": f"Bearer {secret}"}) as h:
            for name, path in pages.items():
                took: list[float] = []
                for i in range(opts.calls + 3):
                    t0 = time.perf_counter()
                    if path.startswith("/api/"):
                        h.post(path, json={"palace": palace, "args": {}}).raise_for_status()
                    else:
                        h.get(path).raise_for_status()
                    if i >= 3:
                        took.append((time.perf_counter() - t0) * 1000)
                report[name] = {"p50": pct(took, 50), "p95": pct(took, 95)}
        if opts.json:
            print(json.dumps(report))
        else:
            print(f"upkeep pages on {opts.drawers} drawers ({report['mode']}), "
                  f"{opts.calls} calls each")
            for name in pages:
                ms = report[name]
                assert isinstance(ms, dict)
                print(f"  {name:<32} p50 {ms['p50']:8.1f} ms   p95 {ms['p95']:8.1f} ms")
        return 0
    finally:
        if ui is not None and ui.poll() is None:
            ui.send_signal(signal.SIGTERM)
            ui.wait(timeout=30)
        daemon.stop()
        daemon.cleanup(keep=False)


if __name__ == "__main__":
    sys.exit(main())
