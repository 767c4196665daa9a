"""Write storms against real daemons for the team-palace tests (``test_team_palaces.py``) and
``bench/pg.py``: writer threads, each with its own ``palace_client.Client``, that remember
distinct texts and record exactly what was acknowledged, what failed and how long each request
took.

A text is a random sentence from a small vocabulary plus a unique token, so that no two are
near-duplicates (no dedup merges them) and its own text, sent as a query, finds it by both
vector and keyword.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from palaced.wire.errors import PalaceError

WHO = ["Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun",
       "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya"]
DID = ["migrated", "rolled back", "benchmarked", "documented", "patched", "reviewed",
       "deprecated", "load-tested", "profiled", "rewrote", "monitored", "archived"]
WHAT = ["the billing service", "the search cluster", "the mobile release", "the payment gateway",
        "the nightly backup", "the login page", "the data warehouse", "the CI runners",
        "the message queue", "the recommendation model", "the audit log", "the VPN config"]
WHEN = ["on Monday", "before the offsite", "after the outage", "during the freeze",
        "last sprint", "at midnight", "for the Q3 review", "with the new vendor"]


def sentence(rng: random.Random, tag: str) -> str:
    """A distinct memory: a random sentence and a unique ticket token."""
    token = uuid.uuid4().hex[:10]
    return (f"{rng.choice(WHO)} {rng.choice(DID)} {rng.choice(WHAT)} {rng.choice(WHEN)}; "
            f"ticket {tag}x{token}.")


def error_name(exc: BaseException) -> str:
    """The wire name of a palace error (also for a code this client has no class for)."""
    if isinstance(exc, PalaceError):
        return str(exc.details.get("name") or exc.name)
    return type(exc).__name__


@dataclass
class Outcome:
    """One request of a writer."""

    writer: str
    text: str
    started: float
    seconds: float
    drawer_id: int | None = None  # set when acknowledged
    error: str | None = None  # the error name otherwise
    message: str = ""
    retryable: bool = False


@dataclass
class Storm:
    """Writers remembering into ``palace`` through the given daemons' sockets.

    ``clients`` maps a writer's daemon label to a factory of connected clients. ``check``
    (optional) is called by the writer right after each acknowledgement, with the outcome;
    what it returns (a list of problems) is collected in ``problems``.
    """

    palace: str
    clients: dict[str, Callable[[], Any]]
    writers_per_daemon: int
    check: Callable[[Outcome], list[str]] | None = None
    items_per_writer: int | None = None  # None: until stop()
    pause_on_error: float = 0.05
    outcomes: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Storm:
        for label, factory in self.clients.items():
            for w in range(self.writers_per_daemon):
                name = f"{label}{w:02d}"
                t = threading.Thread(target=self._run, args=(name, factory), daemon=True)
                self._threads.append(t)
                t.start()
        return self

    def stop(self, timeout: float = 120) -> None:
        self._stop.set()
        self.join(timeout)

    def join(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise AssertionError(f"writers still running after {timeout} s: {alive}")

    def _run(self, name: str, factory: Callable[[], Any]) -> None:
        rng = random.Random(f"{self.palace}-{name}")
        client = factory()
        try:
            i = 0
            while not self._stop.is_set() and (self.items_per_writer is None
                                               or i < self.items_per_writer):
                i += 1
                text = sentence(rng, name)
                t0 = time.monotonic()
                out = Outcome(name, text, t0, 0.0)
                try:
                    out.drawer_id = int(client.remember(self.palace, text, dedup=False))
                except PalaceError as exc:
                    out.error, out.message = error_name(exc), str(exc)
                    out.retryable = bool(exc.retryable)
                except Exception as exc:  # a bug in the client: report, keep storming
                    out.error, out.message = type(exc).__name__, repr(exc)
                out.seconds = time.monotonic() - t0
                with self._lock:
                    self.outcomes.append(out)
                if out.drawer_id is not None and self.check is not None:
                    found = self.check(out)
                    if found:
                        with self._lock:
                            self.problems.extend(found)
                elif out.error is not None:
                    client.close()  # a fresh connection for the next request
                    time.sleep(self.pause_on_error)
        finally:
            client.close()

    @property
    def acked(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.drawer_id is not None]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]


def recall_finds(client: Any, palace: str, out: Outcome, top_k: int = 10) -> bool:
    """Whether recalling ``out``'s own text through ``client`` returns its drawer."""
    results = client.recall(palace, out.text, top_k=top_k)
    return any(int(r["id"]) == out.drawer_id for r in results)


def missing_everywhere(clients: Sequence[tuple[str, Any]], palace: str,
                       outcomes: Sequence[Outcome]) -> list[str]:
    """Each acknowledged write that a daemon's recall (or get) does not find, as a problem."""
    problems = []
    for label, client in clients:
        for out in outcomes:
            if not recall_finds(client, palace, out):
                try:
                    got = client.get(palace, out.drawer_id)["text"] == out.text
                except PalaceError as exc:
                    got = f"get: {error_name(exc)}"  # type: ignore[assignment]
                problems.append(f"{label}: recall misses acknowledged drawer {out.drawer_id} "
                                f"({out.writer}; get finds it: {got})")
    return problems


def all_texts(client: Any, palace: str) -> dict[int, str]:
    """Every drawer of ``palace`` (id: text), through ``memory.list`` pages."""
    out: dict[int, str] = {}
    offset: int | None = 0
    while offset is not None:
        page = client.drawers(palace, limit=1000, offset=offset)
        out.update({int(d["id"]): str(d["text"]) for d in page["drawers"]})
        offset = page["next_offset"]
    return out


def lost(clients: Sequence[tuple[str, Any]], palace: str, outcomes: Sequence[Outcome]
         ) -> list[str]:
    """Each acknowledged write absent from a daemon's listing (or with another text)."""
    problems = []
    for label, client in clients:
        have = all_texts(client, palace)
        problems += [f"{label}: acknowledged drawer {o.drawer_id} ({o.writer}) is "
                     f"{'missing' if o.drawer_id not in have else 'changed'}"
                     for o in outcomes if have.get(o.drawer_id or -1) != o.text]
    return problems
