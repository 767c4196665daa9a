"""REST recall latency (``palace serve``) against the Python client's, same daemon, same palace.

A private palaced (keyword-only by default) under a scratch ``PALACE_HOME`` gets a palace of
--drawers drawers; a ``palace serve --port 0`` process serves it. Then --calls recalls of
rotating queries, alternately through ``palace_client.Client`` (the Unix socket, msgpack) and
through ``POST /api/v1/ops/memory.recall`` (httpx, one keep-alive connection, Bearer secret):
p50/p95 of each and of the difference. Both sides answer the same op with the same arguments,
so the difference is the HTTP hop: JSON, Starlette, a worker thread and a second socket.

    python bench/http_api.py [--drawers 1000] [--calls 300] [--model] [--json]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from _daemon import DEFAULT_MODEL, DEFAULT_TIKTOKEN, PrivateDaemon

from palace_client import Client

WORDS = ("deploy service database migration cache token budget review release index "
         "schema backup restore policy agent memory palace recall search graph").split()
QUERIES = ["deploy the service", "database migration review", "cache token budget",
           "backup and restore policy", "agent memory recall", "search the graph index"]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def fill(daemon: PrivateDaemon, palace: str, drawers: int) -> None:
    """``drawers`` short notes, written in batches of 500."""
    with daemon.client("bench-http") as c:
        for start in range(0, drawers, 500):
            items = [{"text": f"note {i}: " + " ".join(
                WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(12)),
                      "wing": f"w{i % 5}"} for i in range(start, min(drawers, start + 500))]
            c.remember_many(palace, items)


def start_serve(daemon: PrivateDaemon, *command: str
                ) -> tuple[subprocess.Popen[str], dict[str, Any], str]:
    """``palace <command> --port 0 --json`` (``serve``, or ``ui --no-browser``) on
    ``daemon``'s home once it listens: the process, its JSON line and the secret."""
    serve = subprocess.Popen([sys.executable, "-m", "palace_client", *command, "--port", "0",
                              "--json"], env=daemon.env, stdout=subprocess.PIPE, text=True)
    assert serve.stdout is not None
    info = json.loads(serve.stdout.readline())
    return serve, info, Path(info["secret_file"]).read_text().strip()


def stop(serve: subprocess.Popen[str] | None, daemon: PrivateDaemon) -> None:
    """Stop ``serve`` (SIGTERM: it removes its secret file) and the daemon, and delete the
    daemon's scratch home."""
    if serve is not None and serve.poll() is None:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
    daemon.stop()
    daemon.cleanup(keep=False)


ROWS = (("Python client", "client_ms"), ("REST (palace serve)", "rest_ms"),
        ("REST - client", "overhead_ms"))


def compare_recall(c: Client, h: httpx.Client, palace: str, calls: int) -> dict[str, Any]:
    """``calls`` recalls of rotating queries, each through the client ``c`` and then as
    ``POST /api/v1/ops/memory.recall`` through ``h`` (after 10 of each to warm up): p50/p95
    in ms of each side (``ROWS``) and of their difference. Raises RuntimeError when the two
    disagree."""
    direct: list[float] = []
    rest: list[float] = []
    for i in range(calls + 10):
        args: dict[str, Any] = {"query": QUERIES[i % len(QUERIES)], "top_k": 10}
        t0 = time.perf_counter()
        a = c.call("memory.recall", palace, args)
        t1 = time.perf_counter()
        r = h.post("/api/v1/ops/memory.recall", json={"palace": palace, "args": args})
        t2 = time.perf_counter()
        r.raise_for_status()
        # Scores, not ids: equal scores may come in another order (use-aware ranking counts
        # the first call's hits), and on a large synthetic palace most hits tie.
        got, want = ([x["score"] for x in res["results"]] for res in (r.json(), a))
        if got != want:
            raise RuntimeError(f"REST and client disagree on {args['query']!r}: {got} {want}")
        if i >= 10:
            direct.append((t1 - t0) * 1000)
            rest.append((t2 - t1) * 1000)
    over = [b - a for a, b in zip(direct, rest, strict=True)]
    return {"client_ms": {"p50": pct(direct, 50), "p95": pct(direct, 95)},
            "rest_ms": {"p50": pct(rest, 50), "p95": pct(rest, 95)},
            "overhead_ms": {"p50": pct(over, 50), "p95": pct(over, 95),
                            "mean": statistics.fmean(over)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drawers", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--model", action="store_true", help="the real model (default: keyword-only)")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    daemon = PrivateDaemon("pal-http-", DEFAULT_MODEL if opts.model else None, DEFAULT_TIKTOKEN)
    serve: subprocess.Popen[str] | None = None
    try:
        daemon.start()
        palace = "bench-http"
        fill(daemon, palace, opts.drawers)
        serve, info, secret = start_serve(daemon, "serve")
        with daemon.client("bench-http") as c, httpx.Client(
                base_url=info["base"], headers={"Authorization": f"Bearer {secret}"}) as h:
            report = {"drawers": opts.drawers, "calls": opts.calls,
                      "mode": "hybrid" if opts.model else "keyword-only",
                      **compare_recall(c, h, palace, opts.calls)}
        if opts.json:
            print(json.dumps(report))
        else:
            print(f"recall on {opts.drawers} drawers ({report['mode']}), {opts.calls} calls each")
            for name, key in ROWS:
                print(f"  {name:<20} p50 {report[key]['p50']:7.2f} ms   "
                      f"p95 {report[key]['p95']:7.2f} ms")
        return 0
    finally:
        stop(serve, daemon)


if __name__ == "__main__":
    sys.exit(main())
