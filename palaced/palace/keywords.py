"""The owner of a palace's keyword engine (``keyword_engine``, ``keyword_file``): it loads
or builds the engine off the event loop, keeps it fresh, rebuilds it in the background when
its overlay grows, and says when it can serve.

Palaces of at least ``[limits] keyword_engine_min_drawers`` drawers search keywords on the
engine (``palaced.retrieval.search.lexical_search``); FTS5 serves while it is missing, loading or
building, and whenever it turns out damaged (then it is rebuilt): never an error to a
caller. ``meta.keywords_build`` names the build whose file the database's log was pruned
for: a file from another database, a restored backup or a crash before that record is
rebuilt, never trusted.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from palaced.index.keyword_engine import Base, KeywordEngine
from palaced.index.keyword_file import Stopped, Unusable, build, drop_stale_temps, load, save
from palaced.palace.directory import KEYWORDS_NAME
from palaced.store import Store
from palaced.store.conn.meta import meta_get, meta_set
from palaced.store.lookup.fts_log import forget_log, prune

if TYPE_CHECKING:
    from palaced.engine.services import Services

log = logging.getLogger("palaced.palace.keywords")

BUILD_KEY = "keywords_build"
# The overlay (drawers changed since the build) that makes a rebuild due: this share of the
# base, at least REBUILD_MIN and at most REBUILD_MAX drawers: each search scores the overlay
# rows holding its terms (bench/bm25_scale.py --overlay 5000, 100k drawers: p50/p95 2.0/3.4
# ms CPU right after the build, 3.4/5.2 ms after 5,000 remembers, 5,400 rows changed).
REBUILD_SHARE = 0.05
REBUILD_MIN = 2_000
REBUILD_MAX = 20_000
# A palace that does not use the engine (under min_drawers) drops its change log, and with
# it the record of any earlier build, once the log spans this many entries.
LOG_KEEP = 10_000
RETRY_S = 60.0  # after a failed build, searches use FTS5 this long before the next try


@dataclass(frozen=True)
class KeywordsLoad:
    """How the engine came to be: ``loaded`` or ``built`` (with the time it took)."""

    how: str
    seconds: float
    reason: str | None = None


def rebuild_at(n_rows: int) -> float:
    """How many changed rows since the build make a rebuild due."""
    return min(REBUILD_MAX, max(REBUILD_MIN, REBUILD_SHARE * n_rows))


class KeywordState:
    """One palace's keyword engine: loads or builds it off the event loop, keeps it fresh,
    rebuilds it in the background when its overlay grows, and says when it can serve.

    ``engine`` is None until a build or load finished; searches use FTS5 meanwhile.
    The log is pruned by ``prune_sync`` under the palace's write lock (checkpoint).
    """

    def __init__(self, store: Store, path: Path, min_drawers: int) -> None:
        self.store = store
        self.path = path
        self.min_drawers = min_drawers
        self.engine: KeywordEngine | None = None
        self.building = False
        self.last: KeywordsLoad | None = None
        self.error: str | None = None
        self.file_bytes = 0
        self._prune_upto: tuple[int, str] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._tried_load = False
        self._stop = threading.Event()
        self._retry_at = 0.0  # monotonic: no build starts before (a failed one backs off)
        self.last_n: int | None = None  # the palace's drawers at the last search

    @classmethod
    def of(cls, store: Store, directory: Path, services: Services) -> KeywordState:
        """The keyword engine's owner for a palace opening in ``directory``."""
        return cls(store, directory / KEYWORDS_NAME,
                   services.config.limits.keyword_engine_min_drawers)

    def engine_for(self, n_docs: int) -> KeywordEngine | None:
        """The engine if it should serve a palace of ``n_docs`` drawers and is ready; else
        None (a build or load is started in the background when it should serve)."""
        self.last_n = n_docs
        if n_docs < self.min_drawers:
            return None
        engine = self.engine
        if engine is not None and engine.damaged is not None:
            self.broken(engine.damaged)
            return None
        if engine is None or engine.changed > rebuild_at(engine.base.n_rows):
            self.start()
        return engine

    def start(self, *, rebuild: bool = False) -> None:
        """Load (or with ``rebuild``, build) the engine in a background thread, once."""
        with self._lock:
            if self.building or self._stop.is_set() or time.monotonic() < self._retry_at:
                return
            self.building = True
            load_first = not rebuild and not self._tried_load and self.engine is None
            self._tried_load = True
            self._thread = threading.Thread(target=self._run, args=(load_first,),
                                            name="keywords-build", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop a running build and wait for its thread (the palace is closing)."""
        self._stop.set()
        self.wait()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a running load or build (tests, close)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self, load_first: bool) -> None:
        started = time.perf_counter()
        try:
            if load_first:
                try:
                    base = load(self.path)
                    built = self.store.read(lambda c: meta_get(c, BUILD_KEY))
                    if built != base.build_id:
                        raise Unusable("the file is not the database's last build")
                    self.engine = self._caught_up(KeywordEngine(base))
                    self.file_bytes = os.path.getsize(self.path)
                    self.last = KeywordsLoad("loaded", time.perf_counter() - started)
                    return
                except Unusable as exc:
                    reason: str | None = str(exc)
            else:
                reason = "rebuild"
            drop_stale_temps(self.path)
            try:
                base = self._build_in_child()
                saved = True
                self.file_bytes = os.path.getsize(self.path)
            except (OSError, RuntimeError, Unusable) as exc:
                log.warning("keyword engine: the build process failed (%s); building here",
                            exc)
                base = self.store.read(lambda c: build(c, self._stop))
                saved = False
                try:
                    self.file_bytes = save(base, self.path)
                    saved = True
                except OSError as err:  # only a cache: serve from memory
                    log.warning("cannot save the keyword engine %s: %s", self.path, err)
            self.engine = self._caught_up(KeywordEngine(base))
            if saved:
                # Only now: the engine this one replaces may still need the log rows the
                # prune drops.
                self._prune_upto = (base.seq, base.build_id)
            self.error = None
            self.last = KeywordsLoad("built", time.perf_counter() - started, reason)
            log.info("keyword engine built: %d rows, %.2fs (%s)", base.n_rows,
                     self.last.seconds, reason)
        except Stopped:
            log.info("keyword engine build stopped: the palace is closing")
        except Exception as exc:  # a cache: never fail the palace, report it in info
            log.exception("keyword engine build failed")
            self.error = f"{type(exc).__name__}: {exc}"
            self._retry_at = time.monotonic() + RETRY_S
        finally:
            with self._lock:
                self.building = False

    def _build_in_child(self) -> Base:
        """Build and save the engine in a child process (``python -m palaced.index.keyword_file``)
        and map its file: the build's Python loops and its peak memory (~4 KB per drawer) stay
        out of the daemon, whose requests would otherwise wait for the GIL for the whole
        build. Killed when the palace closes.

        Raises:
            RuntimeError: the child failed. OSError: it could not be started.
            Unusable: its file cannot be read. Stopped: the palace is closing.
        """
        # The child imports palaced from where this process did.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "palaced.index.keyword_file", str(self.store.path),
             str(self.path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=env)
        while True:
            try:
                _, err = proc.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if self._stop.is_set():
                    proc.kill()
                    proc.wait()
                    raise Stopped from None
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise RuntimeError(f"exit {proc.returncode}: {tail[0]}")
        return load(self.path)

    def _caught_up(self, engine: KeywordEngine) -> KeywordEngine:
        """``engine`` with the log since its build applied, here in the background rather
        than in the first search (after a kill -9 that may be thousands of rows)."""
        self.store.read(engine.refresh)
        return engine

    def broken(self, exc: Exception) -> None:
        """A search found the engine damaged: drop it and rebuild (FTS5 serves meanwhile)."""
        log.warning("keyword engine unusable (%s); rebuilding", exc)
        self.engine = None
        self.error = f"{type(exc).__name__}: {exc}"
        self.start(rebuild=True)

    @property
    def prune_due(self) -> bool:
        return self._prune_upto is not None

    def prune_sync(self) -> None:
        """Record the saved build and drop the log rows it holds; in a palace that does not
        use the engine, drop a long log (under the write lock: the checkpoint)."""
        todo = self._prune_upto
        if todo is None:
            if (self.engine is None and not self.building and self.last_n is not None
                    and self.last_n < self.min_drawers):
                # No file may be trusted past the dropped log: a later build starts over.
                self.store.write(lambda c: forget_log(c, LOG_KEEP, BUILD_KEY), stamp=False)
            return
        seq, build_id = todo

        def tx(c: apsw.Connection) -> None:
            meta_set(c, BUILD_KEY, build_id)
            prune(c, seq)

        self.store.write(tx, stamp=False)
        self._prune_upto = None

    def state(self) -> dict[str, Any]:
        """What ``palace info`` shows."""
        engine = self.engine
        return {
            "state": "built" if engine is not None else "building" if self.building else "none",
            "building": self.building,
            "min_drawers": self.min_drawers,
            "covered": engine.base.n_rows if engine is not None else 0,
            "changed": engine.changed if engine is not None else 0,
            "file_bytes": self.file_bytes,
            # False until the next checkpoint records the build in the database (a restart
            # before that rebuilds rather than trust the file).
            "recorded": engine is not None and not self.prune_due,
            "load": None if self.last is None else {
                "how": self.last.how, "ms": round(self.last.seconds * 1000, 1),
                **({"reason": self.last.reason} if self.last.reason else {})},
            "error": self.error,
        }
