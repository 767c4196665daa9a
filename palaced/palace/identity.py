"""A palace's L0 identity text: the one place that reads a local palace's identity file
(``read_identity``, user-edited, never breaking a recall), writes it, and strips comment
lines. A team palace keeps the same text in its database (``team.TeamStorage``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from pathlib import Path

from palaced.store.conn.db import storage_errors

log = logging.getLogger("palaced.palace.identity")

# L0 opens every recall and wake-up; a bigger file is a mistake, not an identity.
IDENTITY_MAX_BYTES = 64 * 1024
# The last problem reported per identity file: every recall reads the file, so the same
# warning is logged once, not once per request.
_reported: dict[Path, str] = {}


def _report(path: Path, problem: str | None) -> None:
    if problem is None:
        _reported.pop(path, None)
    elif _reported.get(path) != problem:
        if len(_reported) > 1024:
            _reported.clear()
        _reported[path] = problem
        log.warning("%s: %s", path, problem)


def read_identity(path: Path, *, keep_comments: bool = False) -> str:
    """L0: the identity file's text without ``#`` comment lines ("" when there is none);
    with ``keep_comments``, the whole text as the file holds it (for an export).

    The file is user-edited, so nothing in it may break a recall: only a regular file is read
    (a FIFO or device would block the worker thread forever; a symlink is not followed), at
    most ``IDENTITY_MAX_BYTES`` of it (then cut with a marker), and bytes that are not UTF-8
    are replaced. Never raises; each new problem is logged once as a warning.
    """
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        _report(path, None)
        return ""
    except OSError as exc:
        _report(path, "is a symlink; ignored (L0 stays empty)" if exc.errno == errno.ELOOP
                else f"cannot be read ({exc.strerror}); L0 stays empty")
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _report(path, "is not a regular file; ignored (L0 stays empty)")
            return ""
        raw = bytearray()
        while len(raw) <= IDENTITY_MAX_BYTES:
            chunk = os.read(fd, IDENTITY_MAX_BYTES + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
    except OSError as exc:
        _report(path, f"cannot be read ({exc.strerror}); L0 stays empty")
        return ""
    finally:
        os.close(fd)
    cut = len(raw) > IDENTITY_MAX_BYTES
    _report(path, f"is larger than {IDENTITY_MAX_BYTES} bytes; L0 is cut there" if cut
            else None)
    text = bytes(raw[:IDENTITY_MAX_BYTES]).decode("utf-8", errors="replace")
    if keep_comments:
        return text
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    out = "\n".join(lines).strip()
    if cut:
        out += f"\n[{path.name} truncated at {IDENTITY_MAX_BYTES} bytes]"
    return out


def strip_comments(text: str) -> str:
    """An identity text without its ``#`` comment lines (as ``read_identity`` returns it)."""
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")).strip()


def write_identity(path: Path, text: str, palace: str) -> None:
    """Replace the identity file at ``path`` with ``text``: a new file renamed over the old
    one, never written through a symlink, never half written.

    Raises:
        StorageError: it could not be written (read-only or full storage).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        with storage_errors(path, palace):
            tmp.write_text(text, "utf-8")
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
