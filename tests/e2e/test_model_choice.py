"""Model choice for real: both shared models installed by ``palace model import``, then
``palace model use mpnet`` (384 -> 768 dimensions) and back to ``minilm``, through the CLI of
a real daemon that has no model path in its environment (as a user's), and the refusals.

The palace holds 130 drawers: the background re-embedding stores 64 per batch
(``palaced.maintenance.reembed.BATCH``), so its progress is seen going up between batches.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MODEL_DIR, SHARED, DaemonProc, base_env

pytestmark = pytest.mark.daemon  # every test here runs palace's processes

MPNET_DIR = SHARED / "models" / "all-mpnet-base-v2-onnx-int8"
MINILM_ID = "fastembed:sentence-transformers/all-MiniLM-L6-v2:384"
MPNET_ID = "fastembed:sentence-transformers/all-mpnet-base-v2:768"
DRAWERS = 130
CONFIG = "# my palace settings\n[embedder]\nallow_download = false  # an offline machine\n"


@pytest.fixture
def user_daemon(home: Path) -> Iterator[DaemonProc]:
    """A daemon configured as a user's: no model path in its environment, no model hub."""
    env = base_env(home)
    del env["PALACE_EMBED_MODEL_PATH"]
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # the discard port: nothing listens there
    (home / "config.toml").write_text(CONFIG)
    d = DaemonProc(home, env)
    d.start()
    yield d
    d.stop()


def _palace(d: DaemonProc) -> dict[str, Any]:
    with d.client() as c:
        return next(p for p in c.status()["palaces"] if p["name"] == "p")


def _switch(d: DaemonProc, short: str, identity: str, dims: int, *, cli_progress: bool
            ) -> list[int]:
    """``palace model use short``, then wait for the re-embedding, checking recall on the way;
    the progress values seen (drawers done). ``cli_progress``: also catch ``palace status``
    showing it part-way (a slow model's pass only: a CLI process takes about a second to
    start, as long as MiniLM's whole pass here)."""
    res = d.cli("model", "use", short, check=True)
    assert f"now using {identity}" in res.stdout, res.stdout
    assert f"palace p: re-embedding {DRAWERS} drawers in the background" in res.stdout
    assert "follow it with `palace status`" in res.stdout
    seen: list[int] = []
    line = ""
    deadline = time.monotonic() + 180
    while (moving := _palace(d)["reembedding"]) is not None:
        assert time.monotonic() < deadline, f"no end to the re-embedding: {moving}"
        assert moving["model"] == identity and moving["total"] == DRAWERS
        assert moving["percent"] == moving["done"] * 100 // DRAWERS
        seen.append(moving["done"])
        if len(seen) == 1:
            # Recall meanwhile: keyword-only, and it says so.
            with d.client() as c:
                r = c.recall_ex("p", "who looks after the payment gateway?")
            if r["mode"] != "keyword":  # only if the pass ended in between
                assert _palace(d)["reembedding"] is None, r
            else:
                assert "keyword-only: palace p is being re-embedded" in r["notice"], r
        if cli_progress and not line and seen[-1] > 0:
            status = d.cli("status", check=True).stdout
            found = re.search(rf"re-embedding (\d+)/{DRAWERS} \((\d+)%\) for "
                              rf"{re.escape(identity)} \(keyword-only recall until done\)",
                              status)
            if found:
                line = found.group(0)
                assert int(found.group(2)) == int(found.group(1)) * 100 // DRAWERS
        time.sleep(0.05)
    with d.client() as c:
        info = c.palace_info("p")
        assert info["embedder"] == identity and info["drawers"] == DRAWERS
        assert info["vectors"] == info["index"] == DRAWERS and info["consistent"] is True
        r = c.recall_ex("p", "who is responsible for billing?", top_k=3)
        assert r["mode"] == "hybrid" and "notice" not in r
        hit = next(x for x in r["results"] if x["text"].startswith("Alice"))
        assert hit["vector"] is not None and hit["vector"] > 0.2
        assert c.status()["model"]["dims"] == dims
    assert line or not cli_progress, f"progress never shown part-way by `palace status` {seen}"
    return seen


