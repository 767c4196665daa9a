"""Synchronous keyword search and candidate queries of recall's ranking.

BM25 over the drawers' full-text rows (``fts_search``, with ``TermStats`` to leave out terms
that carry no weight), the query-term helpers also used by the knowledge graph's entity
search, and the queries ``search.rank`` needs around the candidate pool: filtered vector
rows, the pool's rows (``pool_rows``: metadata, the ends of texts and closet hits in one
statement), document frequencies and the palace's rooms. Every function takes an open
``apsw.Connection`` and only reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import apsw

from palaced.store.conn.dialect import is_pg, json_ids
from palaced.store.lookup import pg_search
from palaced.store.lookup.context import neighbour_sql
from palaced.store.rows.drawers import Filters

_WORD = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her
    hers him his how i if in into is it its me my of on or our she so than that the their them
    then there these they this to was we were what when where which who whom why will with
    would you your yours""".split()
)


def fts_terms(query: str) -> list[str]:
    """The searchable words of a query, stopwords removed unless nothing else is left."""
    words = [w.lower() for w in _WORD.findall(query.replace("\x00", " "))]
    kept = [w for w in words if w not in STOPWORDS]
    seen: dict[str, None] = dict.fromkeys(kept or words)
    return list(seen)[:64]


def fts_match(terms: Sequence[str], *, prefix: bool = False) -> str | None:
    """An FTS5 MATCH expression that ORs the quoted terms: user syntax is never interpreted.

    With ``prefix`` each term also matches the words it begins (``bill`` finds ``billing``).
    """
    if not terms:
        return None
    star = "*" if prefix else ""
    return " OR ".join('"' + t.replace('"', '""') + '"' + star for t in terms)


def mentioned(conn: apsw.Connection, names: Sequence[str]) -> set[str]:
    """The ``names`` some drawer's text mentions (an FTS5 phrase query each, column ``text``).

    Matching is the full-text index's: case-insensitive, Porter-stemmed ("Caroline's" and
    "carolines" find "caroline"), a multiword name as a phrase. A few index lookups: well
    under a millisecond each at 10k drawers.
    """
    if is_pg(conn):  # one statement for every name
        return pg_search.mentioned(conn, names)
    found: set[str] = set()
    for name in names:
        phrase = fts_match([name])
        if phrase is None or not conn.execute(
                "SELECT 1 FROM drawers_fts WHERE drawers_fts MATCH ? LIMIT 1",
                ("{text} : " + phrase,)).fetchall():
            continue
        found.add(name)
    return found


# bm25 column weights: drawer text, neighbour context, date words. Measured on LoCoMo dev
# (turn R@5, context ±1): no context .653, context 0.35 .706, 0.5 .712; dates 0 -> 0.6:
# .689 -> .706. With context ±2, 0.4 balances R@1 (.401) against R@5/R@10 (.730/.823).
COLUMN_WEIGHTS = (1.0, 0.4, 0.6)
# BM25's k1, how fast a word's repeats stop counting. FTS5's bm25() fixes it at FTS5_K1
# (Robertson's 1.2); 0.9 is the default Trotman et al. (2014) found better across
# collections, as PISA and Anserini use. Short drawers (a turn, a note) and the context
# column, where a word the neighbours repeat adds up, gain from it. LoCoMo dev,
# leave-one-conversation-out (docs/benchmarks.md, issue 33): 0.6 to 0.9 in every fold of
# both models.
BM25_K1 = 0.9
FTS5_K1 = 1.2


def bm25_weights(columns: Sequence[float] = COLUMN_WEIGHTS,
                 k1: float = BM25_K1) -> tuple[float, ...]:
    """The column weights to give FTS5's bm25() (fixed k1 1.2) for BM25 with ``k1``.

    Scaling every weight by s turns FTS5's ``f (k1 + 1) / (f + k1 L)`` into ``f (k1 + 1) /
    (f + (k1 / s) L)``: BM25 with k1 / s, each score times one constant, which the ranking
    never sees (the fusion standardises the keyword list). The keyword engine and the
    PostgreSQL BM25 take the same weights, so every keyword side ranks alike. Raises
    ValueError for a k1 that is not positive.
    """
    if not k1 > 0:
        raise ValueError(f"k1 must be > 0, got {k1}")
    return tuple(w * FTS5_K1 / k1 for w in columns)


