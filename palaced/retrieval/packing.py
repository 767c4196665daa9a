"""Pure, synchronous packing of levelled context sections into a token budget.

A recall's answer is L0-L3 sections of items (identity, essential drawers, where the query
points, deep search). :func:`pack` fits them into a token budget in the order given, every
non-empty section keeping at least a cut first item, and reports what it cut;
:class:`PackResult` carries the accounting and renders the Markdown that accounting
models. Everything is a function of its arguments (no I/O, no clock, no anyio); the
tokenizer comes in as a :class:`TokenCounter`.
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
# The least text kept for each later section while an earlier one's first item is placed.
MIN_ITEM_TOKENS = 12


class TokenCounter(Protocol):
    """What :func:`pack` needs from a tokenizer (``palaced.engine.tokens.Tokenizer`` fits)."""

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
    """Fit sections into ``budget_tokens`` in the order given (the first section first).

    Costs: each placed item ``count(text) + ITEM_OVERHEAD_TOKENS``; each section with at least
    one placed item ``count(title) + SECTION_OVERHEAD_TOKENS``, charged with its first item.
    Rules:
      * the total charged never exceeds ``budget_tokens``;
      * an id is placed at most once, in the first section that has it; later copies are
        dropped silently;
      * every section with an item gets its first item placed first, in section order: whole
        when it fits beside a minimal share kept for each later section, else truncated
        (token-exact, "…" appended when it fits) to a fair share of what is left, and reported
        in ``cut`` with ``truncated=True``. So every non-empty section appears whenever the
        budget holds its heading and a few tokens;
      * then the other items, section by section in order: an item that does not fit is
        skipped and reported in ``cut``, and later (smaller) items are still tried.
    Output sections keep input order and empty ones are dropped.

    Raises:
        ValueError: ``budget_tokens < 0``.
    """
    if budget_tokens < 0:
        raise ValueError(f"budget_tokens must be >= 0, got {budget_tokens}")
    seen: set[ItemId] = set()
    todo: list[list[Item]] = []
    for section in sections:
        fresh: list[Item] = []
        for it in section.items:
            if it.id not in seen:
                seen.add(it.id)
                fresh.append(it)
        todo.append(fresh)
    headers = [tokenizer.count(s.title) + SECTION_OVERHEAD_TOKENS for s in sections]
    costs = [tokenizer.count(items[0].text) + ITEM_OVERHEAD_TOKENS if items else 0
             for items in todo]
    placed: dict[int, list[Item]] = {}
    cut: list[CutEntry] = []
    remaining = budget_tokens
    open_ = [i for i, items in enumerate(todo) if items]
    for n, index in enumerate(open_):
        item, level = todo[index][0], sections[index].level
        later = open_[n + 1:]
        keep = sum(headers[i] + min(costs[i], ITEM_OVERHEAD_TOKENS + MIN_ITEM_TOKENS)
                   for i in later)
        cost = costs[index]
        if headers[index] + cost <= remaining - keep:
            placed[index] = [item]
            remaining -= headers[index] + cost
            continue
        # Its fair share, but never less than a minimal item while the budget has one.
        share = min(remaining, max(remaining - keep, remaining // (len(later) + 1),
                                   headers[index] + ITEM_OVERHEAD_TOKENS + MIN_ITEM_TOKENS))
        if headers[index] + cost <= share:  # a short item fits its share whole
            placed[index] = [item]
            remaining -= headers[index] + cost
            continue
        text = _truncate(tokenizer, item.text, share - headers[index] - ITEM_OVERHEAD_TOKENS)
        if text:
            placed[index] = [replace(item, text=text, meta={**item.meta, "truncated": True})]
            remaining -= headers[index] + tokenizer.count(text) + ITEM_OVERHEAD_TOKENS
        cut.append(CutEntry(id=item.id, level=level, tokens=cost, truncated=bool(text)))
    for index in open_:
        for item in todo[index][1:]:
            cost = tokenizer.count(item.text) + ITEM_OVERHEAD_TOKENS
            if index in placed and cost <= remaining:
                placed[index].append(item)
                remaining -= cost
            else:
                cut.append(CutEntry(id=item.id, level=sections[index].level, tokens=cost,
                                    truncated=False))
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
