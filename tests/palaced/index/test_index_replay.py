"""The vector index after a crash: the saved file plus a replay of what SQLite changed since
(``palaced/index/vector_file.py``), a rebuild only when the file cannot serve. In-process with the
hashing embedder; the kill -9 of a real daemon is in ``test_durability.py``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.index.vector_file import SAVES_KEY, open_index
from palaced.index.vectors import VectorIndex
from palaced.maintenance import compaction
from palaced.memory import trash, writes
from palaced.palace import reads
from palaced.palace.directory import INDEX_NAME, release_lock
from palaced.palace.handle import Palace
from palaced.retrieval import recall
from palaced.retrieval.recall import RecallRequest
from palaced.store.conn.meta import meta_get, meta_set
from palaced.store.rows import drawers as m
from palaced.store.rows.audit import SYSTEM
from tests.palaced.palace.test_palace_unit import services


async def forget(p: Palace, drawer_id: int) -> None:
    """Forget into the trash: its vectors leave the table and the index like a deletion's."""
    await trash.forget(p, drawer_id, SYSTEM, keep_ms=86_400_000)


pytestmark = pytest.mark.anyio


def crash(p: Palace) -> None:
    """Drop the palace the way a kill -9 does: no checkpoint, no save, files left as they are."""
    p.store.close()
    release_lock(p._lock_fd)
    p._closed = True  # a crash skips every method that closes


async def remember(p: Palace, texts: list[str]) -> list[int]:
    out = await writes.remember_many(p, [m.NewDrawer(text=t) for t in texts])
    return [int(i) for i in out["ids"]]


async def test_kill_replays_only_the_writes_after_the_last_save(tmp_path: Path) -> None:
    svc = services(tmp_path, HashEmbedder(32))
    pdir = tmp_path / "p"
    p = await Palace.open("p", pdir, svc)
    before = await remember(p, [f"saved otter fact {i} river" for i in range(30)])
    await p.checkpoint()  # the index file now holds these 30
    assert p.index is not None and not p.index.dirty
    # A long drawer: several chunks, hence several vectors, replayed too.
    long_text = " ".join(f"Sentence {i} about the harbour crane and its cables." for i in range(90))
    after = await remember(p, [f"unsaved heron fact {i} marsh" for i in range(7)] + [long_text])
    await forget(p, before[0])
    await forget(p, before[1])
    vectors = (await reads.info(p))["vectors"]
    assert vectors > 30 - 2 + 8  # the long drawer has several chunks
    crash(p)

    p = await Palace.open("p", pdir, svc)
    load = p.index_load
    assert load is not None and load.how == "replayed", load
    assert load.replayed == vectors - 28 and load.removed == 2
    info = await reads.info(p)
    assert info["index"] == info["vectors"] == vectors and info["consistent"] is True
    assert info["index_load"]["how"] == "replayed"
    for i, did in enumerate(after[:7]):
        res = await recall.recall(p, RecallRequest(query=f"unsaved heron fact {i} marsh"))
        assert res.hybrid and did in [r["id"] for r in res.results]
        assert res.results[0]["vector"] is not None
    res = await recall.recall(p, RecallRequest(query="saved otter fact 0 river", top_k=30))
    assert before[0] not in [r["id"] for r in res.results]
    await p.aclose()  # saves: the next open loads without replaying
    p = await Palace.open("p", pdir, svc)
    assert p.index_load is not None and p.index_load.how == "loaded"
    assert p.index is not None and len(p.index) == vectors and p.index.dead == 2
    await p.aclose()


async def test_a_file_that_cannot_serve_is_rebuilt(tmp_path: Path) -> None:
    svc = services(tmp_path, HashEmbedder(32))
    pdir = tmp_path / "p"
    p = await Palace.open("p", pdir, svc)
    ids = await remember(p, [f"fact {i} about kestrels" for i in range(12)])
    await p.aclose()
    index_file = pdir / INDEX_NAME
    saved = index_file.read_bytes()
    cases = {
        "damaged": (bytes(b ^ 0xFF if i % 97 == 0 else b for i, b in enumerate(saved)),
                    "matches no save"),
        "empty": (b"", "empty"),
        "missing": (None, "no index file"),
    }
    for name, (data, reason) in cases.items():
        if data is None:
            index_file.unlink()
        else:
            index_file.write_bytes(data)
        p = await Palace.open("p", pdir, svc)
        load = p.index_load
        assert load is not None and load.how == "rebuilt" and reason in (load.reason or ""), (
            name, load)
        res = await recall.recall(p, RecallRequest(query="fact 3 about kestrels", top_k=1))
        assert res.results[0]["id"] == ids[3] and res.results[0]["vector"] is not None
        await p.aclose()
    # A file another model made (its record names that model) is not used either.
    p = await Palace.open("p", pdir, svc)
    p.store.write(lambda c: meta_set(c, SAVES_KEY, json.dumps(
        [{**r, "embedder": "hash:other"} for r in json.loads(meta_get(c, SAVES_KEY) or "[]")])))
    crash(p)
    p = await Palace.open("p", pdir, svc)
    assert p.index_load is not None and p.index_load.how == "rebuilt"
    assert "another model" in (p.index_load.reason or "")
    await p.aclose()


