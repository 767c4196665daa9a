"""The layout of a data root's palaces directory: palace names, the prefixes of directories
in transit (creates, deletes, restores), and the sweep of those a killed daemon left behind.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from palaced.wire.errors import InvalidPalaceName, clip, quote

log = logging.getLogger("palaced.palace.registry")

# Directories of creates and deletes in progress (names() never lists them: not kebab-case).
STAGING_PREFIX = ".creating-"
TRASH_PREFIX = ".deleting-"
# A palace a restore moved aside: renamed back at start if the restore never put its copy in.
REPLACED_PREFIX = ".replaced-"
NAME_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_NAME = 64


def validate_name(name: object) -> str:
    """Return ``name`` if it is lowercase kebab-case of 1-64 characters.

    Raises:
        InvalidPalaceName: anything else (``../x``, ``/abs``, empty, NUL, upper case...).
    """
    if not isinstance(name, str) or not name:
        raise InvalidPalaceName("palace name must be a non-empty string",
                                details={"name": quote(name, 80)})
    if len(name) > MAX_NAME or NAME_RE.fullmatch(name) is None:
        raise InvalidPalaceName(
            f"invalid palace name {quote(name, 80)}: use lowercase letters, digits and single "
            f"hyphens (kebab-case), 1-{MAX_NAME} characters",
            details={"name": clip(name, 80)},
        )
    return name


def sweep_leftovers(root: Path) -> list[str]:
    """Remove staging and trash directories a killed daemon left behind; returns them.

    A palace a killed restore had moved aside goes back under its name when nothing
    took its place, and is removed when the restored copy did.

    Call only while holding the daemon lock: these names belong to no open palace then.
    """
    if not root.is_dir():
        return []
    gone = []
    for p in sorted(root.iterdir()):
        if not p.is_dir() or p.is_symlink():
            continue
        if p.name.startswith(REPLACED_PREFIX):
            name = p.name[len(REPLACED_PREFIX):].rpartition("-")[0]
            if NAME_RE.fullmatch(name) and not os.path.lexists(root / name):
                p.rename(root / name)  # the restore never put its copy in place
                log.warning("restore of palace %s was interrupted: put it back", name)
                continue
        if p.name.startswith((STAGING_PREFIX, TRASH_PREFIX, REPLACED_PREFIX)):
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p.name)
    if gone:
        log.info("removed %d leftover(s) of interrupted creates/deletes", len(gone))
    return gone

