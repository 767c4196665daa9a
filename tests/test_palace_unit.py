"""In-process Palace tests with the fast hashing embedder (no daemon, no real model)."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest

from palaced import config as config_mod
from palaced import reads, recall, trash, writes
from palaced.embedder import HashEmbedder
from palaced.errors import EmbedderMismatch, SchemaTooNew, StorageError
from palaced.palace import Palace
from palaced.paths import resolve
from palaced.recall import RecallRequest
from palaced.services import ModelState, Services
from palaced.store import Store
from palaced.store import drawers as m
from palaced.store.audit import SYSTEM
from palaced.store.schema import SCHEMA_VERSION
from palaced.tokens import Tokenizer

pytestmark = pytest.mark.anyio


def services(tmp_path: Path, embedder: HashEmbedder | None) -> Services:
    os.environ["PALACE_HOME"] = str(tmp_path)
    try:
        cfg = config_mod.load(resolve())
    finally:
        del os.environ["PALACE_HOME"]
    model = ModelState()
    if embedder is not None:
        model.embedder = embedder
        model.state = "ready"
    return Services(config=cfg, model=model, tokenizer=Tokenizer.fallback("unit test"))


async def test_embedder_mismatch_then_reembed(tmp_path: Path) -> None:
    pdir = tmp_path / "p"
    p = await Palace.open("p", pdir, services(tmp_path, HashEmbedder(64)))
    a = (await writes.remember(p, m.NewDrawer(text="alpha beta gamma")))["id"]
    await writes.remember(p, m.NewDrawer(text="delta epsilon"))
    await p.aclose()

    other = services(tmp_path, HashEmbedder(32))
    p = await Palace.open("p", pdir, other)
    assert p.mismatch is not None and "reembed" in p.mismatch
    with pytest.raises(EmbedderMismatch):
        await writes.remember(p, m.NewDrawer(text="zeta"))
    with pytest.raises(EmbedderMismatch):
        await recall.recall(p, RecallRequest(query="alpha"))
    assert (await reads.get(p, a))["text"] == "alpha beta gamma"  # reads still work
    out = await writes.reembed(p)
    assert out["reembedded"] == 2 and out["embedder"] == "hash:32"
    info = await reads.info(p)
    assert info["vectors"] == info["index"] == 2 and info["consistent"] is True
    res = await recall.recall(p, RecallRequest(query="alpha beta gamma", top_k=1))
    assert res.results[0]["id"] == a and res.hybrid and res.notice is None
    assert res.to_wire()["mode"] == "hybrid"
    await p.aclose()


async def test_palace_lock_is_exclusive(tmp_path: Path) -> None:
    """While a palace is open, no other process can take its lock (single owner)."""
    import sys

    import anyio

    p = await Palace.open("p", tmp_path / "p", services(tmp_path, HashEmbedder(16)))
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(tmp_path / 'p' / '.lock')!r}, os.O_RDWR)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n    sys.exit(3)\n"
    )
    assert (await anyio.run_process([sys.executable, "-c", code], check=False)).returncode == 3
    await p.aclose()
    assert (await anyio.run_process([sys.executable, "-c", code], check=False)).returncode == 0


def test_schema_refuses_newer_and_foreign_databases(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    Store(newer).close()
    c = apsw.Connection(str(newer))
    c.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    c.close()
    with pytest.raises(SchemaTooNew):
        Store(newer)
    foreign = tmp_path / "foreign.db"
    c = apsw.Connection(str(foreign))
    c.execute("CREATE TABLE x(y)")
    c.execute("PRAGMA user_version=3")
    c.close()
    with pytest.raises(StorageError):
        Store(foreign)


def test_migrations_from_every_version(tmp_path: Path) -> None:
    from palaced.store.schema import MIGRATIONS, migrate

    for start in range(SCHEMA_VERSION):
        path = tmp_path / f"v{start}.db"
        c = apsw.Connection(str(path))
        for step in range(start):
            with c:
                MIGRATIONS[step](c)
                c.execute("PRAGMA application_id=0x50414C43")
                c.execute(f"PRAGMA user_version={step + 1}")
        assert migrate(c) == start
        assert c.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
        c.close()


def test_fast_embedder_matches_plain_fastembed() -> None:
    """The session rebuilt without thread spinning computes the same vectors."""
    import numpy as np
    from fastembed import TextEmbedding

    from palaced.embedder import EmbedderSettings, FastEmbedder

    from .conftest import MODEL_DIR

    ours = FastEmbedder.load(EmbedderSettings(model_path=MODEL_DIR))
    plain = TextEmbedding(model_name="sentence-transformers/all-MiniLM-L6-v2",
                          specific_model_path=str(MODEL_DIR), local_files_only=True)
    texts = ["readers never block the writer", "a much longer sentence " * 20, "ok"]
    ref = np.asarray(list(plain.embed(texts)), dtype=np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    got = ours.embed_passages(texts)
    assert got.shape == (3, 384)
    assert np.allclose(got, ref, atol=1e-5)
    assert float(ours.embed_query("readers never block the writer") @ ref[0]) > 0.9999


async def test_forget_leaves_tombstones_until_compaction(tmp_path: Path) -> None:
    """usearch's remove is never called: forgotten vectors are skipped, then compacted."""
    svc = services(tmp_path, HashEmbedder(32))
    p = await Palace.open("p", tmp_path / "p", svc)
    ids = [(await writes.remember(p, m.NewDrawer(text=f"note {w} alpha beta")))["id"]
           for w in ("one", "two", "three")]
    await trash.forget(p, ids[0], SYSTEM, keep_ms=86_400_000)  # into the trash
    assert p.index is not None and p.index.dead == 1 and len(p.index) == 2
    res = await recall.recall(p, RecallRequest(query="note one alpha beta", top_k=3))
    assert ids[0] not in [r["id"] for r in res.results]
    await p.checkpoint()  # below the threshold: no compaction, no save of a dead-bearing file
    assert p.index.dead == 1
    await p.aclose()  # close compacts and saves a clean file
    p = await Palace.open("p", tmp_path / "p", svc)
    assert p.index is not None and p.index.dead == 0 and len(p.index) == 2
    info = await reads.info(p)
    assert info["consistent"] is True and info["index"] == info["vectors"] == 2
    await p.aclose()
