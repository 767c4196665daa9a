"""The keyword engine: BM25 top-k over a palace's full-text rows (the search side).

SQLite's ``drawers_fts`` stays the truth; the engine is a cache of it, like the vector index
(its file and build: ``keyword_file``; its owner: ``keywords``). FTS5's bm25() scores every
posting of every query term and cannot stop early: at 1M drawers a query costs ~44/118 ms
p50/p95 (docs/benchmarks.md). The engine keeps, per term (FTS5's own tokens: the ``porter
unicode61 remove_diacritics 2`` tokenizer through apsw), the drawer ids sorted ascending and
each posting's precomputed *impact*, the term-frequency part of FTS5's bm25 (fts5_aux.c)::

    freq   = sum over columns of BM25_WEIGHTS[col] * hits in col    (text, context, dates)
    impact = freq * (k1 + 1) / (freq + k1 * (1 - b + b * D / avgdl))   k1 = 1.2, b = 0.75

with D the row's tokens over all columns and avgdl fixed at build time, so a drawer's score
is ``sum over query terms of idf(t) * impact``, idf as FTS5's (log((N - n + 0.5) / (n + 0.5)),
1e-6 when <= 0). Right after a build the scores are FTS5's to float32 precision.

Top-k is MaxScore (``_top_base``): terms in descending upper bound (idf * max impact); whole
lists are scatter-added into a dense accumulator until the remaining terms' bounds together
fall below the current k-th best score; then only the surviving candidates are completed, by
binary search into the remaining lists. Exact for the engine's scores.

Freshness: every ``drawers_fts`` write logs the drawer in ``fts_changes`` (store/lookup/fts_log.py).
A search first reads, in its own snapshot, the log past what the engine has applied,
re-reads those drawers' rows (a missing row: deleted) into an in-memory ``Overlay`` and masks
their postings in the base. The overlay is shared by concurrent searches: one running in a
snapshot older than the newest a search applied sees those few newer rows (the recall's
``drawers`` join then drops what its snapshot lacks).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from palaced.store.lookup.fts_log import changed_since, rows_of
from palaced.store.lookup.search import BM25_WEIGHTS, TermStats

K1, B = 1.2, 0.75
_tls = threading.local()


def tokenizer() -> Any:
    """This thread's FTS5 tokenizer, exactly the one of ``drawers_fts`` (schema v1)."""
    tok = getattr(_tls, "tok", None)
    if tok is None:
        conn = apsw.Connection(":memory:")
        tok = conn.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])
        _tls.conn, _tls.tok = conn, tok
    return tok


def tokens(text: str, *, query: bool = False) -> list[str]:
    """FTS5's tokens of ``text`` (document or query mode)."""
    if not text:
        return []
    flags = apsw.FTS5_TOKENIZE_QUERY if query else apsw.FTS5_TOKENIZE_DOCUMENT
    out: list[str] = tokenizer()(text.encode("utf-8"), flags, None, include_offsets=False,
                                 include_colocated=False)
    return out


def query_tokens(words: Sequence[str]) -> list[str] | None:
    """One token per query word (FTS5 query mode), or None when some word is not exactly
    one token (a phrase like ``foo_bar``): such a query is left to FTS5."""
    out = []
    for w in words:
        got = tokens(w, query=True)
        if len(got) != 1:
            return None
        out.append(got[0])
    return out


def term_key(term: str) -> int:
    """A stable 64-bit key of a term (the file's term dictionary is sorted keys, no strings:
    nothing to parse at load). Two words of one palace sharing a key would share a list;
    with a million distinct words the odds are ~3e-8."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest(),
                          "little")


def idf(n_rows: int, df: int) -> float:
    """FTS5's BM25 IDF."""
    value = math.log((n_rows - df + 0.5) / (df + 0.5))
    return value if value > 0 else 1e-6


def row_freqs(text: str, context: str, dates: str) -> tuple[dict[str, float], int]:
    """``({token: weighted frequency}, D)`` of one full-text row."""
    freq: dict[str, float] = {}
    n = 0
    for col, weight in zip((text, context, dates), BM25_WEIGHTS, strict=True):
        toks = tokens(col or "")
        n += len(toks)
        for t in toks:
            freq[t] = freq.get(t, 0.0) + weight
    return freq, n


