"""Plain-text rendering of daemon results, shared by the CLI and the MCP tools.

Everything here is pure (mappings in, text out). The primitives (times, scores, places, fact
intervals, indented text) are written once; on top of them sit two layouts that differ on
purpose:

* the agent layout (``render_*``), read by the MCP tools: markdown-ish list items with
  ``#id`` handles an agent passes back to ``forget`` or ``kg_invalidate``;
* the terminal layout (``cli_*``), printed by ``palace``: ``[id] wing/room`` and
  ``subject --predicate--> object`` lines that are easy to scan and to grep.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

# The primitives and the agent layout of a drawer are shared with the daemon, which renders
# the text of a recall or wake-up itself (palaced.wire.recall_text); re-exported here.
from palaced.wire.recall_text import (
    BELOW_FLOOR,
    conflict_mark,
    drawer_date,
    drawer_place,
    excerpt_note,
    format_score,
    indented,
    one_line,
    remember_notes,
    render_drawer,
)

__all__ = ["BELOW_FLOOR", "conflict_mark", "drawer_date", "drawer_place", "excerpt_note",
           "format_score", "indented", "one_line", "remember_notes", "render_drawer"]


# -- primitives ---------------------------------------------------------------------------------
def counted(n: int, noun: str, plural: str = "") -> str:
    """``n`` and ``noun`` in the right number: ``1 drawer``, ``2 drawers``, ``0 entries``.

    ``plural`` is the plural when adding an ``s`` is wrong (``counted(2, "entry", "entries")``).
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def progress(moving: dict[str, Any]) -> str:
    """A re-embedding's progress: ``1,234/5,000 (24%)`` (drawers done of all)."""
    done, total = int(moving.get("done") or 0), int(moving.get("total") or 0)
    share = done * 100 // total if total else 100
    return f"{done:,}/{total:,} ({share}%)"


def pending_chunks(info: dict[str, Any]) -> str:
    """`` (N chunks)`` after a palace's pending embeddings when some are waiting, else ""."""
    chunks = info.get("pending_chunks") or 0
    return f" ({counted(chunks, 'chunk')})" if info.get("pending_embeddings") and chunks else ""


def excerpt(text: str, limit: int, max_lines: int) -> str | None:
    """The start of ``text``, at most ``limit`` characters and ``max_lines`` lines, cut at a
    word where one is near; ``None`` when ``text`` is short enough to show whole."""
    lines = text.splitlines()
    if len(text) <= limit and len(lines) <= max_lines:
        return None
    head = "\n".join(lines[:max_lines])[:limit]
    space = head.rfind(" ")
    if space > limit * 3 // 4:
        head = head[:space]
    return head.rstrip()


def format_time(ms: Any, *, missing: str = "?") -> str:
    """An epoch-ms instant as a UTC date, or a UTC time (ISO 8601) when it is not midnight.

    ``None`` is shown as ``missing``; a value that is no usable instant as itself.
    """
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return missing if ms is None else str(ms)
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    if (when.hour, when.minute, when.second, when.microsecond) == (0, 0, 0, 0):
        return when.strftime("%Y-%m-%d")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def fact_object(fact: Mapping[str, Any]) -> str:
    """A fact's object: an entity name as is, a literal value quoted."""
    obj = str(fact.get("object"))
    return obj if fact.get("object_is_entity", True) else json.dumps(obj, ensure_ascii=False)


def fact_interval(fact: Mapping[str, Any]) -> str:
    """A fact's validity interval, ``[valid_from → valid_to]`` (``now`` while open)."""
    start, end = fact.get("valid_from_ms"), fact.get("valid_to_ms")
    return f"[{format_time(start)} → {'now' if end is None else format_time(end)}]"


def fact_notes(fact: Mapping[str, Any]) -> list[str]:
    """What sets a fact apart: a confidence below 1, and a retraction (an empty interval)."""
    notes: list[str] = []
    confidence = fact.get("confidence")
    if isinstance(confidence, int | float) and confidence < 1:
        notes.append(f"confidence {confidence:.2f}")
    end = fact.get("valid_to_ms")
    if end is not None and end == fact.get("valid_from_ms"):
        notes.append("(retracted)")
    return notes


