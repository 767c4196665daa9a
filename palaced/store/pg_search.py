"""Keyword search of a team palace, inside PostgreSQL: BM25 as FTS5 computes it.

``store.search`` calls these in place of its FTS5 queries when the connection is PostgreSQL
(``dialect.is_pg``), so recall's ranking (``palaced.search``, ``palaced.fusion``) is fed the
same kind of candidate list on both backends. The score is FTS5's ``bm25()`` with the same
column weights (``search.BM25_WEIGHTS``: text, neighbour context, date words), k1 = 1.2,
b = 0.75, over ``drawers_fts.tsv`` (weights A, B, C) and its token count ``ntok``:

    score = sum over query terms t of
            idf(t) * f(t) * (k1 + 1) / (f(t) + k1 * (1 - b + b * D / avgdl))

with f(t) the column-weighted count of t in the row, D its token count, idf(t) =
ln((N - n(t) + 0.5) / (n(t) + 0.5)) clamped to 1e-6 like FTS5. Words are stemmed by the
palace's text search configuration (English Snowball), FTS5's by Porter: a few words stem
apart, measured on LoCoMo in docs/teams.md.

Synchronous; every function takes a ``PgConn`` inside a read or write transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dialect import vector_literal as vector_literal  # re-exported: callers use it here
from .drawers import Filters

K1, B = 1.2, 0.75


def _weights(w: Sequence[float]) -> str:
    return (f"CASE x WHEN 'A' THEN {float(w[0])} WHEN 'B' THEN {float(w[1])} "
            f"ELSE {float(w[2])} END")


def bm25(conn: Any, terms: Sequence[str], filters: Filters, limit: int, now_ms: int,
         weights: Sequence[float]) -> list[tuple[int, float]]:
    """The best ``limit`` drawers matching any of ``terms`` (each a word of the query), as
    ``(drawer_id, score)`` best first, score higher = better."""
    if not terms:
        return []
    where, params = filters.sql(now_ms)
    params.update({"terms": list(terms), "limit": limit})
    sql = f"""
        WITH q AS (
            SELECT DISTINCT u.lexeme AS lex
            FROM unnest(CAST(:terms AS text[])) t, unnest(to_tsvector('palace', t)) u
        ), stats AS (
            SELECT count(*)::float8 AS n, coalesce(avg(ntok), 1)::float8 AS avgdl
            FROM drawers_fts
        ), idf AS (
            SELECT q.lex, GREATEST(ln((s.n - df.n + 0.5) / (df.n + 0.5)), 1e-6) AS idf
            FROM q CROSS JOIN stats s, LATERAL (
                SELECT count(*)::float8 AS n FROM drawers_fts f
                WHERE f.tsv @@ CAST(quote_literal(q.lex) AS tsquery)) df
        ), hits AS (
            SELECT f.rowid, f.ntok, f.tsv FROM drawers_fts f JOIN drawers d ON d.id = f.rowid
            WHERE f.tsv @@ (SELECT CAST(string_agg(quote_literal(lex), ' | ') AS tsquery)
                            FROM q)
              AND {where}
        )
        SELECT h.rowid, sum(i.idf * (x.tf * {K1 + 1}) /
                            (x.tf + {K1} * ({1 - B} + {B} * h.ntok / s.avgdl))) AS score
        FROM hits h CROSS JOIN stats s, LATERAL (
            SELECT u.lexeme, (SELECT sum({_weights(weights)}) FROM unnest(u.weights) x) AS tf
            FROM unnest(h.tsv) u) x
        JOIN idf i ON i.lex = x.lexeme
        GROUP BY h.rowid ORDER BY score DESC, h.rowid LIMIT :limit"""
    return [(int(r[0]), float(r[1])) for r in conn.execute(sql, params)]


def doc_freq(conn: Any, term: str, *, text_only: bool = False) -> int:
    """How many drawers hold ``term`` (a word or a phrase of words), in their own text alone
    with ``text_only``, else in any column."""
    tsq = _phrase(conn, term, "A" if text_only else "")
    if tsq is None:
        return 0
    return int(conn.execute("SELECT count(*) FROM drawers_fts WHERE tsv @@ CAST(? AS tsquery)",
                            (tsq,)).fetchall()[0][0])


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