@dataclass
class Base:
    """The immutable postings of one build (arrays may be memory maps of the file)."""

    keys: np.ndarray  # uint64, sorted: term keys
    start: np.ndarray  # int64 per key: first posting
    count: np.ndarray  # int64 per key: postings (the term's document frequency)
    maxi: np.ndarray  # float32 per key: the term's largest impact
    docs: np.ndarray  # uint32: drawer ids, ascending within a term
    imps: np.ndarray  # float32: impacts
    dl: np.ndarray  # uint32 per drawer id: tokens of its row (0: no row)
    n_rows: int
    avgdl: float
    seq: int  # the newest fts_changes seq the build saw
    build_id: str

    @property
    def span(self) -> int:
        """Drawer ids are below this."""
        return len(self.dl)

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray, float]:
        """``(docs, impacts, max impact)`` of ``term`` (empty when unknown)."""
        key = np.uint64(term_key(term))
        i = int(np.searchsorted(self.keys, key))
        if i >= len(self.keys) or self.keys[i] != key:
            return _EMPTY_U32, _EMPTY_F32, 0.0
        s, n = int(self.start[i]), int(self.count[i])
        return self.docs[s:s + n], self.imps[s:s + n], float(self.maxi[i])

    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.keys, self.start, self.count, self.maxi,
                                           self.docs, self.imps, self.dl))


_EMPTY_U32 = np.zeros(0, dtype=np.uint32)
_EMPTY_F32 = np.zeros(0, dtype=np.float32)


# -- the overlay ------------------------------------------------------------------------------
@dataclass
class Overlay:
    """Rows changed since the base's build, as read in the newest snapshot seen."""

    seq: int
    mask: np.ndarray  # bool per base drawer id: its base postings no longer count
    masked_in_base: int = 0  # masked drawers that have a base row
    rows: dict[int, tuple[dict[str, float], int]] = field(default_factory=dict)
    post: dict[str, dict[int, float]] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)  # D of each overlay row
    changed: set[int] = field(default_factory=set)  # every drawer changed since the build

    def apply(self, conn: apsw.Connection, base: Base) -> int:
        """Read the log past ``seq`` in this snapshot; returns how many drawers changed."""
        ids, newest = changed_since(conn, self.seq)
        if not ids:
            return 0
        self.changed.update(ids)
        for did in ids:
            old = self.rows.pop(did, None)
            self.lengths.pop(did, None)
            if old is not None:
                for t in old[0]:
                    bucket = self.post.get(t)
                    if bucket is not None:
                        bucket.pop(did, None)
                        if not bucket:
                            del self.post[t]
            if did < base.span and not self.mask[did]:
                self.mask[did] = True
                self.masked_in_base += int(base.dl[did] > 0)
        for did, text, context, dates in rows_of(conn, ids):
            freq, n = row_freqs(text, context, dates)
            self.rows[did] = (freq, n)
            self.lengths[did] = n
            for t, f in freq.items():
                self.post.setdefault(t, {})[did] = f
        self.seq = newest
        return len(ids)


