"""Handlers of the maintenance ops: ``palace.doctor``, ``palace.backup``, ``palace.restore``.

Each takes an optional palace: doctor and backup cover every palace without one, restore
defaults to the palace the backup was taken of. The work is in ``palaced.doctor``,
``palaced.backup`` and ``palaced.restore``.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from palaced import backup, doctor, restore
from palaced.errors import PalaceError
from palaced.ops.context import OpContext


async def op_doctor(ctx: OpContext, palace: str | None, args: dict[str, Any]
                    ) -> dict[str, Any]:
    return await doctor.doctor(ctx.registry, ctx.config, ctx.services, palace,
                               repair=bool(args["repair"]), full=bool(args["full"]))


async def op_backup(ctx: OpContext, palace: str | None, args: dict[str, Any]
                    ) -> dict[str, Any]:
    """Back up one palace (its errors raised) or every palace (failures listed, the rest
    still backed up)."""
    to, keep = args.get("to"), args.get("keep")
    if palace is not None:
        made = await backup.backup(ctx.registry, ctx.config, palace, to=to, keep=keep)
        return {"backups": [made], "failed": []}
    # A bad destination is one error, not one failure per palace.
    await anyio.to_thread.run_sync(backup.resolve_root, ctx.config, to)
    backups, failed = [], []
    for name in ctx.registry.names():
        try:
            backups.append(await backup.backup(ctx.registry, ctx.config, name, to=to,
                                               keep=keep))
        except PalaceError as exc:  # a damaged palace must not keep the others unsaved
            failed.append({"palace": name, "error": exc.to_wire()})
    return {"backups": backups, "failed": failed}


async def op_restore(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    return await restore.restore(ctx.registry, str(args["path"]), palace,
                                 force=bool(args["force"]))
