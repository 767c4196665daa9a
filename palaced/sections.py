"""Building the L0-L3 sections of a recall and packing them into a token budget.

Pure and synchronous: turns drawer and fact dicts into ``retrieval.Item``s, and a packed
``retrieval.PackResult`` into the wire shape of the ``sections`` part of a response.
"""

from __future__ import annotations

from typing import Any

from palaced import retrieval


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