async def test_crash_between_the_record_and_the_rename_keeps_the_old_file(
        tmp_path: Path) -> None:
    """A save commits its record before it renames the file; the previous record is kept,
    so the file a crash leaves in place is still recognised and replayed."""
    svc = services(tmp_path, HashEmbedder(32))
    pdir = tmp_path / "p"
    p = await Palace.open("p", pdir, svc)
    await remember(p, [f"first batch {i} of notes" for i in range(5)])
    await p.checkpoint()
    old_file = (pdir / INDEX_NAME).read_bytes()
    await remember(p, [f"second batch {i} of notes" for i in range(4)])
    await p.checkpoint()  # a new record and a new file...
    crash(p)
    (pdir / INDEX_NAME).write_bytes(old_file)  # ...but as if the rename never happened
    p = await Palace.open("p", pdir, svc)
    assert p.index_load is not None and p.index_load.how == "replayed"
    assert p.index_load.replayed == 4
    info = await reads.info(p)
    assert info["index"] == info["vectors"] == 9
    await p.aclose()


async def test_an_index_saved_before_watermarks_is_replayed_not_rebuilt(
        tmp_path: Path) -> None:
    """Upgrading keeps the index file an older palaced saved (float32, sha256 digest)."""
    from usearch.index import Index

    svc = services(tmp_path, HashEmbedder(32))
    pdir = tmp_path / "p"
    p = await Palace.open("p", pdir, svc)
    ids = await remember(p, [f"legacy note {i} about swifts" for i in range(10)])
    crash(p)
    # Write the file the way the previous release did: float32, the digest in meta.
    p = await Palace.open("p", pdir, svc)
    rows = p.store.read(lambda c: c.execute("SELECT id, vec FROM vectors").fetchall())
    crash(p)
    old = Index(ndim=32, metric="cos", dtype="f32", connectivity=16)
    old.add(np.asarray([r[0] for r in rows[:8]], dtype=np.uint64),
            np.frombuffer(b"".join(r[1] for r in rows[:8]), dtype="<f4").reshape(8, 32))
    old.save(str(pdir / INDEX_NAME))
    digest = hashlib.sha256((pdir / INDEX_NAME).read_bytes()).hexdigest()
    from palaced.store import Store
    store = Store(pdir / "palace.db")
    store.write(lambda c: (c.execute("DELETE FROM meta WHERE key = ?", (SAVES_KEY,)),
                           meta_set(c, "index_digest", digest)))
    index, load = open_index(store, pdir / INDEX_NAME, 32)
    assert load.how == "replayed" and load.replayed == 2 and load.removed == 0, load
    assert len(index) == 10 and index.raw.dtype.name.lower() == "f32"
    store.close()
    p = await Palace.open("p", pdir, svc)
    res = await recall.recall(p, RecallRequest(query="legacy note 9 about swifts", top_k=1))
    assert res.results[0]["id"] == ids[9]
    await p.aclose()  # saved again, with a record: the next open needs no digest
    p = await Palace.open("p", pdir, svc)
    assert p.index_load is not None and p.index_load.how == "loaded"
    await p.aclose()


