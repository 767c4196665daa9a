"""The model catalog (``palaced.wire.models``): names resolve, fastembed knows its entries."""

from __future__ import annotations

from palaced.wire.models import MODELS, canonical, entry
from palaced.wire.vocab import DEFAULT_MODEL


def test_short_and_full_names_are_unique_and_resolve() -> None:
    assert len({m.short for m in MODELS}) == len({m.name.lower() for m in MODELS}) == len(MODELS)
    for m in MODELS:
        assert entry(m.short) is m and entry(m.name.upper()) is m
        assert canonical(m.short) == m.name
    assert canonical("thenlper/gte-base") == "thenlper/gte-base"  # not in the catalog
    assert entry("minilm") is not None and entry("minilm").name == DEFAULT_MODEL  # type: ignore[union-attr]


def test_non_custom_entries_are_fastembeds_own_with_its_dims() -> None:
    from fastembed import TextEmbedding

    theirs = {m["model"].lower(): m for m in TextEmbedding.list_supported_models()}
    for m in MODELS:
        if m.custom:
            assert m.name.lower() not in theirs
            continue
        assert theirs[m.name.lower()]["dim"] == m.dims, m.name
        assert theirs[m.name.lower()]["license"] == m.license, m.name
        # An installed copy puts the ONNX file where fastembed loads it from.
        assert theirs[m.name.lower()]["model_file"] == m.model_file, m.name
