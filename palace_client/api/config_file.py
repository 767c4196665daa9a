"""The config file as a client reads it: one ``[section]`` table, never a reason to fail.

The daemon owns the config file's meaning (``palaced.config``, ``palaced check-config``
reports every problem); a client reads only the few keys of its own (``[mcp] tools`` for the
bridge, ``[hooks]`` for the prompt hook) and must keep working when the file is missing,
unreadable or malformed. The file is someone else's to shape, so it is read as untrusted
input: a regular file (a symlink to one is followed: dotfile managers link it), at most
``MAX_CONFIG_BYTES``, never a FIFO that would hang a hook.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from palaced.wire.errors import SourceUnreadable
from palaced.wire.safe_files import read_regular

MAX_CONFIG_BYTES = 1024 * 1024


def config_section(path: Path, name: str, warn: Callable[[str], None]) -> dict[str, Any]:
    """The ``[name]`` table of the config file at ``path``: empty when the file is missing
    or has no such table; empty after ``warn(reason)`` when it cannot be read or parsed, or
    ``[name]`` is not a table. Never raises."""
    try:
        raw, _ = read_regular(path, MAX_CONFIG_BYTES, follow=True)
        data = tomllib.loads(raw.decode("utf-8"))
    except SourceUnreadable as exc:
        if os.path.lexists(path):
            warn(f"cannot read {path} ({exc.details.get('reason') or exc.message})")
        return {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        warn(f"cannot read {path} ({exc})")
        return {}
    table = data.get(name, {})
    if not isinstance(table, dict):
        warn(f"bad config file {path}: [{name}] is not a table")
        return {}
    return table
