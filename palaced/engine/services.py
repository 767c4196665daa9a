"""Daemon-wide services shared by every open palace: model state, embedding lanes, caches.

The model loads in the background; ``ModelState`` is how palaces learn whether vectors can be
used right now. All of it is owned by the daemon's composition root and passed explicitly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import numpy as np
from cachetools import LRUCache

from palaced.config.settings import DaemonConfig
from palaced.engine.batching import EmbedBatcher
from palaced.engine.embedder import Embedder
from palaced.engine.tokens import Tokenizer


@dataclass
class ModelState:
    """Where the embedding model is: loading, ready or unavailable (with the reason).

    ``source`` says where the loaded model's files came from; ``disabled`` that the
    configuration turned embedding off (so there is nothing to install). Watchers are told
    whenever a model is loaded, at start or by ``model.load``.
    """

    state: str = "loading"
    reason: str | None = None
    embedder: Embedder | None = None
    load_seconds: float | None = None
    source: str | None = None
    disabled: bool = False
    configured: str | None = None  # the model the settings name (None: embedding disabled)
    ready_event: anyio.Event = field(default_factory=anyio.Event)
    load_lock: anyio.Lock = field(default_factory=anyio.Lock)  # one load at a time
    use_lock: anyio.Lock = field(default_factory=anyio.Lock)  # one `model.use` at a time
    _watchers: list[Callable[[], None]] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.embedder is not None

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (synchronously: it must not block) on every ``notify``."""
        self._watchers.append(callback)

    def notify(self) -> None:
        """Tell the watchers that a model was loaded or a palace needs re-embedding."""
        for callback in self._watchers:
            callback()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "reason": self.reason,
                               "disabled": self.disabled, "configured": self.configured}
        if self.embedder is not None:
            out["identity"] = self.embedder.identity
            out["dims"] = self.embedder.dims
            out["source"] = self.source
        if self.load_seconds is not None:
            out["load_seconds"] = round(self.load_seconds, 3)
        return out


# Target worker-thread time of one passage slice: how long a request's deadline can be
# overrun, and how long another caller's slice waits for its turn.
SLICE_S = 0.1
MAX_SLICE_TEXTS = 32  # fastembed batches by 16 inside a slice; more only adds padding waste
TEXT_OVERHEAD = 64  # a text costs about as much as this many more characters (per-run setup)
INITIAL_RATE = 20_000.0  # work units (chars + overhead) per second before any measurement


def _units(text: str) -> int:
    return len(text) + TEXT_OVERHEAD


# Texts of one query run: enough to take a burst of 32 clients in one or two runs, few
# enough that a long query among them pads little (queries are short).
MAX_QUERY_BATCH = 32


