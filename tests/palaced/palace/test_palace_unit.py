"""In-process Palace tests with the fast hashing embedder (no daemon, no real model)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import apsw
import pytest

from palaced.config import settings as config_mod
from palaced.engine.embedder import FastEmbedder, HashEmbedder
from palaced.engine.services import ModelState, Services
from palaced.engine.tokens import Tokenizer
from palaced.maintenance import compaction, reembed
from palaced.memory import trash, writes
from palaced.palace import reads
from palaced.palace.handle import Palace
from palaced.retrieval import recall
from palaced.retrieval.recall import RecallRequest
from palaced.store import Store
from palaced.store.rows import drawers as m
from palaced.store.rows.audit import SYSTEM
from palaced.store.schema.sqlite import SCHEMA_VERSION
from palaced.wire.errors import SchemaTooNew, StorageError
from palaced.wire.paths import resolve

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


async def test_model_change_switches_in_passes_and_keeps_the_old_vectors(tmp_path: Path
                                                                         ) -> None:
    """A palace of another model answers keyword-only and stores writes (no EMBEDDER_MISMATCH)
    while its drawers are re-embedded pass by pass; the old vectors stay whole (switching back
    needs no work) until one transaction switches it."""
    pdir = tmp_path / "p"
    old = services(tmp_path, HashEmbedder(64))
    p = await Palace.open("p", pdir, old)
    a = (await writes.remember(p, m.NewDrawer(text="alpha beta gamma")))["id"]
    for i in range(3 * reembed.BATCH):
        await writes.remember(p, m.NewDrawer(text=f"filler drawer number {i}"))
    await p.aclose()
    total = 3 * reembed.BATCH + 1

    new = services(tmp_path, HashEmbedder(32))
    p = await Palace.open("p", pdir, new)
    assert p.mismatch is not None and p.vector_embedder() is None
    res = await recall.recall(p, RecallRequest(query="alpha beta gamma", top_k=1))
    assert not res.hybrid and res.results[0]["id"] == a
    assert res.notice is not None and "re-embedded" in res.notice and "hash:32" in res.notice
    z = await writes.remember(p, m.NewDrawer(text="zeta eta theta"))
    assert z["created"] and not z["embedded"]
    info = await reads.info(p)
    assert info["reembedding"] == {"model": "hash:32", "done": 0, "total": total + 1,
                                   "percent": 0, "paused": False}
    assert info["embedder"] == "hash:64" and info["vectors"] == total

    emb = new.model.embedder
    assert emb is not None
    await reembed.begin(p, emb, fresh=False)
    last, stored, _ = await reembed.step(p, emb, 0, background=True)
    assert stored == reembed.BATCH and last > 0
    # Forgetting (into the trash) mid-pass drops its new vectors too (cascade).
    await trash.forget(p, a, SYSTEM, keep_ms=86_400_000)
    assert (await reads.info(p))["reembedding"]["done"] == reembed.BATCH - 1
    await p.aclose()

    # Back to the old model before the switch: its vectors serve at once, the pass is dropped.
    p = await Palace.open("p", pdir, services(tmp_path, HashEmbedder(64)))
    info = await reads.info(p)
    assert info["reembedding"] is None and p.mismatch is None and info["consistent"] is True
    res = await recall.recall(p, RecallRequest(query="filler drawer number 7", top_k=1))
    assert res.hybrid
    await p.aclose()

    p = await Palace.open("p", pdir, new)  # and forward again: `palace reembed` does it now
    out = await reembed.reembed_now(p, emb)
    assert out == {"palace": "p", "embedder": "hash:32", "reembedded": total}
    info = await reads.info(p)
    assert info["embedder"] == "hash:32" and info["reembedding"] is None
    assert info["vectors"] == info["index"] == total and info["consistent"] is True
    assert info["pending_embeddings"] == 0
    res = await recall.recall(p, RecallRequest(query="zeta eta theta", top_k=1))
    assert res.hybrid and res.notice is None and res.results[0]["id"] == z["id"]
    await p.aclose()


async def test_reembed_of_a_current_palace_recomputes_while_recall_stays_hybrid(
        tmp_path: Path) -> None:
    p = await Palace.open("p", tmp_path / "p", services(tmp_path, HashEmbedder(64)))
    ids = [(await writes.remember(p, m.NewDrawer(text=f"note {i} on kafka")))["id"]
           for i in range(5)]
    emb = p.services.model.embedder
    assert emb is not None
    await reembed.begin(p, emb, fresh=True)
    await reembed.step(p, emb, 0, background=False)  # a recompute half done ...
    res = await recall.recall(p, RecallRequest(query="note 3 on kafka", top_k=1))
    assert res.hybrid and res.results[0]["id"] == ids[3]  # ... the live vectors still serve
    out = await reembed.reembed_now(p, emb)
    assert out["reembedded"] == 5  # a recompute starts from scratch
    assert (await reads.info(p))["consistent"] is True
    await p.aclose()


@pytest.mark.daemon
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
    from palaced.store.schema.sqlite import MIGRATIONS, migrate

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


def test_fast_embedder_matches_plain_fastembed(real_embedder: FastEmbedder) -> None:
    """The session rebuilt without thread spinning computes the same vectors."""
    import numpy as np
    from fastembed import TextEmbedding

    from tests.conftest import MODEL_DIR

    ours = real_embedder
    plain = TextEmbedding(model_name="sentence-transformers/all-MiniLM-L6-v2",
                          specific_model_path=str(MODEL_DIR), local_files_only=True)
    texts = ["readers never block the writer", "a much longer sentence " * 20, "ok"]
    ref = np.asarray(list(plain.embed(texts)), dtype=np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    got = ours.embed_passages(texts)
    assert got.shape == (3, 384)
    assert np.allclose(got, ref, atol=1e-5)
    assert float(ours.embed_query("readers never block the writer") @ ref[0]) > 0.9999


async def test_forget_leaves_tombstones_until_compaction(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """usearch's remove is never called: forgotten vectors are skipped, saved as tombstones
    (the next open counts them again), then compacted once there are enough of them."""
    from palaced.palace import handle as palace_mod

    svc = services(tmp_path, HashEmbedder(32))
    p = await Palace.open("p", tmp_path / "p", svc)
    ids = [(await writes.remember(p, m.NewDrawer(text=f"note {w} alpha beta")))["id"]
           for w in ("one", "two", "three")]
    await trash.forget(p, ids[0], SYSTEM, keep_ms=86_400_000)  # into the trash
    assert p.index is not None and p.index.dead == 1 and len(p.index) == 2
    res = await recall.recall(p, RecallRequest(query="note one alpha beta", top_k=3))
    assert ids[0] not in [r["id"] for r in res.results]
    await p.checkpoint()  # below the threshold: saved with its tombstone, not compacted
    assert p.index.dead == 1 and not p.index.dirty
    await p.aclose()
    p = await Palace.open("p", tmp_path / "p", svc)
    assert p.index is not None and p.index.dead == 1 and len(p.index) == 2
    assert p.index_load is not None and p.index_load.how == "loaded"
    info = await reads.info(p)
    assert info["consistent"] is True and info["index"] == info["vectors"] == 2
    assert not p.compaction_due
    monkeypatch.setattr(palace_mod, "COMPACT_MIN_DEAD", 1)
    assert p.compaction_due  # now enough tombstones: rebuilt from SQLite
    await compaction.compact(p)
    assert p.index.dead == 0 and len(p.index) == 2 and p.index_load.how == "rebuilt"
    res = await recall.recall(p, RecallRequest(query="note two alpha beta", top_k=1))
    assert res.results[0]["id"] == ids[1]
    await p.aclose()


async def test_background_embedding_waits_for_interactive_work() -> None:
    """A background pass's slices wait while a remember embeds: without the priority the two
    would take turns slice by slice (FIFO)."""
    import time

    import anyio
    import numpy as np

    from palaced.engine.services import EmbedLanes

    order: list[str] = []

    class Slow(HashEmbedder):
        def embed_passages(self, texts: list[str]) -> np.ndarray:
            order.append(texts[0][0])
            time.sleep(0.02)
            return super().embed_passages(texts)

    lanes, emb = EmbedLanes(), Slow(8)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(lanes.passages, emb, ["b"] * 200, background=True))
        await anyio.sleep(0.005)  # the first background slice is under way
        await lanes.passages(emb, ["i"] * 100)
        assert "i" in order and set(order[order.index("i"):]) == {"i"}
    assert order[0] == "b" and order.count("b") > 2 and order.count("i") > 2


async def test_reembed_now_takes_over_from_the_background_pass(tmp_path: Path) -> None:
    import anyio

    pdir = tmp_path / "p"
    p = await Palace.open("p", pdir, services(tmp_path, HashEmbedder(64)))
    await writes.remember_many(p, [m.NewDrawer(text=f"drawer {i} of many") for i in range(300)])
    await p.aclose()
    p = await Palace.open("p", pdir, services(tmp_path, HashEmbedder(32)))
    emb = p.services.model.embedder
    assert emb is not None
    await reembed.begin(p, emb, fresh=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(reembed.run_pass, p, emb, background=True))
        await anyio.sleep(0.01)  # the background pass is under way
        out = await reembed.reembed_now(p, emb)
    assert out["embedder"] == "hash:32" and 0 < out["reembedded"] < 300
    info = await reads.info(p)
    assert info["embedder"] == "hash:32" and info["reembedding"] is None
    assert info["vectors"] == info["index"] == 300 and info["consistent"] is True
    assert not await reembed.due(p, emb)
    await p.aclose()


async def test_palace_state_changes_only_through_its_methods(tmp_path: Path) -> None:
    """Issue 28: the palace owns its state. What other modules used to assign (``in_flight``,
    ``maybe_pending``, ``index_stale``, ``embedder_identity``...) is read-only from outside and
    changed through methods; the storage flavour is a strategy the palace holds."""
    from palaced.palace.storage import LocalStorage

    p = await Palace.open("p", tmp_path / "p", services(tmp_path, HashEmbedder(16)))
    try:
        assert isinstance(p.storage, LocalStorage) and not p.storage.shared
        for name in ("in_flight", "last_used", "maybe_pending", "embed_soon", "index",
                     "index_stale", "index_load", "embedder_identity", "write_counter",
                     "closed", "corrupt"):
            with pytest.raises(AttributeError):
                setattr(p, name, getattr(p, name))
        p.begin_work()
        assert p.in_flight == 1
        p.end_work()
        p.all_embedded()
        p.note_unembedded(soon=True)
        assert p.maybe_pending and p.embed_soon
        p.embedding_started()
        assert not p.embed_soon
        p.index_lacks_vectors()
        assert p.index_stale and p.compaction_due
        before = p.write_counter
        await p.transact(lambda c: None)
        assert p.write_counter == before + 1
        # L0 through the strategy: the identity file of a local palace.
        assert "memories of p" in await p.identity()
        assert (await p.identity(keep_comments=True)).startswith("# Identity")
    finally:
        await p.aclose()
    assert p.closed
