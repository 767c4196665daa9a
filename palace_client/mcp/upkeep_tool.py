"""The MCP ``upkeep`` tool: one tool whose ``action`` picks the op it runs, and its wording.

``update`` runs ``memory.update`` (``id`` and the fields to change), ``consolidate`` runs
``memory.consolidate`` (``room``, optional ``wing``, the ``summary``), ``health`` runs
``memory.health``, ``conflicts`` runs ``memory.conflicts`` and ``resolve`` runs
``memory.resolve_conflict`` (``id``, ``resolution``, ``text`` to merge), and the bulk upkeep
``forget`` (``memory.forget_many``: the selectors), ``merge`` (``memory.merge``: ``ids``) and
``restore`` (``memory.restore_batch``: ``batch``); ``forget`` and ``merge`` are dry runs unless
the agent passes ``dry_run: false``. One tool instead of eight keeps ``tools/list`` short (every
session pays for it); ``schema.action_args`` refuses the arguments an action does not take,
naming the ones it does. The tool's schema is declared in ``tools`` (``UPKEEP_ACTIONS``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from palace_client.mcp.schema import action_args
from palace_client.mcp.tools import TOOLS_BY_NAME
from palace_client.render.results import one_line

OpCall = Callable[[str, "str | None", "Mapping[str, Any] | None"], dict[str, Any]]
LISTED = 5  # stale drawers and duplicate pairs shown per room


def run_upkeep(op_call: OpCall, palace: str, arguments: dict[str, Any]) -> str:
    """Run the ``upkeep`` tool's ``action`` on ``palace`` through ``op_call``; its text.

    Raises:
        ToolArgumentError: arguments the action does not take, or required ones missing.
        PalaceError: what the daemon answers (MEMORY_NOT_FOUND, INVALID_ARGS...).
    """
    action = str(arguments["action"])
    op, args = action_args(TOOLS_BY_NAME["upkeep"], arguments)
    if action in ("forget", "merge"):
        args.setdefault("dry_run", True)  # an agent sees what goes before it goes
    result = op_call(op, palace, args)
    if action == "forget":
        return _forgotten(result, palace)
    if action == "merge":
        return _merged(result, palace)
    if action == "restore":
        conflicts = result.get("conflicts") or []
        text = (f"Restored {len(result['restored'])} drawer(s) of batch {result['batch']} "
                f"in palace '{palace}'.")
        if conflicts:
            text += (f" {len(conflicts)} stay in the trash: the same text is stored again "
                     f"(#{', #'.join(str(c['conflict']) for c in conflicts[:LISTED])}).")
        return text
    if action == "update":
        return _updated(result, palace)
    if action == "conflicts":
        return _conflicts(result, palace)
    if action == "resolve":
        return _resolved(result)
    if action == "consolidate":
        return (f"Stored summary #{result['summary_id']} in [{result['wing']}/{result['room']}] "
                f"of palace '{palace}'; it consolidates {len(result['source_ids'])} drawer(s), "
                "which are kept but no longer recalled.")
    return _health(result, palace)


def _forgotten(result: Mapping[str, Any], palace: str) -> str:
    matched = int(result["matched"])
    lines = [f"  #{d['id']} [{d['wing']}/{d['room']}] {one_line(d['preview'])}"
             for d in (result.get("drawers") or [])[:LISTED]]
    if matched > len(lines):
        lines.append(f"  ... and {matched - len(lines)} more")
    if result["dry_run"]:
        again = "dry_run=false" + (f" expect='{result['selection']}'"
                                   if result.get("selection") else "")
        head = (f"Would forget {matched} drawer(s) of palace '{palace}' (nothing changed yet; "
                f"call again with {again} to forget exactly these):")
        if matched > int(result["max_drawers"]):
            head += (f" more than {result['max_drawers']}, which would be refused: narrow the "
                     "selection, or ask the user to run `palace forget` with --max.")
    elif result.get("batch"):
        head = (f"Moved {result['forgotten']} drawer(s) of palace '{palace}' to the trash as "
                f"batch {result['batch']} (upkeep action='restore' batch='{result['batch']}' "
                "brings them back):")
    else:
        head = f"Deleted {result['forgotten']} drawer(s) of palace '{palace}' for good:"
    return "\n".join([head, *lines]) if matched else "No drawer matches; nothing to forget."


def _merged(result: Mapping[str, Any], palace: str) -> str:
    others = ", ".join(f"#{i}" for i in result["merged"])
    tags = ", ".join(result.get("tags") or []) or "none"
    if result["dry_run"]:
        return (f"Would keep drawer #{result['kept']} of palace '{palace}' (tags: {tags}) "
                f"and move {others} to the trash; call again with dry_run=false to merge.")
    undo = (f" as batch {result['batch']} (upkeep action='restore' batch='{result['batch']}' "
            "undoes it)") if result.get("batch") else " for good"
    return (f"Kept drawer #{result['kept']} of palace '{palace}' (tags: {tags}); moved "
            f"{others} to the trash{undo}.")


def _updated(result: Mapping[str, Any], palace: str) -> str:
    did = result["id"]
    changed = list(result.get("changed") or [])
    if not changed:
        return f"Drawer #{did} in palace '{palace}' already says that; nothing changed."
    text = (f"Updated drawer #{did} in palace '{palace}' ({', '.join(changed)}); it is now "
            f"version {result['version']}, earlier versions are kept.")
    if "text" in changed and not result.get("embedded"):
        text += " Its new text is found by keywords now, by meaning once it is embedded."
    return text


# How the remember answer says to resolve a conflict when this tool is served.
RESOLVE_BY_UPKEEP = "(upkeep action='resolve' id={conflict} resolution='supersede')"


def _conflicts(result: Mapping[str, Any], palace: str) -> str:
    found = result["conflicts"]
    if not found:
        return f"No open conflicts in palace '{palace}'."
    lines = [f"{result['total']} open conflict(s) in palace '{palace}':"]
    for x in found:
        lines.append(f"conflict {x['id']} ({x['reason']}): #{x['newer_id']} "
                     f"\u201c{one_line(x['newer_text'])}\u201d is newer than #{x['older_id']} "
                     f"\u201c{one_line(x['older_text'])}\u201d")
    lines.append("Resolve each with upkeep action='resolve' id=N resolution='supersede' "
                 "(retire the older), 'keep_both', or 'merge' with text.")
    return "\n".join(lines)


def _resolved(result: Mapping[str, Any]) -> str:
    if result.get("already"):
        return f"Conflict {result['id']} was already resolved ({result['resolution']})."
    text = f"Resolved conflict {result['id']}: {result['resolution']}."
    if result.get("merged_id") is not None:
        text += f" Stored the merged drawer #{result['merged_id']}."
    if result["retired"]:
        text += (" Retired " + ", ".join(f"#{i}" for i in result["retired"])
                 + " (kept as history, no longer recalled).")
    return text


def consolidation_hint(hint: Mapping[str, Any]) -> str:
    """The line ``remember`` adds when the drawer's room is due a consolidation."""
    room = json.dumps(str(hint["room"]), ensure_ascii=False)
    return (f"Room {room} now holds {hint['drawers']} unconsolidated drawers: if they belong "
            f"together, sum them up with upkeep action='consolidate' room={room} "
            "summary='<summary>'.")