BM25_WEIGHTS = bm25_weights()


class TermStats:
    """Document frequencies of query terms, cached per palace.

    Cheap to keep roughly current: a df only decides whether a term is informative, so the
    cache is dropped when the palace grew or shrank by more than a tenth since it was built.
    """

    MAX_TERMS = 50_000
    MIN_DOCS = 2_000

    def __init__(self) -> None:
        self.df: dict[str, int] = {}
        self.built_for = 0

    def informative(self, conn: apsw.Connection, terms: Sequence[str], n_docs: int
                    ) -> list[str]:
        """``terms`` without those in more than half of the drawers (FTS5's side: a team
        palace applies the same rule inside its BM25 statement, ``pg_search.bm25``).

        BM25's IDF, log((N - n + 0.5) / (n + 0.5)), is <= 0 for such a term and FTS5 clamps
        it to 1e-6: it cannot change the ranking, yet its posting list is the costliest to
        score (measured: a Zipfian 10k palace, 6.5 -> 1.9 ms per query). Keeps all terms
        if none is informative, and all terms in palaces under MIN_DOCS drawers: there the
        full query is cheap, and the near-zero hits it adds steady the z-score fusion
        (LoCoMo dev, ~600-drawer palaces: turn R@1 .401 with them, .399 without).
        """
        if n_docs < self.MIN_DOCS or not terms:
            return list(terms)
        if abs(n_docs - self.built_for) * 10 > self.built_for or len(self.df) > self.MAX_TERMS:
            self.df, self.built_for = {}, n_docs
        keep = []
        for term in terms:
            df = self.df.get(term)
            if df is None:
                df = int(conn.execute("SELECT count(*) FROM drawers_fts WHERE drawers_fts MATCH ?",
                                      (fts_match([term]),)).fetchall()[0][0])
                self.df[term] = df
            if df * 2 <= n_docs:
                keep.append(term)
        return keep or list(terms)

    def common(self, terms: Sequence[str], n_docs: int) -> list[str]:
        """The common terms of ``terms`` (see ``COMMON_SHARE``) when their postings are
        enough to matter (``SPLIT_MIN_POSTINGS``), else []; known after ``informative``."""
        if n_docs < self.MIN_DOCS:
            return []
        common = [t for t in terms if self.df.get(t, 0) * COMMON_SHARE > n_docs]
        if sum(self.df[t] for t in common) < SPLIT_MIN_POSTINGS:
            return []
        return common


# A term found in more than 1/COMMON_SHARE of the drawers is "common": its IDF is under
# log(15) while its posting list is long, and FTS5 scores every posting of a query. A query
# whose common terms hold at least SPLIT_MIN_POSTINGS postings is run in two parts (see
# fts_search). bench/bm25_scale.py, 100k Zipfian drawers, 120 queries (a loaded 2-core
# machine): p50 35.6 -> 14.6 ms, p95 80.3 -> 31.5 ms; 100 % of the exact top-10 and 98 % of
# the exact top-100 kept; LoCoMo dev turns hidden among them: BM25 R@1/5/10 unchanged.
COMMON_SHARE = 16
SPLIT_MIN_POSTINGS = 10_000


