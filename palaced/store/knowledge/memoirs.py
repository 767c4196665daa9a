"""Synchronous memoirs: the named containers of concepts inside a palace.

A memoir has a name (unique per palace, case- and spacing-insensitively), a description and a
consolidation threshold (a concept citing that many source drawers is flagged
``consolidate``). Its concepts live in ``concepts``, the typed links between them in
``concept_links``; the tables in ``schema`` (v5). Deleting a memoir deletes its concepts, their
labels, sources and links by ``ON DELETE CASCADE``, in the caller's transaction.

Every function takes an open ``apsw.Connection``. Writers expect the caller to have opened the
transaction (``Store.write``); nothing here begins or commits.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

import apsw

from palaced.wire.errors import InvalidArgs, InvalidContent, MemoirExists, MemoirNotFound, quote
from palaced.wire.vocab import (
    DEFAULT_CONSOLIDATION_THRESHOLD,
    MAX_CONSOLIDATION_THRESHOLD,
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
)


def query(conn: apsw.Connection, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """All rows of one statement (callers know the columns)."""
    return list(conn.execute(sql, params).fetchall())


# -- names and texts --------------------------------------------------------------------------
def clean_name(value: Any, what: str) -> str:
    """A memoir or concept name: NFKC, runs of whitespace as one space, 1-200 characters.

    Raises:
        InvalidContent: not a string, empty, too long, or holding control characters.
    """
    if not isinstance(value, str):
        raise InvalidContent(f"{what} must be a string, not {type(value).__name__}")
    text = " ".join(unicodedata.normalize("NFKC", value).split())
    if not text or len(text) > MAX_NAME_CHARS or any(unicodedata.category(ch) == "Cc"
                                                      for ch in text):
        raise InvalidContent(
            f"{what} must be 1-{MAX_NAME_CHARS} characters without control characters, "
            f"got {quote(value, 80)}", details={"name": quote(value, 80)})
    return text


def name_key(name: str) -> str:
    """The lookup key of a clean name: names match case-insensitively."""
    return name.casefold()


def clean_text(value: Any, what: str, limit: int, *, empty: bool = False) -> str:
    """A free text (definition, description): NFC, stripped, at most ``limit`` characters.

    Raises:
        InvalidContent: not a string, empty (unless ``empty``), too long, or holding NUL.
    """
    if not isinstance(value, str):
        raise InvalidContent(f"{what} must be a string, not {type(value).__name__}")
    text = unicodedata.normalize("NFC", value).strip()
    if (not text and not empty) or "\x00" in text or len(text) > limit:
        raise InvalidContent(f"{what} must be {0 if empty else 1}-{limit} characters "
                             f"without NUL ({len(text)} given)",
                             details={"what": what, "max_len": limit, "len": len(text)})
    return text


def check_count(value: Any, name: str, low: int, high: int) -> int:
    """``value`` when it is an integer in ``low..high``.

    Raises:
        InvalidArgs: otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgs(f"{name} must be an integer in {low}..{high}", details={name: value})
    return value


# -- memoirs ----------------------------------------------------------------------------------
_MEMOIR_SELECT = (
    "SELECT m.id, m.name, m.description, m.consolidation_threshold, m.created_ms, "
    "m.updated_ms, (SELECT count(*) FROM concepts c WHERE c.memoir_id = m.id), "
    "(SELECT count(*) FROM concept_links l JOIN concepts c ON c.id = l.source_id "
    " WHERE c.memoir_id = m.id) FROM memoirs m "
)


def _memoir_dict(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": int(row[0]),
        "name": row[1],
        "description": row[2],
        "consolidation_threshold": int(row[3]),
        "created_ms": row[4],
        "updated_ms": row[5],
        "concepts": int(row[6]),
        "links": int(row[7]),
    }


def memoir_id(conn: apsw.Connection, name: str) -> int:
    """The row id of memoir ``name``.

    Raises:
        InvalidContent: an invalid name.
        MemoirNotFound: no memoir of that name.
    """
    clean = clean_name(name, "a memoir name")
    rows = query(conn, "SELECT id FROM memoirs WHERE name_key = ?", (name_key(clean),))
    if not rows:
        raise MemoirNotFound(f"no memoir named {quote(clean, 80)}; create it with "
                             "`palace memoir create`", details={"memoir": clean})
    return int(rows[0][0])


def get_memoir(conn: apsw.Connection, name: str) -> dict[str, Any]:
    """Memoir ``name`` with its counts (``concepts``, ``links``).

    Raises:
        InvalidContent: an invalid name.
        MemoirNotFound: no memoir of that name.
    """
    mid = memoir_id(conn, name)
    return _memoir_dict(query(conn, _MEMOIR_SELECT + "WHERE m.id = ?", (mid,))[0])


