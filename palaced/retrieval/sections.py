"""The sections of a recall or wake-up: items made from drawers, facts and concepts, their
packing, and the text delivered.

``deliver`` packs the sections so that the whole text an agent receives
(``palaced.wire.recall_text.answer_text``: heading, titles, item heads, notices) fits the
budget, counted by the daemon's tokenizer; ``Sections`` is that packing with its text and its
wire form. The hits section has level ``HITS`` (-1), shown as no level on the wire.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
import apsw

from palaced.palace.handle import IDENTITY_TEMPLATE, Palace, now_ms
from palaced.palace.identity import strip_comments
from palaced.retrieval.packing import Item, PackResult, Section, TokenCounter, pack
from palaced.store.knowledge.concept_links import concepts_for_recall
from palaced.store.knowledge.graph_walk import facts_matching
from palaced.store.lookup.search import fts_terms
from palaced.text.relevance import shorten
from palaced.wire.recall_text import Frame, Renderings, answer_body, minimal, with_heading

HITS = -1  # the section level of the hits (``None`` on the wire: the hits are no level)


@dataclass(frozen=True)
class Sections:
    """Levelled sections packed into a token budget; ``exact``: counted by the real tokenizer;
    ``text``: the whole delivered text, ``tokens`` its count (<= the budget)."""

    packed: PackResult
    exact: bool
    text: str = ""
    tokens: int = 0
    budget: int = 0  # the budget asked for (the packing's own is what the text left it)

    def to_wire(self) -> dict[str, Any]:
        """The ``sections``, ``text``, ``tokens_used``, ``budget``, ``cut`` and ``tokenizer``
        keys (``tokens_used``: the tokens of ``text``, all of it)."""
        result = self.packed
        return {
            "sections": wire_sections(result),
            "text": self.text,
            "tokens_used": self.tokens,
            "budget": self.budget,
            "cut": [dict(c) for c in result.cut],
            "tokenizer": {"name": result.tokenizer_name, "exact": self.exact},
        }


def wire_sections(result: PackResult, memo: dict[int, tuple[Item, dict[str, Any]]] | None
                  = None) -> list[dict[str, Any]]:
    """The packed sections as the wire carries them (and ``answer_text`` renders them);
    ``memo`` keeps each item's mapping by the item's identity (holding the item), so that the
    packings of one search share the mappings of the items they share (and their
    renderings: ``recall_text.render_sections``)."""
    def wired(it: Item, level: int) -> dict[str, Any]:
        if memo is not None and (known := memo.get(id(it))) is not None and known[0] is it:
            return known[1]
        # Only the hits and search levels (2, 3) have a meaningful score.
        # The drawers of the hits and of L2/L3 show the score that orders them.
        d = {"id": it.id, "text": it.text,
             **({"score": round(it.score, 6)}
                if isinstance(it.id, int) and (level >= 2 or level == HITS) else {}),
             **it.meta}
        if memo is not None:
            memo[id(it)] = (it, d)
        return d

    return [{"level": None if s.level == HITS else s.level, "title": s.title,
             "items": [wired(it, s.level) for it in s.items]}
            for s in result.sections]


def deliver(parts: list[Section], budget: int, tok: TokenCounter, frame: Frame,
            cap: int | None = None) -> tuple[PackResult, str, int]:
    """Pack ``parts`` so that the whole delivered text fits ``budget`` tokens of ``tok``
    (and ``cap`` when given: a miss fits a few tokens whatever its budget).

    ``pack`` charges the items' texts; the text adds their heads (id, place, score, date),
    the heading and the notices. So the packing budget is the largest (by bisection) whose
    rendered text (``answer_text``) fits. A notice (why a recall is keyword-only) gives way
    when no item would fit beside it (the heading still says ``mode keyword``); when not
    even the heading fits, the text is the count alone (``minimal``), or empty. Returns the
    packing, the text and its token count (always <= the limit).

    Raises:
        ValueError: ``budget < 0``.
    """
    limit = budget if cap is None else min(budget, cap)
    tok = _Memo(tok)
    dropped = any(s.items for s in parts)  # said when none of them fits
    frames = [frame, replace(frame, notice=None)] if frame.notice else [frame]
    for n, shown in enumerate(frames):
        best = _fit(parts, budget, limit, tok, shown, dropped)
        if best is not None and (best[0].sections or not dropped or n == len(frames) - 1):
            packed, body = best
            # The body is rendered once; only the heading's stated count changes.
            text, tokens = _settle(partial(with_heading, shown, body, budget=budget), tok,
                                   budget)
            return packed, text, tokens
    empty = pack(parts, 0, tok)
    text, tokens = _settle(partial(minimal, budget=budget), tok, budget)
    return (empty, text, tokens) if tokens <= limit else (empty, "", 0)


def _fit(parts: list[Section], budget: int, limit: int, tok: TokenCounter, frame: Frame,
         dropped: bool) -> tuple[PackResult, str] | None:
    """The packing of ``parts`` with the largest packing budget whose text (``answer_text``
    of ``frame``, stating ``budget``) fits ``limit`` tokens, with its body (``answer_body``);
    None when not even the text without any item fits."""

    # The packings of the search share most items: their mappings and renderings are made
    # once (an item is always in the same section: pack keeps an id in the first that has it).
    wired: dict[int, tuple[Item, dict[str, Any]]] = {}
    rendered: Renderings = {}

    def attempt(inner: int) -> tuple[int, PackResult, str]:
        packed = pack(parts, inner, tok)
        body = answer_body(frame, wire_sections(packed, wired), budget, dropped, rendered)
        return tok.count(with_heading(frame, body, budget, budget)), packed, body

    count, packed, body = attempt(limit)
    if count <= limit:
        return packed, body
    # The largest packing budget whose text fits: the text grows with the packing budget, so
    # search between one that fits (lo, -1: none yet) and one that does not (hi), guessing
    # from the counts (the heads add about the same share per item), bisecting every other
    # step so that a poor guess costs little.
    best: tuple[PackResult, str] | None = None
    lo, lo_count, hi, hi_count = -1, 0, limit, count
    for step in itertools.count():
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        if step % 2 == 0 and hi_count > lo_count:
            guess = lo + (hi - lo) * (limit - lo_count) // (hi_count - lo_count)
            mid = min(max(guess, lo + 1), hi - 1)
        count, packed, body = attempt(mid)
        if count <= limit:
            lo, lo_count, best = mid, count, (packed, body)
        else:
            hi, hi_count = mid, count
    return best


class _Memo:
    """``tok`` remembering every count of one ``deliver``: its search renders the same text
    more than once (packing budgets that pack alike, the text the search chose again when
    settling its count), and a long answer is beyond the tokenizer's own memo."""

    def __init__(self, tok: TokenCounter) -> None:
        self.tok = tok
        self.name = tok.name
        self.counts: dict[str, int] = {}

    def count(self, text: str) -> int:
        """``tok.count(text)``, counted once."""
        n = self.counts.get(text)
        if n is None:
            n = self.counts[text] = self.tok.count(text)
        return n

    def truncate(self, text: str, max_tokens: int) -> str:
        """``tok.truncate``."""
        return self.tok.truncate(text, max_tokens)


