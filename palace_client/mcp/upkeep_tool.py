"""The MCP ``upkeep`` tool: one tool whose ``action`` picks the op, and its results' wording.

``update`` runs ``memory.update`` (``id`` and the fields to change), ``consolidate`` runs
``memory.consolidate`` (``room``, optional ``wing``, the summary as ``text``) and ``health``
runs ``memory.health``. One tool instead of three keeps ``tools/list`` short (every session
pays for it); the arguments an action does not take are refused, naming the ones it does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from palace_client.render import one_line

from .schema import ToolArgumentError

# The arguments of each action (besides ``action``), and which of them it needs.
TAKES: dict[str, tuple[str, ...]] = {
    "update": ("id", "text", "importance", "tags", "room", "wing"),
    "consolidate": ("room", "text", "wing"),
    "health": (),
}
NEEDS: dict[str, tuple[str, ...]] = {"update": ("id",), "consolidate": ("room", "text")}
LISTED = 5  # stale drawers and duplicate pairs shown per room


def request(args: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``(action, op, op args)`` of an ``upkeep`` call.

    Raises:
        ToolArgumentError: an argument the action does not take, or one it needs is missing.
    """
    rest = dict(args)
    action = str(rest.pop("action"))
    takes = TAKES[action]
    extra = sorted(k for k in rest if k not in takes)
    if extra:
        allowed = ", ".join(takes) or "nothing else"
        raise ToolArgumentError(f"action '{action}' does not take {', '.join(extra)} "
                                f"(it takes {allowed})")
    missing = [k for k in NEEDS.get(action, ()) if k not in rest]
    if missing:
        raise ToolArgumentError(f"action '{action}' needs {' and '.join(missing)}")
    if action == "update":
        if len(rest) == 1:
            raise ToolArgumentError("action 'update' needs a field to change: text, "
                                    "importance, tags, room or wing")
        return action, "memory.update", rest
    if action == "consolidate":
        rest["summary"] = rest.pop("text")
        return action, "memory.consolidate", rest
    return action, "memory.health", {}


def render(action: str, result: Mapping[str, Any], palace: str) -> str:
    """The text an agent reads after an ``upkeep`` call."""
    if action == "update":
        return _updated(result, palace)
    if action == "consolidate":
        return (f"Stored summary #{result['summary_id']} in [{result['wing']}/{result['room']}] "
                f"of palace '{palace}'; it consolidates {len(result['source_ids'])} drawer(s), "
                "which are kept.")
    return _health(result, palace)


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


def consolidation_hint(hint: Mapping[str, Any]) -> str:
    """The line ``remember`` adds when the drawer's room is due a consolidation."""
    room = json.dumps(str(hint["room"]), ensure_ascii=False)
    return (f"Room {room} now holds {hint['drawers']} unconsolidated drawers: if they belong "
            f"together, sum them up with upkeep action='consolidate' room={room} "
            "text='<summary>'.")


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
        lines.append("Merge duplicates with upkeep update + forget; forget stale drawers "
                     "that no longer hold.")
    return "\n".join(lines)
