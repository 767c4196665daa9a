"""Palace names: slugifying text and deriving the palace of the project a directory is in.

A palace name is lowercase kebab-case, 1-64 characters. ``palace_name_for`` is the name a
project would claim (its git root's folder name); which palace a project actually uses is
``palace_client.api.projects``' (by path, persisted), which also maps the working directory,
``CLAUDE_PROJECT_DIR`` and an MCP client's roots (``root_uri_path`` here) to palaces.
"""

from __future__ import annotations

import re
import unicodedata
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
    """The palace name the project containing ``start`` would claim (``projects`` may give
    it another when a different project already holds this one).

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


def root_uri_path(uri: str) -> Path | None:
    """The local directory of an MCP root (``file:///home/me/proj``); ``None`` for other URIs.

    Only ``file`` URIs name a directory of this machine: with no host or ``localhost``, an
    absolute path, percent-escapes decoded. Anything else (``https:``, a remote host, a
    relative or empty path) gives ``None``.
    """
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme.lower() != "file" or parts.netloc.lower() not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    if not path.startswith("/") or "\0" in path:
        return None
    return Path(path)