def test_owners_are_resolved_through_the_covering_index(tmp_path: Path) -> None:
    """A vector search's keys resolve to drawers through ``vectors_owner`` (schema v10), not
    the rowid: the table's pages hold the vectors themselves, one page read per key on a
    large palace whose pages are not cached. Deleted keys are simply not found."""
    from palaced.store import Store
    from palaced.store.lookup.vectors import owners_of

    store = Store(tmp_path / "palace.db")
    try:
        store.write(lambda c: [m.insert_drawer(c, m.NewDrawer(text=f"drawer {i}"), now_ms=1000)
                               for i in range(1, 6)])
        store.write(lambda c: [c.execute(
            "INSERT INTO vectors(drawer_id, chunk, vec) VALUES(?, 0, x'00')", (d,))
            for d in (1, 2, 3, 3)])
        store.write(lambda c: c.execute("DELETE FROM vectors WHERE drawer_id = 2"))
        plan = store.read(lambda c: " ".join(str(r[-1]) for r in c.execute(
            "EXPLAIN QUERY PLAN SELECT id, drawer_id FROM vectors INDEXED BY vectors_owner "
            "WHERE id IN (SELECT value FROM json_each('[1]'))")))
        assert "COVERING INDEX vectors_owner" in plan
        assert store.read(lambda c: owners_of(c, [1, 2, 3, 4, 99])) == {1: 1, 3: 3, 4: 3}
    finally:
        store.close()


def test_search_widens_past_tombstones() -> None:
    """Keys the owners lookup no longer knows are skipped; the search widens until it has
    k drawers, so a cluster of deleted vectors never hides the live ones behind it."""
    rng = np.random.default_rng(1)
    index = VectorIndex(16)
    vecs = rng.standard_normal((200, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index.add(list(range(1, 201)), vecs)
    alive = set(range(151, 201))  # the first 150 keys are gone
    index.remove(list(range(1, 151)))
    assert len(index) == 50 and index.dead == 150
    hits = index.search(vecs[0], 10, lambda keys: {k: k for k in keys if k in alive})
    assert len(hits) == 10 and all(d in alive for d, _ in hits)


async def test_compaction_builds_while_writes_go_on(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The rebuild reads a snapshot without the write lock; what is written or forgotten
    meanwhile is caught up under the lock before the new index replaces the old."""
    import threading

    import anyio

    from palaced.palace import handle as palace_mod

    svc = services(tmp_path, HashEmbedder(32))
    p = await Palace.open("p", tmp_path / "p", svc)
    ids = await remember(p, [f"tern colony note {i}" for i in range(20)])
    for did in ids[:6]:
        await forget(p, did)
    monkeypatch.setattr(palace_mod, "COMPACT_MIN_DEAD", 5)
    assert p.compaction_due
    building, release = threading.Event(), threading.Event()
    real_build = compaction.build_index

    def slow_build(c, dims):  # type: ignore[no-untyped-def]
        c.execute("SELECT count(*) FROM vectors").fetchall()  # the snapshot starts here
        building.set()
        assert release.wait(10)
        return real_build(c, dims)

    monkeypatch.setattr(compaction, "build_index", slow_build)
    async with anyio.create_task_group() as tg:
        tg.start_soon(compaction.compact, p)
        await anyio.to_thread.run_sync(building.wait)
        with anyio.fail_after(5):  # the write lock is free during the build
            late = await remember(p, ["a late gannet note written during the rebuild"])
            await forget(p, ids[10])
        release.set()
    assert p.index is not None and p.index.dead == 1  # ids[10], forgotten during the build
    assert p.index_load is not None and p.index_load.how == "rebuilt"
    info = await reads.info(p)
    assert info["index"] == info["vectors"] == 14 and info["consistent"] is True
    res = await recall.recall(p, RecallRequest(query="a late gannet note", top_k=1))
    assert res.results[0]["id"] == late[0] and res.results[0]["vector"] is not None
    res = await recall.recall(p, RecallRequest(query="tern colony note 10", top_k=20))
    assert ids[10] not in [r["id"] for r in res.results]
    await p.aclose()


def test_a_small_index_finds_every_vector_by_itself() -> None:
    """3,000 vectors in eight tight clusters (notes that read alike): the graph walk alone
    misses some vectors even when searched for with themselves (6-14 of 3,000 at k=20
    here); an index of at most ``EXACT_SEARCH_MAX`` keys is searched exactly, so each is
    found, first, with its own cosine."""
    from palaced.index.vectors import EXACT_SEARCH_MAX

    n = 3_000
    assert n <= EXACT_SEARCH_MAX
    rng = np.random.default_rng(2)
    centres = rng.standard_normal((8, 384)).astype(np.float32)
    vecs = centres[rng.integers(0, 8, n)] + 0.15 * rng.standard_normal((n, 384)).astype(
        np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = VectorIndex(384)
    index.add(list(range(1, n + 1)), vecs)
    owners = lambda keys: {k: k for k in keys}  # noqa: E731  # every key a live drawer
    for i in range(n):
        best = index.search(vecs[i], 20, owners)
        assert best[0][0] == i + 1 and best[0][1] > 0.99, i