def _settle(build: Callable[[int], str], tok: TokenCounter, budget: int) -> tuple[str, int]:
    """The text ``build(n)`` whose stated count ``n`` is its own token count, and that count.

    ``build(budget)`` fits; a smaller stated number has no more digits, so its text fits too.
    Converges in a step or two (a count changes only when the number's digits do)."""
    text = build(budget)
    tokens = tok.count(text)
    for _ in range(4):
        again = build(tokens)
        count = tok.count(again)
        if count == tokens:
            return again, count
        tokens = count
    return text, tok.count(text)


async def pack_sections(palace: Palace, parts: list[Section], budget: int, frame: Frame,
                        cap: int | None = None) -> Sections:
    """Pack ``parts`` so the whole delivered text fits ``budget`` tokens (``deliver``) with the
    daemon's tokenizer (waiting for it to be loaded in the first moments after a start), in a
    worker thread: rendering and counting a long answer takes milliseconds."""
    tok = await palace.services.ready_tokenizer()
    packed, text, tokens = await anyio.to_thread.run_sync(deliver, parts, budget, tok, frame,
                                                          cap)
    return Sections(packed, tok.exact, text, tokens, budget)


def unexpired(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop drawers whose TTL ran out since the cached list was read."""
    ts = now_ms()
    return [d for d in found if d.get("expires_ms") is None or d["expires_ms"] > ts]


def drawer_item(d: dict[str, Any], level: int) -> Item:
    """A drawer as a section item; a long one as its excerpt (``relevance.shorten``).

    A ranked drawer's score is its ``rank_score``, the score that orders the hits and L2/L3,
    so the order shown follows the score shown; its 0-1 relevance is kept as ``relevance``.
    """
    d = shorten(d, ())
    ranked = d.get("rank_score")
    return Item(
        id=int(d["id"]), text=str(d["text"]),
        score=float(ranked if ranked is not None else d.get("score") or 0.0), level=level,
        meta={"wing": d["wing"], "room": d["room"], "importance": d["importance"],
              **({"relevance": d["score"]} if ranked is not None else {}),
              "occurred_ms": d["occurred_ms"],
              **({"below_floor": True} if d.get("below_floor") else {}),
              **({"superseded_by": d["superseded_by"]}
                 if isinstance(d.get("superseded_by"), int) else {}),
              **({"conflicts_with": d["conflicts_with"]}
                 if isinstance(d.get("conflicts_with"), int) else {}),
              **({"excerpt": True, "chars": d["chars"]} if d.get("excerpt") else {})},
    )


def fact_item(f: dict[str, Any]) -> Item:
    """A knowledge-graph fact as an L2 item (id ``fact:N`` never collides with drawers)."""
    text = f"{f['subject']} {f['predicate']} {f['object']}"
    return Item(id=f"fact:{f['id']}", text=text, score=float(f.get("confidence") or 1),
                level=2, meta={"kind": "fact", "fact_id": f["id"],
                               "valid_from_ms": f.get("valid_from_ms")})


CONCEPT_DEFINITION_CHARS = 600  # an L2 concept shows at most this much of its definition
FACTS_IN_L2 = 5
CONCEPTS_IN_L2 = 3


def l2_knowledge(conn: apsw.Connection, query: str) -> tuple[list[Item], list[Item]]:
    """L2's curated knowledge for ``query``: the memoir concepts it names or matches (with
    their strongest links) and the active facts about entities it names, as items. Runs in
    recall's read hop."""
    concepts = [concept_item(c) for c in concepts_for_recall(conn, query, CONCEPTS_IN_L2)]
    facts = [fact_item(f) for f in facts_matching(conn, fts_terms(query), FACTS_IN_L2)]
    return concepts, facts


