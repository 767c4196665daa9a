"""Handler of the model op: ``model.load``."""

from __future__ import annotations

from typing import Any

from palaced.config import settings as config_mod
from palaced.maintenance.model_loader import reload_model
from palaced.ops.context import OpContext


async def op_model_load(ctx: OpContext, palace: str | None, args: dict[str, Any]
                        ) -> dict[str, Any]:
    """Read the config file's model settings again and load that model (no restart).

    Raises:
        InvalidArgs: the config file cannot be read.
        EmbedderUnavailable: the model did not load (the one in use, if any, stays).
    """
    settings = config_mod.load(ctx.config.paths).embedder
    return await reload_model(ctx.services, settings, ctx.registry)
