"""What a team palace sends PostgreSQL per request (issue 34): statements counted with
``tests/support/pgcount.py`` on a real server, through the daemon's own ops (in-process core,
hashing embedder). Before issue 34 a recall made 29 statements (33 round trips), a remember
37, a remember_many of 100 drawers 1,950.

The write path's statements are checked for the same results too: after the batched
writes, every drawer's keyword context and context vector is what its room neighbours give
(``context.stale_contexts``, the doctor's definition), and re-remembering is still
idempotent."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TIKTOKEN_FILE, short_home
from tests.support.inproc import InProcDaemon, inproc_daemon
from tests.support.pgcount import Count, counting

pytestmark = pytest.mark.daemon


@pytest.fixture(scope="module")
def core() -> Iterator[InProcDaemon]:
    home = short_home()
    with inproc_daemon(home, tokenizer_file=TIKTOKEN_FILE) as d:
        yield d
    shutil.rmtree(home, ignore_errors=True)


def _reads(n: Count) -> list[list[str]]:
    """The statements of each transaction (``BEGIN ...`` .. ``COMMIT``), in the order they
    ended, without the snapshot's own (its isolation level, settings and change counter:
    ``PgStore.read``). Transactions of several connections may interleave (a team recall's
    vector search runs beside its keyword half)."""
    out: list[list[str]] = []
    current: dict[int, list[str]] = {}
    for (kind, text), conn in zip(n.sent, n.conns, strict=True):
        if kind == "command" and text.startswith("BEGIN"):
            current[conn] = []
        elif kind == "command" and text == "COMMIT" and conn in current:
            out.append(current.pop(conn))
        elif conn in current and not text.startswith("SET TRANSACTION") \
                and "is_called" not in text:
            current[conn].append(text)
    return out


WORDS = ("harbour lantern copper meadow violin glacier pepper orchard saddle thunder "
         "compass velvet marble falcon ribbon canyon pillow walnut signal quartz").split()


def _fill(c: Any, name: str) -> list[int]:
    """100 distinct drawers (no two near-duplicates) in 5 rooms; their ids."""
    items = [{"text": f"{' '.join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11))} "
                      f"{i}: Alice and Bob on the deploy key"
                      + (" in Paris" if i % 10 == 3 else ""), "room": f"room-{i % 5}"}
             for i in range(100)]
    return list(c.remember_many(name, items, dedup=False))


def test_a_team_recall_reads_its_keyword_side_in_one_statement(
        core: InProcDaemon, pg_url: str) -> None:
    """The keyword half of a recall (lexemes, document frequencies, BM25, the filter) is one
    statement, the vector search one in a snapshot of its own beside it, the unknown-name
    check one for all names, in the keyword half's snapshot with L0 and L2's knowledge, the
    whole recall at most 14 statements in 15 round trips (29 statements before issue 34),
    the main snapshot after both halves one statement (the candidates' pools read in the
    halves' snapshots), and the ranking is the same as a local palace's."""
    with core.client() as c:
        c.create_palace("team", store=pg_url)
        c.create_palace("local")
        for name in ("team", "local"):
            _fill(c, name)
        query = "when did Alice and Bob talk about the deploy key in Paris and Zanzibar"
        c.recall("team", query)  # warm: the palace's caches, BM25's statistics
        with counting() as n:
            team = c.recall("team", query)
        local = c.recall("local", query)
    reads = _reads(n)
    keyword = [r for r in reads if any("fts_postings" in s for s in r)]
    assert len(keyword) == 1 and sum("fts_postings" in s for s in keyword[0]) == 1, reads
    # Beside BM25 in its snapshot, off the recall's critical path (the query's embedding
    # and vector search take longer): what the recall reads for the query alone, L2's
    # entities, L0 (meta identity) and the unknown-name check; not in the main snapshot,
    # the one reading the candidate pool, whose every round trip the recall waits for.
    query_only = ("FROM entities", "FROM meta", "string_agg")
    assert all(sum(q in s for s in keyword[0]) == 1 for q in query_only), keyword
    # Each half reads its hits' pool (rows, the drawer before each and its text end: one
    # statement, ``search.pool_rows``) in its own snapshot; the vector half also the
    # context vectors' cosines. The main snapshot, whose every round trip the recall waits
    # for, then reads neither the pool nor what the query alone decides: the hits' texts.
    pool = "LEFT JOIN drawers p ON p.id = c.prev"
    assert sum(pool in s for s in keyword[0]) == 1, keyword
    vector = [r for r in reads if any("<=>" in s for s in r)]
    assert len(vector) == 1 and len(vector[0]) == 5, reads
    assert sum(pool in s for s in vector[0]) == 1 and "context_vectors" in vector[0][-1]
    [main] = [r for r in reads if r not in keyword and r not in vector]
    assert not [s for s in main for q in (*query_only, pool, "context_vectors") if q in s], main
    assert len(main) == 1, main
    names = [s for s in n.statements if "string_agg" in s]
    assert len(names) == 1
    # The vector search's two set_config statements (``PgConn.execute_indexed``) ride in
    # its pipeline, one round trip for the three; each snapshot's BEGIN rides with its
    # settings statement, and the pool hands out an idle connection without a liveness
    # statement (``pg.check_idle``). Before: 15 statements, 17 round trips in two snapshots;
    # now 14 in 15 in three, the keyword (7 round trips) and vector ones (5) side by side,
    # then the main one (3: where it was 8 before the pools moved to the halves).
    assert len(n.statements) <= 14, "\n" + n.summary()
    assert n.round_trips <= 15, "\n" + n.summary()
    assert sum("enable_seqscan" in s for s in n.statements) == 2
    assert [r["id"] for r in team][:5] == [r["id"] for r in local][:5]


def test_remember_many_sends_two_statements_a_drawer(core: InProcDaemon, pg_url: str) -> None:
    """A remember_many of 100 drawers in 5 rooms: the drawer with its full-text row and
    closets in one statement, its vectors in one, a room lock per room, the room context of
    the whole batch in a few; every context then as the doctor computes it, and the same
    batch again is all duplicates."""
    from palaced.store.conn.pg import PgStore
    from palaced.store.lookup.context import stale_contexts
    from palaced.store.schema.pg import schema_name

    with core.client() as c:
        c.create_palace("batch", store=pg_url)
        c.remember("batch", "The first drawer records the palace's model.")
        with counting() as n:
            ids = _fill(c, "batch")
        assert len(n.statements) <= 2 * 100 + 30, "\n" + n.summary()
        # a room lock per room (the change counter's bump has a lock of its own)
        assert sum("pg_advisory_xact_lock(hashtext(current_schema()" in s
                   for s in n.statements) == 5
        assert _fill(c, "batch") == ids
        assert c.palace_info("batch")["drawers"] == 101
    store = PgStore(pg_url, schema_name("batch"), palace="batch")
    try:
        assert store.read(stale_contexts) == []
    finally:
        store.close()


def test_recalls_back_to_back_search_once_each(core: InProcDaemon, pg_url: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A recall's access stamps (its touches, which the checkpointer writes after it) are a
    use signal, not content: they do not move the change counter that a recall's snapshots
    compare. Recalls back to back each run one vector search and one BM25, even when the
    previous one's touches commit between the next one's early vector snapshot and its main
    snapshot (before: both searched again there, 1.7 vector searches a recall at 10k)."""
    from palaced.retrieval import search

    with core.client() as c:
        c.create_palace("stamps", store=pg_url)
        _fill(c, "stamps")
        query = "when did Alice and Bob talk about the deploy key in Paris"
        first = c.recall("stamps", query)  # also warms the caches
        assert core.daemon is not None
        palace = core.daemon.registry.open_palaces["stamps"]
        vector_search = search.vector_search
        flushed: list[tuple[int, int]] = []

        def then_touches(*args: Any, **kwargs: Any) -> Any:
            # The first recall's touches land right after the early vector snapshot.
            out = vector_search(*args, **kwargs)
            if not flushed:
                palace.note_touched([int(r["id"]) for r in first[:10]])
                before = palace.write_counter
                palace.flush_touches_sync()
                flushed.append((before, palace.write_counter))
            return out

        monkeypatch.setattr(search, "vector_search", then_touches)
        with counting() as n:
            again = c.recall("stamps", query)
        monkeypatch.undo()
        assert [r["id"] for r in again] == [r["id"] for r in first]
        assert any(s.startswith("UPDATE drawers SET accessed_ms") for s in n.statements)
        assert sum("<=>" in s for s in n.statements) == 1, "\n" + n.summary()
        assert sum("fts_postings" in s for s in n.statements) == 1, "\n" + n.summary()
        assert flushed[0][0] == flushed[0][1]  # the touches did not move the counter
        # A write of content still moves it (and every cache and snapshot compared on it).
        c.remember("stamps", "The deploy key moved to the vault in Paris", room="room-1")
        assert c.recall("stamps", "deploy key vault")
        assert palace.write_counter > flushed[0][1]


def test_a_write_after_the_keyword_snapshot_is_read_again_in_the_main_one(
        core: InProcDaemon, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """L0, L2's knowledge and the unknown-name check ride in the keyword half's snapshot; a
    write committed after that snapshot began (here the identity, L0) moves the counter, so
    the main snapshot reads them again, as it reads the keyword hits again: the recall shows
    the identity its ranking's snapshot holds."""
    import json

    from palaced.retrieval import search

    with core.client() as c:
        c.create_palace("between", store=pg_url)
        _fill(c, "between")
        query = "Alice and Bob on the deploy key"
        c.recall("between", query)
        assert core.daemon is not None
        palace = core.daemon.registry.open_palaces["between"]
        lexical_search = search.lexical_search
        wrote: list[bool] = []

        def then_write(*args: Any, **kwargs: Any) -> Any:
            out = lexical_search(*args, **kwargs)
            if not wrote:  # inside the keyword snapshot, on another connection
                wrote.append(palace.storage.replace_identity_sync(
                    palace, "Keeper of the deploy key since the Paris offsite."))
            return out

        monkeypatch.setattr(search, "lexical_search", then_write)
        shown = json.dumps(c.recall_ex("between", query))
        monkeypatch.undo()
        assert wrote == [True]
        assert "Keeper of the deploy key since the Paris offsite." in shown


def test_the_vector_half_reads_the_pool_of_its_hits_the_keyword_half_did_not(
        core: InProcDaemon, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each half reads its hits' pool in its own snapshot; a vector search that ends after
    the keyword half read its pool in the same data reads only the hits that pool lacks,
    and the ranking is the same."""
    import time

    from palaced.retrieval import pool as pool_mod
    from palaced.retrieval import search

    with core.client() as c:
        c.create_palace("overlap", store=pg_url)
        _fill(c, "overlap")
        query = "harbour in Paris"  # some drawers' words: the vector hits are all of them
        first = c.recall("overlap", query)
        vector_search, pool_rows = search.vector_search, pool_mod.sql.pool_rows
        found: list[list[int]] = []
        asked: list[list[int]] = []

        def late(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.3)  # the keyword half, its pool included, is done by then
            out = vector_search(*args, **kwargs)
            found.append([i for i, _ in out])
            return out

        def rows(conn: Any, ids: Any, *args: Any, **kwargs: Any) -> Any:
            asked.append(list(ids))
            return pool_rows(conn, ids, *args, **kwargs)

        monkeypatch.setattr(search, "vector_search", late)
        monkeypatch.setattr(pool_mod.sql, "pool_rows", rows)
        again = c.recall("overlap", query)
        monkeypatch.undo()
    assert [r["id"] for r in again] == [r["id"] for r in first]
    keyword, vector, *main = asked  # in this order: the vector half waited
    assert not any(main)  # the main snapshot had every candidate's pool
    assert 0 < len(keyword) < len(found[0]) == 100  # hits both halves found, and more
    assert set(vector) == set(found[0]) - set(keyword)


def test_the_main_snapshot_follows_the_half_that_ends_last_in_its_thread(
        core: InProcDaemon, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team recall's main snapshot runs right after whichever half ends last, in that
    half's worker thread: the recall sends its two halves to worker threads and nothing
    more (before, a third hop: back to the event loop, then the main snapshot out to a worker
    thread). The ranking is the same whichever half ends last."""
    import threading
    import time

    import anyio.to_thread

    from palaced.retrieval import search

    with core.client() as c:
        c.create_palace("chained", store=pg_url)
        _fill(c, "chained")
        query = "harbour in Paris"
        first = c.recall("chained", query)
        vector_search, rank, lexical_search = (search.vector_search, search.rank,
                                               search.lexical_search)
        run_sync = anyio.to_thread.run_sync
        sent: list[str] = []
        threads: dict[str, int] = {}

        async def dispatched(func: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(getattr(func, "__qualname__", repr(func)).split(".")[-1])
            return await run_sync(func, *args, **kwargs)

        def late(search_fn: Any, half: str, delay: float) -> Any:
            def run(*args: Any, **kwargs: Any) -> Any:
                time.sleep(delay)
                threads[half] = threading.get_ident()
                return search_fn(*args, **kwargs)
            return run

        def ranked(*args: Any, **kwargs: Any) -> Any:
            threads["main"] = threading.get_ident()
            return rank(*args, **kwargs)

        monkeypatch.setattr(anyio.to_thread, "run_sync", dispatched)
        monkeypatch.setattr(search, "rank", ranked)
        got = []
        for vector_delay, keyword_delay, last in ((0.3, 0, "vector"), (0, 0.3, "keyword")):
            sent.clear()
            threads.clear()
            monkeypatch.setattr(search, "vector_search",
                                late(vector_search, "vector", vector_delay))
            monkeypatch.setattr(search, "lexical_search",
                                late(lexical_search, "keyword", keyword_delay))
            got.append(c.recall("chained", query))
            halves = [f for f in sent if f.endswith("_then_main") or f == "read"]
            assert sorted(halves) == ["keyword_then_main", "vector_then_main"], sent
            assert threads["main"] == threads[last]
        monkeypatch.undo()
    assert [[r["id"] for r in g] for g in got] == [[r["id"] for r in first]] * 2
