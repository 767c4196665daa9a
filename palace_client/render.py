"""Plain-text rendering of tool results for an agent: drawers, sections, facts, trees, errors.

Everything here is pure (mapping in, text out); ``tools.Toolbox`` adds the per-tool headings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from palaced.errors import DaemonUnreachable, InternalError, PalaceError

from .tool_specs import ToolArgumentError


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _format_score(score: Any) -> str:
    return f"{score:.3f}" if isinstance(score, int | float) else str(score)


def _format_when(item: Mapping[str, Any]) -> str | None:
    value = item.get("occurred_ms") or item.get("occurred_at") or item.get("created_ms")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d")
    return str(value) if value else None


def render_drawer(item: Mapping[str, Any], *, compact: bool = False,
                  show_palace: bool = False) -> str:
    """Render one drawer (recall item, list entry) as text: id, place, score, date, text."""
    place = "/".join(str(item[k]) for k in ("wing", "room") if item.get(k))
    if show_palace and item.get("palace"):
        place = f"{item['palace']}:{place}" if place else str(item["palace"])
    head: list[str] = []
    # Only real drawers (integer ids) can be passed to forget; synthetic items have no "#".
    if isinstance(item.get("id"), int):
        head.append(f"#{item['id']}")
    elif item.get("kind") == "fact" and isinstance(item.get("fact_id"), int):
        head.append(f"fact #{item['fact_id']}")
    if place:
        head.append(f"[{place}]")
    if item.get("score") is not None:
        head.append(f"score {_format_score(item['score'])}")
    when = _format_when(item)
    if when:
        head.append(when)
    if item.get("tags"):
        head.append("tags " + ",".join(map(str, item["tags"])))
    if isinstance(item.get("superseded_by"), int):
        head.append(f"(superseded by #{item['superseded_by']})")
    text = str(item.get("text", ""))
    if compact:
        return " ".join([*head, _one_line(text)]).strip()
    body = "\n".join("  " + line for line in text.splitlines()) or "  (empty)"
    return ("- " + " ".join(head) + "\n" + body) if head else body


def render_items(items: Iterable[Mapping[str, Any]], compact: bool,
                 show_palace: bool = False) -> list[str]:
    """Render drawers with ``render_drawer``, one string per drawer."""
    return [render_drawer(item, compact=compact, show_palace=show_palace) for item in items]


def render_sections(sections: Iterable[Mapping[str, Any]], compact: bool) -> list[str]:
    """Render recall/wake-up sections: one heading per level, then its drawers."""
    lines: list[str] = []
    for section in sections:
        items = list(section.get("items") or [])
        title = section.get("title") or "Memories"
        level = section.get("level")
        heading = f"L{level} · {title}" if level is not None else str(title)
        lines.append(heading if compact else f"## {heading}")
        lines.extend(render_items(items, compact) if items else ["(nothing)"])
        if not compact:
            lines.append("")
    return lines


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


def format_time(ms: Any) -> str:
    """An epoch-ms instant as a date, or a UTC time when it is not midnight."""
    if not isinstance(ms, int | float) or isinstance(ms, bool):
        return "?" if ms is None else str(ms)
    try:
        when = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    if (when.hour, when.minute, when.second, when.microsecond) == (0, 0, 0, 0):
        return when.strftime("%Y-%m-%d")
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def render_fact(fact: Mapping[str, Any], *, compact: bool = False) -> str:
    """One fact on one line: ``#id subject predicate object [valid_from → valid_to|now]``.

    A literal object is quoted; confidence below 1 and a retraction are noted. Outside compact
    mode the line is a list item and ends with the cited source (URL, drawer), if any.
    """
    obj = fact.get("object")
    shown = (str(obj) if fact.get("object_is_entity", True)
             else json.dumps(str(obj), ensure_ascii=False))
    start, end = fact.get("valid_from_ms"), fact.get("valid_to_ms")
    interval = f"[{format_time(start)} → {'now' if end is None else format_time(end)}]"
    parts = [f"#{fact.get('id')}", _one_line(str(fact.get("subject"))),
             str(fact.get("predicate")), _one_line(shown), interval]
    confidence = fact.get("confidence")
    if isinstance(confidence, int | float) and confidence < 1:
        parts.append(f"confidence {confidence:.2f}")
    if end is not None and end == start:
        parts.append("(retracted)")
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


def render_facts(facts: Iterable[Mapping[str, Any]], compact: bool) -> list[str]:
    """Render facts with ``render_fact``, one string per fact."""
    return [render_fact(f, compact=compact) for f in facts]


def render_error(exc: BaseException) -> str:
    """Text of an ``isError`` tool result: error name, message, details and what to do."""
    if isinstance(exc, ToolArgumentError):
        return f"Error INVALID_ARGS: {exc}. Fix the arguments (see the tool's input schema)."
    if isinstance(exc, OSError):
        exc = DaemonUnreachable(f"lost the connection to palaced: {exc}")
    elif not isinstance(exc, PalaceError):
        exc = InternalError(f"{type(exc).__name__}: {exc}")
    lines = [f"Error {exc.name} ({exc.code}): {exc.message}"]
    if exc.details:
        lines.append("details: " + json.dumps(exc.details, sort_keys=True, default=str))
    hint = _ERROR_HINTS.get(exc.name)
    if hint is None and exc.retryable:
        hint = "This is temporary; retry in a moment."
    if hint:
        lines.append(hint)
    return "\n".join(lines)


_ERROR_HINTS = {
    "INVALID_ARGS": "Fix the arguments named above and call the tool again.",
    "MEMORY_NOT_FOUND": "No drawer has that id here; find ids with recall or list_drawers.",
    "PALACE_NOT_FOUND": "See the existing palaces with list_palaces.",
    "TEXT_TOO_LARGE": "Split the text into several smaller, self-contained drawers.",
    "INVALID_CONTENT": "Fix the text, name or date and call the tool again.",
    "FACT_NOT_FOUND": "No fact has that id here; find fact ids with kg_query or kg_timeline.",
}
