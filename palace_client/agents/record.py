"""Which projects ``palace init`` registered the bridge in, so ``palace uninstall`` can undo it.

A JSON list of project roots in ``<state_dir>/init-projects.json``, written when ``palace
init`` changed a project- or local-scope config (user scope needs no record: its files are
the user's own). The record only grows; undoing a project that no longer has palace's entries
changes nothing. Beside it, under ``"dirs"``, the directories ``init`` created for a config
file (``.vscode/``, ``.cursor/``...): an uninstall that deletes the file removes them again
when they are empty.
"""

from __future__ import annotations

import json
from pathlib import Path

from palace_client.agents.safe_write import atomic_write
from palaced.wire.private import make_private_dirs

RECORD_NAME = "init-projects.json"


def record_file(state_dir: Path) -> Path:
    return state_dir / RECORD_NAME


def _recorded(state_dir: Path, key: str) -> list[str]:
    try:
        data = json.loads(record_file(state_dir).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    items = data.get(key) if isinstance(data, dict) else None
    return [p for p in items if isinstance(p, str)] if isinstance(items, list) else []


def _write(state_dir: Path, key: str, items: list[str]) -> None:
    record = {k: _recorded(state_dir, k) for k in ("projects", "dirs")}
    record[key] = items
    make_private_dirs(state_dir)
    atomic_write(record_file(state_dir), json.dumps(record, indent=2) + "\n")


def recorded_projects(state_dir: Path) -> list[Path]:
    """The recorded project roots, oldest first; none when the record is missing or unreadable."""
    return [Path(p) for p in _recorded(state_dir, "projects")]


def record_project(state_dir: Path, project: Path) -> None:
    """Add ``project`` to the record (once).

    Raises:
        OSError: the state dir or the record cannot be written.
    """
    projects = _recorded(state_dir, "projects")
    if str(project) not in projects:
        _write(state_dir, "projects", [*projects, str(project)])


def record_dirs(state_dir: Path, dirs: list[Path]) -> None:
    """Note directories ``init`` created (for ``remove_created_dirs``).

    Raises:
        OSError: the state dir or the record cannot be written.
    """
    known = _recorded(state_dir, "dirs")
    new = [str(d) for d in dirs if str(d) not in known]
    if new:
        _write(state_dir, "dirs", [*known, *new])


def remove_created_dirs(state_dir: Path, start: Path) -> list[Path]:
    """Remove ``start`` and its parents while each is a directory ``init`` created and is
    now empty; returns the removed ones. Anything else (a directory the user made, one
    holding files) is left alone.

    Raises:
        OSError: the record cannot be rewritten.
    """
    known = _recorded(state_dir, "dirs")
    removed: list[Path] = []
    current = start
    while str(current) in known:
        try:
            current.rmdir()  # only an empty directory goes
        except FileNotFoundError:
            pass
        except OSError:
            break
        removed.append(current)
        current = current.parent
    if removed:
        _write(state_dir, "dirs", [d for d in known if Path(d) not in removed])
    return removed
