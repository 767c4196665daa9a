"""The catalog's query and passage prefixes reach the model: fastembed 0.9 adds none."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from palaced.engine.embedder import FastEmbedder


class _Recorder:
    """Stands in for fastembed's TextEmbedding: records the texts, returns a fixed vector."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def _vectors(self, texts: Iterable[str]) -> Iterator[np.ndarray]:
        for text in texts:
            self.seen.append(text)
            yield np.ones(4, dtype=np.float32)

    def embed(self, texts: Iterable[str], **_: Any) -> Iterator[np.ndarray]:
        return self._vectors(texts)

    def query_embed(self, texts: Iterable[str], **_: Any) -> Iterator[np.ndarray]:
        return self._vectors(texts)


def test_nomic_gets_its_prefixes_and_minilm_none() -> None:
    model = _Recorder()
    emb = FastEmbedder(model, "nomic-ai/nomic-embed-text-v1.5", 4)
    emb.embed_passages(["a drawer"])
    emb.embed_query("a question")
    emb.embed_queries(["q1", "q2"])
    assert model.seen == ["search_document: a drawer", "search_query: a question",
                          "search_query: q1", "search_query: q2"]

    model = _Recorder()
    emb = FastEmbedder(model, "sentence-transformers/all-MiniLM-L6-v2", 4)
    emb.embed_passages(["a drawer"])
    emb.embed_query("a question")
    assert model.seen == ["a drawer", "a question"]
