"""The keyword engine (``palaced/palace/keywords.py``): its scores are FTS5's bm25, MaxScore finds
the exhaustive top-k, writes after a build are seen by the next search (through a real
daemon, after a kill -9 too), and a damaged file only costs a rebuild."""

from __future__ import annotations

import dataclasses
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaced.index import keyword_engine as ke
from palaced.index import keyword_file as kf
from palaced.palace import keywords as kw
from palaced.palace.directory import KEYWORDS_NAME
from palaced.retrieval import search as ranking
from palaced.store import Store
from palaced.store.conn.meta import meta_get, meta_set
from palaced.store.lookup import search
from palaced.store.rows import drawers as m
from tests.conftest import DaemonProc, base_env

FAR_FUTURE_MS = 10**13
WORDS = [f"w{i}" for i in range(400)] + ["otter", "heron", "river", "marsh", "crane"]


def zipf_text(rng: random.Random, n: int) -> str:
    # Rank r drawn with weight 1/r: a few words in most drawers, most in a few.
    weights = [1 / (r + 1) for r in range(len(WORDS))]
    return " ".join(rng.choices(WORDS, weights, k=n))


@pytest.fixture(scope="module")
def zipf_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A 2,500-drawer palace database of Zipfian text in 20 rooms (context and dates too)."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("kw") / "palace.db"
    s = Store(path)

    def tx(c: Any) -> None:
        for i in range(2_500):
            m.insert_drawer(c, m.NewDrawer(text=zipf_text(rng, rng.randint(3, 25)),
                                           wing="w", room=f"r{i % 20}",
                                           occurred_ms=1_600_000_000_000 + i * 86_400_000),
                            1_600_000_000_000 + i)

    s.write(tx)
    return s


def fts5(s: Store, words: list[str], k: int, filters: m.Filters | None = None
         ) -> list[tuple[int, float]]:
    """FTS5's own bm25 top-k with the informative terms the engine keeps too."""
    def run(c: Any) -> list[tuple[int, float]]:
        n = search.drawer_count(c)
        terms = search.TermStats().informative(c, words, n)
        return search._bm25(c, search.fts_match(terms), filters or m.Filters(), k,
                            FAR_FUTURE_MS)

    return s.read(run)


def queries(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [rng.sample(WORDS, rng.randint(1, 6)) for _ in range(n)]


def test_engine_scores_are_fts5_bm25(zipf_store: Store) -> None:
    engine = ke.KeywordEngine(zipf_store.read(kf.build))
    for words in queries(60, 1):
        want = fts5(zipf_store, words, 30)
        got = zipf_store.read(lambda c, w=words: engine.search(c, w, 30))
        assert got is not None
        assert len(got) == len(want)
        exact = dict(want)
        for (gid, gs), (_, ws) in zip(got, want, strict=True):
            # Same scores (float32 impacts), and the same order up to ties.
            assert gs == pytest.approx(ws, rel=1e-5)
            # A drawer FTS5 left out ties with FTS5's last one (the cut falls among ties).
            assert exact.get(gid, want[-1][1]) == pytest.approx(gs, rel=1e-5)


def test_engine_file_round_trip_and_damage(zipf_store: Store, tmp_path: Path) -> None:
    base = zipf_store.read(kf.build)
    path = tmp_path / KEYWORDS_NAME
    size = kf.save(base, path)
    assert size == path.stat().st_size
    loaded = kf.load(path)
    words = ["otter", "w3", "w150"]
    a = zipf_store.read(lambda c: ke.KeywordEngine(base).search(c, words, 20))
    b = zipf_store.read(lambda c: ke.KeywordEngine(loaded).search(c, words, 20))
    assert a == b and a
    path.write_bytes(path.read_bytes()[: size // 2])  # truncated
    with pytest.raises(kf.Unusable):
        kf.load(path)
    path.write_bytes(b"garbage" * 100)
    with pytest.raises(kf.Unusable):
        kf.load(path)
    path.write_bytes(b"")
    with pytest.raises(kf.Unusable):
        kf.load(path)


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=8, unique=True),
       k=st.integers(min_value=1, max_value=60))
def test_maxscore_finds_the_exhaustive_top_k(zipf_store: Store, words: list[str], k: int
                                             ) -> None:
    engine = _engine(zipf_store)
    got = zipf_store.read(lambda c: engine.search(c, words, k))
    want = ke.exhaustive_scores(engine, words, k)
    assert got is not None
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-6)
    # Ids agree except among tied scores at the cut.
    cut = want[-1][1] if want else 0.0
    assert {i for i, s in got if s > cut * (1 + 1e-6)} == {i for i, s in want
                                                           if s > cut * (1 + 1e-6)}