class KeywordEngine:
    """A base plus its overlay: what one search uses (thread-safe)."""

    def __init__(self, base: Base) -> None:
        self.base = base
        self.overlay = Overlay(base.seq, np.zeros(base.span, dtype=bool))
        self._lock = threading.Lock()
        # Set by a search that found the base damaged; the owner drops the engine at its next
        # use (``KeywordState.engine_for``) and rebuilds.
        self.damaged: Exception | None = None

    @property
    def changed(self) -> int:
        """Drawers whose rows changed since the build (the overlay's size)."""
        return len(self.overlay.changed)

    def refresh(self, conn: apsw.Connection) -> None:
        """Catch up with the log in this snapshot."""
        with self._lock:
            self.overlay.apply(conn, self.base)

    def search(self, conn: apsw.Connection, words: Sequence[str], k: int, *,
               exhaustive: bool = False) -> list[tuple[int, float]] | None:
        """The best ``k`` ``(drawer_id, score)`` for the query words, best first, as FTS5's
        bm25 would score them in this snapshot (higher = better); None when the query is one
        the engine does not serve (a word of several tokens: FTS5 runs it as a phrase).

        Terms in more than half of the rows are left out (``TermStats.informative``: no
        BM25 weight) unless none is left or the palace is small. A damaged base (postings
        past the drawers: IndexError or ValueError) is recorded in ``damaged`` and the query
        left to FTS5 (None).
        """
        return self._guarded(conn, words, lambda toks: self._search(toks, k, exhaustive))

    def search_in(self, conn: apsw.Connection, words: Sequence[str], ids: Sequence[int],
                  k: int) -> list[tuple[int, float]] | None:
        """``search`` among the drawers ``ids`` alone (a narrowing's drawers): the best ``k``
        of them that hold a query term, each scored exactly as ``search`` scores it (the
        same term weights, over the whole palace). None as ``search``."""
        def run(toks: list[str]) -> list[tuple[int, float]]:
            terms, weights = self._terms(toks)
            if not terms or k <= 0 or not ids:
                return []
            return _top_in(self.base, self.overlay, np.unique(np.asarray(ids, np.int64)),
                           terms, weights, k)

        return self._guarded(conn, words, run)

    def _guarded(self, conn: apsw.Connection, words: Sequence[str],
                 run: Callable[[list[str]], list[tuple[int, float]]]
                 ) -> list[tuple[int, float]] | None:
        """``run(tokens)`` under the lock, the overlay caught up with this snapshot; None
        for a query the engine does not serve or a damaged base (recorded in ``damaged``)."""
        toks = query_tokens(words)
        if toks is None or self.damaged is not None:
            return None
        with self._lock:
            try:
                self.overlay.apply(conn, self.base)
                return run(toks)
            except (IndexError, ValueError) as exc:
                self.damaged = exc
                return None

    def _terms(self, toks: list[str]) -> tuple[list[_Term], list[float]]:
        """The query's terms as this snapshot counts them (df over base and overlay), those
        in more than half of the rows left out unless none is left, with their BM25 IDF."""
        base, ov = self.base, self.overlay
        n_rows = base.n_rows - ov.masked_in_base + len(ov.rows)
        terms = []
        for t in toks:
            docs, imps, maxi = base.postings(t)
            masked = int(np.count_nonzero(ov.mask[docs])) if ov.masked_in_base and len(docs) \
                else 0
            extra = ov.post.get(t, {})
            df = len(docs) - masked + len(extra)
            terms.append((t, docs, imps, maxi, df, extra))
        if n_rows >= TermStats.MIN_DOCS:
            kept = [x for x in terms if x[4] * 2 <= n_rows]
            terms = kept or terms
        terms = [x for x in terms if x[4] > 0]
        return terms, [idf(n_rows, x[4]) for x in terms]

    def _search(self, toks: list[str], k: int, exhaustive: bool) -> list[tuple[int, float]]:
        base, ov = self.base, self.overlay
        terms, weights = self._terms(toks)
        if not terms or k <= 0:
            return []
        found = _top_base(base, ov.mask, [(x[1], x[2], x[3], w) for x, w in
                                          zip(terms, weights, strict=True)], k, exhaustive)
        if ov.rows:
            found = sorted([*found, *_top_overlay(ov, [x[5] for x in terms], weights,
                                                  base.avgdl, k)], key=lambda kv: -kv[1])[:k]
        return found


# A query term as ``_terms`` reads it: (token, docs, impacts, max impact, df, overlay freqs).
_Term = tuple[str, np.ndarray, np.ndarray, float, int, dict[int, float]]


def _top_in(base: Base, ov: Overlay, ids: np.ndarray, terms: Sequence[_Term],
            weights: Sequence[float], k: int) -> list[tuple[int, float]]:
    """The best ``k`` of the drawers ``ids`` (sorted, unique) for ``terms``: base rows by
    their postings' impacts (float32, as ``_top_base`` adds them), overlay rows by their
    frequencies (as ``_top_overlay``); drawers that hold no term are left out."""
    in_base = ids[(ids < base.span)]
    in_base = in_base[~ov.mask[in_base]]
    acc = np.zeros(len(in_base), dtype=np.float32)
    hit_any = np.zeros(len(in_base), dtype=bool)
    for (_, docs, imps, _, _, _), w in zip(terms, weights, strict=True):
        if not len(docs) or not len(in_base):
            continue
        pos = np.searchsorted(docs, in_base)
        pos[pos >= len(docs)] = 0
        hit = docs[pos] == in_base
        acc[hit] += imps[pos[hit]] * np.float32(w)
        hit_any |= hit
    found = list(zip(in_base[hit_any].tolist(), acc[hit_any].tolist(), strict=True))
    rows = sorted(ov.rows.keys() & set(ids.tolist()))  # changed since the build
    if rows:
        buckets = [{d: x[5][d] for d in rows if d in x[5]} for x in terms]
        found += _top_overlay(ov, buckets, weights, base.avgdl, len(rows))
    found.sort(key=lambda kv: (-kv[1], kv[0]))  # ties: the older drawer first
    return [(int(d), float(sc)) for d, sc in found[:k]]