def fts_search(
    conn: apsw.Connection, query: str, filters: Filters, limit: int, now_ms: int,
    stats: TermStats | None = None, n_docs: int = 0,
) -> list[tuple[int, float]]:
    """BM25 search; returns ``(drawer_id, score)`` best first, score higher = better.

    With ``stats`` (and the palace's drawer count), terms in more than half of the drawers
    are left out of the query: they carry no BM25 weight. In a large palace, a query with
    long posting lists of common terms is run as its selective terms alone, then as
    ``(selective) AND (common)``: FTS5's bm25 sums one score per query term with the same
    IDFs either way, so the drawers of the second part get exactly the score of the whole
    query, and those of the first part that hold no common term have it too. Only drawers
    holding common terms alone are left out (each of those terms weighs little), and the
    cost follows the selective terms' postings; when fewer than ``limit`` drawers hold a
    selective term, the whole query runs. In a query of common terms alone, the rarest plays
    the selective part.
    """
    terms = fts_terms(query)
    if is_pg(conn):
        # BM25 inside PostgreSQL, the informative lexemes and the split decided there too:
        # one statement, on the document frequencies it reads anyway.
        return pg_search.bm25(conn, terms, filters, limit, now_ms, BM25_WEIGHTS, None
                              if stats is None else (stats.MIN_DOCS, COMMON_SHARE,
                                                     SPLIT_MIN_POSTINGS),
                              None if stats is None else stats.MIN_DOCS) if terms else []
    if stats is not None:
        terms = stats.informative(conn, terms, n_docs)
    if not terms:
        return []
    common = [] if stats is None else stats.common(terms, n_docs)
    if not common:
        return _bm25(conn, fts_match(terms), filters, limit, now_ms)
    selective = [t for t in terms if t not in common]
    if not selective:
        # Common terms only: the rarest stands for the selective part.
        rarest = min(common, key=lambda t: stats.df.get(t, 0) if stats is not None else 0)
        selective, common = [rarest], [t for t in common if t != rarest]
        if not common:
            return _bm25(conn, fts_match(selective), filters, limit, now_ms)
    sel = fts_match(selective)
    scores = dict(_bm25(conn, sel, filters, 2 * limit, now_ms))
    if len(scores) < limit:
        # Fewer drawers hold a selective term than were asked for: the rest are drawers of
        # common terms alone, ranked by the whole query. A narrowed search needs this most:
        # its wing or room may hold no selective term at all, and the split found nothing.
        return _bm25(conn, fts_match(terms), filters, limit, now_ms)
    scores.update(_bm25(conn, f"({sel}) AND ({fts_match(common)})", filters, 2 * limit,
                        now_ms))
    return sorted(scores.items(), key=lambda kv: -kv[1])[:limit]


def _bm25(conn: apsw.Connection, match: str | None, filters: Filters, limit: int,
          now_ms: int, after: int = 0) -> list[tuple[int, float]]:
    """The best ``limit`` drawers (above rowid ``after``) for an FTS5 expression."""
    if match is None:
        return []
    where, params = filters.sql(now_ms)
    params.update({"match": match, "limit": limit, "inner": limit * 2, "after": after})
    w = BM25_WEIGHTS
    bm25 = f"bm25(drawers_fts, {w[0]}, {w[1]}, {w[2]})"
    if filters.narrows:
        sql = (
            f"SELECT f.rowid, {bm25} AS s FROM drawers_fts f "
            f"JOIN drawers d ON d.id = f.rowid WHERE drawers_fts MATCH :match "
            f"AND f.rowid > :after AND {where} ORDER BY s LIMIT :limit"
        )
    else:
        # Rank in FTS alone first (joining every match costs ~40 %), then drop the few
        # superseded or expired drawers from an over-fetched top.
        sql = (
            f"SELECT f.rowid, f.s FROM (SELECT rowid, {bm25} AS s FROM drawers_fts "
            "WHERE drawers_fts MATCH :match AND rowid > :after ORDER BY s LIMIT :inner) f "
            f"JOIN drawers d ON d.id = f.rowid WHERE {where} ORDER BY f.s LIMIT :limit"
        )
    # FTS5's bm25() is negative with lower = better; negate so higher = better everywhere.
    return [(int(r[0]), -float(r[1])) for r in conn.execute(sql, params)]


