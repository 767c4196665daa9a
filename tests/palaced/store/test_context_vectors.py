"""Context vectors (``store.context_vectors``): each drawer's room neighbours' mean vector,
kept at write time. A real palace (SQLite, vector index) in-process: after every kind of
write the table holds exactly what the definition gives, computed here from the drawers
and vectors tables alone; a palace of schema v11 gets them filled when it migrates."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.memory import edits, trash, writes
from palaced.palace.handle import Palace
from palaced.retrieval import search
from palaced.store.lookup import context_vectors
from palaced.store.lookup.context import CONTEXT_NEIGHBOURS, rebuild_context_vectors, stale_contexts
from palaced.store.rows import audit
from palaced.store.rows import drawers as m
from palaced.store.rows.edits import Edit
from palaced.store.schema import sqlite as schema
from tests.palaced.palace.test_palace_unit import services

pytestmark = pytest.mark.anyio
KEEP_MS = 86_400_000


def expected(c: apsw.Connection) -> dict[int, np.ndarray]:
    """The definition: for each live drawer, the mean, over the ``CONTEXT_NEIGHBOURS`` live
    drawers on each side in its room (time order), of each one's mean chunk vector; none
    with vectors (or a superseded drawer), no entry."""
    vecs: dict[int, list[np.ndarray]] = {}
    for did, blob in c.execute("SELECT drawer_id, vec FROM vectors ORDER BY drawer_id, chunk"):
        vecs.setdefault(int(did), []).append(np.frombuffer(blob, dtype="<f4"))
    means = {d: np.mean(v, axis=0) for d, v in vecs.items()}
    rows = [(int(i), w, r, int(o), s) for i, w, r, o, s in c.execute(
        "SELECT id, wing, room, occurred_ms, superseded_by FROM drawers")]
    out = {}
    for did, wing, room, occ, _ in (r for r in rows if r[4] is None):
        live = sorted((o, i) for i, w, r, o, s in rows
                      if w == wing and r == room and s is None and i != did)
        before = [i for o, i in live if (o, i) < (occ, did)][-CONTEXT_NEIGHBOURS:]
        after = [i for o, i in live if (o, i) > (occ, did)][:CONTEXT_NEIGHBOURS]
        near = [means[j] for j in before + after if j in means]
        if near:
            out[did] = np.mean(near, axis=0)
    return out


def stored(c: apsw.Connection) -> dict[int, np.ndarray]:
    return {int(i): np.frombuffer(b, dtype=context_vectors.STORED).astype(np.float32)
            for i, b in c.execute("SELECT drawer_id, vec FROM context_vectors")}


def assert_same(got: dict[int, np.ndarray], want: dict[int, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for did, vec in want.items():
        # half floats: ~3 significant digits
        assert np.allclose(got[did], vec, rtol=1e-3, atol=1e-4), did


async def check(p: Palace) -> dict[int, np.ndarray]:
    """The table equals the definition, and ``rebuild`` (in a transaction rolled back)
    gives the same table."""
    def look(c: apsw.Connection) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
        return stored(c), expected(c)

    got, want = await p.read(look)
    assert_same(got, want)

    class Undo(Exception):
        pass

    def rebuilt(c: apsw.Connection) -> None:
        rebuild_context_vectors(c)
        assert_same(stored(c), want)
        raise Undo

    with pytest.raises(Undo):
        await p.write(lambda: p.store.write(rebuilt))
    return got


async def test_every_write_keeps_the_context_vectors_exact(tmp_path: Path) -> None:
    """Remembers out of time order in two rooms, a long text (several chunks), supersedes,
    forgets, restores, edits (text, and a move to the other room), and drawers stored
    without a model that get their vectors later: after each, the table is the
    definition's."""
    rng = random.Random(7)
    svc = services(tmp_path, None)  # keyword-only at first: drawers without vectors
    p = await Palace.open("cv", tmp_path / "cv", svc)
    ids: list[int] = []

    async def add(text: str, room: str, supersedes: int | None = None) -> int:
        got = await writes.remember(p, m.NewDrawer(
            text=text, room=room, supersedes=supersedes,
            occurred_ms=1_700_000_000_000 + rng.randrange(50) * 60_000), dedup=False)
        ids.append(int(got["id"]))
        return int(got["id"])

    try:
        for k in range(4):
            await add(f"an early note number {k} about gardens", rng.choice(("a", "b")))
        assert await check(p) == {}  # no vectors yet
        svc.model.embedder = HashEmbedder(32)
        svc.model.state = "ready"
        await p.attach(svc.model.embedder)
        assert await writes.embed_pending(p) == 4
        await check(p)
        for k in range(16):
            await add(f"note {k}: " + " ".join(rng.choice(("tea", "rain", "boats", "maps"))
                                                for _ in range(8)), rng.choice(("a", "b")))
        await add(" ".join(f"word{j}" for j in range(900)), "a")  # several chunks
        got = await check(p)
        assert len(got) == len(ids)
        await add("a correction of an earlier note", "a", supersedes=ids[5])
        await check(p)
        actor = audit.SYSTEM
        await trash.forget(p, ids[7], actor, keep_ms=KEEP_MS)
        await check(p)
        await trash.forget(p, ids[9], actor, keep_ms=KEEP_MS, purge=True)
        await check(p)
        await trash.restore(p, ids[7], actor, keep_ms=KEEP_MS)
        await check(p)
        await edits.update(p, ids[11], Edit(text="the note, rewritten about lighthouses"))
        await check(p)
        room = await p.read(lambda c: m.get_drawer(c, ids[12]))
        await edits.update(p, ids[12], Edit(room="b" if room["room"] == "a" else "a"))
        await check(p)
    finally:
        await p.aclose()


