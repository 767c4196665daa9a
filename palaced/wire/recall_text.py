"""The text an agent receives from a recall or a wake-up: one definition of it.

The daemon renders this text, counts it with its tokenizer and packs the sections until the
whole of it (heading, section titles, item heads, notices) fits the budget; every client (the
MCP tools, ``palace recall --budget``, ``palace wake-up`` and the hooks) prints it as is. The
drawer primitives (place, date, score, excerpt note) and the agent layout of a drawer live
here too, so the clients' other renderers (``palace_client.render.results``) share them.

Leaf module (stdlib only): pure functions, mappings in and text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

BELOW_FLOOR = "(under the relevance floor)"
WEAK = "weak"  # the mark of a nearest item shown under a miss


# -- primitives ---------------------------------------------------------------------------------
def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(str(text).split())


def conflict_mark(item: Mapping[str, Any]) -> str:
    """``(conflicts with #N, newer)`` for the older drawer of an open conflict (recall's
    ``conflicts_with``), else ""."""
    newer = item.get("conflicts_with")
    return f"(conflicts with #{newer}, newer)" if isinstance(newer, int) else ""


def format_score(score: Any) -> str:
    """A score with three decimals (anything else as is)."""
    return f"{score:.3f}" if isinstance(score, int | float) else str(score)


def drawer_date(item: Mapping[str, Any]) -> str | None:
    """The day a drawer's memory happened (or was stored), if known."""
    value = item.get("occurred_ms") or item.get("occurred_at") or item.get("created_ms")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d")
    return str(value) if value else None


def drawer_place(item: Mapping[str, Any]) -> str:
    """``wing/room`` of a drawer (the parts it has)."""
    return "/".join(str(item[k]) for k in ("wing", "room") if item.get(k))


def indented(text: str, indent: str) -> list[str]:
    """Every line of ``text`` indented by ``indent`` (an empty text is one empty line)."""
    return [f"{indent}{line}" for line in str(text).splitlines() or [""]]


def section_heading(section: Mapping[str, Any], sep: str) -> str:
    """``L{level}{sep}{title}`` of a recall/wake-up section (the title alone without level)."""
    title = section.get("title") or "Memories"
    level = section.get("level")
    return f"L{level}{sep}{title}" if level is not None else str(title)


CLI_FETCH = "`palace get {id}`"
AGENT_FETCH = "get ids=[{id}]"  # the MCP get tool


def excerpt_note(item: Mapping[str, Any], fetch: str = CLI_FETCH) -> str | None:
    """``… (excerpt: N chars; `palace get ID` for all)`` under a drawer shown as an excerpt;
    ``fetch`` is how the reader gets it whole (``AGENT_FETCH`` for an agent: the get tool)."""
    if not item.get("excerpt"):
        return None
    chars = item.get("chars")
    size = f"{chars:,} chars; " if isinstance(chars, int) else ""
    return f"… (excerpt: {size}{fetch.format(id=item.get('id'))} for all)"


def render_drawer(item: Mapping[str, Any], *, compact: bool = False,
                  show_palace: bool = False, fetch: str = AGENT_FETCH) -> str:
    """One drawer (recall item, list entry) for an agent: ``- #id [wing/room] score S date``
    then its text indented (``compact``: all on one line); an excerpt says how to read it
    whole (``fetch``)."""
    place = drawer_place(item)
    if show_palace and item.get("palace"):
        place = f"{item['palace']}:{place}" if place else str(item["palace"])
    head: list[str] = []
    # Only real drawers (integer ids) can be passed to forget; synthetic items have no "#".
    if isinstance(item.get("id"), int):
        head.append(f"#{item['id']}")
    elif item.get("kind") == "fact" and isinstance(item.get("fact_id"), int):
        head.append(f"fact #{item['fact_id']}")
    elif item.get("kind") == "concept":
        head.append(f"concept r{item.get('revision')}")
    if place:
        head.append(f"[{place}]")
    if item.get("score") is not None:
        head.append(f"score {format_score(item['score'])}")
    if item.get("below_floor"):
        head.append(BELOW_FLOOR)
    when = drawer_date(item)
    if when:
        head.append(when)
    if item.get("tags"):
        head.append("tags " + ",".join(map(str, item["tags"])))
    if isinstance(item.get("superseded_by"), int):
        head.append(f"(superseded by #{item['superseded_by']})")
    mark = conflict_mark(item)
    if mark:
        head.append(mark)
    text = str(item.get("text", ""))
    # get reads its own palace only: a drawer of another palace (recall scope='all') is read
    # with the CLI.
    note = excerpt_note(item, fetch if not (show_palace and item.get("palace"))
                        else f"`palace get {{id}} --palace {item['palace']}`")
    if note:
        text += "\n" + note
    if compact:
        return " ".join([*head, one_line(text)]).strip()
    body = "\n".join(indented(text, "  ")) if text.splitlines() else "  (empty)"
    return ("- " + " ".join(head) + "\n" + body) if head else body


def weak_item(item: Mapping[str, Any]) -> str:
    """A nearest drawer under a miss, on one line: ``- #id weak 0.213: text``."""
    text = one_line(item.get("text", ""))
    return f"- #{item.get('id')} {WEAK} {format_score(item.get('score'))}: {text}"


Renderings = dict[tuple[int, bool, str], tuple[Mapping[str, Any], str]]


