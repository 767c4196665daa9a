"""MCP tool results: the ``CallToolResult`` shape and the wording of errors for an agent."""

from __future__ import annotations

import json
import re
from typing import Any

from palace_client.mcp.schema import ToolArgumentError
from palaced.wire.errors import DaemonUnreachable, InternalError, PalaceError


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    """An MCP ``CallToolResult`` with one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


# The daemon words argument errors after its op ("memory.forget: argument 'id' ...").
_OP_PREFIX = re.compile(r"[a-z]+\.[a-z_]+: ")


def render_error(exc: BaseException) -> str:
    """Text of an ``isError`` tool result: error name, message, details and what to do.

    The agent knows the tool, not the daemon op behind it, and the tool's arguments have the
    op's names: an ``INVALID_ARGS`` message loses its op prefix (and its details, which only
    repeat the message).
    """
    if isinstance(exc, ToolArgumentError):
        return f"Error INVALID_ARGS: {exc}. Fix the arguments (see the tool's input schema)."
    if isinstance(exc, OSError):
        exc = DaemonUnreachable(f"lost the connection to palaced: {exc}")
    elif not isinstance(exc, PalaceError):
        exc = InternalError(f"{type(exc).__name__}: {exc}")
    message, details = exc.message, exc.details
    if exc.name == "INVALID_ARGS" and (prefix := _OP_PREFIX.match(message)):
        message, details = message[prefix.end():], {}
    lines = [f"Error {exc.name} ({exc.code}): {message}"]
    if details:
        lines.append("details: " + json.dumps(details, sort_keys=True, default=str))
    hint = _ERROR_HINTS.get(exc.name)
    if hint is None and exc.retryable:
        hint = "This is temporary; retry in a moment."
    if hint:
        lines.append(hint)
    return "\n".join(lines)


_ERROR_HINTS = {
    "INVALID_ARGS": "Fix the arguments named above and call the tool again.",
    "MEMORY_NOT_FOUND": "No drawer has that id here; find ids with recall or list_drawers.",
    "PALACE_NOT_FOUND": "recall with scope='all' searches every palace that exists.",
    "TEXT_TOO_LARGE": "Split the text into several smaller, self-contained drawers.",
    "INVALID_CONTENT": "Fix the text, name or date and call the tool again.",
    "FACT_NOT_FOUND": "No fact has that id here; find fact ids with kg_query (history=true "
                      "for closed ones).",
    "FORBIDDEN": "The palace's policy does not let you do this; do not retry. Tell the user, "
                 "who can change it (`palace policy show` in a shell).",
}


def forgotten_text(result: dict[str, Any], drawer_id: int, palace: str, until: str) -> str:
    """What the ``forget`` tool did, and how a human undoes it (``until``: when that ends)."""
    if not result.get("trashed"):
        return f"Deleted drawer #{drawer_id} in palace '{palace}' for good."
    return (f"Moved drawer #{drawer_id} of palace '{palace}' to the trash; it is no longer "
            f"recalled. Until {until} a human can bring it back with "
            f"`palace restore-drawer {drawer_id} --palace {palace}`.")
