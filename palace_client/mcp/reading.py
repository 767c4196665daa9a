"""The ``get`` and ``rooms`` MCP tools: drawers whole within a token bound; the palace's wings,
rooms and recall mode.

``get`` bounds what the agent receives, not only the drawer texts: the daemon cuts a text to
a number of cl100k tokens (``memory.get`` ``max_tokens``) and reports its whole count, and the
lines around the texts (the header, each drawer's line, the notes) are charged at their UTF-8
byte length, which no token count exceeds (a cl100k token is at least one byte). So the
answer never holds more tokens than ``max_tokens``; it says where it cut a text and which
drawers it left unread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from palace_client.render.results import counted, render_drawer
from palaced.wire.errors import MemoryNotFound

OpCall = Callable[[str, "str | None", "Mapping[str, Any] | None"], dict[str, Any]]
MIN_TEXT_TOKENS = 16  # a text cut shorter than this is left unread instead (named, not cut)
ROOMS_SHOWN = 100  # rooms the rooms tool lists (a palace may have thousands)


def upper_tokens(text: str) -> int:
    """An upper bound of the cl100k tokens of ``text``: its UTF-8 bytes."""
    return len(text.encode("utf-8"))


def _unread_line(ids: list[int]) -> str:
    return (f"Not read, the token bound being spent: {', '.join(f'#{i}' for i in ids)}; "
            "get them in another call.")


def _cut_note(did: int, shown: int, tokens: int, most: int) -> str:
    more = "it all" if tokens <= most else "more"
    return (f"… (cut at {shown:,} of its {tokens:,} tokens; get ids=[{did}] "
            f"max_tokens={min(tokens + 100, most)} reads {more})")


def run_get(op_call: OpCall, palace: str, args: Mapping[str, Any], most: int) -> str:
    """The ``get`` tool: drawers ``ids`` of ``palace`` whole, the answer within
    ``max_tokens`` (``most``: the tool's largest ``max_tokens``, named in the cut notes).

    Raises:
        PalaceError: what the daemon answers, but MEMORY_NOT_FOUND (a line of the answer).
    """
    bound = int(args["max_tokens"])
    ids = list(dict.fromkeys(int(i) for i in args["ids"]))
    head = f"Drawers of palace '{palace}' (at most {bound:,} tokens):"
    left = bound - upper_tokens(head)
    lines = [head]
    for n, did in enumerate(ids):
        rest = ids[n + 1:]
        room = left - (upper_tokens(_unread_line(rest)) + 1 if rest else 0) - 1
        read = None
        if room >= MIN_TEXT_TOKENS:
            try:
                read = _one(op_call, palace, did, room, most)
            except MemoryNotFound as exc:
                line = f"#{did}: {exc.message}"
                read = (line, upper_tokens(line)) if upper_tokens(line) <= room else None
        if read is None:
            lines.append(_unread_line(ids[n:]))
            break
        lines.append(read[0])
        left -= read[1] + 1
    return "\n".join(lines)


def _one(op_call: OpCall, palace: str, did: int, room: int, most: int
         ) -> tuple[str, int] | None:
    """Drawer ``did`` as its line and text, and the most tokens they can take, within
    ``room`` tokens; None when not even ``MIN_TEXT_TOKENS`` of its text fit.

    Raises:
        MemoryNotFound: no such drawer (or it is in the trash: the message says so).
    """
    drawer = op_call("memory.get", palace, {"id": did, "max_tokens": room})["drawer"]
    line = render_drawer({**drawer, "text": "", "excerpt": False}, compact=True)
    line_cost = upper_tokens(line) + 1
    tokens = int(drawer.get("tokens") or 0)
    if not drawer.get("truncated") and line_cost + tokens <= room:
        return f"{line}\n{drawer['text']}", line_cost + tokens
    # Cut it shorter: its line and the note saying where it was cut must fit too.
    note_cost = upper_tokens(_cut_note(did, room, tokens, most)) + 1
    text_bound = room - line_cost - note_cost
    if text_bound < MIN_TEXT_TOKENS:
        return None
    drawer = op_call("memory.get", palace, {"id": did, "max_tokens": text_bound})["drawer"]
    note = _cut_note(did, text_bound, tokens, most)
    return f"{line}\n{drawer['text']}\n{note}", line_cost + text_bound + note_cost


def run_rooms(op_call: OpCall, palace: str) -> str:
    """The ``rooms`` tool: ``palace``'s wings and rooms with their drawer counts (at most
    ``ROOMS_SHOWN`` rooms), and whether recall is semantic or keyword-only (and why).

    Raises:
        PalaceError: what the daemon answers.
    """
    info = op_call("palace.info", palace, {})
    rooms = list(info.get("rooms") or [])
    head = (f"Palace '{palace}': {counted(int(info.get('drawers') or 0), 'drawer')} in "
            f"{counted(len(rooms), 'room')}.")
    mode = info.get("recall_mode")
    if mode == "hybrid":
        head += " Recall is semantic (by meaning and keywords)."
    elif mode == "keyword":
        reason = str(info.get("keyword_reason") or "").removeprefix("keyword-only: ")
        head += (" Recall is keyword-only: it finds words, not meaning"
                 + (f" ({reason})." if reason else "."))
    if not rooms:
        return (f"{head}\nNo rooms yet: file memories under a short wing (an area, e.g. "
                "'backend') and room (a topic, e.g. 'auth').")
    wings: dict[str, list[Mapping[str, Any]]] = {}
    for room in rooms[:ROOMS_SHOWN]:
        wings.setdefault(str(room["wing"]), []).append(room)
    lines = [head, "Wings and their rooms (drawers); reuse these names:"]
    lines.extend(f"- {wing}: " + ", ".join(f"{r['room']} ({r['drawers']})" for r in listed)
                 for wing, listed in wings.items())
    if len(rooms) > ROOMS_SHOWN:
        lines.append(f"(and {counted(len(rooms) - ROOMS_SHOWN, 'more room')}; "
                     "`palace info` in a shell lists them all)")
    return "\n".join(lines)
