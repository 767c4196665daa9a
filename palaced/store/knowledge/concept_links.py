"""Synchronous concept links: the typed relations between the concepts of one memoir.

A link is ``from --relation--> to`` with a weight in 0..1 (default 1). The relation is one of
``vocab.TYPED_RELATIONS`` (snake_case, camelCase and the like accepted, see
``vocab.typed_relation``). The database refuses self-links, other relations and links
between two memoirs (``schema`` v5); a link given twice is stored once (a new weight replaces
the old). ``neighbourhood`` walks the links both ways, bounded in depth and nodes;
``concepts_for_recall`` picks the concepts recall's L2 shows, with their strongest links.

Every function takes an open ``apsw.Connection``; writers expect the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import apsw

from palaced.store.conn.dialect import has_memoirs
from palaced.store.knowledge.concepts import concept_by_id, concept_id, concepts_matching
from palaced.store.knowledge.graph_walk import bounded_walk
from palaced.store.knowledge.memoirs import check_count, memoir_id, query
from palaced.wire.errors import InvalidArgs, InvalidContent, quote
from palaced.wire.vocab import MAX_DEPTH, MAX_LIMIT, TYPED_RELATIONS, typed_relation

_LINK_SELECT = (
    "SELECT l.id, s.name, l.relation, t.name, l.weight, l.created_ms, l.source_id, "
    "l.target_id FROM concept_links l JOIN concepts s ON s.id = l.source_id "
    "JOIN concepts t ON t.id = l.target_id "
)


def _link_dict(row: Sequence[Any]) -> dict[str, Any]:
    return {"id": int(row[0]), "from": row[1], "relation": row[2], "to": row[3],
            "weight": float(row[4]), "created_ms": row[5]}


def relation_of(text: Any) -> str:
    """The typed relation ``text`` names.

    Raises:
        InvalidContent: not one of TYPED_RELATIONS in any accepted spelling.
    """
    rel = typed_relation(text) if isinstance(text, str) else None
    if rel is None:
        raise InvalidContent(f"unknown relation {quote(text, 80)}: use one of "
                             f"{', '.join(TYPED_RELATIONS)}",
                             details={"relation": quote(text, 80),
                                      "relations": list(TYPED_RELATIONS)})
    return rel


def _ends(conn: apsw.Connection, memoir: str, name: str, relation: str, to: str
          ) -> tuple[int, str, int]:
    mid = memoir_id(conn, memoir)
    rel = relation_of(relation)
    a, b = concept_id(conn, mid, name), concept_id(conn, mid, to)
    if a == b:
        raise InvalidContent(f"a concept cannot link to itself ({quote(name, 80)})",
                             details={"concept": name})
    return a, rel, b


def link(conn: apsw.Connection, memoir: str, name: str, relation: str, to: str, *,
         weight: float = 1.0, now_ms: int) -> dict[str, Any]:
    """Link concept ``name`` to concept ``to`` of ``memoir``; returns the link with
    ``created`` (False: it existed; its weight is now ``weight``).

    Raises:
        InvalidContent: invalid names, an unknown relation, or ``name`` is ``to``.
        InvalidArgs: a weight outside 0..1.
        MemoirNotFound, ConceptNotFound: no such memoir or concept.
    """
    a, rel, b = _ends(conn, memoir, name, relation, to)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
        raise InvalidArgs("weight must be a number in 0..1", details={"weight": weight})
    found = query(conn, "SELECT id FROM concept_links WHERE source_id = ? AND target_id = ? "
                  "AND relation = ?", (a, b, rel))
    if found:
        lid = int(found[0][0])
        query(conn, "UPDATE concept_links SET weight = ? WHERE id = ? AND weight != ?",
              (float(weight), lid, float(weight)))
    else:
        lid = int(query(conn, "INSERT INTO concept_links(source_id, target_id, relation, "
                        "weight, created_ms) VALUES (?, ?, ?, ?, ?) RETURNING id",
                        (a, b, rel, float(weight), now_ms))[0][0])
    row = query(conn, _LINK_SELECT + "WHERE l.id = ?", (lid,))[0]
    return {**_link_dict(row), "created": not found}


def unlink(conn: apsw.Connection, memoir: str, name: str, relation: str, to: str
           ) -> dict[str, Any]:
    """Remove the link ``name --relation--> to``; ``{"removed", "link"}`` (``link`` the
    removed one, None when there was none: unlinking twice is not an error).

    Raises:
        InvalidContent: invalid names, an unknown relation, or ``name`` is ``to``.
        MemoirNotFound, ConceptNotFound: no such memoir or concept.
    """
    a, rel, b = _ends(conn, memoir, name, relation, to)
    rows = query(conn, _LINK_SELECT + "WHERE l.source_id = ? AND l.target_id = ? AND "
                 "l.relation = ?", (a, b, rel))
    if rows:
        query(conn, "DELETE FROM concept_links WHERE id = ?", (rows[0][0],))
    return {"removed": bool(rows), "link": _link_dict(rows[0]) if rows else None}


def _links_touching(conn: apsw.Connection, ids: Iterable[int]) -> list[tuple[Any, ...]]:
    """Link rows with either end among ``ids``, strongest first."""
    return query(conn, _LINK_SELECT + "WHERE l.source_id IN (SELECT value FROM json_each(:ids)) "
                 "OR l.target_id IN (SELECT value FROM json_each(:ids)) "
                 "ORDER BY l.weight DESC, l.id", {"ids": json.dumps(list(ids))})


def neighbourhood(conn: apsw.Connection, memoir: str, name: str, depth: int = 1, *,
                  max_nodes: int = 100) -> dict[str, Any]:
    """Concept ``name`` and the concepts within ``depth`` links of it (either direction).

    Returns ``{"concept", "nodes", "links", "truncated"}``: the concept dict; the nodes
    ``{id, name, confidence, distance}`` by distance then name (the concept at 0); the links
    between returned nodes; ``truncated`` when ``max_nodes`` cut the walk short.

    Raises:
        InvalidArgs: ``depth`` outside 0..MAX_DEPTH or ``max_nodes`` outside 1..MAX_LIMIT.
        InvalidContent: invalid names; MemoirNotFound, ConceptNotFound: no such memoir or
            concept.
    """
    check_count(depth, "depth", 0, MAX_DEPTH)
    check_count(max_nodes, "max_nodes", 1, MAX_LIMIT)
    root = concept_by_id(conn, concept_id(conn, memoir_id(conn, memoir), name))
    distance, rows, truncated = bounded_walk(
        root["id"], depth, max_nodes, lambda frontier: _links_touching(conn, frontier), (6, 7))
    links = {key: _link_dict(row) for key, row in rows.items()}
    info = {int(r[0]): (r[1], float(r[2])) for r in query(
        conn, "SELECT id, name, confidence FROM concepts WHERE id IN "
        "(SELECT value FROM json_each(?))", (json.dumps(list(distance)),))}
    nodes = [{"id": cid, "name": info[cid][0], "confidence": info[cid][1], "distance": d}
             for cid, d in distance.items()]
    nodes.sort(key=lambda n: (n["distance"], n["name"].casefold(), n["id"]))
    return {"concept": root, "nodes": nodes, "links": [links[k] for k in sorted(links)],
            "truncated": truncated}


def strongest_links(conn: apsw.Connection, ids: Sequence[int], per_concept: int = 3
                    ) -> dict[int, list[dict[str, Any]]]:
    """Up to ``per_concept`` links of each concept of ``ids``, either direction, heaviest
    first (then oldest)."""
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    for row in _links_touching(conn, ids):
        for end in {int(row[6]), int(row[7])}:
            if end in out and len(out[end]) < per_concept:
                out[end].append(_link_dict(row))
    return out


def concepts_for_recall(conn: apsw.Connection, query_text: str, limit: int = 3,
                        links: int = 3) -> list[dict[str, Any]]:
    """The concepts recall's L2 shows for ``query_text`` (``concepts.concepts_matching``),
    each with its ``links``: its ``links`` strongest links in either direction; none where
    the schema has no memoirs (a team palace's, docs/teams.md)."""
    if not has_memoirs(conn):
        return []
    found = concepts_matching(conn, query_text, limit)
    strongest = strongest_links(conn, [c["id"] for c in found], links)
    return [{**c, "links": strongest[c["id"]]} for c in found]
