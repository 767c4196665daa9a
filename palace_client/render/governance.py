"""Plain-text rendering of the trash and the audit log, for the CLI.

Pure functions (mappings in, text out) on top of the primitives of ``palace_client.render.results``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from palace_client.render.results import counted, format_time


def forgotten(result: Mapping[str, Any], palace: str) -> str:
    """What ``memory.forget`` did, and how to undo it while one can."""
    did = result["id"]
    if not result.get("trashed"):
        return f"deleted drawer {did} for good"
    days = result.get("keep_days")
    keep = f"{days:g} days" if isinstance(days, int | float) else "a while"
    return (f"moved drawer {did} to the trash (`palace restore-drawer {did} --palace "
            f"{palace}` brings it back for {keep})")


def forgotten_many(result: Mapping[str, Any], palace: str) -> list[str]:
    """What ``memory.forget_many`` did (or with ``dry_run`` would do): the drawers listed,
    the count, and how to undo it."""
    lines = [f"[{d['id']}] {d['wing']}/{d['room']}  {d['preview']}"
             for d in result.get("drawers") or []]
    matched = int(result.get("matched") or 0)
    if len(lines) < matched:
        lines.append(f"... and {matched - len(lines)} more")
    if result.get("dry_run"):
        lines.append(f"would forget {counted(matched, 'drawer')} (dry run: nothing changed)")
        limit = result.get("max_drawers")
        if isinstance(limit, int) and matched > limit:
            lines.append(f"more than --max {limit}: pass --max {matched} to forget them all")
        if matched and result.get("selection"):
            lines.append(f"selection {result['selection']}: the same command without --dry-run "
                         f"and with --expect {result['selection']} forgets exactly these, or "
                         "nothing if the selectors match another set by then")
        return lines
    done = int(result.get("forgotten") or 0)
    batch = result.get("batch")
    if batch:
        lines.append(f"moved {counted(done, 'drawer')} to the trash as batch {batch} "
                     f"(`palace restore-drawer --batch {batch} --palace {palace}` brings "
                     "them back)")
    else:
        lines.append(f"deleted {counted(done, 'drawer')} for good" if done else "no drawer matched")
    return lines


def restored_batch(result: Mapping[str, Any]) -> list[str]:
    """What ``memory.restore_batch`` did."""
    back = list(result.get("restored") or [])
    lines = [f"restored {counted(len(back), 'drawer')} of batch {result.get('batch')}"]
    lines += [f"drawer {c['id']} stays in the trash: drawer {c['conflict']} holds the same "
              "text now" for c in result.get("conflicts") or []]
    return lines


def merged(result: Mapping[str, Any], palace: str) -> str:
    """What ``memory.merge`` did (or with ``dry_run`` would do)."""
    others = ", ".join(map(str, result.get("merged") or []))
    tags = ", ".join(result.get("tags") or []) or "none"
    if result.get("dry_run"):
        return (f"would keep drawer {result['kept']} (tags: {tags}) and move {others} to the "
                "trash (dry run: nothing changed)")
    batch = result.get("batch")
    undo = (f" as batch {batch} (`palace restore-drawer --batch {batch} --palace {palace}` "
            "brings them back)") if batch else " (deleted for good)"
    return f"kept drawer {result['kept']} (tags: {tags}); moved {others} to the trash{undo}"


def audit_line(entry: Mapping[str, Any]) -> str:
    """One audit entry: ``time  agent  op  outcome  drawers 1,2  facts 3  key=value``."""
    parts = [format_time(entry.get("at_ms")), str(entry.get("agent")), str(entry.get("op")),
             str(entry.get("outcome"))]
    for label, key in (("drawers", "drawer_ids"), ("facts", "fact_ids")):
        ids = list(entry.get(key) or [])
        if ids:
            shown = ",".join(map(str, ids[:20])) + (f",… ({len(ids)})" if len(ids) > 20 else "")
            parts.append(f"{label} {shown}")
    parts += [f"{k}={v}" for k, v in sorted((entry.get("detail") or {}).items())]
    return "  ".join(parts)
