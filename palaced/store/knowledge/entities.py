"""Synchronous knowledge-graph entities: names, their normalisation, lookup and upsert.

An entity is a named concept (a person, a project, a library...) that facts link. Names
match case- and spacing-insensitively through ``entity_key``. Temporal facts between
entities live in ``facts``; navigating the graph in ``graph_walk``; the tables in
``schema``.

Every function takes an open ``apsw.Connection``. Writers expect the caller to have opened the
transaction (``Store.write``); nothing here begins or commits.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from typing import Any

import apsw

from palaced.wire.errors import InvalidArgs, InvalidContent
from palaced.wire.vocab import (
    MAX_ENTITY_DEFINITION_CHARS,
    MAX_ENTITY_LABEL_CHARS,
    MAX_ENTITY_LABELS,
    MAX_LIMIT,
    MAX_NAME_CHARS,
)

MAX_DEFINITION_CHARS = MAX_ENTITY_DEFINITION_CHARS
MAX_LABELS = MAX_ENTITY_LABELS
MAX_LABEL_CHARS = MAX_ENTITY_LABEL_CHARS

_ENTITY_FIELDS = ("id", "name", "type", "definition", "labels", "created_ms", "updated_ms")
_ENTITY_COLS = ", ".join("e." + c for c in _ENTITY_FIELDS)


def _query(conn: apsw.Connection, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """All rows of one statement (callers know the columns)."""
    return list(conn.execute(sql, params).fetchall())


# -- names ------------------------------------------------------------------------------------
def entity_key(name: str) -> str:
    """The lookup key of an entity name: NFKC, case-folded, single spaces.

    Raises:
        InvalidContent: the name is empty, too long or contains NUL.
    """
    return _clean_name(name).casefold()


def _clean_name(name: str) -> str:
    if not isinstance(name, str):
        raise InvalidContent(f"an entity name must be a string, not {type(name).__name__}")
    text = _squash(name)
    if not text or "\x00" in text or len(text) > MAX_NAME_CHARS:
        raise InvalidContent(
            f"an entity name must be 1-{MAX_NAME_CHARS} characters without NUL",
            details={"name": name[:MAX_NAME_CHARS]},
        )
    return text


def _squash(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _clean_text(value: str, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidContent(f"{what} must be a string, not {type(value).__name__}")
    text = unicodedata.normalize("NFC", value).strip()
    if not text or "\x00" in text or len(text) > limit:
        raise InvalidContent(f"{what} must be 1-{limit} characters without NUL")
    return text


def _check_limit(limit: int, name: str = "limit", high: int = MAX_LIMIT) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= high:
        raise InvalidArgs(f"{name} must be an integer in 1..{high}", details={name: limit})
    return limit


# -- entities -------------------------------------------------------------------------------
def _entity_dict(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": int(row[0]),
        "name": row[1],
        "type": row[2],
        "definition": row[3],
        "labels": json.loads(row[4]) if row[4] else [],
        "created_ms": row[5],
        "updated_ms": row[6],
    }


def get_entity(conn: apsw.Connection, name: str) -> dict[str, Any] | None:
    """The entity of that name (case- and spacing-insensitive), or None.

    Raises:
        InvalidContent: the name itself is invalid.
    """
    rows = _query(
        conn, f"SELECT {_ENTITY_COLS} FROM entities e WHERE e.name_key = ?", (entity_key(name),)
    )
    return _entity_dict(rows[0]) if rows else None


def _entity_id(conn: apsw.Connection, name: str) -> int | None:
    rows = _query(conn, "SELECT id FROM entities WHERE name_key = ?", (entity_key(name),))
    return int(rows[0][0]) if rows else None


def _ensure_entity(conn: apsw.Connection, name: str, now_ms: int) -> int:
    clean = _clean_name(name)
    key = clean.casefold()
    rows = _query(
        conn,
        "INSERT INTO entities(name, name_key, created_ms, updated_ms) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(name_key) DO NOTHING RETURNING id",
        (clean, key, now_ms, now_ms),
    )
    if rows:
        return int(rows[0][0])
    return int(_query(conn, "SELECT id FROM entities WHERE name_key = ?", (key,))[0][0])


def upsert_entity(
    conn: apsw.Connection,
    name: str,
    *,
    type: str | None = None,
    definition: str | None = None,
    labels: Sequence[str] | None = None,
    now_ms: int,
) -> dict[str, Any]:
    """Create an entity or update it; returns the entity dict.

    Names match case- and spacing-insensitively; an explicit upsert adopts the spelling given.
    ``type`` and ``definition`` replace the stored values when not None; ``labels`` (stripped,
    deduplicated, order kept) replaces the stored list when not None.

    Raises:
        InvalidContent: invalid name, type, definition or labels.
    """
    clean = _clean_name(name)
    key = clean.casefold()
    type_ = None if type is None else _clean_text(type, "an entity type", MAX_LABEL_CHARS)
    definition_ = (
        None
        if definition is None
        else _clean_text(definition, "a definition", MAX_DEFINITION_CHARS)
    )
    labels_json = None if labels is None else json.dumps(_clean_labels(labels), ensure_ascii=False)
    row = _query(
        conn,
        "INSERT INTO entities AS e(name, name_key, type, definition, labels, created_ms, "
        "updated_ms) VALUES (:name, :key, :type, :definition, coalesce(:labels, '[]'), :now, :now) "
        "ON CONFLICT(name_key) DO UPDATE SET name = excluded.name, "
        "type = coalesce(:type, e.type), definition = coalesce(:definition, e.definition), "
        "labels = coalesce(:labels, e.labels), updated_ms = excluded.updated_ms "
        f"RETURNING {', '.join(_ENTITY_FIELDS)}",
        {
            "name": clean,
            "key": key,
            "type": type_,
            "definition": definition_,
            "labels": labels_json,
            "now": now_ms,
        },
    )[0]
    return _entity_dict(row)


def _clean_labels(labels: Sequence[str]) -> list[str]:
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise InvalidContent("labels must be a list of strings")
    out = list(dict.fromkeys(_clean_text(lab, "a label", MAX_LABEL_CHARS) for lab in labels))
    if len(out) > MAX_LABELS:
        raise InvalidContent(f"an entity has at most {MAX_LABELS} labels")
    return out
