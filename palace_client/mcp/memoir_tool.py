"""The ``memoir`` MCP tool: one tool whose ``action`` picks the memoir op it runs.

``run_memoir`` checks the arguments against the chosen op (``schema.action_args``), sends it
and words the answer for an agent with ``palace_client.render.memoirs``. The tool's schema is
declared in ``tools`` (``MEMOIR_ACTIONS``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from palace_client.mcp.schema import action_args
from palace_client.mcp.tools import TOOLS_BY_NAME
from palace_client.render.memoirs import link_line, memoir_line, render_concept, render_concepts
from palace_client.render.results import counted

OpCall = Callable[[str, "str | None", "Mapping[str, Any] | None"], dict[str, Any]]


def run_memoir(op_call: OpCall, palace: str, arguments: dict[str, Any], compact: bool) -> str:
    """Run the ``memoir`` tool's ``action`` on ``palace`` through ``op_call``; its text.

    Raises:
        ToolArgumentError: arguments the action does not take, or required ones missing.
        PalaceError: what the daemon answers (MEMOIR_NOT_FOUND, CONCEPT_EXISTS...).
    """
    action = str(arguments["action"])
    op, args = action_args(TOOLS_BY_NAME["memoir"], arguments)
    result = op_call(op, palace, args)
    where = f"in palace '{palace}'"
    sep = "\n" if compact else "\n\n"
    if action == "create":
        m = result["memoir"]
        verb = "Created memoir" if result["created"] else "Memoir already exists (unchanged):"
        return f"{verb} {memoir_line(m)} {where}."
    if action == "list":
        found = list(result.get("memoirs") or [])
        if not found:
            return f"No memoirs {where} yet; create one with action=create."
        return f"Memoirs {where} ({len(found)}):\n" + "\n".join(
            f"- {memoir_line(m)}" for m in found)
    if action == "show":
        return _show(result, where, compact)
    if action in ("add_concept", "refine"):
        c = result["concept"]
        head = {("add_concept", True): f"Added concept to memoir '{c['memoir']}' {where}:",
                ("add_concept", False): "Already there with this definition (unchanged); "
                                        "use action=refine to change it:",
                ("refine", True): f"Refined (revision {c['revision']}, confidence "
                                  f"{c['confidence']:.2f}):",
                ("refine", False): "Nothing new in this refinement (unchanged):",
                }[(action, bool(result.get("created", result.get("changed"))))]
        return head + "\n" + render_concept(c, compact=compact)
    if action == "update":
        changed = ", ".join(result["changed"]) or "nothing: it says that already"
        return f"Updated memoir {memoir_line(result['memoir'])} {where} ({changed})."
    if action == "rename_concept":
        c = result["concept"]
        verb = "Renamed" if result["changed"] else "Already so named (unchanged):"
        return f"{verb} concept {json.dumps(c['name'], ensure_ascii=False)} {where}."
    if action == "delete_concept":
        return (f"Deleted concept {json.dumps(result['concept']['name'], ensure_ascii=False)} "
                f"{where} with {counted(int(result.get('links') or 0), 'link')}.")
    if action == "link":
        verb = "Linked" if result["created"] else "Already linked"
        return f"{verb} {where}: {link_line(result['link'])}"
    if action == "search":
        found = list(result.get("concepts") or [])
        what = " ".join(f"{k} {json.dumps(args[k], ensure_ascii=False)}"
                        for k in ("query", "label", "memoir") if args.get(k) is not None)
        if not found:
            return f"No concepts match {what} {where}."
        return (f"Concepts matching {what} {where} ({len(found)}):" + sep
                + "\n".join(render_concepts(found, compact, show_memoir=True)))
    return _inspect(result, where, compact)


def _show(result: Mapping[str, Any], where: str, compact: bool) -> str:
    m, stats = result["memoir"], result.get("stats") or {}
    lines = [f"Memoir {memoir_line(m)} {where}."]
    if stats.get("labels"):
        lines.append("Labels: " + ", ".join(f"{lab['label']} ({lab['concepts']})"
                                            for lab in stats["labels"]))
    concepts = list(result.get("concepts") or [])
    if concepts and not compact:
        lines.append("")
    lines.extend(render_concepts(concepts, compact))
    if result.get("next_offset") is not None:
        lines.append(f"({counted(m['concepts'] - result['next_offset'], 'more concept')}; "
                     "`palace memoir show --offset` lists them.)")
    return "\n".join(lines)


def _inspect(result: Mapping[str, Any], where: str, compact: bool) -> str:
    c = result["concept"]
    lines = [f"Concept in memoir '{c['memoir']}' {where}:", render_concept(c, compact=compact)]
    by_distance: dict[int, list[str]] = {}
    for node in result.get("nodes") or []:
        if node.get("distance"):
            by_distance.setdefault(int(node["distance"]), []).append(str(node["name"]))
    if not by_distance:
        lines.append("No links yet; relate it with action=link.")
        return "\n".join(lines)
    for dist in sorted(by_distance):
        lines.append(f"{counted(dist, 'link')} away: {', '.join(by_distance[dist])}")
    lines.append("Links:")
    lines.extend(("" if compact else "- ") + link_line(ln) for ln in result.get("links") or [])
    if result.get("truncated"):
        lines.append("(cut short at the node limit; inspect with a smaller depth)")
    return "\n".join(lines)
