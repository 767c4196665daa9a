"""Team palaces: a palace whose drawers live in PostgreSQL, shared by several daemons.

The local directory of a team palace holds ``store.toml`` (which server: a libpq URL without a
password, or the name of a ``[stores.NAME]`` connection of config.toml; and the schema) and
the lock file, nothing else. A team palace is a ``Palace`` holding a ``TeamStorage``: its
store is a ``PgStore`` and its vector index a ``PgVectors`` (pgvector searched in SQL), so
every op module runs on it unchanged. What differs lives in ``TeamStorage``
(``palaced.palace.storage`` says the protocol):

- the model is recorded in the palace (meta ``embedder``/``dims``): a daemon running another
  model refuses writes (``EmbedderMismatch``) and recalls keyword-only, instead of mixing
  vector spaces (no background re-embedding of a shared palace);
- ``write_counter``, which recall's caches key on, is the palace's change counter in the
  database as this daemon last saw it (``PgStore.changes``), so one daemon's write
  invalidates every daemon's caches; ``refresh`` reads it before a cached value is used;
- L0, the identity text, is meta ``identity``, shared by every daemon;
- nothing is saved, rebuilt or checkpointed locally; "vanished" means ``store.toml`` went.

Design and limits: docs/teams.md.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tomllib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from palaced.config.team_settings import TeamSettings
from palaced.engine.embedder import Embedder
from palaced.engine.services import Services
from palaced.index.vectors import PgVectors
from palaced.palace.directory import STORE_NAME, is_team, release_lock, take_lock
from palaced.palace.handle import IDENTITY_TEMPLATE, Palace
from palaced.palace.identity import strip_comments as strip_comments  # recall imports it here
from palaced.palace.storage import Palace as Owner
from palaced.palace.storage import Storage
from palaced.store.conn.db import storage_errors
from palaced.store.conn.meta import claim_embedder, meta_get, meta_init, meta_set
from palaced.wire.errors import EmbedderMismatch, InvalidArgs, StorageError, TeamUnsupported

if TYPE_CHECKING:
    from palaced.store.conn.pg import PgStore  # psycopg: loaded only once a team palace is used

log = logging.getLogger("palaced.palace.team")
T = TypeVar("T")
IDENTITY_KEY = "identity"


@dataclass(frozen=True)
class TeamRef:
    """What ``store.toml`` holds: ``store`` (a URL or a ``[stores]`` name) and ``schema``."""

    store: str
    schema: str


def is_url(store: str) -> bool:
    return "://" in store or "=" in store


def resolve(store: str, settings: TeamSettings) -> str:
    """The libpq URL of ``store``: itself, or the url of ``[stores.<store>]``.

    Raises:
        InvalidArgs: an unknown store name, or a URL holding a password.
    """
    from palaced.store.conn.pg import check_url  # psycopg: only for team palaces

    if is_url(store):
        url = store
    else:
        found = settings.stores.get(store)
        if found is None:
            known = ", ".join(sorted(settings.stores)) or "none is configured"
            raise InvalidArgs(f"no store named {store!r} in config.toml ([stores.{store}] "
                              f"url = ...); the named stores: {known}",
                              details={"store": store})
        url = found
    check_url(url)
    return url


def read_ref(directory: Path, name: str) -> TeamRef:
    """The ``store.toml`` of a team palace directory.

    Raises:
        StorageError: it cannot be read or lacks ``store``/``schema``.
    """
    path = directory / STORE_NAME
    with storage_errors(path, name):
        data = tomllib.loads(path.read_text("utf-8"))
    store, schema = data.get("store"), data.get("schema")
    if not isinstance(store, str) or not isinstance(schema, str):
        raise StorageError(f"team palace {name!r}: {path} lacks store or schema",
                           details={"palace": name, "path": str(path), "condition": "damaged"})
    return TeamRef(store, schema)


def write_ref(directory: Path, name: str, ref: TeamRef) -> None:
    """Write ``store.toml`` atomically (a temporary file renamed into place)."""
    path = directory / STORE_NAME
    text = ("# A team palace: its drawers live in PostgreSQL (docs/teams.md). No credentials\n"
            "# here: give them through PGPASSWORD, ~/.pgpass or a pg_service.conf service.\n"
            f"store = {json.dumps(ref.store)}\nschema = {json.dumps(ref.schema)}\n")
    tmp = directory / f".{STORE_NAME}.{os.getpid()}"
    with storage_errors(path, name):
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, "utf-8")
        os.replace(tmp, path)


def unsupported(name: str, what: str, instead: str) -> TeamUnsupported:
    """The error of ``what`` (an op on a local palace's files) asked of team palace ``name``."""
    return TeamUnsupported(f"{what} works on a local palace's files; {name!r} is a team "
                           f"palace, which lives in PostgreSQL: {instead}",
                           details={"palace": name, "op": what})


async def open_existing(name: str, directory: Path, services: Services) -> Palace:
    """Open the palace in ``directory``: a team palace when it holds ``store.toml``."""
    if is_team(directory):
        return (await open_team(name, directory, services))[0]
    return await Palace.open(name, directory, services, create=False)


def refuse(registry: Any, name: str, what: str, instead: str) -> None:
    """Raise TeamUnsupported when ``name`` of ``registry`` is a team palace (``what`` is an
    op on a local palace's files; ``instead`` says what to do)."""
    if registry.exists(name) and registry.is_team(name):
        raise unsupported(name, what, instead)


async def open_new(name: str, directory: Path, services: Services, store: str
                   ) -> tuple[Palace, bool]:
    """Create team palace ``name`` in ``store`` (a URL or a ``[stores]`` name) with its local
    ``directory``, or attach to its schema made by another daemon: ``(palace, created)``.
    Nothing is left in ``directory`` when it fails.

    Raises:
        InvalidArgs: a bad store. StoreUnavailable: the server is unreachable.
        StorageError, SchemaTooNew.
    """
    try:
        return await open_team(name, directory, services, create=True, store=store)
    except BaseException:
        if not is_team(directory):  # nothing of a palace was made: leave no trace
            await anyio.to_thread.run_sync(shutil.rmtree, directory, True)
        raise


class TeamStorage(Storage):
    """A team palace's storage (see the module docstring): its ``PgStore`` and ``store.toml``."""

    shared = True

    def __init__(self, pg: PgStore, directory: Path, ref: TeamRef) -> None:
        self.pg = pg
        self.directory = directory
        self.ref = ref

    # -- the model and the index -------------------------------------------------------------
    def attach_sync(self, palace: Owner, embedder: Embedder) -> None:
        """Record the model in the palace if none is; serve vectors only when it is ours."""
        from palaced.store.schema.pg import claim_dims

        stored = self.pg.read(lambda c: meta_get(c, "embedder"))
        if stored is None:
            def claim(c: Any) -> str:
                found = meta_get(c, "embedder")  # another daemon may have claimed it first
                if found is None:
                    claim_embedder(c, embedder.identity, embedder.dims)
                    claim_dims(c, embedder.dims)
                    return embedder.identity
                return found
            stored = self.pg.write(claim)
        palace.bind_model(stored, PgVectors(embedder.dims) if stored == embedder.identity
                          else None)
        # Rows loaded while no daemon wrote (an import by another tool, a restore) would be
        # planned without statistics until autovacuum's next look.
        self.pg.analyze_soon()

    def load_index_sync(self, palace: Owner, dims: int, *, rebuild: bool = False) -> None:
        palace.replace_index(PgVectors(dims))

    def save_index_sync(self, palace: Owner) -> None:
        """Nothing to save: the vectors are in PostgreSQL."""

    def checkpoint_sync(self, palace: Owner, force: bool) -> None:
        """Only the touches: nothing is saved, rebuilt or folded locally."""
        palace.flush_touches_sync()

    @property
    def compacts(self) -> bool:
        return False

    # -- closing -----------------------------------------------------------------------------
    def closing(self, palace: Owner) -> None:
        palace.keywords.stop()
        self.pg.closing()

    def vanished(self, palace: Owner) -> bool:
        """Whether ``store.toml`` went."""
        return not is_team(self.directory)

    def discard_sync(self, palace: Owner) -> None:
        self.pg.close()

    # -- the model mismatch ------------------------------------------------------------------
    def mismatch_text(self, name: str, stored: str, current: str) -> str:
        return (f"team palace {name!r} holds vectors of {stored}; this daemon runs {current}: "
                "writes are refused and recall is keyword-only (configure the same model on "
                "every daemon sharing it)")

    def refuse_mismatched_write(self, palace: Owner) -> None:
        """Raise EmbedderMismatch while the daemon's model is not the palace's: a shared
        palace is never re-embedded here, so a write would mix vector spaces."""
        why = self.mismatch(palace)
        if why is not None:
            emb = palace.services.model.embedder
            raise EmbedderMismatch(why, details={"palace": palace.name,
                                                 "palace_model": palace.embedder_identity,
                                                 "daemon_model": emb and emb.identity})

    # -- the change counter ------------------------------------------------------------------
    @property
    def changes(self) -> int:
        """The palace's change counter in the database, as last seen by this daemon."""
        return int(self.pg.changes)

    def count_write(self) -> None:
        """Nothing: the database counts writes (``PgStore.write``)."""

    async def refresh(self, palace: Owner) -> None:
        """Read the palace's change counter now (before using what is cached on it)."""
        await palace.read(lambda c: None)

    # -- L0 and imports ----------------------------------------------------------------------
    async def identity(self, palace: Owner, *, keep_comments: bool = False) -> str:
        return await palace.read(partial(self.identity_sync, keep_comments=keep_comments))

    def identity_sync(self, conn: Any, *, keep_comments: bool = False) -> str:
        """Meta ``identity``, shared by every daemon."""
        text = meta_get(conn, IDENTITY_KEY) or ""
        return text if keep_comments else strip_comments(text)

    def replace_identity_sync(self, palace: Owner, text: str) -> bool:
        if self.pg.read(partial(self.identity_sync, keep_comments=True)) == text:
            return False
        self.pg.write(lambda c: meta_set(c, IDENTITY_KEY, text))
        return True

    def after_import(self, conn: Any) -> None:
        """Move the id sequences past ids the import inserted explicitly."""
        from palaced.store.schema.pg import sync_ids

        sync_ids(conn)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"store": self.pg.server, "schema": self.ref.schema}
        if self.pg.replica is not None:
            out["replica"] = self.pg.replica.describe()
        return out


