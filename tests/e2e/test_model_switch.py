"""A model change breaks no palace: real daemons, the real model under two configured names.

The "old" model is the shared MiniLM files configured as ``thenlper/gte-large`` (fastembed then
records another identity, ``fastembed:thenlper/gte-large:384``); the new one is the default.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProc, base_env

pytestmark = pytest.mark.daemon  # every test here runs palace's processes

OLD = "thenlper/gte-large"
NEW_ID = "fastembed:sentence-transformers/all-MiniLM-L6-v2:384"
DRAWERS = 600  # enough that the background pass takes seconds, so it can be caught mid-way


def _palace(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in status["palaces"] if p["name"] == name)


def _wait(d: DaemonProc, name: str, test: Any, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with d.client() as c:
        while time.monotonic() < deadline:
            p = _palace(c.status(), name)
            if test(p):
                return p
            time.sleep(0.05)
    raise AssertionError(f"palace {name} never got there: {p}")


def test_model_change_keeps_working_and_reembeds_in_the_background(home: Path) -> None:
    old_env = base_env(home)
    old_env["PALACE_EMBED_MODEL"] = OLD
    d = DaemonProc(home, old_env)
    d.start()
    with d.client() as c:
        c.create_palace("p")
        c.remember_many("p", [{"text": f"log line {i}: the nightly job {i % 13} finished",
                               "room": "logs"} for i in range(DRAWERS)])
        c.remember("p", "Alice owns the payment gateway integration", room="owners")
        assert c.palace_info("p")["embedder"] == f"fastembed:{OLD}:384"
    d.stop()

    d = DaemonProc(home, base_env(home))  # the default model: another identity
    d.start()
    try:
        with d.client() as c:
            # Remember and recall work at once: no EMBEDDER_MISMATCH.
            made = c.remember_ex("p", "The staging database is Postgres 16 on port 5433")
            assert made["created"] and not made["embedded"]
            r = c.recall_ex("p", "which database runs in staging?")
            assert r["mode"] == "keyword" and r["results"][0]["id"] == made["id"]
            assert "re-embedded for the new model" in r["notice"] and NEW_ID in r["notice"]
        cli = d.cli("recall", "which database runs in staging?", "--palace", "p")
        assert cli.returncode == 0 and "(keyword-only: palace p is being re-embedded" in cli.stderr
        status = d.cli("status", check=True).stdout
        line = next(ln for ln in status.splitlines() if ln.strip().startswith("p:"))
        done = re.search(rf"re-embedding (\d+)/{DRAWERS + 2} \((\d+)%\) for {re.escape(NEW_ID)}",
                         line)
        assert done, status

        # kill -9 in the middle of the pass: the progress is kept, the pass resumes.
        mid = _wait(d, "p", lambda p: 0 < (p["reembedding"] or {}).get("done", 0) < DRAWERS)
        d.kill9()
        d.start()
        with d.client() as c:
            after = _palace(c.status(), "p")
            assert after["embedder"] == f"fastembed:{OLD}:384"  # not switched half-way
            assert after["reembedding"]["done"] >= mid["reembedding"]["done"]

        final = _wait(d, "p", lambda p: p["reembedding"] is None)
        assert final["embedder"] == NEW_ID and final["drawers"] == DRAWERS + 2
        with d.client() as c:
            info = c.palace_info("p")
            assert info["consistent"] is True and info["pending_embeddings"] == 0
            assert info["vectors"] == info["index"] >= DRAWERS + 2
            # Vector recall with the new model: no word of the query is in the drawer.
            r = c.recall_ex("p", "who is responsible for billing?", top_k=3)
            assert r["mode"] == "hybrid" and "notice" not in r
            hit = next(x for x in r["results"] if x["text"].startswith("Alice"))
            assert hit["vector"] is not None and hit["vector"] > 0.2
    finally:
        d.stop()
