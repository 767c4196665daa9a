"""Synchronous concepts: the curated entries of a memoir, their refinement and search.

A concept has a name (unique in its memoir, case-insensitively), a definition, labels
(``namespace:value``; see ``clean_label``), a confidence in 0..1, a revision counter and the
drawers it was learnt from (``concept_sources``). ``add_concept`` creates one (an identical
re-add returns it unchanged; another definition under the same name is CONCEPT_EXISTS);
``refine_concept`` replaces the definition and adds labels and sources. A refinement that
changes anything bumps the revision and raises the confidence by REFINE_CONFIDENCE_STEP (capped
at 1); one that changes nothing is a no-op, so resending it is safe.

Memoirs live in ``memoirs``, links in ``concept_links``; the tables in ``schema`` (v5). Every
function takes an open ``apsw.Connection``; writers expect the caller's transaction.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

import apsw

from palaced.store.knowledge.graph_walk import _name_tokens
from palaced.store.knowledge.memoirs import (
    check_count,
    clean_name,
    clean_text,
    memoir_id,
    name_key,
    query,
)
from palaced.store.lookup.search import STOPWORDS, fts_match, fts_terms
from palaced.text.relevance import coverage
from palaced.wire.errors import (
    ConceptExists,
    ConceptNotFound,
    InvalidArgs,
    InvalidContent,
    MemoryNotFound,
    quote,
)
from palaced.wire.vocab import (
    DEFAULT_CONCEPT_CONFIDENCE,
    DEFAULT_LABEL_NAMESPACE,
    LABEL_NAMESPACE,
    MAX_CONCEPT_LABELS,
    MAX_DEFINITION_CHARS,
    MAX_LABEL_CHARS,
    MAX_LIMIT,
    MAX_SOURCES,
    REFINE_CONFIDENCE_STEP,
)

# L2: a concept the query does not name still shows when its name, definition and labels
# hold at least this share of the query's searchable words.
MATCH_COVERAGE = 0.5
_CANDIDATES = 10  # full-text candidates that recall's concept matching looks at

_CONCEPT_SELECT = (
    "SELECT c.id, m.name, c.name, c.definition, c.labels, c.confidence, c.revision, "
    "c.created_ms, c.updated_ms, (SELECT json_group_array(s.drawer_id) FROM concept_sources s "
    "WHERE s.concept_id = c.id), m.consolidation_threshold "
)
_FROM = "FROM concepts c JOIN memoirs m ON m.id = c.memoir_id "


def concept_dict(row: Sequence[Any]) -> dict[str, Any]:
    """A concept row (``_CONCEPT_SELECT`` columns) as the wire dict."""
    sources = sorted(json.loads(row[9]) if row[9] else [])
    return {
        "id": int(row[0]),
        "memoir": row[1],
        "name": row[2],
        "definition": row[3],
        "labels": json.loads(row[4]),
        "confidence": float(row[5]),
        "revision": int(row[6]),
        "sources": sources,
        "consolidate": len(sources) >= int(row[10]),
        "created_ms": row[7],
        "updated_ms": row[8],
    }


# -- checks -----------------------------------------------------------------------------------
def clean_label(value: Any) -> str:
    """A label as ``namespace:value``: the namespace lower-case (letters, digits, ``_.-``, at
    most 32 characters), the value trimmed with single spaces; a label without a colon gets
    the namespace ``tag`` (``urgent`` -> ``tag:urgent``).

    Raises:
        InvalidContent: not a string, an empty side, a bad namespace, control characters or
            more than MAX_LABEL_CHARS characters.
    """
    if not isinstance(value, str):
        raise InvalidContent(f"a label must be a string, not {type(value).__name__}")
    text = unicodedata.normalize("NFKC", value).strip()
    ns, colon, val = text.partition(":")
    ns, val = (ns.strip().lower(), " ".join(val.split())) if colon else (
        DEFAULT_LABEL_NAMESPACE, " ".join(text.split()))
    label = f"{ns}:{val}"
    if (not val or not LABEL_NAMESPACE.fullmatch(ns) or len(label) > MAX_LABEL_CHARS
            or any(unicodedata.category(ch) == "Cc" for ch in label)):
        raise InvalidContent(
            f"invalid label {quote(value, 80)}: write namespace:value, e.g. domain:auth (the "
            "namespace 1-32 letters, digits, '_', '.' or '-'; at most "
            f"{MAX_LABEL_CHARS} characters)", details={"label": quote(value, 80)})
    return label


def clean_labels(labels: Iterable[Any]) -> list[str]:
    """Labels checked by ``clean_label``, duplicates (case aside) dropped, order kept.

    Raises:
        InvalidContent: a bad label, or more than MAX_CONCEPT_LABELS.
    """
    out: dict[str, str] = {}
    for lab in labels:
        clean = clean_label(lab)
        out.setdefault(clean.casefold(), clean)
    if len(out) > MAX_CONCEPT_LABELS:
        raise InvalidContent(f"a concept has at most {MAX_CONCEPT_LABELS} labels",
                             details={"labels": len(out)})
    return list(out.values())


def check_confidence(value: Any) -> float:
    """Raises InvalidArgs unless ``value`` is a number in 0..1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidArgs("confidence must be a number in 0..1", details={"confidence": value})
    return float(value)


