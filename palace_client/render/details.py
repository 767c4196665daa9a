"""What ``palace get`` says about a drawer's provenance and fate, under its details.

Layers: docs/development.md."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from palace_client.render.results import format_time


def provenance(drawer: Mapping[str, Any], *, now_ms: int | None = None) -> str | None:
    """One line: the drawer's kind when not a plain drawer (a captured ``exchange``, a
    ``summary``), its source, the drawers it supersedes, the one that supersedes it, the
    summary it was consolidated into and when it expires (or expired). None when none of
    these applies. ``now_ms``: the present, for "expires"/"expired" (default: the clock)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    parts: list[str] = []
    if drawer.get("kind") not in (None, "drawer"):
        parts.append(f"kind {drawer['kind']}")
    if drawer.get("source"):
        parts.append(f"source {drawer['source']}")
    if drawer.get("supersedes"):
        parts.append("supersedes " + ", ".join(f"[{i}]" for i in drawer["supersedes"]))
    if drawer.get("superseded_by") is not None:
        # Recall hides a superseded drawer: say which one replaced it.
        parts.append(f"superseded by [{drawer['superseded_by']}]")
    if drawer.get("consolidated_into") is not None:
        parts.append(f"consolidated into [{drawer['consolidated_into']}]")
    if drawer.get("expires_ms") is not None:
        verb = "expired" if drawer["expires_ms"] <= now else "expires"
        parts.append(f"{verb} {format_time(drawer['expires_ms'])}")
    return "    " + "  ".join(parts) if parts else None