# Substring matches ranked at most, newest first: bounds the cost of a fallback whose
# substring is common (a trigram in half of a large palace) to this many rows.
SUBSTRING_SCAN = 2_000


def substring_search(conn: apsw.Connection, query: str, filters: Filters, limit: int,
                     now_ms: int) -> list[tuple[int, float]]:
    """Drawers whose text contains a query word of 3+ characters anywhere ("gres" finds
    "Postgres"), case-insensitive, from the trigram index; ``(drawer_id, score)`` best first.

    The fallback of a keyword search that found nothing: only the newest SUBSTRING_SCAN
    matches are scored (BM25 over trigrams). Words under 3 characters cannot be searched.
    """
    if is_pg(conn):
        return pg_search.substring(conn, [t for t in fts_terms(query) if len(t) >= 3],
                                   filters, limit, now_ms, SUBSTRING_SCAN)
    match = fts_match([t for t in fts_terms(query) if len(t) >= 3])
    if match is None:
        return []
    where, params = filters.sql(now_ms)
    params.update({"match": match, "limit": limit, "scan": SUBSTRING_SCAN})
    sql = (
        "SELECT f.rowid, f.s FROM (SELECT t.rowid, bm25(drawers_trigram) AS s "
        "FROM drawers_trigram t JOIN drawers d ON d.id = t.rowid "
        f"WHERE drawers_trigram MATCH :match AND {where} ORDER BY t.rowid DESC LIMIT :scan) f "
        "ORDER BY f.s LIMIT :limit"
    )
    return [(int(r[0]), -float(r[1])) for r in conn.execute(sql, params)]


# -- around the candidate pool ------------------------------------------------------------------
def drawer_count(conn: apsw.Connection) -> int:
    """How many drawers the palace holds (BM25's N; callers cache it per write)."""
    return int(conn.execute("SELECT count(*) FROM drawers").fetchall()[0][0])


def drawer_top(conn: apsw.Connection) -> int:
    """The highest drawer id (0 when empty): one index seek, where a count scans."""
    return int(conn.execute("SELECT coalesce(max(id), 0) FROM drawers").fetchall()[0][0])


def matching_vector_count(conn: apsw.Connection, filters: Filters, now_ms: int) -> int:
    """How many vectors belong to drawers matching ``filters``."""
    where, params = filters.sql(now_ms)
    return int(conn.execute(
        f"SELECT count(*) FROM vectors v JOIN drawers d ON d.id = v.drawer_id WHERE {where}",
        params).fetchall()[0][0])


def matching_vectors(conn: apsw.Connection, filters: Filters, now_ms: int
                     ) -> list[tuple[int, bytes]]:
    """``(drawer_id, blob)`` of every vector of the drawers matching ``filters``."""
    where, params = filters.sql(now_ms)
    return [(int(r[0]), bytes(r[1])) for r in conn.execute(
        f"SELECT v.drawer_id, v.vec FROM vectors v JOIN drawers d ON d.id = v.drawer_id "
        f"WHERE {where}", params)]


def matching_ids(conn: apsw.Connection, ids: Sequence[int], filters: Filters, now_ms: int
                 ) -> set[int]:
    """The drawers among ``ids`` that match ``filters``."""
    if not ids:
        return set()
    where, params = filters.sql(now_ms)
    marks = ",".join(str(int(i)) for i in ids)
    return {int(r[0]) for r in conn.execute(
        f"SELECT d.id FROM drawers d WHERE d.id IN ({marks}) AND {where}", params)}


def narrowed_ids(conn: apsw.Connection, filters: Filters, now_ms: int, cap: int
                 ) -> list[int] | None:
    """The ids of the drawers that match ``filters``; None when there are more than ``cap``
    (with a wing or room: one read of the index it seeks, stopped past ``cap``)."""
    where, params = filters.sql(now_ms)
    ids = [int(r[0]) for r in conn.execute(
        f"SELECT d.id FROM drawers d WHERE {where} LIMIT :cap", {**params, "cap": cap + 1})]
    return None if len(ids) > cap else ids


