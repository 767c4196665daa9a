"""Handlers of the maintenance ops: ``palace.doctor``, ``palace.backup``, ``palace.restore``.

Each takes an optional palace: doctor and backup cover every palace without one, restore
defaults to the palace the backup was taken of. The work is in ``palaced.maintenance.doctor``,
``palaced.maintenance.backup`` and ``palaced.maintenance.restore``.

Policy (docs/concepts.md): doctor and backup need no permission (they change no memory);
a restore needs ``admin`` of the palace it replaces. The op table checks the palace named in
the request; a restore into the backed-up palace names it only in the manifest, so its
handler checks that palace itself.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from palaced.maintenance import backup, doctor, restore
from palaced.memory import policy
from palaced.ops.context import OpContext
from palaced.palace import team
from palaced.palace.layout import validate_name
from palaced.wire.errors import PalaceError


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
    backups, failed, skipped = [], [], []
    for name in ctx.registry.names():
        if ctx.registry.is_team(name):  # its server's backups cover it (docs/teams.md)
            skipped.append(name)
            continue
        try:
            backups.append(await backup.backup(ctx.registry, ctx.config, name, to=to,
                                               keep=keep))
        except PalaceError as exc:  # a damaged palace must not keep the others unsaved
            failed.append({"palace": name, "error": exc.to_wire()})
    return {"backups": backups, "failed": failed, **({"skipped": skipped} if skipped else {})}


async def op_restore(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    path = str(args["path"])
    if palace is not None:
        team.refuse(ctx.registry, palace, "palace restore", backup.TEAM_BACKUP_HINT.replace(
            "back it up", "restore it").replace("export it with `palace export`",
                                                "import an export with `palace import`"))
    if palace is None:
        source = restore.check_source(path)
        manifest = await anyio.to_thread.run_sync(restore.read_manifest, source)
        try:
            target = await ctx.registry.get(validate_name(manifest["palace"]))
        except PalaceError:  # no such palace (a new one needs no permission), or damaged
            target = None
        if target is not None:
            await policy.require(target, ctx.actor, "admin")
    return await restore.restore(ctx.registry, path, palace, force=bool(args["force"]))