def render_sections(sections: Iterable[Mapping[str, Any]], compact: bool,
                    fetch: str = CLI_FETCH, memo: Renderings | None = None) -> list[str]:
    """Recall/wake-up sections: one heading per level, then its drawers (``fetch``: how the
    reader reads an excerpt whole). ``memo`` keeps each drawer mapping's rendering by its
    identity (holding the mapping, so the identity stays its own), for a caller that renders
    the same unchanged mappings again."""
    lines: list[str] = []
    for section in sections:
        items = list(section.get("items") or [])
        heading = section_heading(section, " · ")
        lines.append(heading if compact else f"## {heading}")
        if memo is None:
            lines.extend(render_drawer(item, compact=compact, fetch=fetch) for item in items)
        else:
            for item in items:
                key = (id(item), compact, fetch)
                known = memo.get(key)
                if known is None or known[0] is not item:
                    known = memo[key] = (item, render_drawer(item, compact=compact,
                                                             fetch=fetch))
                lines.append(known[1])
        if not items:
            lines.append("(nothing)")
        if not compact:
            lines.append("")
    return lines


# -- the delivered text -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Frame:
    """What surrounds the sections of one answer.

    ``kind``: ``recall`` or ``wake_up``; ``mode``: ``hybrid``/``keyword`` (recall only);
    ``miss``: the one line saying nothing is relevant (None: something is); ``notice``: why a
    recall ran keyword-only; ``substring``: no word matched; ``agent``: the reader is an agent
    with the MCP ``get`` tool (excerpts name it instead of the CLI's ``palace get``).
    """

    kind: str
    palace: str
    compact: bool = False
    mode: str | None = None
    miss: str | None = None
    notice: str | None = None
    substring: bool = False
    agent: bool = False


def miss_line(palace: str, unknown: Sequence[str] | None = None) -> str:
    """The one line of a recall with no drawer above the relevance floor; with the names the
    query asks about that no drawer mentions (``unknown_names``), says which."""
    line = f"Nothing relevant in palace '{palace}'"
    if unknown:
        line += f" (no drawer mentions {' or '.join(unknown)})"
    return line + "."


def heading(frame: Frame, tokens: int, budget: int) -> str:
    """The first line: what this is, where from, and the tokens it delivers of the budget."""
    meta = [f"mode {frame.mode}"] if frame.mode else []
    meta.append(f"{tokens} of {budget} tokens")
    if frame.substring:
        meta.append("no word matched: substring matches")
    what = "Recall in" if frame.kind == "recall" else "Wake-up context of"
    return f"{what} palace '{frame.palace}' ({', '.join(meta)})"


def minimal(tokens: int, budget: int) -> str:
    """The text when not even the heading fits the budget: the count alone."""
    return f"{tokens}/{budget} tokens"


def answer_text(frame: Frame, sections: Sequence[Mapping[str, Any]], tokens: int,
                budget: int, dropped: bool = False) -> str:
    """The whole text of one answer: heading, then the miss line and its weak nearest drawers
    or the sections, then the notice. ``tokens`` is the count the heading states;
    ``dropped``: there were items, but none fits the budget."""
    return with_heading(frame, answer_body(frame, sections, budget, dropped), tokens, budget)


def with_heading(frame: Frame, body: str, tokens: int, budget: int) -> str:
    """``answer_body``'s ``body`` under the heading stating ``tokens`` of ``budget``: the
    answer's text (the body does not depend on the count, so it is rendered once)."""
    return (heading(frame, tokens, budget) + body).rstrip()


def answer_body(frame: Frame, sections: Sequence[Mapping[str, Any]], budget: int,
                dropped: bool = False, memo: Renderings | None = None) -> str:
    """What follows the heading of ``answer_text`` (from the newline after it); ``memo``:
    ``render_sections``'."""
    filled = [s for s in sections if s.get("items")]
    if frame.miss is not None:
        body = [frame.miss + (" Nearest, all weak:" if filled else "")]
        body += [weak_item(it) for s in filled for it in s["items"]]
    elif filled:
        body = render_sections(sections, frame.compact,
                               AGENT_FETCH if frame.agent else CLI_FETCH, memo)
        if not frame.compact:
            body.insert(0, "")
    elif dropped:
        body = [f"(none of what was found fits a budget of {budget} tokens; ask with a "
                "larger one)"]
    elif frame.kind == "recall":
        body = ["No drawers matched. Try other words, drop filters, or search every palace "
                "(recall scope='all'; `palace recall --all`)."]
    else:
        body = ["The palace is empty so far. Store durable facts and decisions with remember "
                "as you learn them."]
    if frame.notice:
        body.append(f"({frame.notice})")
    return "\n".join(["", *body])


# -- remember's answer ------------------------------------------------------------------------
def remember_notes(result: Mapping[str, Any], resolve: str) -> list[str]:
    """The lines a remember answer adds about the drawers its new one touches: the drawer it
    extends (a near-duplicate that adds detail is stored, never folded in) and the older
    drawers it conflicts with, each with its id and a question. ``resolve`` says how to
    resolve a conflict, with ``{conflict}`` and ``{id}`` for its ids."""
    lines: list[str] = []
    ext = result.get("extends")
    if isinstance(ext, Mapping):
        lines.append(f"It adds detail to the similar drawer #{ext['id']}, " + (
            "which it now supersedes (kept as history)." if ext.get("superseded")
            else "which is kept too."))
    for c in result.get("conflicts") or []:
        lines.append(f"It conflicts with #{c['id']} (\u201c{one_line(c['text'])}\u201d: "
                     f"{c['reason']}): supersede it? "
                     + resolve.format(conflict=c["conflict"], id=c["id"]))
    return lines