async def test_a_batch_computes_the_room_context_once_and_exactly(tmp_path: Path) -> None:
    """``remember_many`` leaves the room context of a batch (keyword context and context
    vectors) to one pass after its vectors are stored: batches out of time order, across
    rooms, with a repeated text and a supersede inside, end exactly as the definitions say
    (``check`` here, ``stale_contexts`` for the keyword context too)."""
    rng = random.Random(11)
    p = await Palace.open("cvb", tmp_path / "cvb", services(tmp_path, HashEmbedder(32)))

    def item(k: int, **kw: Any) -> m.NewDrawer:
        return m.NewDrawer(text=f"batch note {k} " + " ".join(
            rng.choice(("tea", "rain", "boats", "maps", "kites")) for _ in range(6)),
            room=rng.choice(("a", "b", "c")),
            occurred_ms=1_700_000_000_000 + rng.randrange(200) * 60_000, **kw)

    try:
        first = await writes.remember_many(p, [item(k) for k in range(40)], dedup=False)
        await check(p)
        old = int(first["ids"][3])
        again = [item(k) for k in range(40, 70)]
        again.insert(10, again[0])  # the same text twice in one batch: stored once
        again.append(item(70, supersedes=old))
        out = await writes.remember_many(p, again, dedup=False)
        assert sum(out["created"]) == 31
        await check(p)
        assert await p.read(stale_contexts) == []
        assert old not in {int(i) for i in await p.read(
            lambda c: [r[0] for r in c.execute("SELECT drawer_id FROM context_vectors")])}
    finally:
        await p.aclose()


async def test_the_neighbour_score_reads_the_context_vectors(tmp_path: Path) -> None:
    """``rank`` adds ``neighbour_vector`` × the query's cosine with a hit's context vector:
    with the table emptied, the same palace ranks as without the neighbour score."""
    p = await Palace.open("cv", tmp_path / "cv", services(tmp_path, HashEmbedder(32)))
    try:
        for k in range(12):
            await writes.remember(p, m.NewDrawer(
                text=f"turn {k} on " + ("harbours" if k % 3 else "mountains and rivers"),
                room="chat", occurred_ms=1_700_000_000_000 + k * 60_000))
        qvec = p.vector_embedder().embed_query("mountains")  # type: ignore[union-attr]

        def ranked(params: search.RankParams) -> Any:
            def go(c: apsw.Connection) -> list[tuple[int, float]]:
                r = search.rank(c, query="mountains", qvec=qvec, index=p.index,
                                filters=m.Filters(), now_ms=1_800_000_000_000, params=params)
                return [(i, round(r.scores[i], 6)) for i in r.order]
            return p.read(go)

        on, off = search.RankParams(), search.RankParams(neighbour_vector=0.0)
        with_scores = await ranked(on)
        assert with_scores != await ranked(off)
        await p.write(lambda: p.store.write(
            lambda c: c.execute("DELETE FROM context_vectors")))
        assert await ranked(on) == await ranked(off)
    finally:
        await p.aclose()


def test_a_v11_palace_gets_its_context_vectors_when_it_migrates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database made by the first eleven schema steps, with drawers and vectors: the
    v12 step makes the table and fills it as the definition says, also when a room's
    drawers take several batches (four drawers a batch here, ten drawers a room)."""
    monkeypatch.setattr(context_vectors, "REBUILD_BATCH", 4)
    conn = apsw.Connection(str(tmp_path / "old.db"))
    conn.execute("PRAGMA foreign_keys=ON")
    with conn:
        for step in schema.MIGRATIONS[:11]:
            step(conn)
        conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
        conn.execute("PRAGMA user_version=11")
    rng = np.random.default_rng(3)
    with conn:
        for k in range(30):
            did = conn.execute(
                "INSERT INTO drawers(text, wing, room, occurred_ms, created_ms, updated_ms, "
                "content_hash) VALUES(?, 'w', ?, ?, 0, 0, ?) RETURNING id",
                (f"old note {k}", f"r{k % 3}", int(rng.integers(0, 10)), f"h{k}")
            ).fetchall()[0][0]
            for chunk in range(1 + k % 2):
                vec = rng.normal(size=8).astype("<f4")
                conn.execute("INSERT INTO vectors(drawer_id, chunk, vec) VALUES(?,?,?)",
                             (did, chunk, (vec / np.linalg.norm(vec)).tobytes()))
    assert schema.migrate(conn) == 11
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == schema.SCHEMA_VERSION
    got = stored(conn)
    assert len(got) == 30
    assert_same(got, expected(conn))
