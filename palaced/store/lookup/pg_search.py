"""Keyword search of a team palace, inside PostgreSQL: BM25 as FTS5 computes it.

``store.search`` calls these in place of its FTS5 queries when the connection is PostgreSQL
(``dialect.is_pg``), so recall's ranking (``palaced.retrieval.search``,
``palaced.retrieval.fusion``) is fed the same kind of candidate list on both backends. The score is
FTS5's ``bm25()`` with the same column weights (``search.BM25_WEIGHTS``: text, neighbour context,
date words), k1 = 1.2, b = 0.75, over ``fts_postings`` (the words of ``drawers_fts.tsv`` per drawer,
with their counts in each column and the row's token count ``ntok``, kept by a trigger):

    score = sum over query terms t of
            idf(t) * f(t) * (k1 + 1) / (f(t) + k1 * (1 - b + b * D / avgdl))

with f(t) the column-weighted count of t in the row, D its token count, idf(t) =
ln((N - n(t) + 0.5) / (n(t) + 0.5)) clamped to 1e-6 like FTS5. Words are stemmed by the
palace's text search configuration (English Snowball), FTS5's by Porter: a few words stem
apart, measured on LoCoMo in docs/teams.md.

Synchronous; every function takes a ``PgConn`` inside a read or write transaction.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from palaced.store.conn.dialect import (
    vector_literal as vector_literal,  # re-exported: callers use it here
)
from palaced.store.rows.drawers import Filters

K1, B = 1.2, 0.75


# BM25's collection statistics (N, average length, document frequencies) are cached per
# store and reused while the palace's change counter stays within STATS_SLACK of them (they
# only weigh terms: a few percent of drift does not reorder a ranking), at most STATS_TTL_S.
STATS_SLACK = 0.02
STATS_TTL_S = 30.0


def _stats(conn: Any) -> dict[str, Any]:
    """``{"n", "avgdl", "df": {lexeme: df}}`` of this snapshot, from the store's cache when
    still close enough (see STATS_SLACK)."""
    cache: dict[str, Any] = getattr(conn, "cache", {})
    changes, now = getattr(conn, "changes", None), time.monotonic()
    got = cache.get("bm25")
    if (got is None or changes is None or now - got["at"] > STATS_TTL_S
            or abs(changes - got["changes"]) > STATS_SLACK * max(got["n"], 50)):
        n, total = conn.execute("SELECT count(*), coalesce(sum(ntok), 0) FROM drawers_fts"
                                ).fetchall()[0]
        got = {"n": float(n), "avgdl": float(total) / float(n) if n else 1.0, "df": {},
               "changes": changes, "at": now}
        cache["bm25"] = got
    return got


def bm25(conn: Any, terms: Sequence[str], filters: Filters, limit: int, now_ms: int,
         weights: Sequence[float]) -> list[tuple[int, float]]:
    """The best ``limit`` drawers matching any of ``terms`` (each a word of the query), as
    ``(drawer_id, score)`` best first, score higher = better."""
    if not terms:
        return []
    lexes = [str(r[0]) for r in conn.execute(
        "SELECT DISTINCT u.lexeme FROM unnest(CAST(? AS text[])) t, "
        "unnest(to_tsvector('palace', t)) u", (list(terms),))]
    if not lexes:
        return []
    stats = _stats(conn)
    df: dict[str, float] = stats["df"]
    for lex in lexes:
        if lex not in df:
            df[lex] = float(conn.execute("SELECT count(*) FROM fts_postings WHERE lexeme = ?",
                                         (lex,)).fetchall()[0][0])
    n = stats["n"]
    # A cached N may trail a df counted since (other daemons write): never below it.
    idfs = [max(math.log((max(n, df[lex]) - df[lex] + 0.5) / (df[lex] + 0.5)), 1e-6)
            for lex in lexes]
    where, params = filters.sql(now_ms)
    w = [float(x) for x in weights]
    tf = f"(p.a * {w[0]} + p.b * {w[1]} + p.c * {w[2]})"
    params.update({"lexes": lexes, "idfs": idfs, "limit": limit, "inner": 2 * limit,
                   "avgdl": stats["avgdl"]})
    scored = (f"SELECT p.rowid, sum(i.idf * {tf} * {K1 + 1} / "
              f"({tf} + {K1} * ({1 - B} + {B} * p.ntok / :avgdl))) AS score "
              "FROM unnest(CAST(:lexes AS text[]), CAST(:idfs AS float8[])) AS i(lex, idf) "
              "JOIN fts_postings p ON p.lexeme = i.lex GROUP BY p.rowid")
    # As on SQLite: unfiltered, rank the postings alone, then drop the few superseded or
    # expired drawers from an over-fetched top; filtered, join every scored drawer.
    inner = "" if filters.narrows else " ORDER BY score DESC, rowid LIMIT :inner"
    sql = (f"SELECT s.rowid, s.score FROM ({scored}{inner}) s JOIN drawers d ON d.id = s.rowid "
           f"WHERE {where} ORDER BY s.score DESC, s.rowid LIMIT :limit")
    return [(int(r[0]), float(r[1])) for r in conn.execute(sql, params)]


def doc_freq(conn: Any, term: str, *, text_only: bool = False) -> int:
    """How many drawers hold ``term`` (a word), in their own text alone with ``text_only``,
    else in any column: one count over the word's postings. (A term the parser splits in
    several words counts the drawers holding any of them: a df only decides whether a term
    is informative.)"""
    return int(conn.execute(
        "SELECT count(DISTINCT p.rowid) FROM unnest(to_tsvector('palace', :t)) u "
        "JOIN fts_postings p ON p.lexeme = u.lexeme WHERE p.a > 0 OR NOT :text",
        {"t": term, "text": text_only}).fetchall()[0][0])


def any_mentions(conn: Any, name: str) -> bool:
    """Whether some drawer's own text holds ``name`` (its words as a phrase)."""
    tsq = _phrase(conn, name, "A")
    return tsq is not None and bool(conn.execute(
        "SELECT 1 FROM drawers_fts WHERE tsv @@ CAST(? AS tsquery) LIMIT 1", (tsq,)).fetchall())


