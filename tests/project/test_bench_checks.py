"""The adversarial bench checks, tiny bounds: the protocol fuzzer and the kill -9 checks pass.

``bench/fuzz.py`` and ``bench/crash.py`` each start their own private daemon under a scratch
home; here they run as the CLI would run them, and must exit 0 and print their summaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MODEL_DIR

REPO = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALACE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.daemon
def test_fuzz_bounded_run_finds_nothing() -> None:
    res = _run("fuzz.py", "--frames", "300", "--mcp-lines", "300", "--siege", "--seed", "1")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "frames sent" in out
    assert "INTERNAL replies (500-502)" in out
    assert "daemon alive at end" in out
    assert "MCP lines sent                           300" in out
    assert "mcp case deep_nesting" in out and "mcp answer error -32700" in out
    assert "fuzz-keep canonical dump           unchanged" in out
    assert "daemon RSS before/after (MB)" in out
    assert "'stalled_frame': 10, 'no_hello': 10" in out and "'flood_refused': 10" in out
    assert "RESULT: PASS" in out


@pytest.mark.daemon
def test_crash_bounded_run_loses_nothing() -> None:
    res = _run("crash.py", "--rounds", "2", "--seed", "1")
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "rounds (kill -9 + restart + check)    2" in out
    assert "lost acknowledged writes              0" in out
    assert "phantom drawers                       0" in out
    assert "retried ops whose answer contradicted the final state:" in out
    assert "RESULT: PASS" in out


@pytest.mark.daemon
@pytest.mark.timeout(300)
def test_crash_storm_of_processes_loses_nothing() -> None:
    """kill -9 under 16 writer processes (2 rounds), during palace reembed and during a
    remember_many of 300 (2 transactions), with the real model: nothing acknowledged is
    lost or doubled, keyword and vector recall find what was written, and the files check."""
    res = _run("crash.py", "--procs", "16", "--rounds", "2", "--round-s", "1.2", "--bulk",
               "300", "--search-sample", "4", "--seed", "2", "--model", str(MODEL_DIR),
               timeout=280)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "rounds (kill -9 + restart + check)    2" in out
    assert "lost acknowledged writes              0" in out
    assert "vector recall checks / misses" in out and "/ 0\n" in out
    assert "reembed: killed while it ran" in out
    assert "bulk resent in full: 300 distinct ids for 300 items" in out
    assert "integrity_check: ok" in out
    assert "RESULT: PASS" in out


@pytest.mark.daemon
@pytest.mark.timeout(180)
def test_guard_quick_run_prints_its_table_and_a_verdict() -> None:
    """``bench/guard.py --quick`` (one round, 64 drawers, 15 queries, real model) prints its
    ratio table against the committed baseline and a verdict. Not a timing assertion: on a
    busy machine the verdict may be either, so both are accepted."""
    res = _run("guard.py", "--quick", "--model", str(MODEL_DIR), timeout=170)
    out = res.stdout
    assert res.returncode in (0, 1), out + res.stderr
    assert "round    embed/s  palace/s" in out and "median" in out
    for name in ("ingest", "recall"):
        assert any(line.startswith(name) and ("ok" in line or "REGRESSED" in line)
                   for line in out.splitlines()), out
    verdict = [line for line in out.splitlines() if line.startswith("VERDICT: ")]
    assert verdict and verdict[0].split()[1] in ("PASS", "REGRESSION"), out
    assert (verdict[0].split()[1] == "PASS") == (res.returncode == 0), out


@pytest.mark.slow
def test_scale_bulk_build_writes_what_the_store_layer_writes(tmp_path: Path) -> None:
    """``bench/scale.py --bulk`` (drawers written in their final state) leaves the same rows
    as the store layer's ``insert_drawer`` + ``store_vectors`` (neighbour contexts rewritten
    as each drawer arrives), also when it resumes a build the store layer began."""
    import apsw

    sys.path.insert(0, str(REPO / "bench"))
    import scale

    n = 2 * scale.BUILD_BATCH + 700
    plain, bulk, mixed = tmp_path / "plain", tmp_path / "bulk", tmp_path / "mixed"
    scale.build(plain, n, MODEL_DIR)
    scale.build(bulk, n, MODEL_DIR, bulk=True)
    scale.build(mixed, scale.BUILD_BATCH, MODEL_DIR)
    scale.build(mixed, n, MODEL_DIR, bulk=True)

    def dump(home: Path) -> list[Any]:
        c = apsw.Connection(str(home / "palaces" / scale.PALACE / "palace.db"))
        out = [c.execute(q).fetchall() for q in (
            "SELECT * FROM drawers ORDER BY id",
            "SELECT rowid, text, context, dates FROM drawers_fts ORDER BY rowid",
            "SELECT * FROM vectors ORDER BY id",
            "SELECT * FROM closets ORDER BY drawer_id, topic",
            "SELECT * FROM context_vectors ORDER BY drawer_id",
            # fts_changes is the keyword engine's feed, not content: the store layer logs
            # every context rewrite, the bulk build writes final rows (an engine built later
            # reads the rows themselves).
            "SELECT name, seq FROM sqlite_sequence WHERE name != 'fts_changes' ORDER BY name",
            "SELECT rowid FROM drawers_fts WHERE drawers_fts MATCH 'note' ORDER BY rowid",
            "SELECT rowid FROM drawers_trigram WHERE drawers_trigram MATCH 'ote 12'",
        )]
        c.close()
        return out

    want = dump(plain)
    assert len(want[0]) == n and len(want[2]) == n and len(want[4]) == n
    assert dump(bulk) == want
    assert dump(mixed) == want


@pytest.mark.daemon
def test_prompt_hook_bench_small_run_prints_every_figure(tmp_path: Path) -> None:
    """``bench/prompt_hook.py`` keyword-only on two conversations, two prompts each, one
    restart, with this checkout as its own ``--compare``: every figure printed and sane (the
    hook never starts a daemon, its headings state exact counts). No timing asserted."""
    out_json = tmp_path / "out.json"
    res = _run("prompt_hook.py", "--keyword-only", "--conversations", "2", "--questions", "2",
               "--restarts", "1", "--repeat", "2", "--compare", str(REPO), "--json", str(out_json))
    assert res.returncode == 0, res.stdout + res.stderr
    for line in ("latency warm ", "latency cold first prompt", "daemon down",
                 "of 1 first prompts injected", "realistic sessions, hook of this tree",
                 f"realistic sessions, hook of {REPO}"):
        assert line in res.stdout, res.stdout
    report = json.loads(out_json.read_text())
    assert report["daemon_started_when_down"] is False
    ours, again = (report["sessions"][k] for k in ("this tree", str(REPO)))
    assert ours["prompts"] == again["prompts"] == 8
    assert ours["answerable"] + ours["unanswerable"] == 8
    assert 0 <= ours["noise_share"] <= 1 and 0 <= ours["relevant_share"] <= 1
    assert ours["exact_heading_share"] == 1.0


@pytest.mark.daemon  # a PostgreSQL server (team), and the model's vocabulary file (both)
@pytest.mark.parametrize("kind", ["sqlite", "team"])
def test_pg_bench_fill_writes_what_drawer_by_drawer_writes(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench/pg.py --scale``'s fill (``remember_many``'s write path: a batch's drawers, then
    their room context once, team palace in 3 threads by room) leaves the rows the store
    layer leaves drawer by drawer (``insert_drawer`` + ``store_vectors``, each rewriting its
    neighbours' context: the fill before), on both backends: drawers, full-text rows and
    postings, vectors, context vectors, closets; ids aside (threads interleave them)."""
    sys.path.insert(0, str(REPO / "bench"))
    import pg

    from palaced.index.vectors import to_blob
    from palaced.store.conn.meta import claim_embedder
    from palaced.store.lookup.vectors import store_vectors
    from palaced.store.rows import drawers

    n, batch, rooms = 420, 100, 20
    # 21 drawers a room: every drawer has room neighbours in other batches
    monkeypatch.setattr(pg, "ROOMS", rooms)
    url = request.getfixturevalue("pg_url") if kind == "team" else ""

    def open_new(name: str) -> Any:
        if kind == "team":
            from palaced.store.conn.pg import PgStore
            store: Any = PgStore(url, name, palace=name, create=True)
        else:
            from palaced.store import Store
            store = Store(tmp_path / f"{name}.db", palace=name)
        store.write(lambda c: claim_embedder(c, "synthetic", pg.DIMS))
        if kind == "team":
            from palaced.store.schema.pg import claim_dims
            store.write(lambda c: claim_dims(c, pg.DIMS))
        return store

    def by_drawer(store: Any) -> None:  # the fill before: drawer by drawer, context each
        f = pg.Filler(MODEL_DIR)
        for s in range(1, n, batch):
            count = min(batch, n - s)
            texts = pg.zipf_texts(count, f.words, seed=s + 1)
            vecs = pg.synthetic_vectors(count, f.rng, f.centres)

            def tx(c: Any, s: int = s, texts: list[str] = texts, vecs: Any = vecs) -> None:
                for j, text in enumerate(texts):
                    i = s + j
                    new = drawers.NewDrawer(text=f"{text} (note {i})", wing=f"wing-{i % 4}",
                                            room=f"room-{i % rooms}")
                    did, created = drawers.insert_drawer(c, new, 1_600_000_000_000 + i * 60_000)
                    if created:
                        store_vectors(c, did, [to_blob(vecs[j])])
            store.write(tx)

    def dump(store: Any) -> list[Any]:
        key = "(SELECT text FROM drawers WHERE id = {})"
        queries = [
            "SELECT text, wing, room, tags, importance, created_ms, occurred_ms, "
            "content_hash, embedded, chunks FROM drawers ORDER BY text",
            f"SELECT {key.format('rowid')} k, text, context, dates FROM drawers_fts ORDER BY k",
            f"SELECT {key.format('drawer_id')} k, chunk, vec FROM vectors ORDER BY k",
            f"SELECT {key.format('drawer_id')} k, topic FROM closets ORDER BY k, topic",
            f"SELECT {key.format('drawer_id')} k, * FROM context_vectors ORDER BY k"]
        if kind == "team":
            queries.append(f"SELECT {key.format('rowid')} k, lexeme, a, b, c, ntok "
                           "FROM fts_postings ORDER BY k, lexeme")
        out = []
        for q in queries:
            rows = store.read(lambda c, q=q: [tuple(r) for r in c.execute(q).fetchall()])
            if q.startswith(f"SELECT {key.format('drawer_id')} k, *"):
                rows = [(r[0], *r[2:]) for r in rows]  # its own drawer_id column aside
            out.append([tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
                        for r in rows])
        return out

    old, new = open_new("fill_old"), open_new("fill_new")
    try:
        by_drawer(old)
        pg.Filler(MODEL_DIR).fill(new, 1, n, threads=3 if kind == "team" else 1, batch=batch)
        want = dump(old)
        assert len(want[0]) == n - 1 and len(want[2]) == n - 1 and want[4]
        assert dump(new) == want
    finally:
        old.close()
        new.close()
