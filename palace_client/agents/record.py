"""Which projects ``palace init`` registered the bridge in, so ``palace uninstall`` can undo it.

A JSON list of project roots in ``<state_dir>/init-projects.json``, written when ``palace
init`` changed a project- or local-scope config (user scope needs no record: its files are
the user's own). The record only grows; undoing a project that no longer has palace's entries
changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from palace_client.agents.safe_write import atomic_write
from palaced.wire.private import make_private_dirs

RECORD_NAME = "init-projects.json"


def record_file(state_dir: Path) -> Path:
    return state_dir / RECORD_NAME


def recorded_projects(state_dir: Path) -> list[Path]:
    """The recorded project roots, oldest first; none when the record is missing or unreadable."""
    try:
        data = json.loads(record_file(state_dir).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    items = data.get("projects") if isinstance(data, dict) else None
    return [Path(p) for p in items if isinstance(p, str)] if isinstance(items, list) else []


def record_project(state_dir: Path, project: Path) -> None:
    """Add ``project`` to the record (once).

    Raises:
        OSError: the state dir or the record cannot be written.
    """
    projects = [str(p) for p in recorded_projects(state_dir)]
    if str(project) in projects:
        return
    make_private_dirs(state_dir)
    atomic_write(record_file(state_dir),
                 json.dumps({"projects": [*projects, str(project)]}, indent=2) + "\n")