def check_sources(conn: apsw.Connection, sources: Iterable[Any]) -> list[int]:
    """The distinct drawer ids of ``sources``, each an existing drawer, ascending.

    Raises:
        InvalidArgs: more than MAX_SOURCES, or an id that is not a positive integer.
        MemoryNotFound: ids that name no drawer (listed in ``details["missing"]``).
    """
    ids = sorted({check_count(s, "a source drawer id", 1, 2**63 - 1) for s in sources})
    if len(ids) > MAX_SOURCES:
        raise InvalidArgs(f"at most {MAX_SOURCES} source drawers", details={"sources": len(ids)})
    found = {int(r[0]) for r in query(
        conn, "SELECT id FROM drawers WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(ids),))}
    missing = [i for i in ids if i not in found]
    if missing:
        raise MemoryNotFound(f"no drawer with id {', '.join(map(str, missing[:10]))} to cite "
                             "as a source", details={"missing": missing})
    return ids


# -- reads ------------------------------------------------------------------------------------
def concept_by_id(conn: apsw.Connection, cid: int) -> dict[str, Any]:
    """The concept with row id ``cid`` (which must exist)."""
    return concept_dict(query(conn, _CONCEPT_SELECT + _FROM + "WHERE c.id = ?", (cid,))[0])


def concept_id(conn: apsw.Connection, mid: int, name: str) -> int:
    """The row id of concept ``name`` in memoir ``mid``.

    Raises:
        InvalidContent: an invalid name.
        ConceptNotFound: no such concept in that memoir.
    """
    clean = clean_name(name, "a concept name")
    rows = query(conn, "SELECT id FROM concepts WHERE memoir_id = ? AND name_key = ?",
                 (mid, name_key(clean)))
    if not rows:
        memoir = query(conn, "SELECT name FROM memoirs WHERE id = ?", (mid,))[0][0]
        raise ConceptNotFound(f"no concept {quote(clean, 80)} in memoir {quote(memoir, 80)}",
                              details={"memoir": memoir, "concept": clean})
    return int(rows[0][0])


def get_concept(conn: apsw.Connection, memoir: str, name: str) -> dict[str, Any]:
    """Concept ``name`` of ``memoir``.

    Raises:
        InvalidContent: invalid names.
        MemoirNotFound, ConceptNotFound: no such memoir or concept.
    """
    return concept_by_id(conn, concept_id(conn, memoir_id(conn, memoir), name))


def list_concepts(conn: apsw.Connection, mid: int, limit: int = 100, offset: int = 0
                  ) -> list[dict[str, Any]]:
    """A page of memoir ``mid``'s concepts by name."""
    rows = query(conn, _CONCEPT_SELECT + _FROM + "WHERE c.memoir_id = ? ORDER BY c.name_key "
                 "LIMIT ? OFFSET ?", (mid, limit, offset))
    return [concept_dict(r) for r in rows]


# -- writes -----------------------------------------------------------------------------------
def _add_sources(conn: apsw.Connection, cid: int, ids: Sequence[int]) -> None:
    query(conn, "INSERT OR IGNORE INTO concept_sources(concept_id, drawer_id) "
          "SELECT ?, value FROM json_each(?)", (cid, json.dumps(list(ids))))


def add_concept(conn: apsw.Connection, memoir: str, name: str, definition: str, *,
                labels: Iterable[Any] = (), confidence: float = DEFAULT_CONCEPT_CONFIDENCE,
                sources: Iterable[Any] = (), now_ms: int) -> dict[str, Any]:
    """Add concept ``name`` to ``memoir``; returns it with ``created``.

    The same name with the same definition returns the stored concept unchanged
    (``created: false``): to change a concept, refine it.

    Raises:
        InvalidContent: an invalid name, definition or label; InvalidArgs: a bad confidence.
        MemoirNotFound: no such memoir; MemoryNotFound: a source names no drawer.
        ConceptExists: the memoir has that concept with another definition.
    """
    mid = memoir_id(conn, memoir)
    clean = clean_name(name, "a concept name")
    text = clean_text(definition, "a definition", MAX_DEFINITION_CHARS)
    labs = clean_labels(labels)
    conf = check_confidence(confidence)
    ids = check_sources(conn, sources)
    rows = query(conn, "SELECT id, definition, name FROM concepts WHERE memoir_id = ? AND "
                 "name_key = ?", (mid, name_key(clean)))
    if rows:
        if rows[0][1] == text:
            return {**concept_by_id(conn, int(rows[0][0])), "created": False}
        raise ConceptExists(f"memoir {quote(memoir, 80)} already has the concept "
                            f"{quote(rows[0][2], 80)} with another definition; refine it "
                            "to change it", details={"concept": rows[0][2]})
    cid = int(query(
        conn,
        "INSERT INTO concepts(memoir_id, name, name_key, definition, labels, confidence, "
        "created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (mid, clean, name_key(clean), text, json.dumps(labs, ensure_ascii=False), conf,
         now_ms, now_ms))[0][0])
    _add_sources(conn, cid, ids)
    return {**concept_by_id(conn, cid), "created": True}


def refine_concept(conn: apsw.Connection, memoir: str, name: str, definition: str, *,
                   labels: Iterable[Any] = (), sources: Iterable[Any] = (), now_ms: int
                   ) -> dict[str, Any]:
    """Give concept ``name`` a new definition and add labels and sources; returns it with
    ``changed``.

    A change (another definition, a new label or a new source) bumps ``revision`` by one and
    raises ``confidence`` by REFINE_CONFIDENCE_STEP, capped at 1. Nothing new: the concept is
    returned unchanged (``changed: false``).

    Raises:
        InvalidContent: an invalid name, definition or label, or too many labels.
        MemoirNotFound, ConceptNotFound: no such memoir or concept.
        MemoryNotFound: a source names no drawer.
    """
    cid = concept_id(conn, memoir_id(conn, memoir), name)
    current = concept_by_id(conn, cid)
    text = clean_text(definition, "a definition", MAX_DEFINITION_CHARS)
    labs = clean_labels([*current["labels"], *labels])
    ids = [i for i in check_sources(conn, sources) if i not in set(current["sources"])]
    if text == current["definition"] and len(labs) == len(current["labels"]) and not ids:
        return {**current, "changed": False}
    query(conn, "UPDATE concepts SET definition = ?, labels = ?, revision = revision + 1, "
          "confidence = round(min(1.0, confidence + ?), 6), updated_ms = ? WHERE id = ?",
          (text, json.dumps(labs, ensure_ascii=False), REFINE_CONFIDENCE_STEP, now_ms, cid))
    _add_sources(conn, cid, ids)
    return {**concept_by_id(conn, cid), "changed": True}


# -- search -----------------------------------------------------------------------------------
def rename_concept(conn: apsw.Connection, memoir: str, name: str, new_name: str, *,
                   now_ms: int) -> dict[str, Any]:
    """Rename concept ``name`` of ``memoir`` (its links, labels and sources stay); returns it
    with ``changed`` (False: it has that name already, spelled the same).

    Raises:
        InvalidContent: invalid names.
        MemoirNotFound, ConceptNotFound: no such memoir or concept.
        ConceptExists: another concept of the memoir has the new name.
    """
    mid = memoir_id(conn, memoir)
    cid = concept_id(conn, mid, name)
    clean = clean_name(new_name, "a concept name")
    current = concept_by_id(conn, cid)
    if current["name"] == clean:
        return {**current, "changed": False}
    other = query(conn, "SELECT id FROM concepts WHERE memoir_id = ? AND name_key = ? "
                  "AND id != ?", (mid, name_key(clean), cid))
    if other:
        raise ConceptExists(f"memoir {quote(current['memoir'], 80)} has a concept "
                            f"{quote(clean, 80)} already", details={"concept": clean})
    query(conn, "UPDATE concepts SET name = ?, name_key = ?, updated_ms = ? WHERE id = ?",
          (clean, name_key(clean), now_ms, cid))
    return {**concept_by_id(conn, cid), "changed": True}


def delete_concept(conn: apsw.Connection, memoir: str, name: str) -> dict[str, Any]:
    """Delete concept ``name`` of ``memoir`` with its labels, sources and links (one
    statement): ``{"concept", "links"}``, the concept as it was and how many links went.

    Raises:
        InvalidContent: invalid names.
        MemoirNotFound, ConceptNotFound: no such memoir or concept.
    """
    cid = concept_id(conn, memoir_id(conn, memoir), name)
    found = concept_by_id(conn, cid)
    links = int(query(conn, "SELECT count(*) FROM concept_links WHERE source_id = ? OR "
                      "target_id = ?", (cid, cid))[0][0])
    query(conn, "DELETE FROM concepts WHERE id = ?", (cid,))
    return {"concept": found, "links": links}


def search_concepts(conn: apsw.Connection, *, text: str | None = None,
                    label: str | None = None, memoir: str | None = None, limit: int = 20
                    ) -> list[dict[str, Any]]:
    """Concepts matching ``text`` (full-text over names, definitions and labels, best first;
    an exact name first, words match the words they begin) and/or carrying ``label``, in
    ``memoir`` or across every memoir. Each gains a ``score`` (higher is better; label-only
    searches order by confidence).

    Raises:
        InvalidArgs: neither words nor a label given, or ``limit`` outside 1..MAX_LIMIT.
        InvalidContent: an invalid label or memoir name; MemoirNotFound: no such memoir.
    """
    check_count(limit, "limit", 1, MAX_LIMIT)
    words = fts_terms(text or "")
    if not words and label is None:
        raise InvalidArgs("a concept search needs words to look for or a label",
                          details={"query": text, "label": label})
    params: dict[str, Any] = {
        "mid": None if memoir is None else memoir_id(conn, memoir),
        "label": None if label is None else clean_label(label),
        "limit": limit, "key": name_key(" ".join((text or "").split())),
    }
    where = ("(:mid IS NULL OR c.memoir_id = :mid) AND (:label IS NULL OR c.id IN "
             "(SELECT concept_id FROM concept_labels WHERE label = :label)) ")
    if words:
        params["match"] = fts_match(words, prefix=True)
        rows = query(conn, _CONCEPT_SELECT + ", -bm25(concepts_fts, 10.0, 1.0, 3.0) AS score "
                     "FROM concepts_fts JOIN concepts c ON c.id = concepts_fts.rowid "
                     "JOIN memoirs m ON m.id = c.memoir_id WHERE concepts_fts MATCH :match "
                     f"AND {where}ORDER BY c.name_key = :key DESC, score DESC, c.id "
                     "LIMIT :limit", params)
    else:
        rows = query(conn, _CONCEPT_SELECT + ", c.confidence AS score " + _FROM + "WHERE "
                     f"{where}ORDER BY c.confidence DESC, c.name_key, c.id LIMIT :limit",
                     params)
    return [{**concept_dict(r), "score": round(float(r[11]), 6)} for r in rows]


def concepts_matching(conn: apsw.Connection, query_text: str, limit: int = 3
                      ) -> list[dict[str, Any]]:
    """Concepts a recall query points at, for its L2: the ones it names first (every word of
    the name, stopwords aside, among the query's words), then those whose name, definition
    and labels hold at least MATCH_COVERAGE of its searchable words (and two of them, when it
    has two or more); ties by confidence. Each dict gains ``named``.
    """
    terms = fts_terms(query_text)
    words = {w for t in terms for w in _name_tokens(t)}
    match = fts_match(sorted(words))
    if match is None:
        return []
    # Names are looked up on their own: a named concept may rank low on the definitions'
    # words. Only the columns the tests need are read; the full dicts for the winners alone.
    named = {int(cid) for cid, name in query(
        conn, "SELECT rowid, name FROM concepts_fts WHERE concepts_fts MATCH ? LIMIT ?",
        ("name : (" + match + ")", MAX_LIMIT))
        if (tokens := set(_name_tokens(name))) and ((tokens - STOPWORDS) or tokens) <= words}
    cols = "SELECT c.id, c.name, c.definition, c.labels, c.confidence "
    rows = {int(r[0]): r for r in query(
        conn, cols + "FROM concepts_fts JOIN concepts c ON c.id = concepts_fts.rowid WHERE "
        "concepts_fts MATCH ? ORDER BY rank LIMIT ?", (match, _CANDIDATES))}
    rows.update((int(r[0]), r) for r in query(
        conn, cols + "FROM concepts c WHERE c.id IN (SELECT value FROM json_each(?))",
        (json.dumps(sorted(named - set(rows))),)))
    needed = min(2, len(terms))
    scored: list[tuple[tuple[bool, float, float], int]] = []
    for cid, (_, name, definition, labels, confidence) in rows.items():
        share = 1.0 if cid in named else coverage(
            f"{name} {definition} {labels.replace(':', ' ')}", terms)
        if cid in named or (share >= MATCH_COVERAGE and round(share * len(terms)) >= needed):
            scored.append(((cid in named, share, float(confidence)), cid))
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [{**concept_by_id(conn, cid), "named": key[0]} for key, cid in scored[:limit]]
