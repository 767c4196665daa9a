"""Palace names: slugifying text and deriving the palace of the project a directory is in.

A palace name is lowercase kebab-case, 1-64 characters. A project's palace is named after its
git root (or the directory itself outside git); the home directory and the filesystem root map
to ``DEFAULT_PALACE``. Used by the MCP bridge (``tools``) and ``palace init`` (``agents``).
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path

DEFAULT_PALACE = "default"
_SLUG_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_MAX_SLUG = 64


def slugify(text: str) -> str:
    """Return ``text`` as a palace name: lowercase kebab-case, 1-64 chars, or "" if nothing is left.

    Accents are folded to ASCII, camelCase boundaries become hyphens, and every run of other
    characters becomes one hyphen.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", ascii_text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", spaced)
    slug = re.sub(r"[^a-z0-9]+", "-", spaced.lower()).strip("-")
    return slug[:_MAX_SLUG].rstrip("-")


def is_palace_name(name: str) -> bool:
    """True if ``name`` is a valid palace name (lowercase kebab-case, 1-64 chars)."""
    return len(name) <= _MAX_SLUG and _SLUG_RE.fullmatch(name) is not None


def find_project_root(start: Path) -> Path | None:
    """Return the nearest directory at or above ``start`` holding ``.git`` (dir or file)."""
    current = start
    for candidate in (current, *current.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def palace_name_for(start: Path, home: Path | None = None) -> str:
    """Derive the palace name of the project containing ``start``.

    The git root's directory name, slugified; outside a git repository the directory itself,
    except the home directory and the filesystem root, which map to ``"default"``.
    """
    start = start.expanduser().absolute()
    root = find_project_root(start)
    if root is None:
        home = (home or Path.home()).absolute()
        if start == home or start == Path(start.anchor):
            return DEFAULT_PALACE
        root = start
    return slugify(root.name) or DEFAULT_PALACE


def default_palace(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """The palace of the current project: from ``CLAUDE_PROJECT_DIR`` if set, else the cwd."""
    env = os.environ if environ is None else environ
    project_dir = env.get("CLAUDE_PROJECT_DIR")
    try:
        start = Path(project_dir) if project_dir else (cwd or Path.cwd())
        return palace_name_for(start)
    except OSError:  # the cwd was deleted, or the home directory is unknown
        return DEFAULT_PALACE