@dataclass(frozen=True, slots=True)
class PoolRow:
    """What the ranking reads about one candidate (``pool_rows``)."""

    wing: str
    room: str
    importance: float  # importance times its decay weight
    occurred_ms: int
    accesses: int
    length: int  # characters of its text
    head: str  # its text's first characters
    tail: str  # its text's last characters
    closet: bool  # filed under one of the query's topics


@dataclass(frozen=True, slots=True)
class PoolRead:
    """``pool_rows``' answer: the candidates' rows and, when asked, the drawer before each in
    its room (``before``) with that drawer's text end and length (``before_tails``)."""

    rows: dict[int, PoolRow]
    before: dict[int, int]
    before_tails: dict[int, tuple[str, int]]


def _ends(alias: str, tail: int) -> str:
    """The last ``tail`` characters of ``alias``'s text: ``substr(text, -n)`` is SQLite's
    alone (PostgreSQL returns the whole text), so counted out."""
    return (f"substr({alias}.text, CASE WHEN length({alias}.text) > {int(tail)} THEN "
            f"length({alias}.text) - {int(tail)} + 1 ELSE 1 END)")


def pool_rows(conn: apsw.Connection, ids: Sequence[int], filters: Filters, now_ms: int, *,
              head_chars: int, tail_chars: int, topics: Sequence[str] = (),
              before: bool = False) -> PoolRead:
    """The candidates ``ids`` that still match ``filters`` in this snapshot, in one
    statement: their metadata, the ends of their texts and whether they are filed under one
    of ``topics``; with ``before``, also the drawer before each in its room
    (``context.neighbour_sql``) and that drawer's text end (``tail_chars``) and length.

    BM25 may have run in an earlier read transaction (concurrently with embedding), so a
    candidate superseded, expired or forgotten since is dropped here.
    """
    if not ids:
        return PoolRead({}, {}, {})
    where, params = filters.sql(now_ms)
    closet = "0"
    if topics:
        keys = []
        for k, topic in enumerate(topics):
            params[f"topic{k}"] = topic
            keys.append(f":topic{k}")
        closet = (f"EXISTS (SELECT 1 FROM closets k WHERE k.drawer_id = d.id "
                  f"AND k.topic IN ({','.join(keys)}))")
    params["ids"] = json_ids(ids)
    head, tail = int(head_chars), int(tail_chars)
    rows_sql = (f"SELECT d.id, d.wing, d.room, d.importance, d.occurred_ms, d.weight, "
                f"d.access_count, length(d.text) AS chars, substr(d.text, 1, {head}) AS head, "
                f"{_ends('d', tail)} AS tail, {closet} AS filed"
                f"{', ' + neighbour_sql('d') + ' AS prev' if before else ''} FROM drawers d "
                f"WHERE d.id IN (SELECT value FROM json_each(:ids)) AND {where}")
    sql = rows_sql if not before else (
        # The previous drawer's text end in the same statement: one seek by its id.
        # MATERIALIZED: else PostgreSQL inlines the rows and runs the neighbour's
        # subquery twice, for the column and for the join (100k drawers: 3.2 -> 2.3 ms).
        f"WITH c AS MATERIALIZED ({rows_sql}) SELECT c.*, {_ends('p', tail)}, "
        f"length(p.text) FROM c LEFT JOIN drawers p ON p.id = c.prev")
    out = PoolRead({}, {}, {})
    for did, wing, room, imp, occ, weight, count, chars, first, last, filed, *prev in \
            conn.execute(sql, params):
        # Decay weight scales importance: a stale low drawer ranks below a fresh one.
        out.rows[int(did)] = PoolRow(str(wing), str(room), float(imp) * float(weight),
                                     int(occ), int(count), int(chars), str(first), str(last),
                                     bool(filed))
        if prev and prev[0] is not None:
            out.before[int(did)] = int(prev[0])
            out.before_tails[int(prev[0])] = (str(prev[1]), int(prev[2]))
    return out