async def open_team(name: str, directory: Path, services: Services, *,
                    create: bool = False, store: str | None = None) -> tuple[Palace, bool]:
    """Open team palace ``name`` from ``directory/store.toml``; with ``store`` (a URL or
    a ``[stores]`` name) write that file first, creating the schema if it is not there
    (``create``) or attaching to it. Returns ``(palace, whether the schema was created)``.

    Raises:
        InvalidArgs: a bad store. StoreUnavailable: the server is unreachable.
        PalaceNotFound: the schema is gone. PalaceLocked, StorageError, SchemaTooNew.
    """
    return await anyio.to_thread.run_sync(
        partial(_open_team_sync, name, directory, services, create, store))


def _open_team_sync(name: str, directory: Path, services: Services, create: bool,
                    store: str | None) -> tuple[Palace, bool]:
    from palaced.store.conn.pg import PgStore
    from palaced.store.schema.pg import schema_name

    settings = services.config.team
    if store is not None:
        ref = TeamRef(store, schema_name(name))
        url = resolve(store, settings)
    else:
        ref = read_ref(directory, name)
        url = resolve(ref.store, settings)
    if store is not None:
        with storage_errors(directory, name):
            directory.mkdir(parents=True, exist_ok=True)
    fd = take_lock(name, directory)
    pg: PgStore | None = None
    try:
        named = None if is_url(ref.store) else ref.store  # replica, pooler: named stores
        pg = PgStore(url, ref.schema, palace=name, settings=settings, create=create,
                     replica=settings.replicas.get(named or ""),
                     pooler=settings.poolers.get(named or "", "none"))
        created = pg.created
        if created:
            pg.write(lambda c: meta_init(c, IDENTITY_KEY, IDENTITY_TEMPLATE.format(name=name)))
        if store is not None:
            write_ref(directory, name, ref)
        storage = TeamStorage(pg, directory, ref)
        palace = Palace(name, directory, pg, fd, services, storage)
        palace.bind_model(pg.read(lambda c: meta_get(c, "embedder")), None)
        if services.model.embedder is not None:
            storage.attach_sync(palace, services.model.embedder)
        log.info("team palace %s: %s schema %s on %s", name,
                 "created" if created else "attached", ref.schema, pg.server)
        return palace, created
    except BaseException:
        if pg is not None:
            pg.close()
        release_lock(fd)
        raise