def test_round_trip_minilm_mpnet_minilm(user_daemon: DaemonProc) -> None:
    d = user_daemon
    res = d.cli("model", "import", str(MODEL_DIR), check=True)
    assert "verified: int8 ONNX export of sentence-transformers/all-MiniLM-L6-v2" in res.stdout
    res = d.cli("model", "import", str(MPNET_DIR), "--name", "mpnet", check=True)
    assert "verified: int8 ONNX export of sentence-transformers/all-mpnet-base-v2" in res.stdout
    # Not the configured model: checked on the side, the daemon keeps MiniLM.
    assert f"checked: {MPNET_ID} loads from" in res.stdout, res.stdout
    assert "`palace model use mpnet` switches to it" in res.stdout

    listed = json.loads(d.cli("model", "list", "--json", check=True).stdout)
    rows = {m["short"]: m for m in listed["models"]}
    assert rows["minilm"]["active"] and not rows["mpnet"]["active"]
    assert rows["minilm"]["installed"] and rows["mpnet"]["installed"]
    assert rows["mpnet"]["dims"] == 768 and not rows["bge-small"]["installed"]
    assert rows["nomic"]["query_prefix"] == "search_query: " and not rows["nomic"]["tested"]
    assert "untested" in listed["more"]

    with d.client() as c:
        c.create_palace("p")
        c.remember_many("p", [{"text": f"meeting {i}: the team reviewed ticket {i} about the "
                                       f"{('deploy', 'search', 'backup')[i % 3]} service",
                               "room": "notes"} for i in range(DRAWERS - 1)])
        c.remember("p", "Alice owns the payment gateway integration", room="owners")
        assert c.palace_info("p")["embedder"] == MINILM_ID

    seen = _switch(d, "mpnet", MPNET_ID, 768, cli_progress=True)
    assert seen == sorted(seen) and len(set(seen)) >= 2, seen  # it went up
    text = (d.home / "config.toml").read_text()
    assert text == CONFIG.replace(
        "[embedder]\n", '[embedder]\nmodel = "sentence-transformers/all-mpnet-base-v2"\n')
    human = d.cli("model", "list", check=True).stdout
    assert re.search(r"^\* mpnet +768", human, re.M), human

    _switch(d, "minilm", MINILM_ID, 384, cli_progress=False)
    assert 'model = "sentence-transformers/all-MiniLM-L6-v2"' in (d.home / "config.toml"
                                                                  ).read_text()
    doctor = d.cli("doctor")
    assert doctor.returncode == 0 and "0 failures" in doctor.stdout, doctor.stdout
    assert _palace(d)["drawers"] == DRAWERS

    # A model that is not installed (offline): refused, nothing changes.
    res = d.cli("model", "use", "bge-small")
    assert res.returncode != 0 and "[EMBEDDER_UNAVAILABLE]" in res.stderr, res.stderr
    assert "palace model import PATH --name bge-small" in res.stderr
    assert "the config file was left as it was" in res.stderr
    assert 'model = "sentence-transformers/all-MiniLM-L6-v2"' in (d.home / "config.toml"
                                                                  ).read_text()
    res = d.cli("model", "use", "no-such-org/no-such-model")
    assert res.returncode != 0 and "[EMBEDDER_UNAVAILABLE]" in res.stderr, res.stderr
    assert "`palace model list` shows the models palace knows" in res.stderr
    with d.client() as c:
        assert c.status()["model"]["identity"] == MINILM_ID


def test_use_is_refused_when_the_environment_overrides_the_model(
        shared_keyword_daemon: DaemonProc) -> None:
    res = shared_keyword_daemon.cli("model", "use", "mpnet")
    assert res.returncode == 5 and "[INVALID_ARGS]" in res.stderr, res.stderr
    assert "sets PALACE_EMBED_MODEL" in res.stderr
    assert not (shared_keyword_daemon.home / "config.toml").exists()


def test_use_is_refused_while_a_team_palace_holds_the_old_models_vectors(
        user_daemon: DaemonProc, pg_url: str) -> None:
    d = user_daemon
    d.cli("model", "import", str(MODEL_DIR), check=True)
    d.cli("model", "import", str(MPNET_DIR), "--name", "mpnet", check=True)
    with d.client() as c:
        c.create_palace("shared", store=pg_url)
        c.remember("shared", "Alice owns the payment gateway integration")
        assert c.palace_info("shared")["embedder"] == MINILM_ID
    res = d.cli("model", "use", "mpnet")
    assert res.returncode != 0 and "[EMBEDDER_MISMATCH]" in res.stderr, res.stderr
    assert f"team palace 'shared' holds vectors of {MINILM_ID}" in res.stderr
    assert "palace delete shared --yes" in res.stderr
    assert (d.home / "config.toml").read_text() == CONFIG  # put back as it was
    with d.client() as c:
        assert c.status()["model"]["identity"] == MINILM_ID
        c.remember("shared", "Bob runs the nightly backup job")  # writes still work
