"""Which embedding model the daemon loads: ``[embedder]`` settings and their environment
overrides (``PALACE_EMBED_MODEL``, ``PALACE_EMBED_MODEL_PATH``). The engine
(``palaced.engine.embedder``) loads what these name."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from palaced.wire.models import canonical
from palaced.wire.vocab import DEFAULT_MODEL


@dataclass(frozen=True)
class EmbedderSettings:
    """How to find the model: a name, and optionally a local directory holding it.

    Looked for in order: ``model_path``, the copy ``palace model fetch|import`` installed in
    ``install_dir`` (``<data_dir>/models``), fastembed's cache in ``cache_dir``, a download.
    """

    model_name: str = DEFAULT_MODEL
    model_path: Path | None = None
    cache_dir: Path | None = None
    threads: int | None = None
    allow_download: bool = True
    disabled: bool = False
    install_dir: Path | None = None


def settings_from_env(base: EmbedderSettings) -> EmbedderSettings:
    """Apply PALACE_EMBED_MODEL / PALACE_EMBED_MODEL_PATH overrides.

    ``PALACE_EMBED_MODEL=none`` (or ``off``) disables embedding: keyword-only mode. A catalog
    model's short name (``mpnet``, ``palaced.wire.models``) becomes its fastembed name.
    """
    name = os.environ.get("PALACE_EMBED_MODEL")
    path = os.environ.get("PALACE_EMBED_MODEL_PATH")
    disabled = base.disabled
    model_name = base.model_name
    if name is not None:
        if name.strip().lower() in {"none", "off", "", "0"}:
            disabled = True
        else:
            model_name = name
    model_path = base.model_path
    if path is not None:
        model_path = Path(path).expanduser() if path else None
    return EmbedderSettings(model_name=canonical(model_name), model_path=model_path,
                            cache_dir=base.cache_dir, threads=base.threads,
                            allow_download=base.allow_download, disabled=disabled,
                            install_dir=base.install_dir)