@pytest.mark.parametrize("set_max", [ranking.NARROW_SET_MAX, 0])
def test_a_narrowed_search_is_fts5s_top_k(zipf_store: Store, set_max: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A search narrowed to a room or a wing asks the engine for NARROW_OVERFETCH times its
    limit and keeps the matching drawers; when too few match, a narrowing of at most
    NARROW_SET_MAX drawers (a room of 125) has each of them scored, and a larger one is left
    to FTS5 (None). Whatever the engine returns is FTS5's narrowed top-k."""
    monkeypatch.setattr(ranking, "NARROW_SET_MAX", set_max)
    engine = _engine(zipf_store)
    served = {"room": 0, "wing": 0}
    left = 0
    for words in queries(80, 11):
        for kind, narrow in (("room", m.Filters(room="r3")), ("wing", m.Filters(wing="w"))):
            got = zipf_store.read(lambda c, w=words, f=narrow: ranking.engine_search(
                c, engine, " ".join(w), f, 20, FAR_FUTURE_MS))
            if got is None:
                left += 1
                continue
            served[kind] += 1
            want = fts5(zipf_store, words, 20, narrow)
            assert len(got) == len(want)
            exact = dict(want)
            for (gid, gs), (_, ws) in zip(got, want, strict=True):
                assert gs == pytest.approx(ws, rel=1e-5)
                assert exact.get(gid, want[-1][1]) == pytest.approx(gs, rel=1e-5)
            if kind == "room":
                rooms = zipf_store.read(lambda c, g=got: m.get_drawers(c, [i for i, _ in g]))
                assert {d["room"] for d in rooms.values()} <= {"r3"}
    # The wing holds every drawer: the over-fetch serves it always. A room of 1/20 is served
    # by it when its words are rare enough; else by scoring its drawers, or by FTS5.
    assert served["wing"] == 80, served
    if set_max:
        assert served["room"] == 80, served
    else:
        assert served["room"] > 0 and left > 0, (served, left)


_ENGINES: dict[int, ke.KeywordEngine] = {}


def _engine(s: Store) -> ke.KeywordEngine:
    if id(s) not in _ENGINES:
        _ENGINES[id(s)] = ke.KeywordEngine(s.read(kf.build))
    return _ENGINES[id(s)]


def test_overlay_follows_writes_in_the_snapshot(tmp_path: Path) -> None:
    """Inserts, a text edit (its neighbours' context too) and deletes after the build: the
    engine's top-k equals FTS5's on the changed rows."""
    rng = random.Random(3)
    s = Store(tmp_path / "palace.db")

    def fill(c: Any, n: int, start: int) -> list[int]:
        return [m.insert_drawer(c, m.NewDrawer(text=zipf_text(rng, 12), wing="w",
                                               room=f"r{i % 5}"), start + i)[0]
                for i in range(n)]

    ids = s.write(lambda c: fill(c, 300, 0))
    engine = ke.KeywordEngine(s.read(kf.build))
    s.write(lambda c: fill(c, 40, 1_000))
    s.write(lambda c: m.delete_drawers(c, ids[:25]))
    s.write(lambda c: c.execute("UPDATE drawers_fts SET text = 'otter otter heron' "
                                "WHERE rowid = ?", (ids[30],)) and None)
    from palaced.store.lookup.fts_log import note_changed

    s.write(lambda c: note_changed(c, [ids[30]]))
    for words in [*queries(30, 5), ["otter", "heron"]]:
        want = fts5(s, words, 25)
        got = s.read(lambda c, w=words: engine.search(c, w, 25))
        assert got is not None and len(got) == len(want)
        # The engine's avgdl stays the build's while FTS5's moves with the writes: scores
        # within a little of FTS5's, and the same drawers above the cut.
        assert [x for _, x in got] == pytest.approx([x for _, x in want], rel=2e-3)
        cut = want[-1][1] * 1.01 if want else 0.0
        assert {i for i, x in want if x > cut} <= {i for i, _ in got}
        # Among a room's drawers alone (base and overlay rows both), the same scores.
        room = m.Filters(room="r2")
        ids = s.read(lambda c, f=room: search.narrowed_ids(c, f, FAR_FUTURE_MS, 10_000))
        want = fts5(s, words, 25, room)
        got = s.read(lambda c, w=words, i=ids: engine.search_in(c, w, i, 25))
        assert got is not None and len(got) == len(want)
        assert [x for _, x in got] == pytest.approx([x for _, x in want], rel=2e-3)
        cut = want[-1][1] * 1.01 if want else 0.0
        assert {i for i, x in want if x > cut} <= {i for i, _ in got}
    assert engine.changed >= 65


def test_a_phrase_word_is_left_to_fts5(zipf_store: Store) -> None:
    engine = _engine(zipf_store)
    assert zipf_store.read(lambda c: engine.search(c, ["foo_bar"], 10)) is None
    assert zipf_store.read(lambda c: engine.search(c, ["nosuchword"], 10)) == []


# -- through a real daemon ----------------------------------------------------------------------
def engine_daemon(home: Path) -> DaemonProc:
    """A keyword-only palaced whose every palace uses the keyword engine."""
    (home / "config.toml").write_text(
        "[limits]\nkeyword_engine_min_drawers = 0\ncheckpoint_idle_s = 0.2\n", "utf-8")
    d = DaemonProc(home, base_env(home, model=False))
    d.start()
    return d


def wait_built(c: Any, palace: str, *, timeout: float = 60) -> dict[str, Any]:
    """The engine's state once it is built and recorded by a checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.recall(palace, "otter")  # a search starts the build when there is none
        state = c.palace_info(palace)["keywords"]
        if state["state"] == "built" and not state["building"]:
            while not state["recorded"] and time.monotonic() < deadline:
                time.sleep(0.2)  # the idle checkpoint records it
                state = c.palace_info(palace)["keywords"]
            return dict(state)
        time.sleep(0.1)
    raise TimeoutError(f"keyword engine not built: {state}")


def ids_of(c: Any, palace: str, query: str) -> list[int]:
    """The recall's ids, best first (a drawer's room neighbours match its words through
    their context column too, below it)."""
    return [int(r["id"]) for r in c.recall(palace, query, top_k=10)]


@pytest.mark.daemon
def test_writes_after_the_build_are_seen_by_the_next_search(home: Path) -> None:
    d = engine_daemon(home)
    try:
        with d.client() as c:
            c.create_palace("p")
            c.remember_many("p", [{"text": f"filler note {i} about w{i % 37} things",
                                   "room": f"r{i % 7}"} for i in range(300)])
            state = wait_built(c, "p")
            assert state["covered"] == 300
            new = c.remember("p", "the zanzibar otter ate a quokka", room="r1")
            assert ids_of(c, "p", "zanzibar quokka")[:1] == [new]
            # Narrowed to a room, on the engine too: that room's drawers alone, the written
            # one among them, whether the query's rare word is elsewhere or its own.
            narrowed = c.recall("p", "zanzibar things", room="r3", top_k=10)
            assert len(narrowed) == 10 and {r["room"] for r in narrowed} == {"r3"}
            walrus = c.remember("p", "a walrus among the things", room="r3")
            assert [r["id"] for r in c.recall("p", "walrus things", room="r3")][:1] == [walrus]
            c.call("memory.update", "p", {"id": new, "text": "the pelican left at dawn"})
            assert new not in ids_of(c, "p", "zanzibar quokka")
            assert ids_of(c, "p", "pelican dawn")[:1] == [new]
            c.call("memory.forget", "p", {"id": new})
            assert new not in ids_of(c, "p", "pelican dawn")
            c.call("memory.restore", "p", {"id": new})
            assert ids_of(c, "p", "pelican dawn")[:1] == [new]
            newer = c.remember("p", "the pelican came back at dusk", room="r1", supersedes=new)
            assert ids_of(c, "p", "pelican dawn dusk")[:1] == [newer]
            assert c.palace_info("p")["keywords"]["changed"] > 0  # the engine served
            # A kill -9: nothing saved since; the restarted daemon loads the file and replays
            # the log past its watermark.
            late = c.remember("p", "a narwhal in the fjord", room="r2")
        d.kill9()
        d.start(wait_model=False)
        with d.client() as c:
            state = wait_built(c, "p")
            assert state["load"]["how"] == "loaded"
            assert ids_of(c, "p", "narwhal fjord")[:1] == [late]
            assert ids_of(c, "p", "pelican dawn dusk")[:1] == [newer]
            assert new not in ids_of(c, "p", "zanzibar quokka")
    finally:
        d.stop()


@pytest.mark.daemon
def test_a_damaged_engine_file_falls_back_and_is_rebuilt(home: Path) -> None:
    d = engine_daemon(home)
    try:
        with d.client() as c:
            c.create_palace("p")
            ids = c.remember_many("p", [{"text": f"heron number {i} by the w{i % 11} marsh"}
                                        for i in range(120)])
            wait_built(c, "p")
            want = ids_of(c, "p", "heron w3 marsh")
            path = Path(c.palace_info("p")["path"]) / KEYWORDS_NAME
            assert path.exists()
        d.stop()
        path.write_bytes(path.read_bytes()[:1000])  # truncated
        d.start(wait_model=False)
        with d.client() as c:
            assert ids_of(c, "p", "heron w3 marsh") == want  # served by FTS5 meanwhile
            state = wait_built(c, "p")
            assert state["load"]["how"] == "built" and "truncated" in state["load"]["reason"]
            assert ids_of(c, "p", "heron w3 marsh") == want
            assert set(want) <= set(ids)
    finally:
        d.stop()


@pytest.mark.daemon
def test_a_grown_overlay_is_rebuilt_in_the_background_and_the_log_pruned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kw, "REBUILD_MIN", 50)

    def in_process(*args: Any) -> None:
        raise AssertionError("built in the daemon's process, not in a child")

    monkeypatch.setattr(kw, "build", in_process)  # the fallback when the child fails
    rng = random.Random(9)
    s = Store(tmp_path / "palace.db")

    def fill(c: Any, n: int, start: int) -> list[int]:
        return [m.insert_drawer(c, m.NewDrawer(text=zipf_text(rng, 10), wing="w",
                                               room=f"r{i % 5}"), start + i)[0]
                for i in range(n)]

    s.write(lambda c: fill(c, 200, 0))
    state = kw.KeywordState(s, tmp_path / KEYWORDS_NAME, min_drawers=100)
    assert state.engine_for(50) is None and not state.building  # small: FTS5
    assert state.engine_for(200) is None  # starts the first build
    state.wait()
    first = state.engine
    assert first is not None and first.base.n_rows == 200
    state.prune_sync()
    assert s.read(lambda c: c.execute("SELECT count(*) FROM fts_changes").fetchall()[0][0]) == 0
    s.write(lambda c: fill(c, 60, 1_000))  # 60 drawers and their neighbours' context
    assert state.engine_for(260) is first
    s.read(first.refresh)
    assert first.changed > 50
    state.engine_for(260)  # the overlay is past its share: a rebuild starts
    state.wait()
    assert state.engine is not first and state.engine is not None
    assert state.engine.base.n_rows == 260 and state.engine.changed == 0
    state.prune_sync()
    assert s.read(lambda c: c.execute("SELECT count(*) FROM fts_changes").fetchall()[0][0]) == 0
    words = ["otter", "w1", "w40"]
    want = fts5(s, words, 20)
    got = s.read(lambda c: state.engine.search(c, words, 20) if state.engine else None)
    assert got is not None
    assert [x for _, x in got] == pytest.approx([x for _, x in want], rel=1e-5)
    state.stop()


@pytest.mark.daemon
def test_a_damaged_base_is_dropped_and_rebuilt(zipf_store: Store, tmp_path: Path) -> None:
    """Postings that point past the drawers (a file damaged in place, its size intact): the
    search records the IndexError and leaves the query to FTS5; the owner then drops the
    engine at its next use and rebuilds it (``KeywordState.engine_for``)."""
    base = zipf_store.read(kf.build)
    docs = base.docs.copy()
    docs[:] = base.span + 7
    bad = ke.KeywordEngine(dataclasses.replace(base, docs=docs))
    assert zipf_store.read(lambda c: bad.search(c, ["otter", "w2"], 10)) is None
    assert isinstance(bad.damaged, IndexError)
    state = kw.KeywordState(zipf_store, tmp_path / KEYWORDS_NAME, min_drawers=0)
    state.engine = bad
    assert state.engine_for(base.n_rows) is None  # dropped: FTS5 serves meanwhile
    assert state.engine is None and state.error is not None
    state.wait()
    assert state.engine is not None and state.error is None
    got = zipf_store.read(lambda c: state.engine.search(c, ["otter", "w2"], 10)
                          if state.engine else None)
    want = fts5(zipf_store, ["otter", "w2"], 10)
    assert got is not None
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-5)
    state.stop()


def test_a_palace_without_the_engine_drops_a_long_log(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Under min_drawers nothing reads the log: past LOG_KEEP entries the checkpoint empties
    it, and forgets any earlier build (its file could no longer be replayed)."""
    monkeypatch.setattr(kw, "LOG_KEEP", 30)
    s = Store(tmp_path / "palace.db")
    rng = random.Random(4)
    s.write(lambda c: [m.insert_drawer(c, m.NewDrawer(text=zipf_text(rng, 8), room="r"), i)
                       for i in range(20)] and None)
    s.write(lambda c: meta_set(c, kw.BUILD_KEY, "an-old-build"))
    state = kw.KeywordState(s, tmp_path / KEYWORDS_NAME, min_drawers=1_000)

    def log_rows() -> int:
        return int(s.read(lambda c: c.execute("SELECT count(*) FROM fts_changes"
                                              ).fetchall()[0][0]))

    before = log_rows()
    state.prune_sync()  # no search yet: the palace's size is unknown, nothing is dropped
    assert log_rows() == before > 30
    assert state.engine_for(20) is None
    state.prune_sync()
    assert log_rows() == 0
    assert s.read(lambda c: meta_get(c, kw.BUILD_KEY)) is None


@pytest.mark.daemon
def test_stale_temp_files_of_dead_builds_are_dropped(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    path = tmp_path / KEYWORDS_NAME
    stale = tmp_path / f"{KEYWORDS_NAME}.{int(dead.stdout)}.tmp"
    live = tmp_path / f"{KEYWORDS_NAME}.{os.getpid()}.tmp"
    stale.write_bytes(b"half a build")
    live.write_bytes(b"a build going on")
    kf.drop_stale_temps(path)
    assert not stale.exists() and live.exists()
