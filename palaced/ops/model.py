"""Handlers of the model ops: ``model.load``, ``model.use`` and ``model.check``."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import anyio
import anyio.to_thread

from palaced.config import edit
from palaced.config import settings as config_mod
from palaced.engine.embedder import Embedder, FastEmbedder
from palaced.maintenance.model_loader import reload_model
from palaced.ops.context import OpContext
from palaced.wire.errors import EmbedderMismatch, EmbedderUnavailable, InvalidArgs
from palaced.wire.models import canonical, entry

# Environment variables that override ``[embedder]`` (``palaced.config.model``).
OVERRIDES = ("PALACE_EMBED_MODEL", "PALACE_EMBED_MODEL_PATH")


async def op_model_load(ctx: OpContext, palace: str | None, args: dict[str, Any]
                        ) -> dict[str, Any]:
    """Read the config file's model settings again and load that model (no restart).

    Raises:
        InvalidArgs: the config file cannot be read.
        EmbedderUnavailable: the model did not load (the one in use, if any, stays).
    """
    settings = config_mod.load(ctx.config.paths).embedder
    return await reload_model(ctx.services, settings, ctx.registry)


async def op_model_use(ctx: OpContext, palace: str | None, args: dict[str, Any]
                       ) -> dict[str, Any]:
    """Make ``model`` the daemon's model: write ``[embedder] model`` into the config file
    (commenting out a ``model_path``, which names one model's files), load it, and let the
    background re-embedding move every local palace to it.

    The model in use serves until the new one is loaded; if it does not load, or a team
    palace holds the old model's vectors, the config file is put back as it was.

    Raises:
        InvalidArgs: an environment variable overrides the config file's model, or the file
            cannot be read or edited safely.
        EmbedderUnavailable: the model did not load (not installed, offline...).
        EmbedderMismatch: a team palace on this daemon holds another model's vectors.
    """
    # Two at once would each put the config file back over the other's on failure.
    async with ctx.services.model.use_lock:
        return await _use(ctx, canonical(str(args["model"])))


async def _use(ctx: OpContext, name: str) -> dict[str, Any]:
    """``op_model_use`` under its lock."""
    overriding = [v for v in OVERRIDES if os.environ.get(v) is not None]
    if overriding:
        raise InvalidArgs(
            f"this daemon's environment sets {', '.join(overriding)}, which overrides the "
            "config file's model: unset it (its service unit or shell) and restart the daemon, "
            "then run `palace model use` again",
            details={"condition": "env-override", "variables": overriding})
    path = ctx.config.paths.config_file
    where = str(path)
    old = await anyio.to_thread.run_sync(edit.read_text, path)
    current = (await anyio.to_thread.run_sync(config_mod.load, ctx.config.paths)).embedder
    clear_path = current.model_path is not None
    new = edit.edit_keys(old or "", "embedder",
                         {"model": name, **({"model_path": None} if clear_path else {})}, where)
    await anyio.to_thread.run_sync(edit.write_text, path, new)
    try:
        settings = (await anyio.to_thread.run_sync(config_mod.load, ctx.config.paths)).embedder
        state = await reload_model(ctx.services, settings, ctx.registry,
                                   accept=lambda emb: _team_palaces_accept(ctx, emb))
    except BaseException as exc:
        with anyio.CancelScope(shield=True):  # put the file back even when cancelled
            if old is None:
                await anyio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))
            else:
                await anyio.to_thread.run_sync(edit.write_text, path, old)
        if isinstance(exc, EmbedderUnavailable) and exc.details.get("condition") is None:
            known = entry(name)
            hint = ("`palace model list` shows the models palace knows; any other must be a "
                    "model of fastembed's catalog, downloaded on first use (internet)"
                    if known is None else
                    f"install it with `palace model import PATH --name {known.short}`"
                    if known.custom else
                    "on a machine without internet, install it with `palace model import "
                    f"PATH --name {known.short}`")
            raise EmbedderUnavailable(
                f"{exc.message}; {hint}; the config file was left as it was",
                details={**exc.details, "model": name}) from exc
        raise
    return {"model": name, "config_file": where, "model_path_cleared": clear_path,
            "daemon": state, "reembedding": await _moving(ctx, state.get("identity"))}


async def _team_palaces_accept(ctx: OpContext, emb: Embedder) -> None:
    """Refuse a model that a team palace of this daemon is not on: a shared palace is never
    re-embedded here (every daemon sharing it embeds queries and writes with its model, and
    its pgvector index is made for that model's dimension).

    Raises:
        EmbedderMismatch: naming the palace and its model.
    """
    for name in ctx.registry.names():
        if not ctx.registry.is_team(name) or ctx.registry.damage(name) is not None:
            continue
        team = await ctx.registry.get(name)
        stored = team.embedder_identity
        if stored is not None and stored != emb.identity:
            raise EmbedderMismatch(
                f"team palace {name!r} holds vectors of {stored}, shared with every daemon "
                f"on it and never re-embedded here; switching this daemon to {emb.identity} "
                "would refuse its writes and leave its recall keyword-only. Keep the model, "
                f"or detach it first (`palace delete {name} --yes`: its data stays in "
                "PostgreSQL)",
                details={"palace": name, "palace_model": stored, "model": emb.identity,
                         "condition": "team-palace"})


async def _moving(ctx: OpContext, identity: str | None) -> list[dict[str, Any]]:
    """The local palaces whose vectors the new model re-embeds: name and drawer count."""
    out: list[dict[str, Any]] = []
    for name in ctx.registry.names():
        if ctx.registry.is_team(name) or ctx.registry.damage(name) is not None:
            continue
        try:
            stored, _ = await ctx.registry.recorded_models(name)
            if stored is not None and stored != identity:
                out.append({"palace": name, "drawers": (await ctx.registry.peek(name))
                            .get("drawers")})
        except Exception:  # deleted or damaged meanwhile: `palace status` says so
            continue
    return out


async def op_model_check(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    """Load the installed copy of ``model`` on the side, embed a probe and drop it: whether it
    loads and makes the vectors its record (and the catalog) say. The daemon's model stays.

    Raises:
        EmbedderUnavailable: it does not load, or its vectors have another size.
    """
    name = canonical(str(args["model"]))
    base = (await anyio.to_thread.run_sync(config_mod.load, ctx.config.paths)).embedder
    settings = dataclasses.replace(base, model_name=name, model_path=None,
                                   allow_download=False, disabled=False)
    emb = await anyio.to_thread.run_sync(FastEmbedder.load, settings)
    known = entry(name)
    if known is not None and emb.dims != known.dims:
        raise EmbedderUnavailable(
            f"the copy of {name} in {emb.source} makes {emb.dims}-dimensional vectors, not "
            f"the {known.dims} of the catalog",
            details={"condition": "dims", "dims": emb.dims, "expected": known.dims})
    return {"model": name, "identity": emb.identity, "dims": emb.dims, "source": emb.source}
