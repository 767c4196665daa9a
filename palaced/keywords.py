"""The keyword engine: BM25 top-k over a palace's full-text rows, a rebuildable cache.

SQLite's ``drawers_fts`` stays the truth; this is a cache of it, like the vector index. FTS5's
bm25() scores every posting of every query term and cannot stop early: at 1M drawers a
query costs ~44/118 ms p50/p95 (docs/benchmarks.md). The engine keeps, per term (FTS5's own
tokens: the ``porter unicode61 remove_diacritics 2`` tokenizer through apsw), the drawer ids
sorted ascending and each posting's precomputed *impact*, the term-frequency part of FTS5's
bm25 (fts5_aux.c)::

    freq   = sum over columns of BM25_WEIGHTS[col] * hits in col    (text, context, dates)
    impact = freq * (k1 + 1) / (freq + k1 * (1 - b + b * D / avgdl))   k1 = 1.2, b = 0.75

with D the row's tokens over all columns and avgdl fixed at build time, so a drawer's score
is ``sum over query terms of idf(t) * impact``, idf as FTS5's (log((N - n + 0.5) / (n + 0.5)),
1e-6 when <= 0). Right after a build the scores are FTS5's to float32 precision.

Top-k is MaxScore (``Base.top``): terms in descending upper bound (idf * max impact); whole
lists are scatter-added into a dense accumulator until the remaining terms' bounds together
fall below the current k-th best score; then only the surviving candidates are completed, by
binary search into the remaining lists. Exact for the engine's scores.

Freshness: every ``drawers_fts`` write logs the drawer in ``fts_changes`` (store/fts_log.py).
A search first reads, in its own snapshot, the log past what the engine has applied,
re-reads those drawers' rows (a missing row: deleted) into an in-memory ``Overlay`` and masks
their postings in the base. When the overlay holds a share of the base, the owner
(``KeywordState``) rebuilds in a background thread and swaps. The file is written atomically
(temp file, fsync, rename); ``meta.keywords_build`` names the build the database's log was
pruned for, so a file from another database or a crash mid-save is rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import mmap
import os
import secrets
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import numpy as np

from palaced.store import Store
from palaced.store.fts_log import changed_since, last_seq, prune
from palaced.store.meta import meta_get, meta_set
from palaced.store.search import BM25_WEIGHTS, TermStats

log = logging.getLogger("palaced.keywords")

K1, B = 1.2, 0.75
MAGIC = b"PALKW001"
BUILD_KEY = "keywords_build"
BATCH_ROWS = 20_000  # rows tokenised per numpy pass while building (bounded memory)
# The overlay (drawers changed since the build) that makes a rebuild due: this share of the
# base, at least REBUILD_MIN and at most REBUILD_MAX drawers: each search scores the overlay
# rows holding its terms (bench/bm25_scale.py --overlay 5000, 100k drawers: p50/p95 2.0/3.3
# ms CPU right after the build, 3.8/5.2 ms after 5,000 remembers, 5,400 rows changed).
REBUILD_SHARE = 0.05
REBUILD_MIN = 2_000
REBUILD_MAX = 20_000
_ALIGN = 64
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
    """A stable 64-bit key of a term (the file's term dictionary is sorted keys)."""
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


class Unusable(Exception):
    """The engine file cannot serve (the message says why): rebuild."""


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


# -- building ---------------------------------------------------------------------------------
class Stopped(Exception):
    """A build was stopped (its palace is closing)."""


def build(conn: apsw.Connection, stop: threading.Event | None = None) -> Base:
    """Build the engine from every ``drawers_fts`` row of this snapshot (a read transaction).

    Raises:
        Stopped: ``stop`` was set meanwhile.
    """
    seq = last_seq(conn)
    vocab: dict[str, int] = {}
    tid_of = vocab.setdefault
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    doc_ids: list[int] = []
    doc_lens: list[int] = []
    tids, cols = array("i"), array("b")
    rows_in_batch: list[int] = []
    lens_in_batch: list[int] = []

    def flush() -> None:
        if not rows_in_batch:
            return
        t = np.frombuffer(tids, dtype=np.int32).astype(np.int64)
        w = np.asarray(BM25_WEIGHTS, dtype=np.float64)[np.frombuffer(cols, dtype=np.int8)]
        d = np.repeat(np.asarray(rows_in_batch, dtype=np.int64),
                      np.asarray(lens_in_batch, dtype=np.int64))
        key = (t << 32) | d
        order = np.argsort(key, kind="stable")
        key, w = key[order], w[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        freq = np.add.reduceat(w, first) if len(first) else np.zeros(0)
        k = key[first]
        parts.append(((k >> 32).astype(np.int32), (k & 0xFFFFFFFF).astype(np.uint32),
                      freq.astype(np.float32)))
        del tids[:], cols[:]
        rows_in_batch.clear()
        lens_in_batch.clear()

    for rowid, text, context, dates in conn.execute(
            "SELECT rowid, text, context, dates FROM drawers_fts"):
        n = 0
        for c, col in enumerate((text, context, dates)):
            toks = tokens(str(col or ""))
            if toks:
                tids.extend([tid_of(x, len(vocab)) for x in toks])
                cols.extend(bytes([c]) * len(toks))
                n += len(toks)
        rows_in_batch.append(int(rowid))
        lens_in_batch.append(n)
        doc_ids.append(int(rowid))
        doc_lens.append(n)
        if len(rows_in_batch) >= BATCH_ROWS:
            if stop is not None and stop.is_set():
                raise Stopped
            flush()
    flush()
    n_rows = len(doc_ids)
    span = (max(doc_ids) + 1) if doc_ids else 1
    dl = np.zeros(span, dtype=np.uint32)
    if doc_ids:
        dl[np.asarray(doc_ids, dtype=np.int64)] = np.asarray(doc_lens, dtype=np.uint32)
    total = int(sum(doc_lens))
    avgdl = total / n_rows if n_rows else 1.0
    if parts:
        tid = np.concatenate([p[0] for p in parts])
        docs = np.concatenate([p[1] for p in parts])
        freq = np.concatenate([p[2] for p in parts])
        parts.clear()
        # Each batch is sorted by (term, drawer) and the batches by drawer: a stable sort by
        # term (timsort merges the runs) gives every term's drawers in ascending order.
        order = np.argsort(tid, kind="stable")
        tid, docs, freq = tid[order], docs[order], freq[order]
        del order
    else:
        tid = np.zeros(0, dtype=np.int32)
        docs = np.zeros(0, dtype=np.uint32)
        freq = np.zeros(0, dtype=np.float32)
    norm = (K1 * (1 - B + B * dl.astype(np.float64)[docs] / max(avgdl, 1e-9)))
    f64 = freq.astype(np.float64)
    imps = (f64 * (K1 + 1) / (f64 + norm)).astype(np.float32)
    del norm, f64, freq
    n_terms = len(vocab)
    count = np.bincount(tid, minlength=n_terms).astype(np.int64)
    start = np.zeros(n_terms, dtype=np.int64)
    if n_terms:
        start[1:] = np.cumsum(count)[:-1]
    maxi = (np.maximum.reduceat(imps, start) if len(imps) else np.zeros(n_terms)
            ).astype(np.float32)
    keys = np.fromiter((term_key(t) for t in vocab), dtype=np.uint64, count=n_terms)
    perm = np.argsort(keys, kind="stable")
    return Base(keys=keys[perm], start=start[perm], count=count[perm], maxi=maxi[perm],
                docs=docs, imps=imps, dl=dl, n_rows=n_rows, avgdl=float(avgdl), seq=seq,
                build_id=secrets.token_hex(8))


# -- the file ---------------------------------------------------------------------------------
_ARRAYS = ("keys", "start", "count", "maxi", "docs", "imps", "dl")


def save(base: Base, path: Path) -> int:
    """Write ``base`` to ``path`` atomically (temp file, fsync, rename, directory fsync);
    returns the file's size. Raises OSError."""
    arrays = {name: np.ascontiguousarray(getattr(base, name)) for name in _ARRAYS}
    layout: dict[str, list[Any]] = {}
    offset = 0
    for name, arr in arrays.items():
        layout[name] = [offset, arr.dtype.str, int(arr.shape[0])]
        offset += -(-arr.nbytes // _ALIGN) * _ALIGN
    header = json.dumps({"layout": layout, "n_rows": base.n_rows, "avgdl": base.avgdl,
                         "seq": base.seq, "build_id": base.build_id, "data": offset}).encode()
    head_len = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(header).to_bytes(8, "little") + header)
            f.write(b"\0" * (head_len - len(MAGIC) - 8 - len(header)))
            for arr in arrays.values():
                f.write(arr.tobytes())
                f.write(b"\0" * (-arr.nbytes % _ALIGN))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return head_len + offset


def load(path: Path) -> Base:
    """The base saved in ``path``, its arrays memory-mapped (pages read on first use).

    Raises:
        Unusable: missing, truncated or malformed.
    """
    try:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise Unusable(f"cannot read {path.name}: {exc}") from exc
    try:
        if data[:len(MAGIC)] != MAGIC:
            raise Unusable(f"{path.name} is not a keyword engine file")
        hlen = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
        header = json.loads(bytes(data[len(MAGIC) + 8:len(MAGIC) + 8 + hlen]))
        head_len = -(-(len(MAGIC) + 8 + hlen) // _ALIGN) * _ALIGN
        if len(data) != head_len + int(header["data"]):
            raise Unusable(f"{path.name} is truncated or padded ({len(data)} bytes)")
        arrays = {}
        for name in _ARRAYS:
            off, dtype, n = header["layout"][name]
            arrays[name] = np.frombuffer(data, dtype=np.dtype(dtype), count=int(n),
                                         offset=head_len + int(off))
        base = Base(**arrays, n_rows=int(header["n_rows"]), avgdl=float(header["avgdl"]),
                    seq=int(header["seq"]), build_id=str(header["build_id"]))
    except Unusable:
        raise
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise Unusable(f"{path.name} is malformed: {exc}") from exc
    n_keys = len(base.keys)
    if not (len(base.start) == len(base.count) == len(base.maxi) == n_keys
            and len(base.docs) == len(base.imps)
            and (n_keys == 0 or int(base.start[-1] + base.count[-1]) <= len(base.docs))):
        raise Unusable(f"{path.name} is inconsistent")
    return base


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

    def apply(self, conn: apsw.Connection, base: Base) -> int:
        """Read the log past ``seq`` in this snapshot; returns how many drawers changed."""
        ids, newest = changed_since(conn, self.seq)
        if not ids:
            return 0
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
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            marks = ",".join(str(int(x)) for x in chunk)
            for rowid, text, context, dates in conn.execute(
                    "SELECT rowid, text, context, dates FROM drawers_fts "
                    f"WHERE rowid IN ({marks})"):
                freq, n = row_freqs(str(text or ""), str(context or ""), str(dates or ""))
                did = int(rowid)
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

    @property
    def changed(self) -> int:
        """Drawers whose rows changed since the build (the overlay's size)."""
        return int(np.count_nonzero(self.overlay.mask)) + sum(
            1 for d in self.overlay.rows if d >= self.base.span)

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
        BM25 weight) unless none is left or the palace is small. Raises IndexError or
        ValueError on a damaged base (the caller falls back and rebuilds).
        """
        toks = query_tokens(words)
        if toks is None:
            return None
        with self._lock:
            self.overlay.apply(conn, self.base)
            return self._search(toks, k, exhaustive)

    def _search(self, toks: list[str], k: int, exhaustive: bool) -> list[tuple[int, float]]:
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
        if not terms or k <= 0:
            return []
        weights = [idf(n_rows, x[4]) for x in terms]
        found = _top_base(base, ov.mask, [(x[1], x[2], x[3], w) for x, w in
                                          zip(terms, weights, strict=True)], k, exhaustive)
        if ov.rows:
            found = sorted([*found, *_top_overlay(ov, [x[5] for x in terms], weights,
                                                  base.avgdl, k)], key=lambda kv: -kv[1])[:k]
        return found


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
    seen = np.zeros(base.span, dtype=bool)
    seen[mask] = True  # masked drawers never become candidates
    found: list[np.ndarray] = []
    theta = -math.inf
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
        cands = np.concatenate(found) if len(found) > 1 else found[0]
        if len(found) > 1:
            found = [cands]
        if len(cands) >= k and not exhaustive:
            theta = float(np.partition(acc[cands], len(cands) - k)[len(cands) - k])
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


# -- the owner --------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeywordsLoad:
    """How the engine came to be: ``loaded`` or ``built`` (with the time it took)."""

    how: str
    seconds: float
    reason: str | None = None


def rebuild_at(n_rows: int) -> float:
    """How many changed rows since the build make a rebuild due."""
    return min(REBUILD_MAX, max(REBUILD_MIN, REBUILD_SHARE * n_rows))


class KeywordState:
    """One palace's keyword engine: loads or builds it off the event loop, keeps it fresh,
    rebuilds it in the background when its overlay grows, and says when it can serve.

    ``engine`` is None until a build or load finished; searches then use FTS5 (``usable``).
    The log is pruned by ``prune_sync`` under the palace's write lock (checkpoint).
    """

    def __init__(self, store: Store, path: Path, min_drawers: int) -> None:
        self.store = store
        self.path = path
        self.min_drawers = min_drawers
        self.engine: KeywordEngine | None = None
        self.building = False
        self.last: KeywordsLoad | None = None
        self.error: str | None = None
        self.file_bytes = 0
        self._prune_upto: tuple[int, str] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._tried_load = False
        self._stop = threading.Event()

    def engine_for(self, n_docs: int) -> KeywordEngine | None:
        """The engine if it should serve a palace of ``n_docs`` drawers and is ready; else
        None (a build or load is started in the background when it should serve)."""
        if n_docs < self.min_drawers:
            return None
        engine = self.engine
        if engine is None or engine.changed > rebuild_at(engine.base.n_rows):
            self.start()
        return engine

    def start(self, *, rebuild: bool = False) -> None:
        """Load (or with ``rebuild``, build) the engine in a background thread, once."""
        with self._lock:
            if self.building or self._stop.is_set():
                return
            self.building = True
            load_first = not rebuild and not self._tried_load and self.engine is None
            self._tried_load = True
            self._thread = threading.Thread(target=self._run, args=(load_first,),
                                            name="keywords-build", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop a running build and wait for its thread (the palace is closing)."""
        self._stop.set()
        self.wait()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a running load or build (tests, close)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self, load_first: bool) -> None:
        started = time.perf_counter()
        try:
            if load_first:
                try:
                    base = load(self.path)
                    built = self.store.read(lambda c: meta_get(c, BUILD_KEY))
                    if built != base.build_id:
                        raise Unusable("the file is not the database's last build")
                    self.engine = self._caught_up(KeywordEngine(base))
                    self.file_bytes = os.path.getsize(self.path)
                    self.last = KeywordsLoad("loaded", time.perf_counter() - started)
                    return
                except Unusable as exc:
                    reason: str | None = str(exc)
            else:
                reason = "rebuild"
            try:
                base = self._build_in_child()
                saved = True
                self.file_bytes = os.path.getsize(self.path)
            except (OSError, RuntimeError, Unusable) as exc:
                log.warning("keyword engine: the build process failed (%s); building here",
                            exc)
                base = self.store.read(lambda c: build(c, self._stop))
                saved = False
                try:
                    self.file_bytes = save(base, self.path)
                    saved = True
                except OSError as err:  # only a cache: serve from memory
                    log.warning("cannot save the keyword engine %s: %s", self.path, err)
            self.engine = self._caught_up(KeywordEngine(base))
            if saved:
                # Only now: the engine this one replaces may still need the log rows the
                # prune drops.
                self._prune_upto = (base.seq, base.build_id)
            self.error = None
            self.last = KeywordsLoad("built", time.perf_counter() - started, reason)
            log.info("keyword engine built: %d rows, %.2fs (%s)", base.n_rows,
                     self.last.seconds, reason)
        except Stopped:
            log.info("keyword engine build stopped: the palace is closing")
        except Exception as exc:  # a cache: never fail the palace, report it in info
            log.exception("keyword engine build failed")
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self.building = False

    def _build_in_child(self) -> Base:
        """Build and save the engine in a child process (``python -m palaced.keywords``) and
        map its file: the build's Python loops and its peak memory (~4 KB per drawer) stay
        out of the daemon, whose requests would otherwise wait for the GIL for the whole
        build. Killed when the palace closes.

        Raises:
            RuntimeError: the child failed. OSError: it could not be started.
            Unusable: its file cannot be read. Stopped: the palace is closing.
        """
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "palaced.keywords", str(self.store.path), str(self.path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env)
        while True:
            try:
                _, err = proc.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if self._stop.is_set():
                    proc.kill()
                    proc.wait()
                    raise Stopped from None
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise RuntimeError(f"exit {proc.returncode}: {tail[0]}")
        return load(self.path)

    def _caught_up(self, engine: KeywordEngine) -> KeywordEngine:
        """``engine`` with the log since its build applied, here in the background rather
        than in the first search (after a kill -9 that may be thousands of rows)."""
        self.store.read(engine.refresh)
        return engine

    def broken(self, exc: Exception) -> None:
        """A search found the engine damaged: drop it and rebuild (FTS5 serves meanwhile)."""
        log.warning("keyword engine unusable (%s); rebuilding", exc)
        self.engine = None
        self.error = f"{type(exc).__name__}: {exc}"
        self.start(rebuild=True)

    @property
    def prune_due(self) -> bool:
        return self._prune_upto is not None

    def prune_sync(self) -> None:
        """Record the saved build and drop the log rows it holds (under the write lock)."""
        todo = self._prune_upto
        if todo is None:
            return
        seq, build_id = todo

        def tx(c: apsw.Connection) -> None:
            meta_set(c, BUILD_KEY, build_id)
            prune(c, seq)

        self.store.write(tx, stamp=False)
        self._prune_upto = None

    def state(self) -> dict[str, Any]:
        """What ``palace info`` shows."""
        engine = self.engine
        return {
            "state": "built" if engine is not None else "building" if self.building else "none",
            "building": self.building,
            "min_drawers": self.min_drawers,
            "covered": engine.base.n_rows if engine is not None else 0,
            "changed": engine.changed if engine is not None else 0,
            "file_bytes": self.file_bytes,
            # False until the next checkpoint records the build in the database (a restart
            # before that rebuilds rather than trust the file).
            "recorded": engine is not None and not self.prune_due,
            "load": None if self.last is None else {
                "how": self.last.how, "ms": round(self.last.seconds * 1000, 1),
                **({"reason": self.last.reason} if self.last.reason else {})},
            "error": self.error,
        }


def build_file(db: Path, out: Path) -> Base:
    """Build the engine of the palace database ``db`` (one read snapshot) and save it to
    ``out``: what the child process of ``KeywordState`` runs. Raises apsw.Error, OSError."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READWRITE)  # it only reads
    conn.set_busy_timeout(10_000)
    try:
        conn.execute("BEGIN")
        try:
            base = build(conn)
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()
    save(base, out)
    return base


def exhaustive_scores(engine: KeywordEngine, words: Iterable[str], k: int
                      ) -> list[tuple[int, float]]:
    """Every posting scored (no MaxScore): the reference the tests compare with."""
    toks = query_tokens(list(words)) or []
    with engine._lock:
        return engine._search(toks, k, True)


if __name__ == "__main__":  # python -m palaced.keywords DB OUT: KeywordState's build process
    build_file(Path(sys.argv[1]), Path(sys.argv[2]))
