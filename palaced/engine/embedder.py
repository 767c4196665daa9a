"""Text embedders: fastembed (the product) and a deterministic hashing embedder (tests).

Synchronous module: loading and inference run in worker threads under the embed limiter.
Vectors are float32, L2-normalised, so cosine similarity is a dot product.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from palaced.config.model import EmbedderSettings
from palaced.wire.errors import EmbedderUnavailable
from palaced.wire.models import ModelEntry, canonical, entry
from palaced.wire.paths import MODEL_RECORD, model_dir_name

log = logging.getLogger(__name__)

# How a user gets the model when it is missing (error messages and the keyword-only notice).
INSTALL_HINT = "`palace model fetch` or `palace model import PATH` installs it"
# Texts are sorted by length and embedded 16 at a time: less padding per batch. LoCoMo turns
# (~150 chars), 2 cores: batch 16 -> 138/s, 64 -> 131/s, 256 -> 53/s, unsorted 64 -> 25/s.
BATCH_SIZE = 16


class Embedder(Protocol):
    """What the daemon needs from an embedding model."""

    @property
    def identity(self) -> str: ...

    @property
    def dims(self) -> int: ...

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray: ...


def _normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = matrix / norms
    return out


def installed_copy(settings: EmbedderSettings) -> Path | None:
    """The installed copy of the configured model (``palace model``), if there is one."""
    if settings.install_dir is None:
        return None
    known = entry(settings.model_name)
    path = settings.install_dir / model_dir_name(canonical(settings.model_name))
    onnx = known.model_file if known is not None else "model.onnx"
    return path if (path / onnx).is_file() else None


def register_custom(model: ModelEntry) -> None:
    """Teach fastembed a model of palace's catalog that its own catalog lacks (once per
    process; a second call for the same name is a no-op)."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    known = {m["model"].lower() for m in TextEmbedding.list_supported_models()}
    if model.name.lower() in known:
        return
    TextEmbedding.add_custom_model(
        model=model.name, pooling=PoolingType[model.pooling.upper()],
        normalization=model.normalized, sources=ModelSource(hf=model.name), dim=model.dims,
        model_file=model.model_file, license=model.license, size_in_gb=model.size_mb / 1000)


def _recorded_dims(path: Path) -> int | None:
    """The vector size an installed copy's record promises (None: unknown)."""
    try:
        dims = json.loads((path / MODEL_RECORD).read_text("utf-8")).get("dims")
    except (OSError, ValueError, AttributeError):
        return None
    return dims if isinstance(dims, int) else None


