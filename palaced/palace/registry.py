"""Registry: the palaces of one data root — names, lazy open, create, delete, idle close.

The catalogue is the directory itself (``<data>/palaces/<name>/palace.db``): a separate
catalogue file could drift from what is on disk, and the directory cannot. The open palaces
stay within a budget of descriptors (``palaced.palace.open_files``).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from palaced.engine.services import Services
from palaced.palace import peek, reads, team
from palaced.palace.directory import DB_NAME, LOCK_NAME, has_database, is_team
from palaced.palace.handle import Palace
from palaced.palace.layout import (
    NAME_RE,
    REPLACED_PREFIX,
    STAGING_PREFIX,
    TRASH_PREFIX,
    sweep_leftovers,
    validate_name,
)
from palaced.palace.open_files import OpenPalaces, close_logged
from palaced.store.conn.db import storage_errors
from palaced.store.lookup.reembed import next_model
from palaced.wire.errors import PalaceExists, PalaceNotFound, StorageError
from palaced.wire.safe_files import sync_dir

log = logging.getLogger("palaced.palace.registry")

class Registry:
    """Owns every open Palace of the daemon."""

    def __init__(self, root: Path, services: Services) -> None:
        self.root = root
        self.services = services
        self._open: dict[str, Palace] = {}
        self._opening: dict[str, anyio.Lock] = {}
        self._guards: dict[str, anyio.Lock] = {}
        self._admin = anyio.Lock()
        # Handles whose directory was deleted or replaced under them, closed once idle.
        self._vanished: list[Palace] = []
        self.budget = OpenPalaces(self._open, self._opening, self.get)

    def path_of(self, name: str) -> Path:
        return self.root / validate_name(name)

    def exists(self, name: str) -> bool:
        """Whether a palace is there: a usable one, or a damaged one (files, no database).

        A damaged palace exists so that it is listed, reported and deletable, and so that
        ``create`` never makes a fresh database in its place.
        """
        try:
            return has_database(name, self.path_of(name))
        except StorageError:
            return True

    def damage(self, name: str) -> StorageError | None:
        """The StorageError describing a damaged palace directory, or None."""
        try:
            has_database(name, self.path_of(name))
        except StorageError as exc:
            return exc
        return None

    def names(self) -> list[str]:
        """Names of every palace on disk (damaged ones included), sorted."""
        found = self.root.iterdir() if self.root.is_dir() else iter(())
        return sorted(p.name for p in found if NAME_RE.fullmatch(p.name) and self.exists(p.name))

    @property
    def open_palaces(self) -> dict[str, Palace]:
        return dict(self._open)

    def _live(self, name: str) -> tuple[Palace | None, bool]:
        """``(the open palace or None, whether it was just set aside as vanished)``."""
        palace = self._open.get(name)
        if palace is None or not palace.vanished():
            return palace, False
        del self._open[name]
        self._vanished.append(palace)
        log.warning("palace %s: its database %s was deleted or replaced while open; the "
                    "handle is closed without writing to it", name, palace.dir / DB_NAME)
        return None, True

    async def evict_vanished(self) -> None:
        """Set aside open palaces whose directory was deleted or replaced under the daemon,
        and close those no request uses any more (the scheduler calls this on every run)."""
        for name in list(self._open):
            self._live(name)
        for palace in list(self._vanished):
            if palace.in_flight == 0:
                self._vanished.remove(palace)
                with anyio.CancelScope(shield=True):
                    await palace.write(palace.discard_sync, wrote=False)

    async def get(self, name: str) -> Palace:
        """Return the open palace, opening it on first use.

        A failed open leaves nothing behind (no lock, no connection, no registry entry):
        the next request tries again, so fixing the cause is enough.

        Raises:
            InvalidPalaceName, PalaceNotFound, PalaceLocked, StorageError (also: a damaged
            palace), SchemaTooNew, IndexError_.
        """
        validate_name(name)
        palace, gone = self._live(name)
        if palace is not None:
            palace.used()
            return palace
        await self.evict_vanished()
        lock = self._opening.setdefault(name, anyio.Lock())
        async with lock:
            palace, gone_now = self._live(name)
            if palace is None:
                if not self.exists(name):
                    deleted = bool(gone or gone_now)
                    why = " (its directory was deleted while it was open)" if deleted else ""
                    # ``deleted``: clients do not create a palace on a write that found it
                    # gone from under the daemon (palace_client.api.projects.CREATES_PALACE).
                    raise PalaceNotFound(
                        f"no palace named {name!r}{why}; create it with "
                        f"`palace create {name}`",
                        details={"palace": name, **({"deleted": True} if deleted else {})},
                    )
                await self.budget.make_room(self.is_team(name))
                palace = await team.open_existing(name, self.path_of(name), self.services)
                await self._register(palace)
                log.info("opened palace %s", name)
            palace.used()
            return palace

    async def _register(self, palace: Palace) -> None:
        """Make a freshly opened palace visible; closes it again if attaching fails."""
        self._open[palace.name] = palace
        try:
            await self._attach_if_ready(palace)
        except Exception:
            del self._open[palace.name]
            with anyio.CancelScope(shield=True):
                await palace.aclose()
            raise

    async def _attach_if_ready(self, palace: Palace) -> None:
        """Attach the model if it became ready (or changed) while the palace was being opened;
        a palace whose vectors are another model's wakes the background re-embedding."""
        embedder = self.services.model.embedder
        if embedder is not None and (palace.index is None
                                     or palace.embedder_identity != embedder.identity):
            await palace.attach(embedder)
        if palace.mismatch is not None:
            self.services.model.notify()

    def is_team(self, name: str) -> bool:  # a team palace's directory holds store.toml
        return is_team(self.path_of(name))

    async def recorded_models(self, name: str) -> tuple[str | None, str | None]:
        """``(model of the vectors, model a re-embedding aims at)`` of a palace, open or not
        (never opens it). Raises PalaceNotFound, StorageError."""
        open_ = self._open.get(validate_name(name))
        if open_ is not None:
            return open_.embedder_identity, await open_.read(next_model)
        if not self.exists(name):
            raise PalaceNotFound(f"no palace named {name!r}", details={"palace": name})
        return await anyio.to_thread.run_sync(peek.recorded_models, self.path_of(name), name)

    async def peek(self, name: str) -> dict[str, Any]:
        """Counts of a palace without opening it (no index load, no lock, no caches).

        ``palace status`` lists every palace; opening them all would load every vector index
        into memory just to count rows. Open palaces report their full ``info`` instead.

        Raises:
            PalaceNotFound, StorageError (also: a damaged palace).
        """
        open_, _ = self._live(validate_name(name))
        if open_ is None and self.exists(name) and self.is_team(name):
            open_ = await self.get(name)  # no file to peek into: ask its server
        if open_ is not None:
            info = await reads.info(open_)
            info["open"] = True
            return info
        if not self.exists(name):
            raise PalaceNotFound(f"no palace named {name!r}", details={"palace": name})
        if (damage := self.damage(name)) is not None:
            raise damage
        current = self.services.model.embedder
        return await anyio.to_thread.run_sync(
            peek.closed_info, self.path_of(name), name, current.identity if current else None)

    async def create(self, name: str, *, exist_ok: bool = False, store: str | None = None
                     ) -> tuple[Palace, bool]:  # store: a team palace (``team.open_new``)
        """Create a palace directory and open it: the only way a new palace comes to be.

        Returns the open palace and whether this call created it. Of concurrent creates of
        one name, exactly one says it created it: the existence check and the create are
        made under one lock, so no other create can slip between them.

        Raises:
            PalaceExists: it exists and ``exist_ok`` is false.
            StorageError: a damaged palace is there (even with ``exist_ok``: a fresh database
                must not replace it; delete it explicitly), or the storage failed.
        """
        validate_name(name)
        async with self._admin:
            self._live(name)  # a handle whose directory was deleted must not be reused
            if (damage := self.damage(name)) is not None:
                raise damage
            if self.exists(name):
                if not exist_ok or (store is not None and not self.is_team(name)):
                    raise PalaceExists(f"palace {name!r} already exists", details={"palace": name})
                return await self.get(name), False
            if store is not None:
                async with self._opening.setdefault(name, anyio.Lock()):
                    await self.budget.make_room(True)
                    p, new = await team.open_new(name, self.path_of(name), self.services, store)
                    await self._register(p)
                return p, new
            with storage_errors(self.root):
                self.root.mkdir(parents=True, exist_ok=True)
            lock = self._opening.setdefault(name, anyio.Lock())
            # One hold of the opening lock from the rename to the registration: a get() in
            # between would open the new palace itself, and this open would then find its
            # lock taken (PALACE_LOCKED).
            async with lock:
                await self.budget.make_room(False)
                created = await self._build(name)
                if created:
                    palace = await Palace.open(name, self.path_of(name), self.services,
                                               create=False)
                    await self._register(palace)
            if not created:
                # Another process on this data directory renamed its palace in first.
                if not exist_ok:
                    raise PalaceExists(f"palace {name!r} already exists", details={"palace": name})
                return await self.get(name), False
            log.info("created palace %s", name)
            return palace, True

    async def _build(self, name: str) -> bool:
        """Make a complete palace directory for ``name`` and move it into place in one rename.

        A kill -9 in the middle of a create must not leave a half-made palace under the
        palace's name (it would read as damaged, and block every later create): the palace is
        built and closed under a staging name that ``names()`` ignores, then renamed. The
        rename is also what decides, atomically, who created it: it fails on a directory that
        is no longer empty. Returns False when a palace got there first.

        Raises:
            StorageError: the storage failed; nothing is left under the palace's name.
        """
        path = self.path_of(name)
        staging = self.root / f"{STAGING_PREFIX}{name}-{time.time_ns()}"
        try:
            made = await Palace.open(name, staging, self.services, create=True)
            await made.aclose()

            def move() -> bool:
                # A directory holding only a lock file (or nothing) is no palace: replace it.
                if path.is_dir() and not path.is_symlink() and {
                        p.name for p in path.iterdir()} <= {LOCK_NAME}:
                    shutil.rmtree(path)
                try:
                    staging.rename(path)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) and has_database(name, path):
                        return False
                    raise
                return True

            with storage_errors(path, name):
                return await anyio.to_thread.run_sync(move)
        finally:
            if staging.exists():
                await anyio.to_thread.run_sync(shutil.rmtree, staging, True)

    def guard(self, name: str) -> anyio.Lock:
        """The lock that serialises backups and restores of palace ``name``."""
        return self._guards.setdefault(validate_name(name), anyio.Lock())

    @asynccontextmanager
    async def held(self, name: str) -> AsyncIterator[Palace | None]:
        """Keep palace ``name`` as it is: yields its open handle, or None while it stays
        closed (requests that would open it wait until the block ends)."""
        async with self._opening.setdefault(validate_name(name), anyio.Lock()):
            yield self._open.get(name)

    async def replace(self, name: str, staging: Path,
                      check: Callable[[Path], None] | None = None) -> bool:
        """Put the palace directory ``staging`` in place of palace ``name``; True when a
        palace was replaced. The open palace is closed first, then ``check(path)`` runs (in
        a worker thread, nothing can write to the palace any more) and may refuse by raising.

        The old directory is renamed aside before the new one is renamed in: a crash between
        the two leaves it under REPLACED_PREFIX, and ``sweep_leftovers`` puts it back.

        Raises:
            What ``check`` raises (nothing is changed); StorageError: a rename failed.
        """
        validate_name(name)
        async with self._admin:
            async with self._opening.setdefault(name, anyio.Lock()):
                palace = self._open.pop(name, None)
                if palace is not None:
                    await palace.aclose()
                path = self.path_of(name)
                if check is not None:
                    await anyio.to_thread.run_sync(check, path)

                def swap() -> bool:
                    aside = path.with_name(f"{REPLACED_PREFIX}{name}-{time.time_ns()}")
                    replaced = os.path.lexists(path)
                    if replaced:
                        path.rename(aside)
                    staging.rename(path)
                    sync_dir(self.root)
                    if replaced:
                        shutil.rmtree(aside, ignore_errors=True)
                    return replaced

                with storage_errors(path, name):
                    replaced = await anyio.to_thread.run_sync(swap)
        log.info("%s palace %s from %s", "replaced" if replaced else "restored", name, staging)
        return replaced

    def sweep_leftovers(self) -> list[str]:
        """Remove what a killed daemon left behind (see ``layout.sweep_leftovers``).

        Call only while holding the daemon lock: these names belong to no open palace then.
        """
        return sweep_leftovers(self.root)

    async def delete(self, name: str) -> None:
        """Close and remove a palace directory (a team palace's: detaches it, its data stays).

        Raises:
            PalaceNotFound: no such palace.
            StorageError: the directory cannot be removed (read-only storage...).
        """
        validate_name(name)
        async with self._admin:
            self._live(name)  # a vanished handle is discarded, never checkpointed into the path
            if not self.exists(name):
                raise PalaceNotFound(f"no palace named {name!r}", details={"palace": name})
            lock = self._opening.setdefault(name, anyio.Lock())
            async with lock:
                palace = self._open.pop(name, None)
                if palace is not None:
                    await palace.aclose()
                path = self.path_of(name)
                # Rename first so a crash mid-delete never leaves a half palace visible.
                trash = path.with_name(f"{TRASH_PREFIX}{name}-{time.time_ns()}")
                with storage_errors(path, name):
                    await anyio.to_thread.run_sync(path.rename, trash)
                await anyio.to_thread.run_sync(shutil.rmtree, trash, True)
            log.info("deleted palace %s", name)

    async def close_idle(self, idle_s: float) -> None:
        """Close palaces nobody used for ``idle_s`` seconds."""
        now = time.monotonic()
        for name, palace in list(self._open.items()):
            if palace.in_flight == 0 and now - palace.last_used > idle_s:
                lock = self._opening.setdefault(name, anyio.Lock())
                async with lock:
                    if palace.in_flight == 0 and self._open.get(name) is palace:
                        del self._open[name]
                        await palace.aclose()
                        log.info("closed idle palace %s", name)

    async def aclose(self) -> None:
        """Close every palace (saves dirty indexes), concurrently: a team palace whose server
        is gone waits out its pool's timeout at its closing checkpoint, N of them N times."""
        with anyio.CancelScope(shield=True):
            for name in list(self._open):
                self._live(name)
            for palace in self._vanished:
                await palace.write(palace.discard_sync, wrote=False)
            self._vanished.clear()
            async with anyio.create_task_group() as tg:
                for palace in self._open.values():
                    tg.start_soon(close_logged, palace)
            self._open.clear()
