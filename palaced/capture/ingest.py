"""Ingesting a session transcript into a palace: only what is new, exactly once.

The capture state of the transcript (``store/rows/captures.py``) says where the last capture
stopped. From there the transcript is read in batches of complete exchanges
(``palaced.text.exchanges``, in the job's ``format``: Claude Code, Codex CLI, Gemini CLI or
Copilot CLI records); each batch's drawers (``palaced.capture.drawers``) commit in one
transaction together with the new state, so a crash (even ``kill -9``) between batches loses nothing
and a repeat stores nothing. The state always points at the start of the first exchange that is not
complete, so an exchange still in progress is read again next time:

* a prompt without an answer yet is not stored;
* an answered exchange at the end of the file is stored (its turn may be over: a ``Stop``
  hook fires then) and remembered as *open*; when a later capture finds it grown, the new
  drawer replaces it in the same transaction, and once a next prompt follows it is closed.

Parsing, redaction, extraction and file reads run in worker threads; embedding and the write
go through the palace's usual path (``writes.remember_captured``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import anyio.to_thread
import apsw

from palaced.capture.drawers import Captured, project_wing, room_name, to_drawer
from palaced.memory import writes
from palaced.palace.handle import Palace, now_ms
from palaced.store.rows.audit import SYSTEM, Actor, append
from palaced.store.rows.captures import CaptureState, drop_open_drawer, get_state, put_state
from palaced.text.exchanges import (
    MAX_LISTED,
    Exchange,
    TranscriptReader,
    open_transcript,
    records_for,
)
from palaced.wire.vocab import DEFAULT_TRANSCRIPT_FORMAT

BATCH = 256  # exchanges per transaction


@dataclass(frozen=True)
class CaptureJob:
    """One capture request: which transcript, keyed how, filed where."""

    palace: str
    path: Path
    key: str  # the session id, else the path (prefixed ``<format>:`` but for Claude Code's)
    session_id: str | None = None
    wing: str = "sessions"
    project_wing: bool = False
    create: bool = False
    dry_run: bool = False
    actor: Actor = SYSTEM  # who asked: the agent the drawers and the audit log record
    format: str = DEFAULT_TRANSCRIPT_FORMAT  # whose transcript: wire.vocab.TRANSCRIPT_FORMATS


@dataclass
class Report:
    """What one capture did (or, dry, would do)."""

    exchanges: int = 0  # exchange drawers written: new ones and replacements
    drawers: int = 0  # new drawer rows among them
    replaced: int = 0  # open exchanges that grew and replaced their drawer
    redactions: int = 0
    skipped: int = 0  # malformed lines skipped
    skipped_lines: list[int] = field(default_factory=list)
    pending: bool = False  # a prompt at the end still waits for its answer
    tags: Counter[str] = field(default_factory=Counter)
    wing: str | None = None
    room: str | None = None

    def to_wire(self, job: CaptureJob) -> dict[str, Any]:
        return {"palace": job.palace, "path": str(job.path), "key": job.key,
                "wing": self.wing, "room": self.room, "exchanges": self.exchanges,
                "drawers": self.drawers, "replaced": self.replaced,
                "redactions": self.redactions, "skipped": self.skipped,
                "skipped_lines": self.skipped_lines, "pending": self.pending,
                "tags": dict(self.tags), "dry_run": job.dry_run, "format": job.format}


@dataclass
class _Open:
    """The exchange stored while open: where it starts, its drawer (if ours) and content."""

    start: int
    drawer: int | None
    digest: str


async def ingest(palace: Palace | None, job: CaptureJob, limit: int) -> Report:
    """Capture what is new in ``job.path`` into ``palace`` (see the module docstring).

    ``limit`` is the longest drawer text (longer exchanges are cut). ``palace`` may be None
    for a dry run only (no palace yet: everything is new).

    Raises:
        SourceUnreadable: the transcript is missing, not a regular file or not readable.
        InvalidArgs: ``job.format`` is not a transcript format.
        StorageError: SQLite failed (the batches committed before it stay committed).
    """
    if palace is None and not job.dry_run:
        raise ValueError("only a dry run may go without a palace")
    state = None if palace is None else await palace.read(lambda c: get_state(c, job.key))
    if state is not None and state.path != str(job.path):
        # The session's transcript moved: its offsets mean nothing in the new file. Read it
        # from the start; content hashes keep what is already stored from being stored twice.
        state = replace(state, path=str(job.path), offset=0, line=0, scanned=0,
                        open_drawer=None, open_hash=None)
    records = records_for(job.format)
    fh = await anyio.to_thread.run_sync(open_transcript, job.path)
    try:
        reader = await anyio.to_thread.run_sync(
            partial(TranscriptReader, fh, state.offset if state else 0,
                    state.line if state else 0, state.scanned if state else 0, records))
        return await _ingest(palace, job, limit, reader, state)
    finally:
        fh.close()


async def _ingest(palace: Palace | None, job: CaptureJob, limit: int, reader: TranscriptReader,
                  state: CaptureState | None) -> Report:
    report = Report()
    opened: _Open | None = None
    if state is not None and state.open_hash is not None and not reader.restarted:
        opened = _Open(state.offset, state.open_drawer, state.open_hash)
    wing, room = (state.wing, state.room) if state is not None else (None, None)
    total = state.exchanges if state is not None else 0
    while True:
        batch = await anyio.to_thread.run_sync(reader.next_batch, BATCH)
        report.skipped += batch.malformed
        room_left = MAX_LISTED - len(report.skipped_lines)
        report.skipped_lines.extend(batch.malformed_lines[:max(room_left, 0)])
        exchanges = list(batch.complete)
        tail = batch.tail if batch.eof else None
        if tail is not None and tail.answered:
            exchanges.append(tail)
        report.pending = tail is not None and not tail.answered
        if room is None and exchanges:
            wing = project_wing(exchanges, job.wing) if job.project_wing else job.wing
            room = room_name(exchanges[0], job.session_id, str(job.path))
        if wing is None or room is None:
            if batch.eof:
                return report
            continue
        report.wing, report.room = wing, room
        captured, exchanges, failed = await anyio.to_thread.run_sync(
            partial(_drawers, exchanges, wing, room, str(job.path), limit))
        report.skipped += len(failed)
        room_left = MAX_LISTED - len(report.skipped_lines)
        report.skipped_lines.extend(failed[:max(room_left, 0)])
        items, drop, keep = _plan(captured, exchanges, tail, opened)
        for cap in items:
            report.redactions += cap.redactions
            report.tags.update(cap.drawer.tags)
        report.exchanges += len(items)
        report.replaced += drop is not None
        total += len(items)
        new_state = CaptureState(job.key, str(job.path), wing, room, batch.resume,
                                 batch.resume_line, reader.position, exchanges=total)
        if job.dry_run or palace is None:
            report.drawers += len(items)
        elif items or drop is not None or new_state != _without_open(state):
            opened = await _commit(palace, items, drop, keep, tail, new_state, report,
                                   job.actor)
            state = new_state
        if batch.eof:
            return report


def _drawers(exchanges: list[Exchange], wing: str, room: str, path: str, limit: int
             ) -> tuple[list[Captured], list[Exchange], list[int]]:
    """The drawers of ``exchanges``, the exchanges they stand for, and the first line of
    each exchange that could not become a drawer: skipped alone, never the whole session."""
    captured: list[Captured] = []
    kept: list[Exchange] = []
    failed: list[int] = []
    for ex in exchanges:
        try:
            cap = to_drawer(ex, wing=wing, room=room, path=path, limit=limit)
            _ = cap.drawer.content_hash  # encodes the text: fails here, not in the write
        except (ValueError, OverflowError, RecursionError):
            failed.append(ex.first_line)
            continue
        captured.append(cap)
        kept.append(ex)
    return captured, kept, failed


def _without_open(state: CaptureState | None) -> CaptureState | None:
    return None if state is None else replace(state, open_drawer=None, open_hash=None)


def _plan(captured: list[Captured], exchanges: list[Exchange], tail: Exchange | None,
          opened: _Open | None) -> tuple[list[Captured], _Open | None, _Open | None]:
    """What to store of a batch: the drawers, the open drawer they replace (if it grew), and
    the open drawer that stays open unchanged (if the tail is still that exchange)."""
    items: list[Captured] = []
    drop = keep = None
    for cap, ex in zip(captured, exchanges, strict=True):
        if opened is not None and ex.start == opened.start:
            if cap.drawer.content_hash == opened.digest:
                if ex is tail:
                    keep = opened
                continue  # stored already, unchanged
            if opened.drawer is not None:
                drop = opened
        items.append(cap)
    return items, drop, keep


async def _commit(palace: Palace, items: list[Captured], drop: _Open | None,
                  keep: _Open | None, tail: Exchange | None, state: CaptureState,
                  report: Report, actor: Actor) -> _Open | None:
    """Store one batch with its state for ``actor`` in one transaction (its audit entry
    too); returns the exchange left open."""
    result: list[_Open | None] = [None]
    tail_item = items[-1] if items and tail is not None and items[-1].start == tail.start \
        else None

    def before(c: apsw.Connection) -> list[int]:
        if drop is None or drop.drawer is None:
            return []
        vids = drop_open_drawer(c, drop.drawer, drop.digest)
        if vids is None:
            return []
        # Deleted, not trashed: the grown exchange's drawer stored next holds its text.
        append(c, actor, "replaced", now_ms(), drawer_ids=[drop.drawer],
               detail={"reason": "capture"})
        return vids

    def after(c: apsw.Connection, outcomes: list[dict[str, Any]]) -> None:
        opened = keep
        if tail_item is not None:
            last = outcomes[-1]
            # A drawer that already existed (the same words earlier in the room) is not
            # ours to replace later: remember only its content.
            opened = _Open(tail_item.start, int(last["id"]) if last["created"] else None,
                           tail_item.drawer.content_hash)
        put_state(c, replace(state, open_drawer=opened.drawer if opened else None,
                             open_hash=opened.digest if opened else None), now_ms())
        result[0] = opened

    outcomes = await writes.remember_captured(
        palace, [cap.drawer for cap in items], writes.TxHooks(before, after), actor)
    report.drawers += sum(1 for o in outcomes if o["created"])
    return result[0]