SKIP_SCAN_MAX = 1_000  # rooms found by index seeks before a plain scan is cheaper


def all_rooms(conn: apsw.Connection) -> list[tuple[str, str]]:
    """Every (wing, room) of the palace, in order (callers cache it per write).

    A skip scan: one seek per room in the ``(wing, room, ...)`` index, so it costs the
    rooms, not the drawers (100k drawers in 200 rooms: ~1 ms instead of a ~15 ms scan); a
    palace with very many rooms is scanned once instead.
    """
    found: list[tuple[str, str]] = []
    if is_pg(conn):
        # The same skip scan in one statement (a recursive CTE, one index seek per room):
        # PostgreSQL's planner does not skip for DISTINCT by itself, and scanned all of
        # ``drawers_room_time`` (10k drawers: 4.2 ms a recall, the write counter a recall's
        # own access stamps bump invalidating the cache each time; 0.4 ms so).
        return [(str(w), str(r)) for w, r in conn.execute(
            "WITH RECURSIVE r(wing, room) AS ((SELECT wing, room FROM drawers "
            "ORDER BY wing, room LIMIT 1) UNION ALL SELECT n.wing, n.room FROM r "
            "CROSS JOIN LATERAL (SELECT d.wing, d.room FROM drawers d WHERE (d.wing, d.room) "
            "> (r.wing, r.room) ORDER BY d.wing, d.room LIMIT 1) n) "
            "SELECT wing, room FROM r ORDER BY wing, room")]
    rows = conn.execute("SELECT wing, room FROM drawers ORDER BY wing, room LIMIT 1").fetchall()
    while rows:
        if len(found) >= SKIP_SCAN_MAX:
            return [(str(w), str(r)) for w, r in conn.execute(
                "SELECT DISTINCT wing, room FROM drawers ORDER BY wing, room")]
        wing, room = rows[0]
        found.append((str(wing), str(room)))
        rows = conn.execute("SELECT wing, room FROM drawers WHERE wing = ? AND room > ? "
                            "ORDER BY wing, room LIMIT 1", (wing, room)).fetchall() or (
            conn.execute("SELECT wing, room FROM drawers WHERE wing > ? ORDER BY wing, room "
                         "LIMIT 1", (wing,)).fetchall())
    return found


def text_doc_freq(conn: apsw.Connection, word: str) -> int:
    """How many drawers' own text (not their neighbour context) holds ``word``."""
    return text_doc_freqs(conn, [word])[word]


def text_doc_freqs(conn: apsw.Connection, words: Sequence[str]) -> dict[str, int]:
    """``{word: how many drawers' own text holds it}`` for ``words``: one statement (a
    full-text count per word) on either backend."""
    if is_pg(conn):
        return pg_search.doc_freqs(conn, words)
    phrases = {w: p for w in words if (p := fts_match([w])) is not None}
    out = dict.fromkeys(words, 0)
    if not phrases:
        return out
    counts = ", ".join("(SELECT count(*) FROM drawers_fts WHERE drawers_fts MATCH ?)"
                       for _ in phrases)
    row = conn.execute(f"SELECT {counts}", ["{text} : " + p for p in phrases.values()]
                       ).fetchall()[0]
    out.update(zip(phrases, (int(n) for n in row), strict=True))
    return out


def drawer_tails(conn: apsw.Connection, ids: Sequence[int], chars: int
                 ) -> dict[int, tuple[str, int]]:
    """``{id: (the last chars characters of its text, its length)}`` of the drawers ``ids``
    that exist."""
    if not ids:
        return {}
    return {int(i): (str(t), int(n)) for i, t, n in conn.execute(
        f"SELECT d.id, {_ends('d', chars)}, length(d.text) FROM drawers d "
        "WHERE d.id IN (SELECT value FROM json_each(?))", (json_ids(ids),))}
