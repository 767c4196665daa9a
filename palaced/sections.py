"""The sections of a recall or wake-up: items made from drawers and facts, and their packing.

``Sections`` is what ``packing.pack`` made of them, with its wire form. The hits section has
level ``HITS`` (-1), shown as no level on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from palaced.packing import Item, PackResult, Section, pack
from palaced.palace import Palace, now_ms
from palaced.relevance import shorten

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


def identity_section(palace: str, text: str) -> Section:
    """L0: the palace's identity text (no item when it is empty)."""
    items = [Item(id="identity", text=text, score=1.0, level=0)] if text else []
    return Section(0, f"Identity of {palace}", items)


def essential_section(found: list[dict[str, Any]]) -> Section:
    """L1: the essential drawers, in importance-then-recency order."""
    return Section(1, "Essential", [drawer_item(d, 1) for d in found])