def _phrase(conn: Any, words: str, weight: str) -> str | None:
    """A tsquery of ``words`` as a phrase, each lexeme restricted to ``weight`` if given."""
    rows = conn.execute(
        "SELECT u.lexeme, u.positions[1] FROM unnest(to_tsvector('palace', ?)) u "
        "ORDER BY 2", (words,)).fetchall()
    if not rows:
        return None
    tag = f":{weight}" if weight else ""
    quoted = ["'" + str(r[0]).replace("'", "''").replace("\\", "\\\\") + "'" + tag for r in rows]
    return " <-> ".join(quoted)


def substring(conn: Any, words: Sequence[str], filters: Filters, limit: int, now_ms: int,
              scan: int) -> list[tuple[int, float]]:
    """Drawers whose text contains one of ``words`` anywhere, case-insensitive: among the
    newest ``scan`` such drawers, those containing the most of them first."""
    if not words:
        return []
    where, params = filters.sql(now_ms)
    patterns = ["%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                for w in words]
    params.update({"pats": patterns, "limit": limit, "scan": scan})
    sql = ("SELECT f.id, f.s FROM (SELECT d.id, (SELECT count(*) FROM unnest(CAST(:pats AS "
           "text[])) p WHERE d.text ILIKE p) AS s FROM drawers d "
           f"WHERE d.text ILIKE ANY(CAST(:pats AS text[])) AND {where} "
           "ORDER BY d.id DESC LIMIT :scan) f ORDER BY f.s DESC, f.id DESC LIMIT :limit")
    return [(int(r[0]), float(r[1])) for r in conn.execute(sql, params)]


def vector_search(conn: Any, query: bytes | str, dims: int, filters: Filters | None, k: int,
                  now_ms: int) -> list[tuple[int, float]]:
    """Best ``(drawer_id, cosine)`` pairs, one per drawer, best first: the HNSW index over
    every vector (``filters`` None: the caller drops inactive drawers), else an exact scan of
    the vectors of the drawers matching ``filters``."""
    vec = f"CAST(:q AS vector({int(dims)}))"
    emb = f"CAST(v.embedding AS vector({int(dims)}))"
    if filters is None:
        params: dict[str, Any] = {"q": query, "k": 4 * k}
        sql = (f"SELECT v.drawer_id, 1 - ({emb} <=> {vec}) FROM vectors v "
               f"ORDER BY {emb} <=> {vec} LIMIT :k")
    else:
        where, params = filters.sql(now_ms)
        params.update({"q": query, "k": 4 * k})
        sql = (f"SELECT v.drawer_id, 1 - ({emb} <=> {vec}) FROM vectors v "
               f"JOIN drawers d ON d.id = v.drawer_id WHERE {where} "
               # "+ 0": not the indexed expression, so the scan is exact (an HNSW scan
               # filtered afterwards could return fewer than k of a narrow filter's drawers).
               f"ORDER BY ({emb} <=> {vec}) + 0 LIMIT :k")
    best: dict[int, float] = {}
    for did, sim in conn.execute(sql, params):
        if float(sim) > best.get(int(did), -2.0):
            best[int(did)] = float(sim)
    return sorted(best.items(), key=lambda kv: -kv[1])[:k]
