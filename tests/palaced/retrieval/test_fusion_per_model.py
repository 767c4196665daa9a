"""Recall fuses keyword and vector hits with the weights fitted for the palace's model
(``params.params_for`` of ``Palace.embedder_identity``): a real palace (SQLite, vector index)
in-process, with hand-made vectors, once under mpnet's identity and once under a model the
catalog does not know."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from palaced.memory import writes
from palaced.palace.handle import Palace
from palaced.retrieval import recall
from palaced.retrieval.params import DEFAULTS, params_for
from palaced.store.rows import drawers as m
from palaced.wire.models import entry
from tests.palaced.palace.test_palace_unit import services
from tests.palaced.retrieval.test_neighbour_vector import TableEmbedder, _unit

pytestmark = pytest.mark.anyio

QUERY = "harbour ferry timetable"
# Matches every word of the query, but not its meaning (the query's vector is axis 0).
WORDS = "the harbour ferry timetable changed in spring"
# Matches fewer words but the meaning exactly. The two swap places when the vector weight
# passes about 0.34 (of keyword + vector = 1): below it WORDS ranks first, above it MEANING.
MEANING = "boats and the ferry leave the harbour twice a day now"
FILLERS = [f"note {w} about the harbour" for w in ("one", "two", "three", "four")] + [
    f"unrelated remark {w}" for w in ("five", "six", "seven")]
TABLE = {WORDS: _unit({1: 1.0}), MEANING: _unit({0: 1.0}),
         **{t: _unit({0: 0.1 * k, 2 + k: 1.0}) for k, t in enumerate(FILLERS)}}


class NamedEmbedder(TableEmbedder):
    """The table's vectors under another model's identity (the catalog reads only that)."""

    def __init__(self, identity: str) -> None:
        super().__init__(TABLE)
        self._identity = identity

    @property
    def identity(self) -> str:
        return self._identity

    def embed_queries(self, texts: list[str]) -> np.ndarray:  # recall's batched query path
        return np.stack([self.embed_query(t) for t in texts])


async def _first(tmp_path: Path, identity: str) -> str:
    p = await Palace.open("f", tmp_path / "f", services(tmp_path, NamedEmbedder(identity)))
    try:
        for k, text in enumerate([WORDS, MEANING, *FILLERS]):  # a room each: no neighbours
            await writes.remember(p, m.NewDrawer(text=text, room=f"r{k}",
                                                 occurred_ms=1_700_000_000_000))
        assert p.embedder_identity == identity
        res = await recall.recall(p, recall.RecallRequest(query=QUERY, top_k=3))
        assert res.hybrid
        return str(res.results[0]["text"])
    finally:
        await p.aclose()


async def test_recall_weighs_the_vectors_as_fitted_for_the_palaces_model(tmp_path: Path
                                                                         ) -> None:
    mpnet = entry("mpnet")
    assert mpnet is not None and mpnet.fusion is not None
    identity = f"fastembed:{mpnet.name}:{mpnet.dims}"
    # mpnet's fitted vector weight is above the swap point, the defaults' below it.
    assert params_for(identity).vector_weight > 0.34 > DEFAULTS.vector_weight
    assert await _first(tmp_path / "mpnet", identity) == MEANING
    # A model the catalog does not know ranks with the defaults: the words win.
    assert await _first(tmp_path / "other", "fastembed:BAAI/bge-small-en-v1.5:16") == WORDS