def identity_in(c: Any) -> str:
    """The raw identity text of a team palace (comments kept), in one read."""
    return meta_get(c, IDENTITY_KEY) or ""


def purge_ref(name: str, directory: Path) -> TeamRef:
    """What ``purge_sync`` will drop, read before the palace is detached (worker thread).

    Raises:
        InvalidArgs: ``name`` is a local palace. StorageError: an unreadable store.toml.
    """
    if not is_team(directory):
        raise InvalidArgs(f"palace {name!r} is a local palace: --purge is for team palaces "
                          "(deleting a local palace removes everything already)",
                          details={"palace": name})
    return read_ref(directory, name)


def purge_sync(name: str, ref: TeamRef, settings: TeamSettings) -> bool:
    """Drop team palace ``name``'s schema (every daemon's data of it), after this daemon
    closed and detached it; False when it was already gone.

    Raises:
        StoreUnavailable: the server is unreachable (the schema stays: attach and purge again).
    """
    import psycopg  # here: psycopg is loaded only once a team palace is used

    from palaced.store.conn.pg import check_url, store_error, where
    from palaced.store.schema.pg import drop

    url = resolve(ref.store, settings)
    server = where(check_url(url))
    try:
        with psycopg.connect(url, autocommit=True,
                             connect_timeout=max(1, int(settings.connect_timeout_s + 0.999))
                             ) as conn:
            return drop(conn, ref.schema)
    except psycopg.Error as exc:
        raise store_error(exc, server, name) from exc
