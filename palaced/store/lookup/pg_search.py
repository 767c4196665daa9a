"""Keyword search of a team palace, inside PostgreSQL: BM25 as FTS5 computes it.

``store.search`` calls these in place of its FTS5 queries when the connection is PostgreSQL
(``dialect.is_pg``), so recall's ranking (``palaced.retrieval.search``,
``palaced.retrieval.fusion``) is fed the same kind of candidate list on both backends. The score is
FTS5's ``bm25()`` with the same column weights (``search.BM25_WEIGHTS``: text, neighbour context,
date words, scaled by ``search.bm25_weights`` so that FTS5's fixed k1 = 1.2 acts as
``search.BM25_K1``), k1 = 1.2, b = 0.75, over ``fts_postings`` (the words of
``drawers_fts.tsv`` per drawer, with their counts in each column and the row's token
count ``ntok``, kept by a trigger):

    score = sum over query terms t of
            idf(t) * f(t) * (k1 + 1) / (f(t) + k1 * (1 - b + b * D / avgdl))

with f(t) the column-weighted count of t in the row, D its token count, idf(t) =
ln((N - n(t) + 0.5) / (n(t) + 0.5)) clamped to 1e-6 like FTS5. Words are stemmed by the
palace's text search configuration (English Snowball), FTS5's by Porter: a few words stem
apart, measured on LoCoMo in docs/teams.md.

Synchronous; every function takes a ``PgConn`` inside a read or write transaction.
"""

from __future__ import annotations

import json
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
# The counter sees every daemon's writes, so the age limit is only a backstop: counting N
# and the average length reads every full-text row (~0.5 s at 90k drawers on a loaded
# 2-core machine), which a 30 s limit made one recall in every 30 s pay.
STATS_SLACK = 0.02
STATS_TTL_S = 600.0


def _cached_stats(conn: Any) -> dict[str, Any] | None:
    """The store's cached ``{"n", "avgdl", "df": {lexeme: df}, ...}`` when still close
    enough to this snapshot (see STATS_SLACK), else None (dropped: the next search counts
    them afresh)."""
    cache: dict[str, Any] = getattr(conn, "cache", {})
    changes, now = getattr(conn, "changes", None), time.monotonic()
    got: dict[str, Any] | None = cache.get("bm25")
    if (got is None or changes is None or now - got["at"] > STATS_TTL_S
            or abs(changes - got["changes"]) > STATS_SLACK * max(got["n"], 50)):
        cache.pop("bm25", None)
        return None
    return got


