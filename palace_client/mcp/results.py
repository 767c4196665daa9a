"""MCP tool results: the ``CallToolResult`` shape and the wording of errors for an agent."""

from __future__ import annotations

import json
from typing import Any

from palaced.errors import DaemonUnreachable, InternalError, PalaceError

from .schema import ToolArgumentError


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    """An MCP ``CallToolResult`` with one text block."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def render_error(exc: BaseException) -> str:
    """Text of an ``isError`` tool result: error name, message, details and what to do."""
    if isinstance(exc, ToolArgumentError):
        return f"Error INVALID_ARGS: {exc}. Fix the arguments (see the tool's input schema)."
    if isinstance(exc, OSError):
        exc = DaemonUnreachable(f"lost the connection to palaced: {exc}")
    elif not isinstance(exc, PalaceError):
        exc = InternalError(f"{type(exc).__name__}: {exc}")
    lines = [f"Error {exc.name} ({exc.code}): {exc.message}"]
    if exc.details:
        lines.append("details: " + json.dumps(exc.details, sort_keys=True, default=str))
    hint = _ERROR_HINTS.get(exc.name)
    if hint is None and exc.retryable:
        hint = "This is temporary; retry in a moment."
    if hint:
        lines.append(hint)
    return "\n".join(lines)


_ERROR_HINTS = {
    "INVALID_ARGS": "Fix the arguments named above and call the tool again.",
    "MEMORY_NOT_FOUND": "No drawer has that id here; find ids with recall or list_drawers.",
    "PALACE_NOT_FOUND": "See the existing palaces with list_palaces.",
    "TEXT_TOO_LARGE": "Split the text into several smaller, self-contained drawers.",
    "INVALID_CONTENT": "Fix the text, name or date and call the tool again.",
    "FACT_NOT_FOUND": "No fact has that id here; find fact ids with kg_query or kg_timeline.",
}
