"""Handlers of the daemon ops: ``daemon.status`` and ``daemon.stop``."""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import apsw

from palaced import __version__
from palaced.ops.context import OpContext

TIGHTENED_SHOWN = 20  # status lists this many tightened paths; the log has them all


async def op_status(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    names = ctx.registry.names()
    palaces: list[dict[str, Any]] = [{} for _ in names]

    async def peek(k: int, name: str) -> None:
        try:
            info = await ctx.registry.peek(name)
            info.pop("rooms", None)
            info.pop("identity", None)
            palaces[k] = info
        except Exception as exc:  # one broken palace must not hide the others
            palaces[k] = {"name": name, "error": f"{type(exc).__name__}: {exc}"}

    # Together: a team palace whose server does not answer costs its connect timeout, once
    # for all of them rather than once each.
    async with anyio.create_task_group() as tg:
        for k, name in enumerate(names):
            tg.start_soon(peek, k, name)
    tok = await ctx.services.ready_tokenizer()
    return {
        "version": __version__,
        "pid": os.getpid(),
        "uptime_s": round(time.monotonic() - ctx.started, 3),
        "socket": str(ctx.config.paths.socket),
        "data_dir": str(ctx.config.paths.data_dir),
        "log_file": str(ctx.config.paths.log_file),
        "model": ctx.services.model.as_dict(),
        "mode": "hybrid" if ctx.services.model.ready else "keyword-only",
        # Embedding runs since start, and the requests they served: under concurrency one
        # run serves several waiting queries or slices (palaced.engine.batching).
        "embedding": ctx.services.embeds.as_dict(),
        "tokenizer": {"name": tok.name, "exact": tok.exact, "reason": tok.reason},
        "connections": ctx.connections(),
        # SQLite's heap (page caches, schemas, statements): up to 16 MB of page cache per
        # connection (palaced.store.conn.db), five per open palace; part of the RSS that fills up.
        "sqlite_mb": round(apsw.memory_used() / 2**20, 1),
        # Background transcript captures: waiting, and finished (failed ones among them).
        "captures": ({"waiting": ctx.captures.waiting, "done": ctx.captures.done,
                      "failed": ctx.captures.failed} if ctx.captures is not None else None),
        "palaces": palaces,
        # Permissions this run tightened at start: shown for the whole run, empty from the
        # next start on since there is then nothing left to tighten.
        "tightened": {"count": len(ctx.tightened), "paths": ctx.tightened[:TIGHTENED_SHOWN]},
    }


async def op_stop(ctx: OpContext, palace: str | None, args: dict[str, Any]) -> dict[str, Any]:
    ctx.request_stop()
    return {"stopping": True}
