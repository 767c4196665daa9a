"""Which palace a project uses: one definition for the CLI, the MCP bridge, the hooks and init.

A project is the git root of a directory (outside git, the directory itself; the home
directory and the filesystem root are no project and use ``DEFAULT_PALACE``). Its palace is
chosen by the project's *path*, not its folder name, and the choice persists in
``<data_dir>/projects.json`` (``{"version": 1, "projects": {"/abs/root": "name"}}``):

* A project already in the map keeps its palace, whatever its folder is called now.
* A new project claims its folder name, slugified (``~/work/api`` -> ``api``), when no other
  project holds that name. If one does, it gets a derived name, stable because it comes from
  its path (``api-3f9c1a``), and a warning names both projects.
* A moved repository: when the project holding the name no longer exists (its directory is
  gone), the new path takes the name over, with its memories, and a notice says so. A
  renamed one (new folder name) starts a new palace; ``palace project --set OLD`` inside it
  points it back at its old one (see docs/agents.md, "Which palace"). Projects may share a
  palace that way (worktrees of one repository).

Two clients resolving the same new project at once agree: the read-claim-write runs under an
exclusive ``flock`` on ``projects.lock`` beside the map. The map is a file a user may edit, so
it is read as untrusted input: a regular file of ours (never through a symlink), at most
``MAX_MAP_BYTES``, entries whose path is not absolute or whose name is not a palace name are
ignored. An unreadable map leaves the derived folder name in use and is never overwritten.

Creating palaces (``CREATES_PALACE``): the first write to a palace that does not exist yet
creates it, whichever client sends it and whether the palace was named or derived; reads never
create one (they answer as for an empty palace or say that it does not exist yet).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from palace_client.api.slug import (
    DEFAULT_PALACE,
    find_project_root,
    is_palace_name,
    root_uri_path,
    slugify,
)
from palaced.wire.errors import SourceUnreadable
from palaced.wire.private import make_private_dirs
from palaced.wire.safe_files import private_file, read_regular

MAP_NAME = "projects.json"
LOCK_NAME = "projects.lock"
MAX_MAP_BYTES = 4 * 1024 * 1024
_HASH_CHARS = 6
# The ops that create their palace when it does not exist yet (every client, the same rule):
# the ones that add memories. Reads, edits and deletions of a missing palace never create it.
# (``capture.transcript`` has its own ``create`` argument, which the capture hook sets.)
CREATES_PALACE = frozenset({
    "memory.remember", "memory.remember_many", "palace.import_records", "graph.assert",
    "graph.link", "memoir.create",
})

Warn = Callable[[str], None]


def _stderr(text: str) -> None:
    sys.stderr.write(f"palace: {text}\n")


@dataclass(frozen=True)
class ProjectPalace:
    """A project's palace and how it was chosen."""

    name: str
    root: Path | None  # None: no project (home directory, filesystem root)
    how: str  # "mapped", "claimed", "derived", "moved", "default", "unmapped"


def project_root(start: Path, home: Path | None = None) -> Path | None:
    """The project ``start`` is in: its git root, else ``start`` itself; ``None`` for the home
    directory and the filesystem root outside git (they are no project).

    Raises:
        OSError: the path cannot be made absolute (deleted cwd) or the home is unknown.
    """
    start = start.expanduser().absolute()
    root = find_project_root(start)
    if root is not None:
        return root
    home = (home or Path.home()).absolute()
    if start == home or start == Path(start.anchor):
        return None
    return start


def map_file(data_dir: Path | None = None) -> Path:
    """The project map of this installation (``PALACE_HOME`` moves it with everything)."""
    if data_dir is None:
        from palaced.wire.paths import resolve

        data_dir = resolve().data_dir
    return data_dir / MAP_NAME


def read_map(path: Path) -> dict[str, str]:
    """The valid entries of the map at ``path`` (root -> palace); ``{}`` when it is missing.

    Raises:
        SourceUnreadable: it exists but is no regular file of ours, too large or not a JSON
            object (a user's hand edit gone wrong): the caller must not overwrite it.
    """
    if not os.path.lexists(path):
        return {}
    data, st = read_regular(path, MAX_MAP_BYTES)
    if st.st_uid != os.geteuid():
        raise SourceUnreadable(f"{path}: owned by uid {st.st_uid}, not by you",
                               details={"path": str(path), "reason": "foreign owner"})
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SourceUnreadable(f"{path}: not JSON", details={"path": str(path),
                                                             "reason": "not JSON"}) from None
    projects = doc.get("projects") if isinstance(doc, dict) else None
    if not isinstance(projects, dict):
        raise SourceUnreadable(f"{path}: no \"projects\" object",
                               details={"path": str(path), "reason": "no projects object"})
    return {root: name for root, name in projects.items()
            if isinstance(root, str) and isinstance(name, str) and root.startswith("/")
            and "\0" not in root and is_palace_name(name)}


def _write_map(path: Path, projects: Mapping[str, str]) -> None:
    with private_file(path) as out:
        json.dump({"version": 1, "projects": dict(sorted(projects.items()))}, out, indent=2)
        out.write("\n")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the map's lock (``projects.lock`` beside it) for a read-modify-write."""
    make_private_dirs(path.parent)
    fd = os.open(path.parent / LOCK_NAME,
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def derived_name(root: Path) -> str:
    """The stable second name of a project whose folder name another project holds: the
    folder name, a hyphen and six hex digits of the path's SHA-256."""
    base = slugify(root.name) or DEFAULT_PALACE
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:_HASH_CHARS]
    return f"{base[:64 - _HASH_CHARS - 1].rstrip('-')}-{digest}"


