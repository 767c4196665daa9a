"""The sections of a recall or wake-up: items made from drawers, facts and concepts, and their
packing.

``Sections`` is what ``packing.pack`` made of them, with its wire form. The hits section has
level ``HITS`` (-1), shown as no level on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw

from palaced.palace.handle import Palace, now_ms
from palaced.retrieval.packing import Item, PackResult, Section, pack
from palaced.store.knowledge.concept_links import concepts_for_recall
from palaced.store.knowledge.graph_walk import facts_matching
from palaced.store.lookup.search import fts_terms
from palaced.text.relevance import shorten

HITS = -1  # the section level of the hits (``None`` on the wire: the hits are no level)


@dataclass(frozen=True)
class Sections:
    """Levelled sections packed into a token budget; ``exact``: counted by the real tokenizer."""

    packed: PackResult
    exact: bool

    def to_wire(self) -> dict[str, Any]:
        """The ``sections``, ``tokens_used``, ``budget``, ``cut`` and ``tokenizer`` keys."""
        result = self.packed
        return {
            "sections": [
                {"level": None if s.level == HITS else s.level, "title": s.title,
                 # Only the hits and search levels (2, 3) have a meaningful score.
                 "items": [{"id": it.id, "text": it.text,
                            **({"score": round(it.score, 6)}
                               if s.level >= 2 or s.level == HITS else {}),
                            **it.meta} for it in s.items]}
                for s in result.sections
            ],
            "tokens_used": result.tokens_used,
            "budget": result.budget_tokens,
            "cut": [dict(c) for c in result.cut],
            "tokenizer": {"name": result.tokenizer_name, "exact": self.exact},
        }


async def pack_sections(palace: Palace, parts: list[Section], budget: int) -> Sections:
    """Pack ``parts`` into ``budget`` tokens with the daemon's tokenizer (waiting for it to
    be loaded in the first moments after a start)."""
    tok = await palace.services.ready_tokenizer()
    return Sections(pack(parts, budget, tok), tok.exact)


def unexpired(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop drawers whose TTL ran out since the cached list was read."""
    ts = now_ms()
    return [d for d in found if d.get("expires_ms") is None or d["expires_ms"] > ts]


def drawer_item(d: dict[str, Any], level: int) -> Item:
    """A drawer as a section item; a long one as its excerpt (``relevance.shorten``)."""
    d = shorten(d, ())
    return Item(
        id=int(d["id"]), text=str(d["text"]), score=float(d.get("score") or 0.0), level=level,
        meta={"wing": d["wing"], "room": d["room"], "importance": d["importance"],
              "occurred_ms": d["occurred_ms"],
              **({"below_floor": True} if d.get("below_floor") else {}),
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
    """L0: the palace's identity text (no item when it is empty)."""
    items = [Item(id="identity", text=text, score=1.0, level=0)] if text else []
    return Section(0, f"Identity of {palace}", items)


def essential_section(found: list[dict[str, Any]]) -> Section:
    """L1: the essential drawers, in importance-then-recency order."""
    return Section(1, "Essential", [drawer_item(d, 1) for d in found])
