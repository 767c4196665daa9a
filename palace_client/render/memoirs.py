"""Plain-text rendering of memoirs, concepts and their links, for the CLI and the MCP tool.

Pure functions (mappings in, lines out), in the two layouts of ``palace_client.render.results``: the
terminal layout (``cli_*``) and the agent layout (``render_*``). A concept reads
``name [r2 c0.60] (domain:auth, type:service)``: its revision and confidence, then its labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from palace_client.render.results import counted, indented, one_line


def concept_head(c: Mapping[str, Any], *, show_memoir: bool = False) -> str:
    """``name [r2 c0.60] (labels)``; with ``show_memoir``, ``memoir/name`` first."""
    name = f"{c.get('memoir')}/{c.get('name')}" if show_memoir else str(c.get("name"))
    head = f"{name} [r{c.get('revision')} c{float(c.get('confidence') or 0):.2f}]"
    if c.get("labels"):
        head += f" ({', '.join(map(str, c['labels']))})"
    return head


def concept_notes(c: Mapping[str, Any]) -> list[str]:
    """The concept's sources (``sources #3, #9``) and the consolidation hint, if any."""
    notes = []
    if c.get("sources"):
        notes.append("sources " + ", ".join(f"#{s}" for s in c["sources"]))
    if c.get("consolidate"):
        notes.append("(enough sources to consolidate them into one summary drawer)")
    return notes


def link_line(link: Mapping[str, Any]) -> str:
    """``from --relation--> to`` and the weight when it is not 1."""
    weight = float(link.get("weight", 1.0))
    note = f"  (weight {weight:g})" if weight != 1.0 else ""
    return f"{link.get('from')} --{link.get('relation')}--> {link.get('to')}{note}"


def memoir_line(m: Mapping[str, Any]) -> str:
    """``name: 3 concepts, 2 links - description``."""
    text = (f"{m.get('name')}: {counted(int(m.get('concepts') or 0), 'concept')}, "
            f"{counted(int(m.get('links') or 0), 'link')}")
    return text + (f" - {one_line(str(m['description']))}" if m.get("description") else "")


# -- terminal layout ----------------------------------------------------------------------------
def cli_concept(c: Mapping[str, Any], *, show_memoir: bool = False) -> list[str]:
    """A concept's head line, then its definition and notes indented."""
    return [concept_head(c, show_memoir=show_memoir),
            *indented(str(c.get("definition", "")), "    "),
            *(f"    {n}" for n in concept_notes(c))]


def cli_show(result: Mapping[str, Any]) -> list[str]:
    """``memoir.show``: the memoir line, its stats, then its concepts."""
    memoir, stats = result["memoir"], result.get("stats") or {}
    lines = [memoir_line(memoir)]
    if stats.get("avg_confidence") is not None:
        lines.append(f"  average confidence {stats['avg_confidence']:.2f}; consolidate at "
                     f"{counted(int(memoir['consolidation_threshold']), 'source')}")
    if stats.get("labels"):
        lines.append("  labels: " + ", ".join(f"{lab['label']} ({lab['concepts']})"
                                              for lab in stats["labels"]))
    for c in result.get("concepts") or []:
        lines.extend(cli_concept(c))
    if result.get("next_offset") is not None:
        lines.append(f"(more: --offset {result['next_offset']})")
    return lines


def cli_inspect(result: Mapping[str, Any]) -> list[str]:
    """``memoir.inspect``: the concept, its neighbours by distance, then the links."""
    lines = cli_concept(result["concept"])
    for node in result.get("nodes") or []:
        if node.get("distance"):
            lines.append(f"{node['distance']}  {node['name']}")
    lines.extend(f"   {link_line(ln)}" for ln in result.get("links") or [])
    if len(result.get("nodes") or []) <= 1:
        lines.append(f"{result['concept']['name']} has no links")
    if result.get("truncated"):
        lines.append("(truncated at --max-nodes)")
    return lines


# -- agent layout -------------------------------------------------------------------------------
def render_concept(c: Mapping[str, Any], *, compact: bool = False, show_memoir: bool = False
                   ) -> str:
    """A concept as a list item: head, then its definition and notes (one line compact)."""
    head = concept_head(c, show_memoir=show_memoir)
    body = [str(c.get("definition", "")), *concept_notes(c)]
    if compact:
        return " ".join([head + ":", *map(one_line, body)])
    return "\n".join([f"- {head}", *(ln for text in body for ln in indented(text, "  "))])


def render_concepts(concepts: Iterable[Mapping[str, Any]], compact: bool, *,
                    show_memoir: bool = False) -> list[str]:
    """Render concepts with ``render_concept``, one string per concept."""
    return [render_concept(c, compact=compact, show_memoir=show_memoir) for c in concepts]
