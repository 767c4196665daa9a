"""A recall reads twice: the keyword search while the query is embedded, then the ranking. A
write that commits between the two (a supersede) must not leave the recall with neither
drawer: the ranking drops the superseded one it was handed, so the keyword search is run
again in the ranking's snapshot. In-process palace, the hashing embedder; the write is
made to land exactly between the two reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from palaced.engine.embedder import HashEmbedder
from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.retrieval import recall, search
from palaced.store.rows import drawers as m
from tests.palaced.palace.test_palace_unit import services


@pytest.fixture
async def palace(tmp_path: Path) -> AsyncIterator[Palace]:
    p = await Palace.open("snap", tmp_path / "snap", services(tmp_path, HashEmbedder()))
    yield p
    await p.aclose()


@pytest.mark.anyio
async def test_a_supersede_between_the_two_reads_is_seen(palace: Palace,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    old = int((await writes.remember(palace, m.NewDrawer(
        text="The API rate limit is 100 requests per minute", room="api")))["id"])
    new: list[int] = []
    real = search.lexical_search

    def keyword_then_write(c: Any, *args: Any, **kwargs: Any) -> search.KeywordHits:
        hits = real(c, *args, **kwargs)
        if not new:  # the first keyword search: the supersede commits right after it
            def supersede(w: Any) -> None:
                did, _ = m.insert_drawer(w, m.NewDrawer(
                    text="The API rate limit is 300 requests per minute", room="api"), 2)
                m.supersede(w, old, did, 2)
                new.append(did)

            palace.store.write(supersede)
        return hits

    monkeypatch.setattr(search, "lexical_search", keyword_then_write)
    got = await recall.recall(palace, recall.RecallRequest(
        query="API rate limit requests per minute", top_k=5))
    ids = [int(r["id"]) for r in got.results]
    assert new and old not in ids
    # Before: the keyword hits of the first snapshot held only the old drawer, which the
    # ranking then dropped as superseded, and the new one has no vector yet: nothing.
    assert ids == new, ids