# -- agent layout (MCP tools) -------------------------------------------------------------------
def render_items(items: Iterable[Mapping[str, Any]], compact: bool,
                 show_palace: bool = False) -> list[str]:
    """Render drawers with ``render_drawer``, one string per drawer."""
    return [render_drawer(item, compact=compact, show_palace=show_palace) for item in items]


def render_tree(value: Any, indent: int = 0) -> list[str]:
    """Render nested mappings and lists (daemon status, palace info) as indented lines."""
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                lines.append(f"{pad}{key}:")
                lines.extend(render_tree(item, indent + 1))
            else:
                lines.append(f"{pad}{key}: {render_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item:
                sub = render_tree(item, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {render_scalar(item)}")
    else:
        lines.append(f"{pad}{render_scalar(value)}")
    return lines


def render_scalar(value: Any) -> str:
    """A leaf value as text: JSON for null, booleans and containers, else ``str``."""
    if value is None or isinstance(value, bool | Mapping | list):
        return json.dumps(value, default=str)
    return str(value)


def render_fact(fact: Mapping[str, Any], *, compact: bool = False) -> str:
    """One fact on one line: ``#id subject predicate object [valid_from → valid_to|now]``.

    A literal object is quoted; confidence below 1 and a retraction are noted. Outside compact
    mode the line is a list item and ends with the cited source (URL, drawer), if any.
    """
    parts = [f"#{fact.get('id')}", one_line(str(fact.get("subject"))),
             str(fact.get("predicate")), one_line(fact_object(fact)), fact_interval(fact),
             *fact_notes(fact)]
    line = " ".join(parts)
    if compact:
        return line
    source = fact.get("source")
    cited: list[str] = []
    if isinstance(source, Mapping):
        if source.get("url"):
            cited.append(str(source["url"]))
        if source.get("drawer") is not None:
            cited.append(f"drawer #{source['drawer']}")
        if cited and source.get("agent"):  # alone, the agent is noise on every line
            cited.append(f"by {source['agent']}")
    return "- " + line + (f" (source: {', '.join(cited)})" if cited else "")


def describe_entity(entity: Mapping[str, Any]) -> str:
    """An entity's type, definition and labels on one line ("" when it has none)."""
    parts = [f"a {entity['type']}" if entity.get("type") else "",
             str(entity.get("definition") or ""),
             f"labels {', '.join(entity['labels'])}" if entity.get("labels") else ""]
    return "; ".join(p for p in parts if p)


def render_facts(facts: Iterable[Mapping[str, Any]], compact: bool) -> list[str]:
    """Render facts with ``render_fact``, one string per fact."""
    return [render_fact(f, compact=compact) for f in facts]


def render_neighbours(result: Mapping[str, Any], palace: str, depth: int,
                      relation: str | None, compact: bool) -> list[str]:
    """A ``graph.neighbors`` answer for an agent: a head line with the counts, the entities
    by distance, then the facts between them."""
    name = str(result["entity"].get("name"))
    via = f" via {relation}" if relation else ""
    by_distance: dict[int, list[str]] = {}
    for node in result.get("nodes") or []:
        if node.get("distance"):
            by_distance.setdefault(int(node["distance"]), []).append(str(node.get("name")))
    edges = list(result.get("edges") or [])
    found = sum(map(len, by_distance.values()))
    head = (f"Neighbours of '{name}' within {depth} hop(s){via} in palace '{palace}': "
            f"{counted(found, 'entity', 'entities')}, {counted(len(edges), 'fact')}")
    if not by_distance:
        return [f"{head}. Nothing is linked to it yet; relate it with kg_assert."]
    lines = [head, *([] if compact else [""])]
    for dist in sorted(by_distance):
        label = f"{dist} hop{'s' if dist > 1 else ''}"
        names = ", ".join(by_distance[dist])
        lines.append(f"{label}: {names}" if compact else f"- {label}: {names}")
    lines.append("Facts:" if compact else "\nFacts:")
    lines.extend(render_facts(edges, compact))
    if result.get("truncated"):
        lines.append("(cut short at the node limit; narrow with relation or a smaller depth)")
    return lines


# -- terminal layout (palace CLI) ---------------------------------------------------------------
CLI_EXCERPT_CHARS = 300  # `palace drawers` shows a long drawer's start; `palace get` all of it
CLI_EXCERPT_LINES = 8


def cli_drawer(drawer: Mapping[str, Any], *, score: bool = False,
               cut: bool = False) -> list[str]:
    """``[id] wing/room  score=0.123``, then the drawer's text indented by four spaces.

    With ``cut``, a long text shows its first ``CLI_EXCERPT_CHARS`` characters (at most
    ``CLI_EXCERPT_LINES`` lines), then ``… (N chars; `palace get ID` for all)``.
    """
    head = f"[{drawer['id']}] {drawer_place(drawer)}"
    if score and drawer.get("score") is not None:
        head += f"  score={format_score(drawer['score'])}"
    if score and drawer.get("below_floor"):
        head += f"  {BELOW_FLOOR}"
    if conflict_mark(drawer):
        head += f"  {conflict_mark(drawer)}"
    text = str(drawer.get("text", ""))
    start = excerpt(text, CLI_EXCERPT_CHARS, CLI_EXCERPT_LINES) if cut else None
    note = excerpt_note(drawer)
    if start is None:
        return [head, *indented(text, "    "), *([f"    {note}"] if note else [])]
    more = f"… ({len(text):,} chars; `palace get {drawer['id']}` for all)"
    return [head, *indented(start, "    "), f"    {more}"]


def cli_drawer_details(drawer: Mapping[str, Any]) -> str:
    """The metadata lines under ``palace get``: importance, tags, times, recall count; who
    stored the drawer and who changed it last."""
    by, changed = drawer.get("created_by") or "-", drawer.get("updated_by") or "-"
    return (f"    importance {drawer['importance']}  tags {', '.join(drawer['tags']) or '-'}  "
            f"happened {format_time(drawer['occurred_ms'], missing='-')}  "
            f"stored {format_time(drawer['created_ms'], missing='-')}  "
            f"recalled {drawer['access_count']}x"
            + (f"  version {drawer['versions']}" if drawer.get("versions", 1) > 1 else "")
            + f"\n    stored by {by}" + (f"  last changed by {changed}" if changed != by else ""))


def cli_history(versions: Iterable[Mapping[str, Any]]) -> list[str]:
    """The earlier versions of a drawer (``palace get --history``), newest first."""
    lines: list[str] = []
    for v in versions:
        lines.append(f"  version {v['version']} (replaced {format_time(v['replaced_ms'])}) "
                     f"{drawer_place(v)}  importance {v['importance']}  "
                     f"tags {', '.join(v['tags']) or '-'}")
        lines.extend(indented(str(v["text"]), "    "))
    return lines or ["  (never edited)"]


def nothing_relevant(palace: str, query: str, unknown: Sequence[str] | None = None) -> str:
    """The one line a recall with no drawer above the relevance floor answers; with the
    names the query asks about that no drawer mentions (``unknown_names``), says which."""
    line = f"nothing relevant in palace {palace} for: {query}"
    if unknown:
        line += f" (no drawer mentions {' or '.join(unknown)})"
    return line


def cli_fact(fact: Mapping[str, Any]) -> str:
    """One fact as ``#id subject --predicate--> object  [from → to]`` and its notes."""
    notes = "".join(f"  {note}" for note in fact_notes(fact))
    return (f"#{fact['id']} {fact['subject']} --{fact['predicate']}--> {fact_object(fact)}  "
            f"{fact_interval(fact)}{notes}")
