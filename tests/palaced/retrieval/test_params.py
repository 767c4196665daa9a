"""The ranking's fusion weights follow the palace's model (``params.params_for``): each
catalog entry's fitted (keyword, vector) pair, the defaults for a model the catalog does not
know and for keyword-only."""

from __future__ import annotations

from dataclasses import replace

from palaced.retrieval.params import DEFAULTS, params_for
from palaced.wire.models import MODELS, entry


def _identity(name: str, dims: int) -> str:
    return f"fastembed:{name}:{dims}"  # FastEmbedder.identity's shape


def test_each_catalog_model_ranks_with_its_own_fitted_weights() -> None:
    for model in MODELS:
        params = params_for(_identity(model.name, model.dims))
        if not model.tested:  # fetched from the hub, never measured here: the defaults
            assert model.fusion is None and params == DEFAULTS, model.short
            continue
        assert model.fusion is not None, model.short  # every model tested here was fitted
        assert (params.lexical_weight, params.vector_weight) == model.fusion
        # Only the fusion is the model's: every other knob is the defaults'.
        assert replace(params, lexical_weight=DEFAULTS.lexical_weight,
                       vector_weight=DEFAULTS.vector_weight) == DEFAULTS
    minilm, mpnet = entry("minilm"), entry("mpnet")
    assert minilm is not None and mpnet is not None
    # The two shared models were fitted to different weights: the identity decides.
    assert (params_for(_identity(minilm.name, minilm.dims)).vector_weight
            != params_for(_identity(mpnet.name, mpnet.dims)).vector_weight)


def test_unknown_models_and_keyword_only_rank_with_the_defaults() -> None:
    assert params_for(_identity("BAAI/bge-m3", 1024)) == DEFAULTS
    assert params_for("hash:64") == DEFAULTS  # the tests' embedder: not a catalog name
    assert params_for("") == DEFAULTS
    assert params_for(None) == DEFAULTS  # keyword-only: no vectors to weigh