def bm25(conn: Any, terms: Sequence[str], filters: Filters, limit: int, now_ms: int,
         weights: Sequence[float], split: tuple[int, int, int] | None = None,
         min_informative: int | None = None) -> list[tuple[int, float]]:
    """The best ``limit`` drawers matching any of ``terms`` (each a word of the query), as
    ``(drawer_id, score)`` best first, score higher = better.

    One statement (one round trip): the query's lexemes, their document frequencies (those
    the store's cache lacks counted in place), N and the average length (when the cache has
    none), the scores and the filter. The statistics it counted come back as extra rows
    (``rowid`` NULL) and fill the cache.

    With ``min_informative``, in a palace of at least that many drawers, the lexemes in
    more than half of them are left out (all kept when every one is): their IDF is clamped
    to nothing (``search.TermStats.informative``, which the SQLite side asks first).

    ``split`` (``(min_docs, common_share, min_postings)``) is FTS5's common-term split of
    ``search.fts_search``: in a palace of at least ``min_docs`` drawers, a query whose common
    lexemes (in more than 1/``common_share`` of the drawers) hold ``min_postings`` postings
    or more scores only the drawers holding one of its selective lexemes (the rarest lexeme
    when all are common), each by the whole query. Only drawers holding common lexemes
    alone are left out, as on SQLite; when fewer than ``limit`` drawers matching
    ``filters`` hold a selective lexeme, the whole query runs. Those drawers are scored by
    their selective postings first; walking down that score, the ``limit``-th matching
    ``filters`` sets a floor t (a drawer's whole score is at least its selective one), and
    only the drawers whose selective score plus the most the common lexemes can add
    (``idf * (k1 + 1)`` each) reaches t get the common lexemes' postings added: the same
    top, the same scores (to the last bits of a sum in another order), for the selective
    postings, ``limit`` key lookups in ``drawers`` and the common postings of the drawers
    kept (measured in docs/teams.md, "Numbers", at 100k drawers)."""
    if not terms:
        return []
    got = _cached_stats(conn)
    where, params = filters.sql(now_ms)
    w = [float(x) for x in weights]
    # float8 weights: a bare 0.4 is a numeric, and numeric arithmetic over every posting
    # was most of the statement (EXPLAIN at 10k drawers: 9 of 15 ms).
    tf = f"(p.a * {w[0]}::float8 + p.b * {w[1]}::float8 + p.c * {w[2]}::float8)"
    # float8 here too: ``0.75 * p.ntok`` was a numeric product per posting.
    score = (f"sum(i.idf * {tf} * {K1 + 1} / ({tf} + {K1} * ({1 - B} + {B}::float8 * p.ntok "
             "/ (SELECT avgdl FROM c))))")
    known = {} if got is None else got["df"]
    min_docs, share, min_postings = split if split is not None else (0, 1, 0)
    params.update({"terms": list(terms), "limit": limit, "inner": 2 * limit,
                   "n": None if got is None else got["n"],
                   "avgdl": None if got is None else got["avgdl"],
                   "known": json.dumps(known), "split": split is not None,
                   "min_docs": min_docs, "share": share, "min_postings": min_postings,
                   # No palace holds this many drawers: no lexeme is left out.
                   "min_informative": (float(min_informative) if min_informative is not None
                                       else float("inf"))})
    # As on SQLite: unfiltered, rank the postings alone, then drop the few superseded or
    # expired drawers from an over-fetched top; filtered, join every scored drawer.
    inner = "" if filters.narrows else " ORDER BY score DESC, rowid LIMIT :inner"
    sql = (
        "WITH q AS (SELECT DISTINCT u.lexeme AS lex FROM unnest(CAST(:terms AS text[])) t, "
        "unnest(to_tsvector('palace', t)) u), "
        # N and the average length: the cache's, else counted (a one-time filter: the
        # count runs only when :n is NULL; HAVING drops the aggregate's row otherwise).
        "c AS (SELECT CAST(:n AS float8) AS n, CAST(:avgdl AS float8) AS avgdl "
        "WHERE CAST(:n AS float8) IS NOT NULL UNION ALL "
        "SELECT count(*)::float8, CASE WHEN count(*) > 0 THEN sum(ntok)::float8 / count(*) "
        "ELSE 1.0 END FROM drawers_fts WHERE CAST(:n AS float8) IS NULL "
        "HAVING CAST(:n AS float8) IS NULL), "
        # A cached N may trail a df counted since (other daemons write): never below it.
        # ``useless``: in more than half of the drawers of a palace of at least
        # :min_informative (``search.TermStats.informative``'s rule, decided here on the df
        # the statement has anyway instead of in a statement of its own).
        "every AS (SELECT q.lex, f.df, greatest(ln((greatest(c.n, f.df) - f.df + 0.5) / "
        "(f.df + 0.5)), 1e-6) AS idf, f.df * :share <= c.n AS rare, "
        "(c.n >= :min_informative AND f.df * 2 > c.n) AS useless "
        # OFFSET 0: df is used five times above, and the LATERAL pulled up into it counted a
        # lexeme's postings once per use (five counts of 73k postings at 100k drawers).
        "FROM q CROSS JOIN c CROSS JOIN LATERAL (SELECT coalesce("
        "CAST(CAST(:known AS jsonb) ->> q.lex AS float8), (SELECT count(*) FROM fts_postings "
        "x WHERE x.lexeme = q.lex)::float8) AS df OFFSET 0) f), "
        # The query's informative lexemes; all of them when none is.
        "i AS (SELECT lex, df, idf, rare FROM every WHERE NOT useless OR NOT EXISTS "
        "(SELECT 1 FROM every WHERE NOT useless)), "
        # The split: the selective lexemes (the rarest one when all are common) ...
        "sel AS (SELECT lex FROM i WHERE rare OR (NOT EXISTS (SELECT 1 FROM i WHERE rare) "
        "AND lex = (SELECT lex FROM i ORDER BY df, lex LIMIT 1))), "
        # ... the drawers holding one, each with its score by the selective lexemes, when
        # the split applies (one-time filters: no scan otherwise): their postings alone ...
        f"cand AS (SELECT p.rowid, {score} AS s FROM sel JOIN i ON i.lex = sel.lex "
        "JOIN fts_postings p ON p.lexeme = i.lex WHERE :split AND (SELECT n FROM c) "
        ">= :min_docs AND (SELECT coalesce(sum(df), 0) FROM i WHERE NOT rare) "
        ">= :min_postings GROUP BY p.rowid), "
        # ... the best :limit of them that match the filter, walking down that score (a key
        # lookup in drawers each, stopping at :limit; OFFSET 0 keeps the lookup per row) ...
        "top AS (SELECT k.s FROM (SELECT rowid, s FROM cand ORDER BY s DESC, rowid) k "
        "CROSS JOIN LATERAL (SELECT 1 FROM drawers d WHERE d.id = k.rowid AND "
        f"{where} OFFSET 0) ok ORDER BY k.s DESC, k.rowid LIMIT :limit), "
        # ... so the split applies when :limit do, and the :limit-th's selective score t
        # bounds the top's whole scores from below. A common lexeme adds less than
        # idf * (k1 + 1) to a score: a drawer whose selective score plus that bound (b)
        # stays under t cannot enter the top, and is not scored further.
        "go AS (SELECT count(*) >= :limit AS split, min(s) AS t, (SELECT coalesce(sum(idf), 0) "
        f"* {K1 + 1} FROM i WHERE lex NOT IN (SELECT lex FROM sel)) AS b FROM top), "
        # The others: each scored by the whole query, its selective score plus that of the
        # common lexemes' postings of those drawers; else every posting of the query's
        # lexemes.
        "kept AS (SELECT rowid, s FROM cand WHERE (SELECT split FROM go) "
        "AND s + (SELECT b FROM go) >= (SELECT t FROM go) * (1 - 1e-12)), "
        f"s AS (SELECT k.rowid, k.s + coalesce(m.score, 0) AS score FROM kept k LEFT JOIN "
        f"(SELECT p.rowid, {score} AS score FROM i JOIN fts_postings p ON p.lexeme = i.lex "
        "WHERE i.lex NOT IN (SELECT lex FROM sel) AND p.rowid IN (SELECT rowid FROM kept) "
        "GROUP BY p.rowid) m ON m.rowid = k.rowid "
        f"UNION ALL (SELECT p.rowid, {score} AS score FROM i JOIN fts_postings p "
        f"ON p.lexeme = i.lex WHERE NOT (SELECT split FROM go) GROUP BY p.rowid{inner})) "
        "(SELECT s.rowid, s.score, NULL::text, NULL::float8 FROM s JOIN drawers d "
        f"ON d.id = s.rowid WHERE {where} ORDER BY s.score DESC, s.rowid LIMIT :limit) "
        "UNION ALL SELECT NULL, e.df, e.lex, NULL FROM every e "
        "UNION ALL SELECT NULL, c.n, NULL, c.avgdl FROM c")
    hits: list[tuple[int, float]] = []
    dfs: dict[str, float] = {}
    n = avgdl = None
    for rowid, score, lex, mean in conn.execute(sql, params):
        if rowid is not None:
            hits.append((int(rowid), float(score)))
        elif lex is not None:
            dfs[str(lex)] = float(score)
        else:
            n, avgdl = float(score), float(mean)
    if got is None and n is not None and avgdl is not None:
        got = {"n": n, "avgdl": avgdl, "df": {}, "changes": getattr(conn, "changes", None),
               "at": time.monotonic()}
        getattr(conn, "cache", {})["bm25"] = got
    if got is not None:
        got["df"].update(dfs)
    return hits