class FastEmbedder:
    """fastembed ONNX model; load with ``FastEmbedder.load``. ``source`` says from where."""

    def __init__(self, model: Any, name: str, dims: int, source: str = "") -> None:
        self._model = model
        self._name = name
        self._dims = dims
        self.source = source
        known = entry(name)
        # The catalog's prefixes (nomic's "search_query: "...): fastembed adds none.
        self._query_prefix = known.query_prefix if known else ""
        self._passage_prefix = known.passage_prefix if known else ""

    @property
    def identity(self) -> str:
        return f"fastembed:{self._name}:{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    @classmethod
    def load(cls, settings: EmbedderSettings) -> FastEmbedder:
        """Load the model (blocking, ~1 s). Never touches the network unless allowed.

        Raises:
            EmbedderUnavailable: no model could be loaded; the message says why.
        """
        if settings.disabled:
            raise EmbedderUnavailable("embedding disabled by configuration (keyword-only)")
        try:
            from fastembed import TextEmbedding
        except Exception as exc:  # pragma: no cover - dependency problem
            raise EmbedderUnavailable(f"fastembed cannot be imported: {exc}") from exc
        known = entry(settings.model_name)
        if known is not None and known.custom:
            register_custom(known)
        kwargs: dict[str, Any] = {"model_name": known.name if known else settings.model_name}
        if settings.threads:
            kwargs["threads"] = settings.threads
        if settings.cache_dir is not None:
            kwargs["cache_dir"] = str(settings.cache_dir)
        errors: list[str] = []
        attempts: list[tuple[str, dict[str, Any]]] = []
        path, expect = settings.model_path, None
        if path is None and (installed := installed_copy(settings)) is not None:
            path, expect = installed, _recorded_dims(installed)
        if path is not None:
            if (not (path / "model.onnx").is_file() and not any(path.glob("*.onnx"))
                    and not (known is not None and (path / known.model_file).is_file())):
                raise EmbedderUnavailable(f"no ONNX model in {path} (PALACE_EMBED_MODEL_PATH)")
            attempts.append((str(path), {"specific_model_path": str(path),
                                         "local_files_only": True}))
        else:
            cache = f"the fastembed cache {settings.cache_dir or ''}".rstrip()
            attempts.append((cache, {"local_files_only": True}))
            if settings.allow_download:
                reachable, why = hub_reachable()
                if reachable:
                    attempts.append((f"a download into {cache}", {}))
                else:
                    errors.append(why)
        for source, extra in attempts:
            try:
                model = TextEmbedding(**kwargs, **extra)
                _stop_spinning(model, settings.threads)
                probe = np.asarray(next(iter(model.embed(["probe"]))), dtype=np.float32)
            except Exception as exc:
                # fastembed's words for a model that is not there ("ValueError: Could not load
                # model ... from any source") reached `palace status` and every keyword-only
                # recall notice: say where it was looked for; the exception goes to the log.
                log.info("embedding model not loaded from %s: %s: %s", source,
                         type(exc).__name__, exc)
                said = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                cache_miss = extra.get("local_files_only") and "specific_model_path" not in extra
                errors.append(f"not in {source}" if cache_miss else f"{source}: {said}")
                continue
            dims = int(probe.shape[0])
            if expect is not None and dims != expect:
                raise EmbedderUnavailable(
                    f"the model installed in {path} makes {dims}-dimensional vectors, not the "
                    f"{expect} its record promises; install another copy with `palace model "
                    "import PATH`", details={"path": str(path), "dims": dims})
            return cls(model, kwargs["model_name"], dims, source)
        where = path or settings.cache_dir or "the fastembed cache"
        raise EmbedderUnavailable(
            f"model {settings.model_name} not available from {where} (offline? {INSTALL_HINT}): "
            f"{'; '.join(dict.fromkeys(errors))}")

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        """Embed texts in batches of similar length (less padding), in input order."""
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self._dims), dtype=np.float32)
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            batch = [self._passage_prefix + texts[i] for i in idx]
            vecs = np.asarray(
                list(self._model.embed(batch, batch_size=len(batch))),
                dtype=np.float32,
            )
            out[idx] = vecs
        return _normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        vec = np.asarray(next(iter(self._model.query_embed([self._query_prefix + text]))),
                         dtype=np.float32)
        out: np.ndarray = _normalise(vec.reshape(1, -1))[0]
        return out

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Query vectors of ``texts`` in input order, in one ONNX run (the queries that
        waited together: ``palaced.engine.batching``). Rows match ``embed_query`` of each text."""
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        vecs = np.asarray(list(self._model.query_embed(
            [self._query_prefix + t for t in texts], batch_size=len(texts))), dtype=np.float32)
        return _normalise(vecs)


def hub_reachable(timeout: float = 3.0) -> tuple[bool, str]:
    """Whether the model hub answers a TCP connect; ``(False, reason)`` when it does not.

    Offline, fastembed's download attempt retries for ~40 s before failing, and the daemon
    would report "loading" all that time; a connect probe settles it in milliseconds.
    ``HF_ENDPOINT`` (a mirror) is honoured.
    """
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return False, f"model hub {host}:{port} unreachable ({exc.strerror or exc})"
    return True, ""


def _stop_spinning(model: Any, threads: int | None) -> None:
    """Recreate fastembed's ONNX session with thread spinning off.

    onnxruntime's intra-op threads busy-wait after every run. On two cores that steals the
    core SQLite needs while recall runs BM25 beside the query embedding: measured embed +
    BM25 in parallel, 11.2 ms with spinning, 6.8 ms without (sequential: 8.9 ms). fastembed
    does not expose the option, so the session is rebuilt from the same file with the same
    settings plus this one; if its internals ever differ, the original session is kept.
    """
    try:
        import onnxruntime as ort

        wrapper = model.model
        old = wrapper.model
        path = old._model_path
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = threads
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
        wrapper.model = ort.InferenceSession(path, sess_options=so,
                                             providers=old.get_providers())
    except Exception:  # keep fastembed's own session: slower under contention, still right
        return


_TOKEN = re.compile(r"\w+")


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder for fast unit tests (not semantic)."""

    def __init__(self, dims: int = 64) -> None:
        self._dims = dims

    @property
    def identity(self) -> str:
        return f"hash:{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    def _one(self, text: str) -> np.ndarray:
        vec = np.zeros(self._dims, dtype=np.float32)
        for word in _TOKEN.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            vec[h % self._dims] += 1.0 if (h >> 32) & 1 else -1.0
        if not vec.any():
            vec[0] = 1.0
        return vec

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dims), dtype=np.float32)
        return _normalise(np.stack([self._one(t) for t in texts]))

    def embed_query(self, text: str) -> np.ndarray:
        out: np.ndarray = _normalise(self._one(text).reshape(1, -1))[0]
        return out

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)
