"""Handler of ``capture.transcript`` and the capture runner the background queue calls.

The request is checked before anything is queued (palace name, an absolute path to a
readable regular file, labels), so a hook's mistakes come back as typed errors at once;
without ``wait`` the capture is only queued (``palaced.capture.worker``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio.to_thread

from palaced.capture.ingest import CaptureJob, Report, ingest
from palaced.ops.context import OpContext
from palaced.ops.fields import check_label, need_palace
from palaced.palace import team
from palaced.text.exchanges import open_transcript, records_for
from palaced.wire.errors import InternalError, InvalidArgs, PalaceNotFound
from palaced.wire.vocab import DEFAULT_TRANSCRIPT_FORMAT


def _check_path(raw: str) -> Path:
    """Raises InvalidArgs unless ``raw`` is an absolute path without NUL bytes."""
    if "\x00" in raw or not os.path.isabs(raw):
        raise InvalidArgs("path must be an absolute path (the daemon runs from /)",
                          details={"arg": "path", "value": raw[:200]})
    return Path(raw)


def _readable(path: Path) -> None:
    """Raises SourceUnreadable unless ``path`` is a regular file the daemon can read."""
    open_transcript(path).close()


async def op_capture_transcript(ctx: OpContext, palace: str | None, args: dict[str, Any]
                                ) -> dict[str, Any]:
    name = need_palace(palace)
    team.refuse(ctx.registry, name, "capture", "capture transcripts into a local palace")
    path = _check_path(args["path"])
    session_id = check_label(args["session_id"], "session_id")
    fmt = args["format"]
    records_for(fmt)  # an unknown format is refused before anything is queued
    # Claude Code's states keep their bare keys (palaces captured before formats had names);
    # another agent's session of the same id is a different transcript.
    key = session_id or str(path)
    if fmt != DEFAULT_TRANSCRIPT_FORMAT:
        key = f"{fmt}:{key}"
    job = CaptureJob(
        palace=name, path=path, key=key, session_id=session_id, format=fmt,
        wing=check_label(args["wing"], "wing") or "sessions",
        project_wing=bool(args["project_wing"]), create=bool(args["create"]),
        dry_run=bool(args["dry_run"]), actor=ctx.actor)
    if not job.create and not job.dry_run and not ctx.registry.exists(name):
        raise PalaceNotFound(f"no palace named {name!r}; create it with `palace create {name}` "
                             "or pass create", details={"palace": name})
    await anyio.to_thread.run_sync(_readable, path)
    if ctx.captures is None:
        raise InternalError("the capture queue is not running")
    if args["wait"] or job.dry_run:
        return (await ctx.captures.run_now(job)).to_wire(job)
    status = ctx.captures.enqueue(job)
    return {"queued": True, "coalesced": status == "coalesced", "palace": name,
            "key": job.key, "path": str(path)}


async def run_capture(ctx: OpContext, job: CaptureJob) -> Report:
    """Open (or with ``job.create`` create) the palace and capture into it; the palace counts
    as in use meanwhile, so it is not closed as idle under the capture.

    A dry run of a palace that does not exist yet reads the transcript from its start.

    Raises:
        PalaceError: what opening the palace or the capture raises.
    """
    limit = ctx.config.limits.max_text_chars
    if job.dry_run and not ctx.registry.exists(job.palace):
        return await ingest(None, job, limit)
    if job.create:
        palace, _ = await ctx.registry.create(job.palace, exist_ok=True)
    else:
        palace = await ctx.registry.get(job.palace)
    palace.begin_work()
    try:
        return await ingest(palace, job, limit)
    finally:
        palace.end_work()
        palace.used()
