"""The memoir methods of ``palace_client.Client``: curated concept graphs, one request each.

A mixin so that ``client.py`` stays readable; ``Client`` inherits it, and each method sends
one ``memoir.*`` op through ``Client.call`` (retried after a broken connection as the op's
spec says). Arguments left None take the daemon's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class _Caller(Protocol):
    def call(self, op: str, palace: str | None = None, args: Mapping[str, Any] | None = None,
             *, timeout_ms: int | None = None) -> dict[str, Any]: ...


def _some(**values: Any) -> dict[str, Any]:
    """The arguments that were given (None means "use the daemon's default")."""
    return {k: v for k, v in values.items() if v is not None}


class MemoirMethods:
    """Memoirs: named containers of concepts (definition, labels, confidence, revision,
    source drawers) linked by typed relations. See docs/concepts.md, "Memoirs"."""

    def memoir_create(self: _Caller, palace: str, memoir: str, *,
                      description: str | None = None,
                      consolidation_threshold: int | None = None, exist_ok: bool = False
                      ) -> dict[str, Any]:
        """Create a memoir: ``{"memoir", "created"}``. Raises ``MemoirExists`` unless
        ``exist_ok`` (then an existing memoir comes back unchanged, ``created`` False)."""
        return self.call("memoir.create", palace, _some(
            memoir=memoir, description=description,
            consolidation_threshold=consolidation_threshold, exist_ok=exist_ok))

    def memoir_list(self: _Caller, palace: str) -> list[dict[str, Any]]:
        """Every memoir of the palace with its ``concepts`` and ``links`` counts."""
        return list(self.call("memoir.list", palace)["memoirs"])

    def memoir_show(self: _Caller, palace: str, memoir: str, *, limit: int = 100,
                    offset: int = 0) -> dict[str, Any]:
        """A memoir and a page of its concepts: ``{"memoir", "stats", "concepts",
        "next_offset"}``. Raises ``MemoirNotFound``."""
        return self.call("memoir.show", palace, {"memoir": memoir, "limit": limit,
                                                 "offset": offset})

    def memoir_delete(self: _Caller, palace: str, memoir: str) -> dict[str, Any]:
        """Delete a memoir with its concepts and links: ``{"memoir", "concepts", "links",
        "deleted"}``. Raises ``MemoirNotFound``."""
        return self.call("memoir.delete", palace, {"memoir": memoir})

    def memoir_add_concept(self: _Caller, palace: str, memoir: str, concept: str,
                           definition: str, *, labels: Sequence[str] | None = None,
                           confidence: float | None = None,
                           sources: Sequence[int] | None = None) -> dict[str, Any]:
        """Add a concept: ``{"concept", "created"}`` (the same definition again: unchanged,
        ``created`` False). Raises ``ConceptExists`` for another definition under that name,
        ``InvalidContent`` for a bad label, ``MemoryNotFound`` for an unknown source drawer."""
        return self.call("memoir.add_concept", palace, _some(
            memoir=memoir, name=concept, definition=definition,
            labels=None if labels is None else list(labels), confidence=confidence,
            sources=None if sources is None else list(sources)))

    def memoir_refine(self: _Caller, palace: str, memoir: str, concept: str, definition: str,
                      *, labels: Sequence[str] | None = None,
                      sources: Sequence[int] | None = None) -> dict[str, Any]:
        """Refine a concept: ``{"concept", "changed"}``; a change bumps its revision and adds
        0.1 to its confidence (max 1). Raises ``ConceptNotFound``."""
        return self.call("memoir.refine", palace, _some(
            memoir=memoir, name=concept, definition=definition,
            labels=None if labels is None else list(labels),
            sources=None if sources is None else list(sources)))

    def memoir_search(self: _Caller, palace: str, query: str | None = None, *,
                      label: str | None = None, memoir: str | None = None, limit: int = 20
                      ) -> list[dict[str, Any]]:
        """Concepts matching ``query`` and/or carrying ``label``, in ``memoir`` or all of
        them, best first (each with its ``memoir`` and ``score``)."""
        return list(self.call("memoir.search", palace, _some(
            query=query, label=label, memoir=memoir, limit=limit))["concepts"])

    def memoir_inspect(self: _Caller, palace: str, memoir: str, concept: str, *, depth: int = 1,
                       max_nodes: int | None = None) -> dict[str, Any]:
        """A concept and its neighbourhood within ``depth`` links: ``{"concept", "nodes",
        "links", "truncated"}``. Raises ``ConceptNotFound``."""
        return self.call("memoir.inspect", palace, _some(
            memoir=memoir, name=concept, depth=depth, max_nodes=max_nodes))

    def memoir_link(self: _Caller, palace: str, memoir: str, concept: str, relation: str,
                    to: str, *, weight: float | None = None) -> dict[str, Any]:
        """Link ``concept`` to the concept ``to`` (``depends_on``, ``part_of``, ... or camelCase):
        ``{"link", "created"}``. Raises ``InvalidContent`` for a self-link or another
        relation."""
        return self.call("memoir.link", palace, _some(
            memoir=memoir, name=concept, relation=relation, to=to, weight=weight))

    def memoir_unlink(self: _Caller, palace: str, memoir: str, concept: str, relation: str,
                      to: str) -> dict[str, Any]:
        """Remove a link: ``{"removed", "link"}`` (``removed`` False when there was none)."""
        return self.call("memoir.unlink", palace, {"memoir": memoir, "name": concept,
                                                   "relation": relation, "to": to})