def _health(result: Mapping[str, Any], palace: str) -> str:
    t = result["totals"]
    lines = [f"Health of palace '{palace}': {t['drawers']} drawers in {t['rooms']} rooms, "
             f"{t['stale']} stale, {t['duplicates']} duplicate pairs, {t['hints']} rooms to "
             "consolidate."]
    for room in result.get("rooms") or []:
        notes: list[str] = []
        if room.get("hint"):
            notes.append(f"  consolidate: {room['unconsolidated']} unconsolidated drawers")
        for s in (room.get("stale") or [])[:LISTED]:
            notes.append(f"  stale #{s['id']} (unused {s['days_unused']:.0f} days, weight "
                         f"{s['weight']:.3f}): {one_line(s['preview'])}")
        for d in (room.get("duplicates") or [])[:LISTED]:
            a, b = d["ids"]
            notes.append(f"  {d['kind']} duplicates #{a} ~ #{b} ({d['similarity']:.2f})")
        if notes:
            lines.append(f"[{room['wing']}/{room['room']}] {room['active']} active")
            lines.extend(notes)
    if len(lines) == 1:
        lines.append("Nothing to tidy.")
    else:
        lines.append("Merge duplicates with upkeep action='merge' ids=[...]; forget stale "
                     "drawers that no longer hold.")
    return "\n".join(lines)
