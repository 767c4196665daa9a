"""Building the L0-L3 sections of a recall and packing them into a token budget.

Synchronous: turns drawer and fact dicts into ``retrieval.Item``s, and a packed
``retrieval.PackResult`` into the wire shape of the ``sections`` part of a response. Also
reads the L0 text from a palace's identity file (``read_identity``), the one place that does.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path
from typing import Any

from palaced import retrieval

log = logging.getLogger("palaced.sections")

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


def read_identity(path: Path) -> str:
    """L0: the identity file's text without ``#`` comment lines ("" when there is none).

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
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    out = "\n".join(lines).strip()
    if cut:
        out += f"\n[{path.name} truncated at {IDENTITY_MAX_BYTES} bytes]"
    return out


def drawer_item(d: dict[str, Any], level: int) -> retrieval.Item:
    """A drawer as a section item."""
    return retrieval.Item(
        id=int(d["id"]), text=str(d["text"]), score=float(d.get("score") or 0.0), level=level,
        meta={"wing": d["wing"], "room": d["room"], "importance": d["importance"],
              "occurred_ms": d["occurred_ms"]},
    )


def fact_item(f: dict[str, Any]) -> retrieval.Item:
    """A knowledge-graph fact as an L2 item (id ``fact:N`` never collides with drawers)."""
    text = f"{f['subject']} {f['predicate']} {f['object']}"
    return retrieval.Item(id=f"fact:{f['id']}", text=text, score=float(f.get("confidence") or 1),
                          level=2, meta={"kind": "fact", "fact_id": f["id"],
                                         "valid_from_ms": f.get("valid_from_ms")})


def identity_section(palace: str, text: str) -> retrieval.Section:
    """L0: the palace's identity text (no item when it is empty)."""
    items = [retrieval.Item(id="identity", text=text, score=1.0, level=0)] if text else []
    return retrieval.Section(0, f"Identity of {palace}", items)


def essential_section(drawers: list[dict[str, Any]]) -> retrieval.Section:
    """L1: the essential drawers, in importance-then-recency order."""
    return retrieval.Section(1, "Essential", [drawer_item(d, 1) for d in drawers])


def packed(sections: list[retrieval.Section], budget: int,
           tokenizer: retrieval.TokenCounter, exact: bool) -> dict[str, Any]:
    """Pack ``sections`` into ``budget`` tokens; returns the response's section keys."""
    result = retrieval.pack(sections, budget, tokenizer)
    return {
        "sections": [
            {"level": s.level, "title": s.title,
             # Only search levels (2, 3) have a meaningful score.
             "items": [{"id": it.id, "text": it.text,
                        **({"score": round(it.score, 6)} if s.level >= 2 else {}),
                        **it.meta} for it in s.items]}
            for s in result.sections
        ],
        "tokens_used": result.tokens_used,
        "budget": budget,
        "cut": [dict(c) for c in result.cut],
        "tokenizer": {"name": tokenizer.name, "exact": exact},
    }
