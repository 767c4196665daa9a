"""The embedding models palace knows: one entry per model, read by every side.

Leaf module (stdlib only), importable by thin clients. The daemon loads a model by its entry
(fastembed's own catalog, or a custom ONNX model with the pooling given here), the ranking reads
the model's fusion weights from it, and ``palace model list|use|import`` show and check what it
says. A model missing from this table can still be configured by its fastembed name; it then
ranks with the default weights (``palaced.retrieval.params``).
"""

from __future__ import annotations

from dataclasses import dataclass

from palaced.wire.vocab import DEFAULT_MODEL


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model: how to load it and what it costs.

    ``custom`` models are not in fastembed's catalog: the daemon registers them
    (``TextEmbedding.add_custom_model``) with ``pooling`` and ``normalized`` before loading a
    local copy. ``fusion`` is the (keyword, vector) weight pair fitted for this model
    (docs/benchmarks.md says how); None ranks with the defaults.
    """

    name: str  # fastembed's model name
    short: str  # the name a user types: `palace model use minilm`
    dims: int
    size_mb: int  # the ONNX file on disk
    license: str
    custom: bool = False
    pooling: str = "mean"  # custom models only: "mean" or "cls"
    normalized: bool = True
    # What the model expects before a query or a passage (fastembed 0.9 adds none itself, so
    # palace's embedder does); "" for models trained without.
    query_prefix: str = ""
    passage_prefix: str = ""
    # False for the fastembed catalog models that fastembed downloads on first use: palace's
    # tests cannot reach the model hub, so their loading path is untested here.
    tested: bool = True
    # Where the ONNX file is in the model's directory: fastembed loads it from there (an
    # installed copy puts it there too; fastembed's catalog says it for its own models).
    model_file: str = "model.onnx"
    fusion: tuple[float, float] | None = None
    note: str = ""  # speed and measured quality, one line (docs/benchmarks.md has the detail)


MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(DEFAULT_MODEL, "minilm", 384, 90, "apache-2.0", fusion=(0.7, 0.3),
               note="the default: 89 drawers/s, recall p50 18 ms; LoCoMo dev turn R@5 .771"),
    ModelEntry("sentence-transformers/all-mpnet-base-v2", "mpnet", 768, 110, "apache-2.0",
               custom=True, fusion=(0.6, 0.4),
               note="3x slower: 26 drawers/s, recall p50 66 ms; LoCoMo dev turn R@5 .786"),
)

# fastembed's own catalog (0.9): models a user with internet can choose (``palace model use``
# lets fastembed download them into its cache). Untested offline: no hub here.
_FROM_HUB = "fetched by fastembed on first use (needs internet; untested offline)"
_ARCTIC_QUERY = "Represent this sentence for searching relevant passages: "
_ONNX_DIR = "onnx/model.onnx"
MODELS = (*MODELS,
    ModelEntry("BAAI/bge-small-en-v1.5", "bge-small", 384, 67, "mit", tested=False,
               model_file="model_optimized.onnx",
               note=f"MiniLM's size, stronger on retrieval benchmarks; {_FROM_HUB}"),
    ModelEntry("BAAI/bge-base-en-v1.5", "bge-base", 768, 210, "mit", tested=False,
               model_file="model_optimized.onnx",
               note=f"mpnet's size class; {_FROM_HUB}"),
    ModelEntry("snowflake/snowflake-arctic-embed-s", "arctic-s", 384, 130, "apache-2.0",
               query_prefix=_ARCTIC_QUERY, tested=False, model_file=_ONNX_DIR,
               note=f"retrieval-tuned, query prefix applied by palace; {_FROM_HUB}"),
    ModelEntry("snowflake/snowflake-arctic-embed-m", "arctic-m", 768, 430, "apache-2.0",
               query_prefix=_ARCTIC_QUERY, tested=False, model_file=_ONNX_DIR,
               note=f"retrieval-tuned, query prefix applied by palace; {_FROM_HUB}"),
    ModelEntry("nomic-ai/nomic-embed-text-v1.5", "nomic", 768, 520, "apache-2.0",
               query_prefix="search_query: ", passage_prefix="search_document: ", tested=False,
               model_file=_ONNX_DIR,
               note=f"long inputs (8192 tokens), prefixes applied by palace; {_FROM_HUB}"),
)


def canonical(name: str) -> str:
    """The fastembed name of catalog model ``name`` (short or full); other names unchanged."""
    found = entry(name)
    return found.name if found is not None else name


def entry(name: str) -> ModelEntry | None:
    """The entry whose fastembed name or short name is ``name`` (case-insensitive), or None."""
    wanted = name.strip().lower()
    for model in MODELS:
        if wanted in (model.name.lower(), model.short):
            return model
    return None
