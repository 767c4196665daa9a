"""Synchronous navigation of the knowledge graph: entity search, neighbourhoods and paths.

Read-side only: ``search_entities`` (full-text over names, definitions and labels),
``neighbors`` (breadth-first neighbourhood), ``overview`` (the whole graph, bounded, for
drawing), ``path`` (shortest chain of facts) and ``facts_matching`` (active facts about
entities a recall query names). Entities live in ``entities`` and fact writes in ``facts``,
whose row shapes and limits this module reuses.

Every function takes an open ``apsw.Connection`` and only reads.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import apsw

from palaced.store.conn.dialect import is_pg
from palaced.store.knowledge.entities import (
    _ENTITY_COLS,
    _check_limit,
    _entity_dict,
    _entity_id,
    _query,
    _squash,
    get_entity,
)
from palaced.store.knowledge.facts import (
    _ACTIVE,
    _FACT_SELECT,
    _VALID_AT,
    _fact_dict,
    normalize_predicate,
)
from palaced.store.lookup.search import STOPWORDS, fts_match, fts_terms
from palaced.text.timeparse import parse_when
from palaced.wire.errors import InvalidArgs
from palaced.wire.vocab import MAX_DEPTH, MAX_LIMIT, MAX_OVERVIEW_FACTS, MAX_PATH_DEPTH

# Bounds the work of one traversal on a dense graph; path() reports "no path" past it.
MAX_VISITED = 10_000
_NAME_TOKEN = re.compile(r"[^\W_]+")


# -- entity search --------------------------------------------------------------------------
def search_entities(conn: apsw.Connection, query: str, limit: int = 20, *,
                    type: str | None = None) -> list[dict[str, Any]]:
    """Entities whose name, definition or labels match the words of ``query``, best first;
    with ``type``, only entities of that type (any case).

    Each word is quoted, so FTS5 syntax in the query (quotes, ``*``, ``AND``, ``NEAR(``,
    ``col:``) is searched as plain words and never raises. An exact name match ranks first.
    Each entity dict gains a ``score`` (higher is better).

    Raises:
        InvalidArgs: ``limit`` outside 1..MAX_LIMIT.
    """
    _check_limit(limit)
    # Entity names are short and typed from memory: a word matches the names it begins
    # (``bill`` finds ``billing-service``), exact words still rank first by bm25.
    match = fts_match(fts_terms(query), prefix=True)
    if match is None:
        return []
    key = _squash(query).casefold()
    of_type = "" if type is None else "AND lower(e.type) = lower(:type) "
    if is_pg(conn):
        # The same words as prefixes in tsquery syntax; ts_rank with the same column weights
        # (name 10, definition 1, labels 3) stands for bm25, negated to FTS5's lower-is-better.
        rows = _query(
            conn,
            f"SELECT {_ENTITY_COLS}, -ts_rank(ARRAY[0, 0.3, 0.1, 1.0]::float4[], e.tsv, q) "
            f"AS rank FROM entities e, CAST(:q AS tsquery) q WHERE e.tsv @@ q {of_type}"
            "ORDER BY e.name_key = :key DESC, rank, e.id LIMIT :limit",
            {"q": _prefix_tsquery(fts_terms(query)), "key": key, "limit": limit,
             **({} if type is None else {"type": type})})
    else:
        rows = _query(
            conn,
            f"SELECT {_ENTITY_COLS}, bm25(entities_fts, 10.0, 1.0, 3.0) AS rank "
            "FROM entities_fts JOIN entities e ON e.id = entities_fts.rowid "
            f"WHERE entities_fts MATCH :match {of_type}"
            "ORDER BY e.name_key = :key DESC, rank, e.id LIMIT :limit",
            {"match": match, "key": key, "limit": limit,
             **({} if type is None else {"type": type})},
        )
    out = []
    for row in rows:
        entity = _entity_dict(row)
        # FTS5's bm25() is lower-is-better; negate to match the rest of palace's scores.
        entity["score"] = -float(row[7])
        out.append(entity)
    return out


def _words_tsquery(words: Sequence[str], weight: str = "", *, prefix: bool = False) -> str:
    """A tsquery (``simple`` words, as the entities' ``tsv``) ORing ``words``, quoted."""
    tag = ":" + ("*" if prefix else "") + weight if prefix or weight else ""
    # Longer words cannot be in a tsvector (PostgreSQL drops them): they match nothing.
    words = [w for w in words if len(w.encode()) < 2000] or ["\x1f"]
    return " | ".join("'" + w.lower().replace("\\", "\\\\").replace("'", "''") + "'" + tag
                      for w in words)


def _prefix_tsquery(terms: Sequence[str]) -> str:
    return _words_tsquery(terms, prefix=True)


# -- traversal ------------------------------------------------------------------------------
def _edges_of(
    conn: apsw.Connection,
    node_ids: Iterable[int],
    *,
    relation: str | None,
    as_of_ms: int | None,
) -> list[tuple[Any, ...]]:
    """Fact rows with an entity object touching any of ``node_ids``, in either direction."""
    validity = _ACTIVE if as_of_ms is None else _VALID_AT
    return _query(
        conn,
        _FACT_SELECT + "WHERE f.object_id IS NOT NULL AND "
        "(f.subject_id IN (SELECT value FROM json_each(:ids)) "
        " OR f.object_id IN (SELECT value FROM json_each(:ids))) "
        f"AND {validity} AND (CAST(:p AS TEXT) IS NULL OR f.predicate = :p) ORDER BY f.id",
        {"ids": json.dumps(list(node_ids)), "p": relation, "t": as_of_ms},
    )



Row = Sequence[Any]


def bounded_walk(root: int, depth: int, max_nodes: int,
                 rows_touching: Callable[[list[int]], Iterable[Row]], ends: tuple[int, int]
                 ) -> tuple[dict[int, int], dict[int, Row], bool]:
    """Breadth-first walk from ``root`` over rows linking two nodes (either direction).

    ``rows_touching(frontier)`` gives the rows with an end in ``frontier``; ``ends`` are the
    column positions of a row's two node ids; column 0 is the row's id. Returns each reached
    node's distance (at most ``max_nodes`` nodes, within ``depth`` steps), the rows between
    reached nodes by id, and whether ``max_nodes`` cut the walk short.
    """
    distance: dict[int, int] = {root: 0}
    kept: dict[int, Row] = {}
    truncated = False
    frontier = [root]
    a, b = ends
    for level in range(1, depth + 1):
        if not frontier:
            break
        nxt: list[int] = []
        for row in rows_touching(frontier):
            for node in (int(row[a]), int(row[b])):
                if node in distance:
                    continue
                if len(distance) >= max_nodes:
                    truncated = True
                    continue
                distance[node] = level
                nxt.append(node)
            if int(row[a]) in distance and int(row[b]) in distance:
                kept[int(row[0])] = row
        frontier = nxt
    return distance, kept, truncated


def neighbors(
    conn: apsw.Connection,
    entity: str,
    depth: int = 1,
    *,
    relation: str | None = None,
    as_of_ms: int | None = None,
    max_nodes: int = 200,
) -> dict[str, Any]:
    """Breadth-first neighbourhood of ``entity`` over entity-to-entity facts, both directions.

    Follows active facts, or the facts valid at ``as_of_ms`` when given, optionally only one
    ``relation`` (normalised). Returns ``{"entity", "nodes", "edges", "truncated"}``:
    ``entity`` is the root entity dict (None when unknown, with no nodes); ``nodes`` are
    ``{id, name, type, distance}`` sorted by distance then name, the root at distance 0;
    ``edges`` are the fact dicts between returned nodes; ``truncated`` says ``max_nodes``
    cut the traversal short.

    Raises:
        InvalidArgs: ``depth`` outside 0..MAX_DEPTH or ``max_nodes`` outside 1..MAX_LIMIT.
        InvalidContent: invalid entity name, relation or time.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        raise InvalidArgs(f"depth must be an integer in 0..{MAX_DEPTH}", details={"depth": depth})
    _check_limit(max_nodes, "max_nodes")
    pred = None if relation is None else normalize_predicate(relation)
    t = None if as_of_ms is None else parse_when(as_of_ms, now_ms=as_of_ms)
    root = get_entity(conn, entity)
    if root is None:
        return {"entity": None, "nodes": [], "edges": [], "truncated": False}
    distance, rows, truncated = bounded_walk(
        root["id"], depth, max_nodes,
        lambda frontier: _edges_of(conn, frontier, relation=pred, as_of_ms=t), (13, 14))
    edges = {key: _fact_dict(row) for key, row in rows.items()}
    info = {
        int(r[0]): (r[1], r[2])
        for r in _query(
            conn,
            "SELECT id, name, type FROM entities WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(distance)),),
        )
    }
    nodes = [
        {"id": nid, "name": info[nid][0], "type": info[nid][1], "distance": d}
        for nid, d in distance.items()
    ]
    nodes.sort(key=lambda n: (n["distance"], n["name"].casefold(), n["id"]))
    return {
        "entity": root,
        "nodes": nodes,
        "edges": [edges[k] for k in sorted(edges)],
        "truncated": truncated,
    }


# Facts one overview reads at most: bounds the work on a huge graph (then ``truncated``).
MAX_OVERVIEW_SCAN = 50_000
OVERVIEW_CHANGES = 50  # the latest times the graph changed, for a reader to step back to


def overview(conn: apsw.Connection, *, as_of_ms: int | None = None, max_nodes: int = 500,
             max_facts: int = 2_000) -> dict[str, Any]:
    """The whole graph as it stood: the active facts (or those valid at ``as_of_ms``), oldest
    fact first, and the entities they touch, for drawing.

    A fact is kept while its entities fit in ``max_nodes`` and the facts in ``max_facts``;
    a literal fact (its object a value) needs only its subject. Returns ``{"as_of_ms",
    "nodes", "edges", "truncated", "changes"}``: ``nodes`` are ``{id, name, type, facts}``
    (``facts``: how many kept facts touch it) by name; ``edges`` are the kept fact dicts by
    id; ``truncated`` says a bound (or ``MAX_OVERVIEW_SCAN``) left facts out; ``changes``
    are the latest ``OVERVIEW_CHANGES`` times any fact began or ended, newest first.

    Raises:
        InvalidArgs: ``max_nodes`` outside 1..MAX_LIMIT or ``max_facts`` outside
            1..MAX_OVERVIEW_FACTS.
        InvalidContent: invalid time.
    """
    _check_limit(max_nodes, "max_nodes")
    _check_limit(max_facts, "max_facts", MAX_OVERVIEW_FACTS)
    t = None if as_of_ms is None else parse_when(as_of_ms, now_ms=as_of_ms)
    validity = _ACTIVE if t is None else _VALID_AT
    rows = _query(conn, _FACT_SELECT + f"WHERE {validity} ORDER BY f.id LIMIT :scan",
                  {"t": t, "scan": MAX_OVERVIEW_SCAN + 1})
    truncated = len(rows) > MAX_OVERVIEW_SCAN
    degree: dict[int, int] = {}
    kept: list[dict[str, Any]] = []
    for row in rows[:MAX_OVERVIEW_SCAN]:
        ends = [int(row[13])] + ([] if row[14] is None else [int(row[14])])
        new = {e for e in ends if e not in degree}
        if len(kept) >= max_facts or len(degree) + len(new) > max_nodes:
            truncated = True
            continue
        for e in ends:
            degree[e] = degree.get(e, 0) + 1
        kept.append(_fact_dict(row))
    info = _query(
        conn, "SELECT id, name, type FROM entities WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(degree)),)) if degree else []
    nodes = [{"id": int(r[0]), "name": r[1], "type": r[2], "facts": degree[int(r[0])]}
             for r in info]
    nodes.sort(key=lambda n: (n["name"].casefold(), n["id"]))
    changes = [int(r[0]) for r in _query(
        conn, "SELECT t FROM (SELECT valid_from_ms AS t FROM facts UNION SELECT valid_to_ms "
        "FROM facts WHERE valid_to_ms IS NOT NULL) AS times ORDER BY t DESC LIMIT ?",
        (OVERVIEW_CHANGES,))]
    return {"as_of_ms": t, "nodes": nodes, "edges": kept, "truncated": truncated,
            "changes": changes}


def path(
    conn: apsw.Connection,
    a: str,
    b: str,
    max_depth: int = 6,
    *,
    as_of_ms: int | None = None,
) -> list[dict[str, Any]] | None:
    """A shortest chain of facts linking ``a`` to ``b``, in order from ``a``.

    Edges are active (or valid at ``as_of_ms``) entity-to-entity facts taken in either
    direction, so a fact in the chain may point backwards. Returns ``[]`` when ``a`` and ``b``
    are the same entity, and None when either is unknown or no chain of at most ``max_depth``
    facts exists within MAX_VISITED entities.

    Raises:
        InvalidArgs: ``max_depth`` outside 1..MAX_PATH_DEPTH.
        InvalidContent: invalid names or time.
    """
    _check_limit(max_depth, "max_depth", MAX_PATH_DEPTH)
    t = None if as_of_ms is None else parse_when(as_of_ms, now_ms=as_of_ms)
    start, goal = _entity_id(conn, a), _entity_id(conn, b)
    if start is None or goal is None:
        return None
    if start == goal:
        return []
    parent: dict[int, tuple[int, Sequence[Any]] | None] = {start: None}
    frontier = [start]
    for _ in range(max_depth):
        nxt: list[int] = []
        for row in _edges_of(conn, frontier, relation=None, as_of_ms=t):
            s, o = int(row[13]), int(row[14])
            for here, there in ((s, o), (o, s)):
                # Every fetched edge touches the frontier, so ``here`` is on it.
                if here in parent and there not in parent:
                    parent[there] = (here, row)
                    nxt.append(there)
            if goal in parent:
                chain: list[dict[str, Any]] = []
                node = goal
                while (step := parent[node]) is not None:
                    node, edge = step
                    chain.append(_fact_dict(edge))
                return chain[::-1]
        if not nxt or len(parent) > MAX_VISITED:
            return None
        frontier = nxt
    return None


# -- recall support -------------------------------------------------------------------------
def _name_tokens(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text.casefold())
    stripped = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return _NAME_TOKEN.findall(stripped)


def facts_matching(
    conn: apsw.Connection, query_terms: Sequence[str], limit: int = 10
) -> list[dict[str, Any]]:
    """Active facts about entities named in ``query_terms``, for showing beside recall hits.

    An entity is named when every word of its name (ignoring stopwords, unless the name is
    only stopwords) occurs among the words of ``query_terms``, case and accents aside; so
    "Project Apollo" needs both words, "Postgres" just one. Facts linking two named entities
    come first, then higher confidence, then newer.

    Raises:
        InvalidArgs: ``limit`` outside 1..MAX_LIMIT.
    """
    _check_limit(limit)
    words = {w for term in query_terms for w in _name_tokens(term)}
    match = fts_match(sorted(words))
    if match is None:
        return []
    named: list[int] = []
    found = _query(conn, "SELECT id, name FROM entities WHERE tsv @@ CAST(? AS tsquery) "
                   "ORDER BY id LIMIT ?", (_words_tsquery(sorted(words), "A"), MAX_LIMIT)
                   ) if is_pg(conn) else _query(
        conn,
        "SELECT rowid, name FROM entities_fts WHERE entities_fts MATCH ? ORDER BY rank LIMIT ?",
        ("name : (" + match + ")", MAX_LIMIT),
    )
    for eid, name in found:
        tokens = set(_name_tokens(name))
        needed = (tokens - STOPWORDS) or tokens
        if needed and needed <= words:
            named.append(int(eid))
    if not named:
        return []
    if is_pg(conn):
        rows = _query(
            conn,
            _FACT_SELECT + f"WHERE {_ACTIVE} AND (f.subject_id = ANY(:ids) OR "
            "f.object_id = ANY(:ids)) ORDER BY (f.subject_id = ANY(:ids))::int + "
            "coalesce((f.object_id = ANY(:ids))::int, 0) DESC, f.confidence DESC, "
            "f.valid_from_ms DESC, f.id DESC LIMIT :limit", {"ids": named, "limit": limit})
        return [_fact_dict(r) for r in rows]
    rows = _query(
        conn,
        "WITH named(id) AS (SELECT value FROM json_each(:ids)) "
        + _FACT_SELECT
        + f"WHERE {_ACTIVE} AND (f.subject_id IN named OR f.object_id IN named) "
        "ORDER BY (f.subject_id IN named) + coalesce(f.object_id IN named, 0) DESC, "
        "f.confidence DESC, f.valid_from_ms DESC, f.id DESC LIMIT :limit",
        {"ids": json.dumps(named), "limit": limit},
    )
    return [_fact_dict(r) for r in rows]