class EmbedLanes:
    """Embeds on worker threads so long work never holds up short work or a deadline.

    Passages (remember, backfill, reembed) run in slices of about ``SLICE_S`` of model time,
    one slice at a time daemon-wide: one ONNX session already uses every core, so concurrent
    passage runs would only contend. A caller waits for its slice's turn in arrival order
    (FIFO), so waiting callers take turns slice by slice, and the caller's cancel scope (its
    request deadline) takes effect: a timed-out caller stops within one slice. Slices are
    sized from the measured throughput, so they stay short on a loaded machine too.

    Query embeddings (one short text, a few ms) have their own lane and run beside a passage
    slice instead of behind it: onnxruntime sessions accept concurrent runs.

    Both lanes micro-batch (``palaced.engine.batching``): the slices and queries that queue while
    their lane's run is under way are embedded together in its next run (slices up to one
    slice's budget), so 32 concurrent recalls cost a few ONNX runs, not 32; a lone caller
    runs at once.

    Background work (a palace re-embedded for a new model) asks for ``background``: before
    each of its slices it waits until no interactive passage call (remember) is running, so it
    delays one at most by the slice already under way.
    """

    def __init__(self) -> None:
        self.passage_lane = EmbedBatcher(MAX_SLICE_TEXTS, on_run=self._measured)
        self.query_lane = EmbedBatcher(MAX_QUERY_BATCH)
        self._rate = INITIAL_RATE
        self._interactive = 0
        self._no_interactive = anyio.Event()
        self._no_interactive.set()

    def as_dict(self) -> dict[str, int]:
        """Runs and the requests (queries, passage slices) they served, since start."""
        return {"query_runs": self.query_lane.runs, "queries": self.query_lane.requests,
                "passage_runs": self.passage_lane.runs,
                "passage_slices": self.passage_lane.requests}

    def _measured(self, units: float, seconds: float) -> None:
        # Smoothed, so one slice slowed by a burst of load does not shrink all the next.
        self._rate = 0.5 * self._rate + 0.5 * (units / max(seconds, 1e-3))

    async def passages(self, emb: Embedder, texts: list[str], *, background: bool = False
                       ) -> np.ndarray:
        """Vectors of ``texts`` in input order (shape ``(len(texts), emb.dims)``).

        Raises:
            anyio.get_cancelled_exc_class(): the caller's deadline passed (checked between
                slices and once more after the last one, so callers never write late).
            Exception: what the embedder raised.
        """
        if background:
            return await self._passages(emb, texts, background=True)
        self._interactive += 1
        if self._interactive == 1:
            self._no_interactive = anyio.Event()
        try:
            return await self._passages(emb, texts, background=False)
        finally:
            self._interactive -= 1
            if self._interactive == 0:
                self._no_interactive.set()

    async def _passages(self, emb: Embedder, texts: list[str], *, background: bool
                        ) -> np.ndarray:
        out = np.zeros((len(texts), emb.dims), dtype=np.float32)
        # Slices of similar lengths pad less; the embedder sorts inside a slice as well.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        pos = 0
        while pos < len(order):
            budget = self._rate * SLICE_S
            end, units = pos + 1, _units(texts[order[pos]])
            while (end < len(order) and end - pos < MAX_SLICE_TEXTS
                   and units + _units(texts[order[end]]) <= budget):
                units += _units(texts[order[end]])
                end += 1
            idx = order[pos:end]
            batch = [texts[i] for i in idx]
            while background and self._interactive:
                await self._no_interactive.wait()
            out[idx] = await self.passage_lane.embed(emb, emb.embed_passages, batch,
                                                     units=units, budget=budget)
            pos = end
        await anyio.lowlevel.checkpoint_if_cancelled()
        return out

    async def query(self, emb: Embedder, text: str) -> np.ndarray:
        """The query vector of ``text``, computed beside any running passage slice, in one
        run with the other queries waiting at the same time.

        Raises:
            Exception: what the embedder raised for the run that held this query.
        """
        rows = await self.query_lane.embed(emb, emb.embed_queries, [text])
        vec: np.ndarray = rows[0]
        return vec


@dataclass
class Services:
    """Shared services handed to palaces."""

    config: DaemonConfig
    model: ModelState
    tokenizer: Tokenizer
    embeds: EmbedLanes = field(default_factory=EmbedLanes)
    query_vectors: LRUCache[tuple[str, str], Any] = field(
        default_factory=lambda: LRUCache(maxsize=2048)
    )
    _tokenizer_loading: threading.Thread | None = field(default=None, init=False)

    def load_tokenizer(self, load: Callable[[], Tokenizer]) -> None:
        """Load the tokenizer in a background thread (parsing cl100k_base takes ~0.2 s, which
        would delay the daemon's first answer); ``ready_tokenizer`` waits for it."""
        def run() -> None:
            self.tokenizer = load()

        self._tokenizer_loading = threading.Thread(target=run, name="tokenizer", daemon=True)
        self._tokenizer_loading.start()

    async def ready_tokenizer(self) -> Tokenizer:
        """The tokenizer, once loaded: budgets are always counted by the final one."""
        loading = self._tokenizer_loading
        if loading is not None and loading.is_alive():
            await anyio.to_thread.run_sync(loading.join)
        return self.tokenizer