def concept_item(c: dict[str, Any]) -> Item:
    """A memoir concept as an L2 item (id ``concept:N``): its name, memoir and definition,
    then its strongest links."""
    definition = str(c["definition"])
    if len(definition) > CONCEPT_DEFINITION_CHARS:
        definition = definition[: CONCEPT_DEFINITION_CHARS - 1].rstrip() + "…"
    text = f"{c['name']} ({c['memoir']}): {definition}"
    if c.get("links"):
        text += "\nlinks: " + "; ".join(f"{ln['from']} {ln['relation']} {ln['to']}"
                                       for ln in c["links"])
    return Item(id=f"concept:{c['id']}", text=text, score=float(c["confidence"]), level=2,
                meta={"kind": "concept", "concept_id": c["id"], "memoir": c["memoir"],
                      "revision": c["revision"], "labels": list(c["labels"])})


def identity_section(palace: str, text: str) -> Section:
    """L0: the palace's identity text (no item when it is empty or still the placeholder a
    new palace is created with: it says nothing the palace's name does not)."""
    placeholder = strip_comments(IDENTITY_TEMPLATE.format(name=palace))
    items = ([Item(id="identity", text=text, score=1.0, level=0)]
             if text and text.strip() != placeholder else [])
    return Section(0, f"Identity of {palace}", items)


def essential_section(found: list[dict[str, Any]]) -> Section:
    """L1: the essential drawers, in importance-then-recency order."""
    return Section(1, "Essential", [drawer_item(d, 1) for d in found])
