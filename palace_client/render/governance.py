"""Plain-text rendering of the trash and the audit log, for the CLI.

Pure functions (mappings in, text out) on top of the primitives of ``palace_client.render.results``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from palace_client.render.results import format_time


def forgotten(result: Mapping[str, Any], palace: str) -> str:
    """What ``memory.forget`` did, and how to undo it while one can."""
    did = result["id"]
    if not result.get("trashed"):
        return f"deleted drawer {did} for good"
    days = result.get("keep_days")
    keep = f"{days:g} days" if isinstance(days, int | float) else "a while"
    return (f"moved drawer {did} to the trash (`palace restore-drawer {did} --palace "
            f"{palace}` brings it back for {keep})")


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