def create_memoir(conn: apsw.Connection, name: str, *, description: str = "",
                  consolidation_threshold: int = DEFAULT_CONSOLIDATION_THRESHOLD,
                  exist_ok: bool = False, now_ms: int) -> dict[str, Any]:
    """Create memoir ``name``; returns it with ``created`` (False: it existed, unchanged).

    Raises:
        InvalidContent: an invalid name or description.
        InvalidArgs: a threshold outside 1..MAX_CONSOLIDATION_THRESHOLD.
        MemoirExists: it exists and ``exist_ok`` is false.
    """
    clean = clean_name(name, "a memoir name")
    text = clean_text(description, "a memoir description", MAX_DESCRIPTION_CHARS, empty=True)
    threshold = check_count(consolidation_threshold, "consolidation_threshold", 1,
                            MAX_CONSOLIDATION_THRESHOLD)
    rows = query(
        conn,
        "INSERT INTO memoirs(name, name_key, description, consolidation_threshold, created_ms, "
        "updated_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name_key) DO NOTHING RETURNING id",
        (clean, name_key(clean), text, threshold, now_ms, now_ms))
    if not rows and not exist_ok:
        raise MemoirExists(f"memoir {quote(clean, 80)} already exists",
                           details={"memoir": clean})
    return {**get_memoir(conn, clean), "created": bool(rows)}


def update_memoir(conn: apsw.Connection, name: str, *, description: str | None = None,
                  consolidation_threshold: int | None = None, now_ms: int) -> dict[str, Any]:
    """Change memoir ``name``'s description and/or threshold (None: keep it); returns it with
    ``changed`` (the fields whose value changed; none: nothing was written).

    Raises:
        InvalidContent: an invalid name or description.
        InvalidArgs: a threshold outside 1..MAX_CONSOLIDATION_THRESHOLD, or neither given.
        MemoirNotFound: no memoir of that name.
    """
    if description is None and consolidation_threshold is None:
        raise InvalidArgs("give a description or a consolidation_threshold to change",
                          details={"arg": "description"})
    found = get_memoir(conn, name)
    new = {"description": found["description"] if description is None else clean_text(
               description, "a memoir description", MAX_DESCRIPTION_CHARS, empty=True),
           "consolidation_threshold": found["consolidation_threshold"]
           if consolidation_threshold is None else check_count(
               consolidation_threshold, "consolidation_threshold", 1,
               MAX_CONSOLIDATION_THRESHOLD)}
    changed = [k for k, v in new.items() if v != found[k]]
    if changed:
        query(conn, "UPDATE memoirs SET description = ?, consolidation_threshold = ?, "
              "updated_ms = ? WHERE id = ?",
              (new["description"], new["consolidation_threshold"], now_ms, found["id"]))
    return {**get_memoir(conn, found["name"]), "changed": changed}


def list_memoirs(conn: apsw.Connection) -> list[dict[str, Any]]:
    """Every memoir of the palace with its counts, by name."""
    return [_memoir_dict(r) for r in query(conn, _MEMOIR_SELECT + "ORDER BY m.name_key")]


def delete_memoir(conn: apsw.Connection, name: str) -> dict[str, Any]:
    """Delete memoir ``name`` with its concepts, labels, sources and links (one statement).

    Returns ``{"memoir", "concepts", "links"}``: the name and what went with it.

    Raises:
        InvalidContent: an invalid name.
        MemoirNotFound: no memoir of that name.
    """
    found = get_memoir(conn, name)
    query(conn, "DELETE FROM memoirs WHERE id = ?", (found["id"],))
    return {"memoir": found["name"], "concepts": found["concepts"], "links": found["links"]}


def memoir_stats(conn: apsw.Connection, mid: int, top_labels: int = 20) -> dict[str, Any]:
    """The average confidence of a memoir's concepts and its most used labels with counts."""
    avg = query(conn, "SELECT avg(confidence) FROM concepts WHERE memoir_id = ?", (mid,))[0][0]
    labels = query(
        conn,
        "SELECT l.label, count(*) AS n FROM concept_labels l JOIN concepts c "
        "ON c.id = l.concept_id WHERE c.memoir_id = ? GROUP BY l.label "
        "ORDER BY n DESC, l.label LIMIT ?", (mid, top_labels))
    return {"avg_confidence": None if avg is None else round(float(avg), 4),
            "labels": [{"label": lab, "concepts": int(n)} for lab, n in labels]}
