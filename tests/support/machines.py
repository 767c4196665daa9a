"""Several real daemons with homes of their own ("machines"), each with the same
``config.toml``, for the team-palace tests (PgBouncer, replica)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

from tests.conftest import DaemonProc, base_env, short_home


@contextmanager
def machines(n: int, config: str = "", *, model: bool = True) -> Iterator[list[DaemonProc]]:
    """``n`` started daemons, each in a fresh short home holding ``config`` as its
    config.toml; stopped and their homes removed at the end."""
    homes = [short_home() for _ in range(n)]
    daemons = [DaemonProc(h, base_env(h, model=model)) for h in homes]
    try:
        for h, d in zip(homes, daemons, strict=True):
            (h / "config.toml").write_text(config)
            d.start()
        yield daemons
    finally:
        for d in daemons:
            d.stop()
        for h in homes:
            shutil.rmtree(h, ignore_errors=True)
