"""Pure, synchronous packing of levelled context sections into a token budget.

A recall's answer is L0-L3 sections of items (identity, essential drawers, where the query
points, deep search). :func:`pack` fits them into a token budget, level by level, truncating
only L0 and reporting what it cut; :class:`PackResult` carries the accounting and renders the
Markdown that accounting models. Everything is a function of its arguments (no I/O, no clock,
no anyio); the tokenizer comes in as a :class:`TokenCounter`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypedDict

ItemId = int | str


# Budget accounting overheads, in tokens, on top of counting the text itself. They cover what
# PackResult.render adds: "## " + title + "\n" plus the blank line between sections (3 tokens
# at most in cl100k_base, 2 in the chars/4 estimate), and "- " + text + "\n" per item (2 at
# most). One token of margin each absorbs BPE merges across those joins.
SECTION_OVERHEAD_TOKENS = 4
ITEM_OVERHEAD_TOKENS = 3


class TokenCounter(Protocol):
    """What :func:`pack` needs from a tokenizer (``palaced.tokens.Tokenizer`` fits)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


@dataclass(slots=True)
class Item:
    """One candidate line of context.

    ``text`` is exactly what gets rendered and counted (format any prefix such as a room or
    date into it). ``score`` and ``level`` are carried for the caller; :func:`pack` keeps the
    given order and uses the enclosing section's level.
    """

    id: ItemId
    text: str
    score: float
    level: int
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Section:
    """A titled group of items of one level (0 = L0 identity ... 3 = L3 deep search)."""

    level: int
    title: str
    items: list[Item] = field(default_factory=list)


class CutEntry(TypedDict):
    """An item left out (``truncated`` False) or shortened to fit (``truncated`` True)."""

    id: ItemId
    level: int
    tokens: int  # the whole item's cost: count(text) + ITEM_OVERHEAD_TOKENS
    truncated: bool


@dataclass(slots=True)
class PackResult:
    """The sections that fit, with their accounting.

    ``tokens_used`` is the sum of what was charged (text counts plus the documented overheads)
    and is always <= ``budget_tokens``; ``render()`` produces the text that accounting models.
    """

    sections: list[Section]
    tokens_used: int
    cut: list[CutEntry]
    tokenizer_name: str
    budget_tokens: int

    def cut_by_level(self) -> dict[int, int]:
        """Number of items fully left out, per level."""
        counts: dict[int, int] = {}
        for entry in self.cut:
            if not entry["truncated"]:
                counts[entry["level"]] = counts.get(entry["level"], 0) + 1
        return counts

    def render(self) -> str:
        """Render as Markdown: ``## title`` per section, ``- text`` per item."""
        return "\n".join(
            f"## {section.title}\n" + "".join(f"- {item.text}\n" for item in section.items)
            for section in self.sections
        )


def pack(sections: Sequence[Section], budget_tokens: int, tokenizer: TokenCounter) -> PackResult:
    """Fit sections into ``budget_tokens``, filling by level (L0 first), order kept within one.

    Costs: each placed item ``count(text) + ITEM_OVERHEAD_TOKENS``; each section with at least
    one placed item ``count(title) + SECTION_OVERHEAD_TOKENS``, charged with its first item.
    Rules:
      * the total charged never exceeds ``budget_tokens``;
      * an id is placed at most once, at its highest-priority (lowest) level; later copies
        are dropped silently;
      * an item that does not fit is skipped and reported in ``cut``, and later (smaller)
        items are still tried;
      * level-0 items are never skipped while they fit: the first L0 item that does not is
        truncated (token-exact, "…" appended when it fits) to the remaining budget and
        reported in ``cut`` with ``truncated=True``. Hence all of L0 is kept whenever L0 alone
        fits the budget.
    Sections of equal level keep their input order; output sections keep input order and
    empty ones are dropped.

    Raises:
        ValueError: ``budget_tokens < 0``.
    """
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    order = sorted(range(len(sections)), key=lambda i: sections[i].level)
    placed: dict[int, list[Item]] = {}
    seen: set[ItemId] = set()
    cut: list[CutEntry] = []
    remaining = budget_tokens
    for index in order:
        section = sections[index]
        header_cost: int | None = None
        for item in section.items:
            if item.id in seen:
                continue
            if header_cost is None:
                header_cost = tokenizer.count(section.title) + SECTION_OVERHEAD_TOKENS
            opening = header_cost if index not in placed else 0
            cost = tokenizer.count(item.text) + ITEM_OVERHEAD_TOKENS
            if opening + cost <= remaining:
                placed.setdefault(index, []).append(item)
                seen.add(item.id)
                remaining -= opening + cost
                continue
            shortened = None
            if section.level <= 0:
                room = remaining - opening - ITEM_OVERHEAD_TOKENS
                text = _truncate(tokenizer, item.text, room)
                if text:
                    shortened = replace(item, text=text, meta={**item.meta, "truncated": True})
                    remaining -= opening + tokenizer.count(text) + ITEM_OVERHEAD_TOKENS
                    placed.setdefault(index, []).append(shortened)
                    seen.add(item.id)
            cut.append(CutEntry(id=item.id, level=section.level, tokens=cost,
                                truncated=shortened is not None))
    out = [replace(sections[i], items=placed[i]) for i in range(len(sections)) if i in placed]
    return PackResult(sections=out, tokens_used=budget_tokens - remaining, cut=cut,
                      tokenizer_name=tokenizer.name, budget_tokens=budget_tokens)


def _truncate(tokenizer: TokenCounter, text: str, max_tokens: int) -> str:
    """Cut ``text`` to at most ``max_tokens``, marking the cut with "…" when that fits."""
    if max_tokens <= 0:
        return ""
    head = tokenizer.truncate(text, max_tokens - 1).rstrip()
    if head and tokenizer.count(head + "…") <= max_tokens:
        return head + "…"
    head = tokenizer.truncate(text, max_tokens)
    return head if tokenizer.count(head) <= max_tokens else ""