def doc_freqs(conn: Any, terms: Sequence[str]) -> dict[str, int]:
    """``{term: how many drawers' own text holds it}`` (each a word; its postings in the
    text column): one statement, a count over each word's postings. (A term the parser
    splits in several words counts the drawers holding any of them: a df only decides
    whether a term is informative.)"""
    if not terms:
        return {}
    out = dict.fromkeys(terms, 0)
    for t, n in conn.execute(
            "SELECT w.t, (SELECT count(DISTINCT p.rowid) FROM unnest(to_tsvector('palace', w.t)) "
            "u JOIN fts_postings p ON p.lexeme = u.lexeme WHERE p.a > 0) "
            "FROM unnest(CAST(:terms AS text[])) AS w(t)",
            {"terms": list(dict.fromkeys(terms))}):
        out[str(t)] = int(n)
    return out


def mentioned(conn: Any, names: Sequence[str]) -> set[str]:
    """The ``names`` some drawer's own text holds (each name's words as a phrase), in one
    statement: each name's tsquery (its lexemes in order, joined by ``<->``, each restricted
    to the text's weight A, quoted as tsquery quotes) is built in place and tried on the GIN
    index."""
    if not names:
        return set()
    quoted = (r"'''' || replace(replace(u.lexeme, '\', '\\'), '''', '''''') || ''':A'")
    sql = ("SELECT n.name FROM unnest(CAST(? AS text[])) AS n(name) CROSS JOIN LATERAL ("
           f"SELECT string_agg({quoted}, ' <-> ' ORDER BY u.positions[1]) AS tsq "
           "FROM unnest(to_tsvector('palace', n.name)) u) p WHERE p.tsq IS NOT NULL AND "
           "EXISTS (SELECT 1 FROM drawers_fts f WHERE f.tsv @@ CAST(p.tsq AS tsquery))")
    return {str(r[0]) for r in conn.execute(sql, (list(names),))}


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
    the vectors of the drawers matching ``filters``.

    The index is asked for ``2 * k`` vectors, as a local palace asks its usearch graph (a
    long drawer has several among the nearest), and for ``4 * k`` when those held fewer
    than ``k`` drawers: the same hits as asking ``4 * k`` at once, for a quarter less time
    (fetching and scoring the rows the index returns; 100k drawers, ``hnsw.ef_search`` 400:
    9.3 instead of 11.8 ms, docs/teams.md)."""
    vec = f"CAST(:q AS vector({int(dims)}))"
    emb = f"CAST(v.embedding AS vector({int(dims)}))"
    if filters is None:
        sql = (f"SELECT v.drawer_id, 1 - ({emb} <=> {vec}) FROM vectors v "
               f"ORDER BY {emb} <=> {vec} LIMIT :k")
        for want in (2 * k, 4 * k):
            # The HNSW index is asked for (``PgConn.execute_indexed``): the planner would
            # scan every vector of a 10k palace instead.
            rows = conn.execute_indexed(sql, {"q": query, "k": want})
            best = _best(rows, k)
            if len(best) >= k or len(rows) < want:
                break
        return best
    where, params = filters.sql(now_ms)
    params.update({"q": query, "k": 4 * k})
    return _best(conn.execute(
        f"SELECT v.drawer_id, 1 - ({emb} <=> {vec}) FROM vectors v "
        f"JOIN drawers d ON d.id = v.drawer_id WHERE {where} "
        # "+ 0": not the indexed expression, so the scan is exact (an HNSW scan filtered
        # afterwards could return fewer than k of a narrow filter's drawers).
        f"ORDER BY ({emb} <=> {vec}) + 0 LIMIT :k", params), k)


def _best(rows: Any, k: int) -> list[tuple[int, float]]:
    """The best ``k`` of ``(drawer_id, cosine)`` rows, one per drawer (its best)."""
    best: dict[int, float] = {}
    for did, sim in rows:
        if float(sim) > best.get(int(did), -2.0):
            best[int(did)] = float(sim)
    return sorted(best.items(), key=lambda kv: -kv[1])[:k]
