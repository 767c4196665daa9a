"""Team palaces (issue 15) through a real daemon and a real PostgreSQL: creating and
attaching, named stores, credentials refused, detach and purge, the ops that make no sense on
a team palace, an unreachable server, recall across local and team palaces, and the
backend's store functions themselves (full-text, vectors, race-safe inserts).

The op-level suites parametrised over both backends (``store`` fixture of conftest) are
test_memory_lifecycle, test_progressive, test_knowledge, test_export_import, test_graph,
test_upkeep_edit and test_governance; the multi-daemon storms are tests/e2e/test_team_palaces.py,
the multi-daemon governance checks tests/e2e/test_team_governance.py."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from palaced.config import settings as config
from palaced.store.lookup import search
from palaced.store.lookup.pg_search import vector_search
from palaced.store.lookup.vectors import store_vectors
from palaced.store.rows import drawers
from palaced.store.rows.drawers import Filters, NewDrawer
from palaced.wire import errors as E
from tests.conftest import DaemonProc, base_env, short_home
from tests.support.pgstore_support import pg_conn


@pytest.fixture(scope="module")
def team_daemon() -> Iterator[DaemonProc]:
    """A daemon with the real model; its config names a store ``teamdb`` (set per test)."""
    home = short_home()
    d = DaemonProc(home, base_env(home))
    d.start()
    yield d
    d.stop()
    shutil.rmtree(home, ignore_errors=True)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_create_attach_detach_and_purge(team_daemon: DaemonProc, pg_url: str) -> None:
    d, name = team_daemon, _name("team")
    with d.client() as c:
        info = c.create_palace(name, store=pg_url)
        assert info["created"] is True and info["schema"] == f"palace_{name.replace('-', '_')}"
        assert "user" not in info["store"] and info["store"].endswith(":5432/" + pg_url.split(
            "///")[1].split("?")[0])
        did = c.remember(name, "The deploy key rotates every ninety days", room="ops")
        store_file = d.home / "palaces" / name / "store.toml"
        assert not (d.home / "palaces" / name / "palace.db").exists()
        assert 'schema = "palace_' in store_file.read_text()
        # Creating it again is PALACE_EXISTS; with exist_ok it is the same palace.
        with pytest.raises(E.PalaceExists):
            c.create_palace(name, store=pg_url)
        assert c.create_palace(name, store=pg_url, exist_ok=True)["created"] is False
        # Delete detaches this daemon only: the data stays, attaching again finds it.
        assert c.delete_palace(name) == {"deleted": name}
        assert not (d.home / "palaces" / name).exists()
        again = c.create_palace(name, store=pg_url)
        assert again["created"] is False and again["drawers"] == 1
        assert c.get(name, did)["text"] == "The deploy key rotates every ninety days"
        # --purge drops the schema: attaching afterwards starts an empty palace.
        assert c.delete_palace(name, purge=True) == {"deleted": name, "purged": True}
        fresh = c.create_palace(name, store=pg_url)
        assert fresh["created"] is True and fresh["drawers"] == 0
        c.delete_palace(name, purge=True)
        local = _name("local")
        c.create_palace(local)
        with pytest.raises(E.InvalidArgs, match="local palace"):
            c.delete_palace(local, purge=True)
        assert local in [p["name"] for p in c.list_palaces()]


def test_a_url_with_a_password_is_refused_and_nothing_is_made(team_daemon: DaemonProc,
                                                              pg_url: str) -> None:
    d, name = team_daemon, _name("pw")
    secret = "s3cr3t-pass"
    with_password = pg_url.replace("user=palace", f"user=palace&password={secret}")
    with d.client() as c:
        with pytest.raises(E.InvalidArgs, match="PGPASSWORD") as err:
            c.create_palace(name, store=with_password)
        assert secret not in json.dumps(err.value.to_wire())
        assert name not in [p["name"] for p in c.list_palaces()]
    assert not (d.home / "palaces" / name).exists()
    res = d.cli("create", name, "--store", "postgresql://palace:" + secret + "@db.example/x")
    assert res.returncode == 5 and "PGPASSWORD" in res.stderr and secret not in res.stderr
    log = d.home / "state" / "palaced.log"
    assert not log.exists() or secret not in log.read_text()


def test_a_named_store_of_the_config(pg_url: str) -> None:
    home = short_home()
    (home / "config.toml").write_text(f'[team]\nstatement_timeout_s = 10\n\n'
                                      f'[stores.teamdb]\nurl = "{pg_url}"\n')
    d = DaemonProc(home, base_env(home, model=False))
    d.start()
    try:
        with d.client() as c:
            info = c.create_palace("shared", store="teamdb")
            assert info["created"] is True
            with pytest.raises(E.InvalidArgs, match=r"no store named 'nodb'.*teamdb"):
                c.create_palace("other", store="nodb")
        text = (home / "palaces" / "shared" / "store.toml").read_text()
        assert 'store = "teamdb"' in text and pg_url not in text
    finally:
        d.stop()
        shutil.rmtree(home, ignore_errors=True)
    bad = short_home() / "config.toml"
    bad.write_text('[stores.x]\nurl = 5\nport = 1\n\n[stores.y]\n')
    with pytest.raises(E.InvalidArgs) as err:
        config.read_file(bad)
    text = err.value.message
    assert "[stores.x] url must be a string" in text and "unknown key 'port' in [stores.x]" in text
    assert "[stores.y] has no url" in text
    assert "unknown key 'port' in [stores.x] (only url, replica, pooler)" in text
    shutil.rmtree(bad.parent, ignore_errors=True)


def test_file_ops_are_refused_on_a_team_palace(team_daemon: DaemonProc, pg_url: str,
                                               tmp_path: Path) -> None:
    d, name = team_daemon, _name("ops")
    local = _name("loc")
    with d.client() as c:
        c.create_palace(name, store=pg_url)
        c.create_palace(local)
        c.remember(local, "A local memory")
        for op, args in [("palace.backup", {}), ("palace.doctor", {}),
                         ("palace.reembed", {}), ("memoir.create", {"memoir": "arch"}),
                         ("palace.restore", {"path": str(tmp_path)})]:
            with pytest.raises(E.TeamUnsupported) as err:
                c.call(op, name, args)
            assert err.value.code == 209 and name in err.value.message
        # Without a palace, backup and doctor cover the local palaces and skip team ones.
        out = c.call("palace.backup", None, {"to": str(tmp_path / "b")})
        assert name in out["skipped"] and local in [b["palace"] for b in out["backups"]]
        assert name not in c.call("palace.doctor", None, {})["palaces"]
    res = d.cli("backup", "-p", name)
    assert res.returncode == 1 and "TEAM_UNSUPPORTED" in res.stderr and "pg_dump" in res.stderr


def test_an_unreachable_server_fails_fast_and_names_it(team_daemon: DaemonProc) -> None:
    d, name = team_daemon, _name("gone")
    nowhere = "postgresql:///palace?host=/tmp/no-such-pg-dir&user=palace"
    with d.client() as c:
        local = _name("loc")
        c.create_palace(local)
        started = time.monotonic()
        with pytest.raises(E.StoreUnavailable) as err:
            c.create_palace(name, store=nowhere)
        assert time.monotonic() - started < 10
        wire = err.value.to_wire()
        assert wire["retryable"] is True and wire["code"] == 403
        assert wire["details"]["server"] == "/tmp/no-such-pg-dir:5432/palace"
        assert name not in [p["name"] for p in c.list_palaces()]
        assert c.remember(local, "Local palaces keep working") > 0  # others unaffected
    res = d.cli("create", name, "--store", nowhere)
    assert res.returncode == 7 and "STORE_UNAVAILABLE" in res.stderr


def test_recall_all_spans_local_and_team_palaces(team_daemon: DaemonProc, pg_url: str) -> None:
    d = team_daemon
    team, local = _name("t"), _name("l")
    with d.client() as c:
        c.create_palace(team, store=pg_url)
        c.create_palace(local)
        c.remember(team, "The team standup moved to 9:30 on Mondays", room="meetings")
        c.remember(local, "My own standup notes live in the notebook", room="notes")
        out = c.recall_all("when is the standup?", top_k=10)
        palaces = {r["palace"] for r in out["results"]}
        assert {team, local} <= palaces
        woke = c.call("memory.wake_up", team, {"budget": 400})
        # A new palace's placeholder identity is not shown (issue 29): nothing stored yet.
        assert "This palace holds the memories of" not in woke["text"]
        assert "The team standup moved to 9:30 on Mondays" in woke["text"]
        c.delete_palace(team, purge=True)


def test_a_nul_in_a_filter_is_invalid_args_on_team_and_local_palaces(
        team_daemon: DaemonProc, pg_url: str) -> None:
    """PostgreSQL text cannot hold NUL: an audit or import-ledger filter with one once failed
    a team palace with STORAGE_ERROR where SQLite matched nothing. The argument layer refuses
    a NUL in any argument (but texts, INVALID_CONTENT) for every palace, before a store sees
    it."""
    team, local = _name("t"), _name("l")
    nul = "a\x00b"
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("palace.audit", {}, "agent"), ("palace.audit", {}, "op"),
        ("source.list", {"importer": "markdown"}, "prefix"),
        ("source.list", {"importer": "markdown"}, "after"),
        ("source.sync", {"importer": "markdown", "key": "k", "items": []}, "hash"),
        ("memory.recall", {"query": "deploy"}, "wing"), ("memory.list", {}, "room"),
        ("graph.query", {}, "subject")]
    with team_daemon.client() as c:
        c.create_palace(team, store=pg_url)
        c.create_palace(local)
        for palace in (team, local):
            c.remember(palace, "The deploy checklist lives in the wiki", tags=["ops"])
            for op, args, arg in cases:
                with pytest.raises(E.InvalidArgs, match="contains a NUL character") as info:
                    c.call(op, palace, {**args, arg: nul})
                assert info.value.details["arg"] == arg, (palace, op)
            with pytest.raises(E.InvalidArgs, match="item 1 of argument 'tags' contains a NUL"):
                c.call("memory.recall", palace, {"query": "deploy", "tags": ["ops", nul]})
            with pytest.raises(E.InvalidContent):  # a text's NUL stays a content error
                c.remember(palace, nul)
            assert c.call("palace.audit", palace, {"agent": "*"})  # without NUL: answered
        c.delete_palace(team, purge=True)


# -- the store functions on PostgreSQL ------------------------------------------------------
@pytest.fixture
def pgc(pg_url: str) -> Iterator[Any]:
    yield from pg_conn(pg_url)


def _unit(seed: int, dims: int = 8) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dims).astype("<f4")
    return v / np.linalg.norm(v)


def _chat_in_both(local: Any, pgc: Any, texts: list[str]) -> None:
    """``texts`` as drawers of room ``chat``, a minute apart, in a SQLite store and on
    PostgreSQL."""
    for i, t in enumerate(texts):
        item = NewDrawer(text=t, room="chat", occurred_ms=1_700_000_000_000 + i * 60_000)
        local.write(lambda c, item=item: drawers.insert_drawer(c, item, 1))
        with pgc:
            drawers.insert_drawer(pgc, item, 1)


def test_bm25_ranks_like_fts5(pgc: Any, tmp_path: Path) -> None:
    """The same drawers in SQLite (FTS5 bm25) and PostgreSQL (pg_search.bm25): the same
    order, and scores within a few percent (the stemmers differ on few words)."""
    from palaced.store import Store
    texts = ["Caroline went hiking in the Alps with her sister",
             "Melanie painted a sunrise over the lake",
             "Caroline and Melanie talked about adoption agencies",
             "The hiking boots were too small for the long trail",
             "A quiet morning: coffee, a book, no hiking today"]
    local = Store(tmp_path / "p.db")
    try:
        _chat_in_both(local, pgc, texts)
        for query in ["hiking Caroline", "Melanie lake sunrise", "adoption", "trail boots"]:
            a = local.read(lambda c, q=query: search.fts_search(c, q, Filters(), 10, 2))
            b = search.fts_search(pgc, query, Filters(), 10, 2)
            assert [i for i, _ in a] == [i for i, _ in b], query
            for (_, sa), (_, sb) in zip(a, b, strict=True):
                assert sb == pytest.approx(sa, rel=0.05), query
    finally:
        local.close()
    assert search.mentioned(pgc, ["caroline", "zebra"]) == {"caroline"}
    assert search.text_doc_freq(pgc, "hiking") == 3
    assert [i for i, _ in search.substring_search(pgc, "rolin", Filters(), 10, 2)] == [3, 1]


def test_mentioned_names_like_sqlite_in_one_statement(pgc: Any, tmp_path: Path) -> None:
    """``search.mentioned`` (recall's unknown-name check): the same names found on both
    backends (phrases in order, possessives, quotes and backslashes in a name, words only in
    a neighbour's text not counted), PostgreSQL in one statement for all names."""
    from palaced.store import Store
    from tests.support.pgcount import counting

    texts = ["Caroline Smith met O'Brien at the back\\slash bar",
             "Melanie's trip to New York was long"]
    names = ["Caroline Smith", "Smith Caroline", "O'Brien", "back\\slash", "Melanie",
             "New York", "York New", "trip", "zebra", "Caroline", "'", "\\", ""]
    local = Store(tmp_path / "p.db")
    try:
        _chat_in_both(local, pgc, texts)
        want = local.read(lambda c: search.mentioned(c, names))
        with counting() as n:
            got = search.mentioned(pgc, names)
        assert got == want
        assert {"Caroline Smith", "O'Brien", "Melanie", "New York"} <= got
        assert "Smith Caroline" not in got and "zebra" not in got
        assert len(n.statements) == 1
    finally:
        local.close()


def _with_dfs(pgc: Any, stats: search.TermStats, query: str) -> list[str]:
    """``query``'s words, their document frequencies (any column, as BM25 counts them) put
    in ``stats.df``: what ``TermStats.common`` reads about the split."""
    terms = search.fts_terms(query)
    for t in terms:
        stats.df[t] = int(pgc.execute(
            "SELECT count(DISTINCT p.rowid) FROM unnest(to_tsvector('palace', ?)) u "
            "JOIN fts_postings p ON p.lexeme = u.lexeme", (t,)).fetchall()[0][0])
    return terms


def test_bm25_splits_common_terms_off_as_fts5_does(pgc: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """FTS5's common-term split inside the one BM25 statement (issue 34): in a palace of
    2,400 drawers, a query with long posting lists of common lexemes scores only the drawers
    holding a selective one, each by the whole query (the same top 10 and the same scores as
    the unsplit query); common terms alone: the rarest leads; a narrowing that holds too few
    selective drawers runs the whole query."""
    import random

    from palaced.store.lookup import pg_search

    monkeypatch.setattr(search, "SPLIT_MIN_POSTINGS", 100)
    rnd = random.Random(3)
    n = 2_400
    rare = ["quokka", "narwhal", "axolotl"]
    often = ["harbour", "ledger", "ferry"]
    with pgc:
        for i in range(n):
            words = [w for w in often if rnd.random() < 0.2]
            words += [w for w in rare if rnd.random() < 0.04]
            words += [f"filler{rnd.randint(0, 3000)}" for _ in range(rnd.randint(3, 12))]
            rnd.shuffle(words)
            drawers.insert_drawer(pgc, NewDrawer(text=" ".join(words) + f" note {i}",
                                                 room=f"r{i % 7}"), 1 + i, context=False)
    stats = search.TermStats()

    def exact(q: str, limit: int, filters: Filters | None = None) -> list[tuple[int, float]]:
        return pg_search.bm25(pgc, search.fts_terms(q), filters or Filters(), limit, 10**13,
                              search.BM25_WEIGHTS)

    # The second query's words are all common: there the whole query ranks drawers of
    # its other common word alone among the selective ones', which the split leaves out.
    for query, mixed in (("quokka narwhal harbour ledger", False), ("harbour ferry", True)):
        terms = _with_dfs(pgc, stats, query)
        assert stats.common(terms, n)  # the split applies
        fast = search.fts_search(pgc, query, Filters(), 50, 10**13, stats, n)
        full = dict(exact(query, 10_000))
        assert len(fast) == 50 and len(full) > 300
        assert [i for i, _ in fast[:10]] == [i for i, _ in exact(query, 10)]
        for did, score in fast:
            assert score == pytest.approx(full[did])
        # Split: only the drawers holding a selective word were scored at all.
        common = stats.common(terms, n)
        lead = [t for t in terms if t not in common] or [min(common, key=stats.df.__getitem__)]
        holders = {int(i) for i, t in pgc.execute("SELECT id, text FROM drawers")
                   if set(lead) & set(str(t).split())}
        assert {i for i, _ in fast} <= holders < set(full)
        # ... also where the whole query would rank drawers of common words alone.
        wide = search.fts_search(pgc, query, Filters(), len(holders) * 3 // 4, 10**13,
                                 stats, n)
        assert {i for i, _ in wide} <= holders
        assert any(i not in holders for i, _ in exact(query, len(wide))) == mixed
    # Few selective drawers in the room: the whole query ranks it.
    room = Filters(room="r3")
    fast = search.fts_search(pgc, "quokka harbour", room, 20, 10**13, stats, n)
    assert [i for i, _ in fast] == [i for i, _ in exact("quokka harbour", 20, room)]


def _drawers_rows_read(plan: dict[str, Any], counted: bool = False) -> int:
    """Rows the nodes of an ``EXPLAIN (ANALYZE, FORMAT JSON)`` plan read from table
    ``drawers`` (returned or filtered out, every loop) inside the statement's CTEs (before
    the final filter of the top, which joins ``drawers`` by design)."""
    counted = counted or str(plan.get("Subplan Name", "")).startswith("CTE ")
    own = 0
    if counted and plan.get("Relation Name") == "drawers":
        own = int((plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0))
                  * plan.get("Actual Loops", 1))
    return own + sum(_drawers_rows_read(sub, counted) for sub in plan.get("Plans", ()))


def test_bm25_split_reads_about_limit_drawers_not_one_per_candidate(
        pgc: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The split's filter (issue 34 at 100k drawers): the drawers holding a selective lexeme
    were each looked up in ``drawers`` before any was scored (7,000 key lookups for a query
    at 92k drawers); now the best ``limit`` by their selective score that pass the filter
    set the floor, so the split reads about ``limit`` rows of ``drawers`` however many
    drawers hold a selective lexeme, with the same top and scores as every drawer
    holding one scored by the whole query."""
    import random

    from palaced.store.lookup import pg_search

    monkeypatch.setattr(search, "SPLIT_MIN_POSTINGS", 100)
    rnd = random.Random(5)
    n, limit = 2_400, 10
    with pgc:
        for i in range(n):
            words = [w for w in ("harbour", "ledger") if rnd.random() < 0.3]
            words += [w for w in ("quokka", "narwhal") if rnd.random() < 0.25]
            words += [f"filler{rnd.randint(0, 3000)}" for _ in range(rnd.randint(3, 12))]
            rnd.shuffle(words)
            drawers.insert_drawer(pgc, NewDrawer(text=" ".join(words) + f" note {i}",
                                                 room=f"r{i % 7}"), 1 + i, context=False)
        pgc.execute("UPDATE drawers SET superseded_by = id - 1 WHERE id % 9 = 0")
    query = "quokka narwhal harbour ledger"
    stats = search.TermStats()
    terms = _with_dfs(pgc, stats, query)
    assert stats.common(terms, n)  # the split applies
    holders = {int(i) for i, t in pgc.execute(
        "SELECT id, text FROM drawers WHERE superseded_by IS NULL")
        if {"quokka", "narwhal"} & set(str(t).split())}
    assert len(holders) > 50 * limit
    sent: list[tuple[str, Any]] = []
    execute = pgc.execute

    def keep(sql: str, params: Any = None) -> Any:
        sent.append((sql, params))
        return execute(sql, params)

    monkeypatch.setattr(pgc, "execute", keep)
    fast = search.fts_search(pgc, query, Filters(), limit, 10**13, stats, n)
    sql, params = next((q, a) for q, a in sent if "fts_postings" in q)
    monkeypatch.setattr(pgc, "execute", execute)
    plan = pgc.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()[0][0]
    top = plan[0] if isinstance(plan, list) else json.loads(plan)[0]
    assert _drawers_rows_read(top["Plan"]) <= 2 * limit
    # The same top and scores as every holder of a selective lexeme scored whole.
    whole = dict(pg_search.bm25(pgc, search.fts_terms(query), Filters(), 100_000, 10**13,
                                search.BM25_WEIGHTS))
    want = sorted(((s, -i) for i, s in whole.items() if i in holders), reverse=True)[:limit]
    assert [i for i, _ in fast] == [-i for _, i in want]
    for did, score in fast:
        assert score == pytest.approx(whole[did], rel=1e-12)


def test_room_neighbours_like_sqlite(pgc: Any, tmp_path: Path) -> None:
    """Room neighbours (``context.neighbours_of``, one statement of row-value seeks; the
    reply step reads them): the same on PostgreSQL as on SQLite, superseded drawers
    skipped."""
    from palaced.store import Store
    from palaced.store.lookup import search as search_sql
    from palaced.store.lookup.context import neighbours_of

    local = Store(tmp_path / "n.db")
    try:
        ids = []
        for i in range(8):
            item = NewDrawer(text=f"turn number {i}", room="chat" if i % 4 else "other",
                             occurred_ms=1_700_000_000_000 + (i // 2) * 60_000)
            a, _ = local.write(lambda c, item=item: drawers.insert_drawer(c, item, 1))
            with pgc:
                b, _ = drawers.insert_drawer(pgc, item, 1)
            assert a == b
            ids.append(a)
        mark = "UPDATE drawers SET superseded_by = ? WHERE id = ?"
        local.write(lambda c: c.execute(mark, (ids[7], ids[3])))
        with pgc:
            pgc.execute(mark, (ids[7], ids[3]))
        want = local.read(lambda c: neighbours_of(c, [*ids, 999], 2))
        assert neighbours_of(pgc, [*ids, 999], 2) == want
        # Time order, then id order among drawers of the same minute; turn 3 is superseded.
        assert want[ids[2]] == [(ids[1], -1), (ids[5], 1), (ids[6], 2)]
        # The ends of texts the reply step reads: the same counted-out substring on both.
        tails = local.read(lambda c: search_sql.drawer_tails(c, [ids[0], ids[5], 999], 3))
        assert tails == {ids[0]: ("r 0", 13), ids[5]: ("r 5", 13)}
        assert search_sql.drawer_tails(pgc, [ids[0], ids[5], 999], 3) == tails
        assert search_sql.drawer_tails(pgc, [ids[0]], 50) == {ids[0]: ("turn number 0", 13)}
    finally:
        local.close()


def test_pool_rows_like_sqlite(pgc: Any, tmp_path: Path) -> None:
    """What the ranking reads about its candidates (``store.search.pool_rows``: metadata,
    the ends of texts counted out, closet hits, the drawer before each with its text end,
    in one statement) and the second hop's
    document frequencies (``text_doc_freqs``): the same on PostgreSQL as on SQLite."""
    from palaced.store import Store
    from palaced.store.lookup import search as search_sql

    local = Store(tmp_path / "p.db")
    try:
        ids = []
        for i, text in enumerate(["Caroline went hiking at the lake?", "x" * 50,
                                  "Melanie and Caroline"]):
            item = NewDrawer(text=text, room="chat", occurred_ms=1_700_000_000_000 + i)
            a, _ = local.write(lambda c, item=item: drawers.insert_drawer(c, item, 1))
            with pgc:
                b, _ = drawers.insert_drawer(pgc, item, 1)
            assert a == b
            ids.append(a)
        add = "INSERT INTO closets(topic, drawer_id) VALUES (?, ?)"
        local.write(lambda c: c.execute(add, ("zz-hiking", ids[0])))
        with pgc:
            pgc.execute(add, ("zz-hiking", ids[0]))

        def read(c: Any) -> search_sql.PoolRead:
            return search_sql.pool_rows(c, [*ids, 999], Filters(), 2, head_chars=10,
                                        tail_chars=6, topics=["zz-hiking", "other"],
                                        before=True)

        got = local.read(read)
        assert read(pgc) == got
        want = got.rows
        assert want[ids[0]].head == "Caroline w" and want[ids[0]].tail == " lake?"
        assert want[ids[0]].closet and not want[ids[2]].closet
        # The drawer before each in its room, with its text end and length.
        assert got.before == {ids[1]: ids[0], ids[2]: ids[1]}
        assert got.before_tails == {ids[0]: (" lake?", 33), ids[1]: ("x" * 6, 50)}
        assert want[ids[1]].length == 50 and 999 not in want
        words = ["caroline", "melanie", "absent"]
        got = local.read(lambda c: search_sql.text_doc_freqs(c, words))
        assert got == {"caroline": 2, "melanie": 1, "absent": 0}
        assert search_sql.text_doc_freqs(pgc, words) == got
    finally:
        local.close()


def test_context_vectors_like_sqlite(pgc: Any, tmp_path: Path) -> None:
    """Each drawer's context vector (``store.context_vectors``), kept by inserts, vectors
    and a supersede, and made again by ``rebuild``: the same on PostgreSQL as on SQLite."""
    from palaced.store import Store
    from palaced.store.lookup.context import rebuild_context_vectors
    from palaced.store.schema.pg import claim_dims

    def table(c: Any) -> dict[int, bytes]:
        return {int(i): bytes(b) for i, b in c.execute(
            "SELECT drawer_id, vec FROM context_vectors ORDER BY drawer_id")}

    local = Store(tmp_path / "cv.db")
    try:
        with pgc:
            claim_dims(pgc, 8)
        ids = []
        for i in range(10):
            item = NewDrawer(text=f"context turn {i}", room="chat" if i % 3 else "other",
                             occurred_ms=1_700_000_000_000 + (i * 7 % 5) * 60_000)
            blobs = [_unit(i % 8).tobytes(), _unit((i + 3) % 8).tobytes()][:1 + i % 2]

            def put(c: Any, item: NewDrawer = item, blobs: list[bytes] = blobs) -> int:
                did, _ = drawers.insert_drawer(c, item, 1)
                store_vectors(c, did, blobs)
                return int(did)

            a = local.write(put)
            with pgc:
                assert put(pgc) == a
            ids.append(a)
        local.write(lambda c: drawers.supersede(c, ids[4], ids[9], 2))
        with pgc:
            drawers.supersede(pgc, ids[4], ids[9], 2)
        want = local.read(table)
        assert len(want) == 9 and ids[4] not in want
        assert table(pgc) == want
        with pgc:
            rebuild_context_vectors(pgc)
        assert table(pgc) == want
    finally:
        local.close()


def test_a_v1_team_palace_gets_its_context_vectors_when_it_migrates(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A team palace made by schema v1, with drawers and vectors: opening it with this
    palaced runs v2, which makes ``context_vectors`` and fills it as the definition says."""
    import psycopg

    from palaced.store.conn.pg import PgConn, PgStore
    from palaced.store.schema import pg as pg_schema
    from tests.palaced.store.test_context_vectors import assert_same, expected, stored

    with monkeypatch.context() as m:
        m.setattr(pg_schema, "MIGRATIONS", pg_schema.MIGRATIONS[:1])
        m.setattr(pg_schema, "SCHEMA_VERSION", 1)
        PgStore(pg_url, "palace_old", palace="old", create=True).close()
    with psycopg.connect(pg_url, autocommit=True,
                         options="-c search_path=palace_old,public") as raw:
        c = PgConn(raw)
        for k in range(12):
            did = c.execute(
                "INSERT INTO drawers(text, wing, room, occurred_ms, created_ms, updated_ms, "
                "content_hash) VALUES(?, 'w', ?, ?, 0, 0, ?) RETURNING id",
                (f"old note {k}", f"r{k % 2}", k * 7 % 5, f"h{k}")).fetchall()[0][0]
            for chunk in range(1 + k % 2):
                vec = _unit(10 * k + chunk)
                c.execute("INSERT INTO vectors(drawer_id, chunk, vec, embedding) "
                          "VALUES(?, ?, ?, ?::vector)",
                          (did, chunk, vec.tobytes(), str(vec.tolist())))
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute("SELECT 1 FROM context_vectors")
        PgStore(pg_url, "palace_old", palace="old").close()
        assert c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchall() == [
            (str(pg_schema.SCHEMA_VERSION),)]
        got = stored(c)
        assert len(got) == 12
        assert_same(got, expected(c))


def test_drawers_in_period_like_sqlite(pgc: Any, tmp_path: Path) -> None:
    """The drawers of a span (``store.dated``, the candidates of "yesterday"): the same ids,
    newest first, on PostgreSQL as on SQLite, filters and superseded drawers applied."""
    from palaced.store import Store
    from palaced.store.rows.dated import drawers_in_period

    local = Store(tmp_path / "d.db")
    try:
        for i in range(12):
            item = NewDrawer(text=f"day note {i}", room="a" if i % 2 else "b",
                             occurred_ms=1_700_000_000_000 + i * 3_600_000)

            def put(c: Any, item: NewDrawer = item) -> int:
                return int(drawers.insert_drawer(c, item, 1)[0])

            assert put(pgc) == local.write(put)
        local.write(lambda c: drawers.supersede(c, 6, 12, 2))
        drawers.supersede(pgc, 6, 12, 2)
        start, end = 1_700_000_000_000 + 2 * 3_600_000, 1_700_000_000_000 + 9 * 3_600_000
        for filters in (Filters(), Filters(room="b")):
            want = local.read(lambda c, f=filters: drawers_in_period(c, start, end, f, 0, 4))
            assert drawers_in_period(pgc, start, end, filters, 0, 4) == want
        assert want == [9, 7, 5, 3]  # room b (odd ids) of drawers 3-9, newest first
    finally:
        local.close()


def test_vectors_race_safe_inserts_and_filters(pgc: Any) -> None:
    from palaced.store.schema.pg import claim_dims

    with pgc:
        claim_dims(pgc, 8)
        ids = []
        for i, room in enumerate(["a", "a", "b"]):
            did, _ = drawers.insert_drawer(pgc, NewDrawer(text=f"drawer {i}", room=room),
                                                 1)
            store_vectors(pgc, did, [_unit(i).tobytes()])
            ids.append(did)
        # The same content again: the same drawer, not a second one.
        assert drawers.insert_drawer(pgc, NewDrawer(text="drawer 1", room="a"), 2) == (
            ids[1], False)
    best = vector_search(pgc, "[" + ",".join(map(str, _unit(2))) + "]", 8, None, 2, 5)
    assert best[0][0] == ids[2] and best[0][1] == pytest.approx(1.0, abs=1e-5)
    only_a = vector_search(pgc, "[" + ",".join(map(str, _unit(2))) + "]", 8,
                           Filters(room="a"), 5, 5)
    assert {i for i, _ in only_a} == {ids[0], ids[1]}
    with pgc:
        assert len(drawers.delete_drawers(pgc, [ids[0]]) or []) == 1  # its one vector
    assert pgc.execute("SELECT count(*) FROM vectors").fetchall()[0][0] == 2
    assert drawers.list_drawers(pgc, Filters(), 10, 0, 5)[1] == 2


def test_unfiltered_vector_search_takes_the_hnsw_index(pgc: Any) -> None:
    """The planner prefers a full scan of a small table to the HNSW index (at 10k vectors
    of 384 dimensions too, where the scan costs 70-120 ms: issue 34); an unfiltered vector
    search is planned without sequential scans, and the setting is back afterwards. Results:
    the exact nearest drawers (HNSW over 60 vectors is exact)."""
    from palaced.store.schema.pg import claim_dims

    with pgc:
        claim_dims(pgc, 8)
        for i in range(60):
            did, _ = drawers.insert_drawer(pgc, NewDrawer(text=f"drawer {i}", room="a"), 1,
                                           context=False)
            store_vectors(pgc, did, [_unit(i).tobytes()], context=False)
    q = "[" + ",".join(map(str, _unit(7))) + "]"
    sql = ("SELECT v.drawer_id FROM vectors v ORDER BY CAST(v.embedding AS vector(8)) <=> "
           "CAST(:q AS vector(8)) LIMIT 10")
    pgc.execute("ANALYZE vectors")  # 60 known rows: a full scan looks cheaper
    with pgc:
        plain = "\n".join(str(r[0]) for r in pgc.execute("EXPLAIN " + sql, {"q": q}))
        indexed = "\n".join(str(r[0]) for r in pgc.execute_indexed("EXPLAIN " + sql, {"q": q}))
        got = vector_search(pgc, q, 8, None, 10, 5)
        assert pgc.execute("SHOW enable_seqscan").fetchall()[0][0] == "on"
    assert "vectors_hnsw_8" not in plain and "vectors_hnsw_8" in indexed
    exact = [int(r[0]) for r in pgc.execute(
        "SELECT drawer_id FROM vectors ORDER BY (CAST(embedding AS vector(8)) <=> "
        "CAST(:q AS vector(8))) + 0 LIMIT 10", {"q": q})]
    assert [i for i, _ in got] == exact and got[0][1] == pytest.approx(1.0, abs=1e-5)


def test_vector_search_widens_when_long_drawers_fill_its_first_ask(pgc: Any) -> None:
    """The index is asked for ``2 * k`` vectors, then ``4 * k`` when those held fewer than
    ``k`` drawers (long drawers have a vector per chunk): ``k`` drawers, the nearest, in
    two statements; one when the first ask is enough."""
    from palaced.store.schema.pg import claim_dims

    with pgc:
        claim_dims(pgc, 8)
        for i in range(20):  # four chunks each, all near the query: 2k = 8 vectors, 2 drawers
            did, _ = drawers.insert_drawer(pgc, NewDrawer(text=f"long drawer {i}", room="a"),
                                           1, context=False)
            near = _unit(7) + 0.02 * (i + 1) * _unit(200 + i)  # drawer i further away ...
            store_vectors(pgc, did, [(near + 0.001 * _unit(100 + 4 * i + j)).astype(
                "<f4").tobytes() for j in range(4)], context=False)  # ... its chunks together
    q = "[" + ",".join(map(str, _unit(7))) + "]"
    sent: list[int] = []
    indexed = pgc.execute_indexed

    def counted(sql: str, params: dict[str, Any]) -> list[Any]:
        sent.append(int(params["k"]))
        return cast(list[Any], indexed(sql, params))

    pgc.execute_indexed = counted
    try:
        with pgc:
            got = vector_search(pgc, q, 8, None, 4, 5)
            assert sent == [8, 16] and len(got) == 4
            sent.clear()
            assert len(vector_search(pgc, q, 8, None, 1, 5)) == 1 and sent == [2]
    finally:
        del pgc.execute_indexed
    exact = pgc.execute(
        "SELECT drawer_id, max(1 - (CAST(embedding AS vector(8)) <=> CAST(:q AS vector(8)))) "
        "AS s FROM vectors GROUP BY drawer_id ORDER BY s DESC LIMIT 4", {"q": q}).fetchall()
    assert [i for i, _ in got] == [int(r[0]) for r in exact]


@pytest.mark.parametrize(("sqlite", "postgres"), [
    ("SELECT id FROM drawers WHERE id = ? AND room = :room",
     "SELECT id FROM drawers WHERE id = %s AND room = %(room)s"),
    ("INSERT OR IGNORE INTO closets(topic, drawer_id) VALUES(?, ?)",
     "INSERT INTO closets(topic, drawer_id) VALUES(%s, %s) ON CONFLICT DO NOTHING"),
    ("INSERT OR IGNORE INTO t(a) VALUES(?) RETURNING id",
     "INSERT INTO t(a) VALUES(%s) ON CONFLICT DO NOTHING RETURNING id"),
    ("UPDATE drawers SET importance = max(importance, ?), w = min(1.0, w + ?)",
     "UPDATE drawers SET importance = GREATEST(importance, %s), w = LEAST(1.0, w + %s)"),
    ("SELECT max(id) FROM vectors", "SELECT max(id) FROM vectors"),
    ("WHERE id IN (SELECT value FROM json_each(?))",
     "WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text((%s)::jsonb) AS j(value))"),
    ("EXISTS (SELECT 1 FROM json_each(d.tags) WHERE value IN (:tag0))",
     "EXISTS (SELECT 1 FROM jsonb_array_elements_text((d.tags)::jsonb) AS j(value) "
     "WHERE value IN (%(tag0)s))"),
    ("WHERE f.object_id IS ? AND f.x IS NOT :v AND f.y IS NULL AND f.z IS NOT NULL",
     "WHERE f.object_id IS NOT DISTINCT FROM %s AND f.x IS DISTINCT FROM %(v)s "
     "AND f.y IS NULL AND f.z IS NOT NULL"),
    ("SELECT '?', 'a:b', x::text, 5 % 2 FROM t WHERE s LIKE '%x'",
     "SELECT '?', 'a:b', x::text, 5 %% 2 FROM t WHERE s LIKE '%%x'"),
])
def test_sqlite_spellings_are_translated(sqlite: str, postgres: str) -> None:
    from palaced.store.conn.pg import translate

    assert translate(sqlite) == postgres


def test_bm25_statistics_are_cached_and_a_trailing_n_is_harmless(pgc: Any) -> None:
    """BM25's N and average length are reused while the change counter stays close; a df
    counted after other writers grew the palace never makes an idf undefined."""
    from palaced.store.conn.pg import PgConn

    cache: dict[str, Any] = {}
    with pgc:
        drawers.insert_drawer(pgc, NewDrawer(text="kubernetes cluster upgrade"), 1)
    first = PgConn(pgc.raw, cache, changes=10)
    assert [i for i, _ in search.fts_search(first, "kubernetes", Filters(), 10, 2)] == [1]
    assert cache["bm25"]["n"] == 1
    with pgc:  # another daemon writes: the counter it bumped is not seen yet
        for k in range(5):
            drawers.insert_drawer(pgc, NewDrawer(text=f"kubernetes node {k}"), 1)
    cache["bm25"]["df"].clear()
    same = PgConn(pgc.raw, cache, changes=10)
    assert len(search.fts_search(same, "kubernetes", Filters(), 10, 2)) == 6
    assert cache["bm25"]["n"] == 1  # reused: the counter did not move
    moved = PgConn(pgc.raw, cache, changes=100)
    search.fts_search(moved, "kubernetes", Filters(), 10, 2)
    assert cache["bm25"]["n"] == 6


def test_bm25_leaves_out_lexemes_in_half_the_drawers_in_its_own_statement(
        pgc: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a palace of at least ``TermStats.MIN_DOCS`` drawers, a query word in more than
    half of them weighs nothing in BM25 and is left out, every word kept when all are such
    (``TermStats.informative``). On PostgreSQL the BM25 statement decides it on the
    document frequencies it reads anyway: one statement, no count of its own first, the
    same hits as SQLite's."""
    from palaced.store import Store
    from palaced.store.conn.pg import PgConn

    monkeypatch.setattr(search.TermStats, "MIN_DOCS", 10)
    texts = [f"common harbour {k}" for k in range(3)] + [f"common {k}" for k in range(3, 7)] \
        + ["common zebra", "zebra ledger", "ledger", "quiet note", "note"]
    local = Store(tmp_path / "p.db")
    try:
        for k, text in enumerate(texts):
            item = NewDrawer(text=text, room=f"r{k}", occurred_ms=1_700_000_000_000 + k)
            local.write(lambda c, item=item: drawers.insert_drawer(c, item, 1))
            with pgc:
                drawers.insert_drawer(pgc, item, 1)
        n = len(texts)
        conn = PgConn(pgc.raw, {}, changes=1)
        sent: list[str] = []
        execute = conn.execute

        def keep(sql: str, params: Any = None) -> Any:
            sent.append(sql)
            return execute(sql, params)

        conn.execute = keep  # type: ignore[method-assign]
        for query, want in (("common zebra", {8, 9}), ("common", set(range(1, 9))),
                            ("harbour zebra", {1, 2, 3, 8, 9})):
            sent.clear()
            got = search.fts_search(conn, query, Filters(), 20, 10**13, search.TermStats(), n)
            assert {i for i, _ in got} == want, query
            assert len(sent) == 1, sent
            there = local.read(lambda c, q=query: search.fts_search(
                c, q, Filters(), 20, 10**13, search.TermStats(), n))
            assert [i for i, _ in there] == [i for i, _ in got], query
        # Without the statistics nothing is left out: "common" finds its drawers too.
        plain = search.fts_search(conn, "common zebra", Filters(), 20, 10**13)
        assert {i for i, _ in plain} == set(range(1, 10))
    finally:
        local.close()


def test_bm25_counts_each_lexemes_df_once_and_keeps_its_statistics_minutes(
        pgc: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lexeme's document frequency the cache lacks is counted once in the BM25 statement
    (a pulled-up LATERAL counted it once per use: five counts of 73k postings a common
    lexeme at 100k drawers), and the statistics outlive 30 s while the change counter
    stays (recounting N and the average length reads every full-text row: ~0.5 s at 90k)."""
    from palaced.store.conn.pg import PgConn
    from palaced.store.lookup import pg_search

    with pgc:
        for k in range(4):
            drawers.insert_drawer(pgc, NewDrawer(text=f"kubernetes node {k} upgraded"), 1)
    cache: dict[str, Any] = {}
    conn = PgConn(pgc.raw, cache, changes=10)
    sent: list[tuple[str, Any]] = []
    execute = conn.execute

    def keep(sql: str, params: Any = None) -> Any:
        sent.append((sql, params))
        return execute(sql, params)

    conn.execute = keep  # type: ignore[method-assign]
    pg_search.bm25(conn, ["kubernetes", "upgraded"], Filters(), 10, 10**13,
                   search.BM25_WEIGHTS)
    sql, params = sent[-1]
    params = {**params, "known": "{}"}
    plan = execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchall()[0][0]
    top = plan[0] if isinstance(plan, list) else json.loads(plan)[0]

    def counts(node: dict[str, Any]) -> int:
        own = int(node.get("Actual Loops", 0)) if (
            node.get("Relation Name") == "fts_postings"
            and str(node.get("Alias", "")).startswith("x")) else 0
        return own + sum(counts(sub) for sub in node.get("Plans", ()))

    assert counts(top["Plan"]) == 2  # one count per lexeme
    assert cache["bm25"]["n"] == 4
    sent.clear()
    later = time.monotonic() + 120
    monkeypatch.setattr(pg_search.time, "monotonic", lambda: later)
    pg_search.bm25(conn, ["kubernetes"], Filters(), 10, 10**13, search.BM25_WEIGHTS)
    assert sent[-1][1]["n"] == 4  # two minutes on, the cached N is sent: nothing recounted


def test_trash_audit_and_policy_on_a_team_palace(team_daemon: DaemonProc, pg_url: str) -> None:
    """Governance (trash, audit log, policy) lives in the team palace's schema too."""
    name = _name("gov")
    with team_daemon.client() as c:
        c.create_palace(name, store=pg_url)
        a = c.remember(name, "The release train leaves every second Thursday", room="process")
        b = c.remember(name, "Hotfixes skip the train", room="process")
        assert c.call("memory.forget", name, {"id": a})["trashed"] is True
        with pytest.raises(E.MemoryNotFound):
            c.get(name, a)
        assert c.call("memory.restore", name, {"id": a})["restored"] is True
        assert c.get(name, a)["text"] == "The release train leaves every second Thursday"
        assert c.call("memory.forget", name, {"id": b, "purge": True})["purged"] is True
        entries = c.call("palace.audit", name, {})
        ops = [(e["op"], e["outcome"]) for e in next(iter(entries.values()))]
        assert ("memory.restore", "restored") in ops and ("palace.create", "created") in ops
        out = c.call("palace.policy_set", name, {"permission": "write", "agents": ["nobody*"]})
        assert out["allowed"]["write"] is False
        with pytest.raises(E.PalaceError, match=r"FORBIDDEN|permission|may not"):
            c.remember(name, "refused by the shared policy")
        c.delete_palace(name, purge=True)


def test_the_team_error_codes_are_their_own() -> None:
    """STORE_UNAVAILABLE and TEAM_UNSUPPORTED decode to themselves (no code shared)."""
    table = E.error_classes()
    assert table[403] is E.StoreUnavailable and E.StoreUnavailable.retryable
    assert table[209] is E.TeamUnsupported and table[208] is E.Forbidden


def test_concurrent_writes_never_move_the_change_counter_back(pg_url: str) -> None:
    """Four writers bump one team palace's change counter at once: it ends at the highest
    value any bump returned and every write took its own value (``setval(nextval())`` is two
    steps; interleaved without the lock, a writer set the counter back to a value another
    write then took again, and a cache filled at that value missed the later write)."""
    import threading

    import psycopg

    from palaced.store.conn.pg import PgStore

    store = PgStore(pg_url, "palace_bumps", palace="bumps", create=True)
    seen: list[int] = []
    lock = threading.Lock()
    try:
        def writer() -> None:
            for _ in range(60):
                with store._pooled() as conn:  # the bump as write() sends it, after a commit
                    row = store._bump(conn)
                with lock:
                    seen.append(int(row[0]))

        threads = [threading.Thread(target=writer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with psycopg.connect(pg_url, autocommit=True) as raw:
            last = raw.execute("SELECT last_value FROM palace_bumps.changes").fetchone()
        assert last is not None
        assert len(set(seen)) == len(seen) == 240
        assert last[0] == max(seen)
    finally:
        store.close()


def test_a_bulk_load_gets_the_planners_statistics_without_waiting_for_autovacuum(
        pg_url: str) -> None:
    """Rows loaded in a few writes (a bulk import) are analysed and vacuumed by the store
    itself once they are a tenth of a table: autovacuum looks once a minute, and a team
    recall planned without statistics was 6x slower (bench/pg.py --scale 10000: 277 -> 47 ms
    p50), and one whose postings' pages were not yet all-visible read a table row for every
    posting it scored."""
    import psycopg

    from palaced.store.conn import pg as pgconn

    store = pgconn.PgStore(pg_url, "palace_stats", palace="stats", create=True)
    try:
        def load(c: Any) -> None:
            for i in range(pgconn.ANALYZE_MIN_ROWS + 100):
                drawers.insert_drawer(c, NewDrawer(text=f"bulk note {i}", room=f"r{i % 7}"),
                                      1_700_000_000_000 + i)

        store.write(load)

        def analysed() -> set[str]:
            with psycopg.connect(pg_url, autocommit=True) as raw:
                return {r[0] for r in raw.execute(
                    "SELECT relname FROM pg_stat_user_tables WHERE schemaname = "
                    "'palace_stats' AND last_analyze IS NOT NULL").fetchall()}

        before = analysed()
        for _ in range(pgconn.ANALYZE_EVERY - 1):  # small writes: the look comes on the 16th
            store.write(lambda c: None)
        # On a thread of its own (the write did not wait for it): done once its lock is free.
        deadline = time.monotonic() + 20
        while not store._analyzing.acquire(timeout=0.05):
            assert time.monotonic() < deadline, "the ANALYZE thread never ended"
        store._analyzing.release()
        after = analysed()
        assert "drawers" not in before and {"drawers", "fts_postings"} <= after, after
        assert store.analyze_stale() == []  # nothing changed since
        # Vacuumed too (the rows were inserted): an index-only scan of the postings, as BM25
        # reads them, no longer reads a table row per posting.
        with psycopg.connect(pg_url, autocommit=True) as raw:
            raw.execute("SET search_path = palace_stats")
            raw.execute("SET enable_seqscan = off")
            raw.execute("SET enable_bitmapscan = off")
            plan = "\n".join(r[0] for r in raw.execute(
                "EXPLAIN (ANALYZE, COSTS OFF) SELECT count(*) FROM fts_postings "
                "WHERE lexeme = 'bulk'").fetchall())
        assert "Index Only Scan" in plan and "Heap Fetches: 0" in plan, plan
    finally:
        store.close()