def _top_overlay(ov: Overlay, buckets: Sequence[dict[int, float]], weights: Sequence[float],
                 avgdl: float, k: int) -> list[tuple[int, float]]:
    """The best ``k`` overlay rows for the query terms' ``{drawer: freq}`` buckets (numpy:
    an overlay of thousands of rows costs a millisecond or two, not a Python loop each)."""
    docs_parts, score_parts = [], []
    length = ov.lengths
    for bucket, w in zip(buckets, weights, strict=True):
        if not bucket:
            continue
        docs = np.fromiter(bucket.keys(), dtype=np.int64, count=len(bucket))
        freq = np.fromiter(bucket.values(), dtype=np.float64, count=len(bucket))
        dl = np.fromiter(map(length.__getitem__, bucket), dtype=np.float64, count=len(bucket))
        docs_parts.append(docs)
        score_parts.append(w * freq * (K1 + 1) / (freq + K1 * (1 - B + B * dl / avgdl)))
    if not docs_parts:
        return []
    docs, inverse = np.unique(np.concatenate(docs_parts), return_inverse=True)
    scores = np.bincount(inverse, weights=np.concatenate(score_parts), minlength=len(docs))
    if len(docs) > k:
        top = np.argpartition(-scores, k - 1)[:k]
        docs, scores = docs[top], scores[top]
    return list(zip(docs.tolist(), scores.tolist(), strict=True))


def _top_base(base: Base, mask: np.ndarray,
              terms: Sequence[tuple[np.ndarray, np.ndarray, float, float]], k: int,
              exhaustive: bool) -> list[tuple[int, float]]:
    """MaxScore top-k over the base postings ``(docs, impacts, max impact, idf)``; masked
    drawers are left out. ``exhaustive`` scores every posting (the reference for tests)."""
    order = sorted(range(len(terms)), key=lambda i: -terms[i][2] * terms[i][3])
    terms = [terms[i] for i in order]
    bounds = [maxi * w for _, _, maxi, w in terms]
    rest = [sum(bounds[i:]) for i in range(len(terms))] + [0.0]
    acc = np.zeros(base.span, dtype=np.float32)
    seen = mask.copy()  # masked drawers never become candidates
    found: list[np.ndarray] = []
    n_found = 0
    scored = 0.0  # the bounds of the terms scored so far: no score is above it
    theta = -math.inf  # the k-th best score so far (a lower bound of the final k-th)
    done = len(terms)
    for i, (docs, imps, _, w) in enumerate(terms):
        if not exhaustive and rest[i] < theta:
            done = i
            break
        if not len(docs):
            continue
        acc[docs] += imps * np.float32(w)
        new = docs[~seen[docs]]
        seen[new] = True
        found.append(new)
        n_found += len(new)
        scored += bounds[i]
        # Stopping before the next term needs theta > rest[i + 1], and theta <= scored: the
        # partition (the costly part with long lists) waits until that can happen.
        if not exhaustive and n_found >= k and rest[i + 1] < scored:
            found = [np.concatenate(found)] if len(found) > 1 else found
            theta = float(np.partition(acc[found[0]], n_found - k)[n_found - k])
    if not found:
        return []
    cands = np.concatenate(found) if len(found) > 1 else found[0]
    vals = acc[cands]
    if done < len(terms):
        keep = vals + rest[done] >= theta
        cands, vals = cands[keep], vals[keep].copy()
        for docs, imps, _, w in terms[done:]:
            if not len(docs):
                continue
            pos = np.searchsorted(docs, cands)
            pos[pos >= len(docs)] = 0
            hit = docs[pos] == cands
            vals[hit] += imps[pos[hit]] * np.float32(w)
    if len(cands) > k:
        top = np.argpartition(-vals, k - 1)[:k]
        cands, vals = cands[top], vals[top]
    best = np.lexsort((cands, -vals))  # ties: the older drawer first
    return [(int(d), float(s)) for d, s in zip(cands[best].tolist(), vals[best].tolist(),
                                               strict=True)]



def exhaustive_scores(engine: KeywordEngine, words: Iterable[str], k: int
                      ) -> list[tuple[int, float]]:
    """Every posting scored (no MaxScore): the reference the tests compare with."""
    toks = query_tokens(list(words)) or []
    with engine._lock:
        return engine._search(toks, k, True)