def _claim(projects: dict[str, str], root: Path, warn: Warn) -> tuple[str, str]:
    """Choose (and enter in ``projects``) the palace of the new project ``root``."""
    base = slugify(root.name) or DEFAULT_PALACE
    holders = [other for other, name in projects.items() if name == base]
    if not holders:
        projects[str(root)] = base
        return base, "claimed"
    gone = [other for other in holders if not Path(other).is_dir()]
    if len(gone) == len(holders):
        for other in gone:
            del projects[other]
        projects[str(root)] = base
        warn(f"palace '{base}' belonged to the project at {gone[0]}, which is gone: it is now "
             f"the palace of {root} (a moved repository keeps its memories; see `palace "
             "project --help`)")
        return base, "moved"
    name = derived_name(root)
    projects[str(root)] = name
    living = [other for other in holders if other not in gone]
    warn(f"two projects are named '{base}': {living[0]} uses palace '{base}', so {root} "
         f"uses palace '{name}' (`palace project --set NAME` inside it chooses another)")
    return name, "derived"


def project_palace(start: Path, *, home: Path | None = None, data_dir: Path | None = None,
                   warn: Warn = _stderr, record: bool = True) -> ProjectPalace:
    """The palace of the project containing ``start``, entering a new project in the map
    (unless not ``record``: then the palace it would get, the map left as it is).

    Never raises for a bad map or an unwritable data directory: it warns and uses the folder
    name for this call, so an agent session still gets its palace.

    Raises:
        OSError: ``start`` cannot be made absolute or the home directory is unknown.
    """
    root = project_root(start, home)
    if root is None:
        return ProjectPalace(DEFAULT_PALACE, None, "default")
    path = map_file(data_dir)
    fallback = ProjectPalace(slugify(root.name) or DEFAULT_PALACE, root, "unmapped")
    try:
        known = read_map(path).get(str(root))
        if known is not None:  # the common case, without taking the lock
            return ProjectPalace(known, root, "mapped")
        if not record:
            name, how = _claim(read_map(path), root, lambda _: None)
            return ProjectPalace(name, root, how)
        with _locked(path):
            projects = read_map(path)
            if str(root) in projects:
                return ProjectPalace(projects[str(root)], root, "mapped")
            name, how = _claim(projects, root, warn)
            _write_map(path, projects)
            return ProjectPalace(name, root, how)
    except SourceUnreadable as exc:
        warn(f"the project map is unreadable ({exc.message}); using palace "
             f"'{fallback.name}' for {root}: fix or remove the file")
    except OSError as exc:
        warn(f"cannot record the palace of {root} in {path} ({exc}); using '{fallback.name}'")
    return fallback


def set_project_palace(root: Path, name: str, *, data_dir: Path | None = None) -> list[str]:
    """Point the project at ``root`` to the palace ``name``; returns the other projects that
    use ``name`` too (they keep it: projects may share a palace, e.g. worktrees of one repo).

    Raises:
        ValueError: ``name`` is not a palace name.
        SourceUnreadable: the map exists but cannot be read (it is left alone).
        OSError: the map cannot be written.
    """
    if not is_palace_name(name):
        raise ValueError(f"{name!r} is not a palace name (lowercase kebab-case, 1-64 chars)")
    path = map_file(data_dir)
    with _locked(path):
        projects = read_map(path)
        projects[str(root)] = name
        _write_map(path, projects)
    return [other for other, held in projects.items() if held == name and other != str(root)]


def current_project(environ: Mapping[str, str] | None = None, cwd: Path | None = None,
                    warn: Warn = _stderr) -> ProjectPalace:
    """The project a client runs for: ``CLAUDE_PROJECT_DIR`` when set (Claude Code sets it
    for the servers and hooks it starts), else the working directory's.

    Raises:
        OSError: the working directory was deleted, or the home directory is unknown.
    """
    env = os.environ if environ is None else environ
    project_dir = env.get("CLAUDE_PROJECT_DIR")
    start = Path(project_dir) if project_dir else (cwd or Path.cwd())
    return project_palace(start, warn=warn)


def palace_of(start: Path, home: Path | None = None) -> str:
    """``project_palace(start).name``, ``DEFAULT_PALACE`` when ``start`` cannot be resolved."""
    try:
        return project_palace(start, home=home).name
    except OSError:  # the cwd was deleted, or the home directory is unknown
        return DEFAULT_PALACE


def default_palace(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """The palace of the current project: from ``CLAUDE_PROJECT_DIR`` if set, else the cwd."""
    from_env = project_dir_palace(environ)
    if from_env is not None:
        return from_env
    try:
        return palace_of(cwd or Path.cwd())
    except OSError:  # the cwd was deleted
        return DEFAULT_PALACE


def project_dir_palace(environ: Mapping[str, str] | None = None) -> str | None:
    """The palace of the project ``CLAUDE_PROJECT_DIR`` names; ``None`` when it is unset or empty.

    Claude Code sets it for the servers and hooks it starts: it is the most direct word on
    which project a session works in.
    """
    env = os.environ if environ is None else environ
    project_dir = env.get("CLAUDE_PROJECT_DIR")
    if not project_dir:
        return None
    return palace_of(Path(project_dir))


def root_palace(uri: str, home: Path | None = None) -> str | None:
    """The palace of the project an MCP root URI names (``projects.palace_of``); ``None`` when
    the URI names no local directory (see ``root_uri_path``)."""
    path = root_uri_path(uri)
    if path is None:
        return None
    return palace_of(path, home)
