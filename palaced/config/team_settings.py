"""The settings of team palaces (PostgreSQL, docs/teams.md) in config.toml: ``[team]``
timeouts and the named connections of ``[stores.NAME] url = ...``. Leaf module of
``palaced.config.settings``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from palaced.config.bounds import bounds

# ``[stores.NAME]``: named PostgreSQL connections, ``url`` each (a libpq URL, no password),
# optionally a read ``replica`` (same form) and the ``pooler`` between palace and server;
# checked apart from config.SCHEMA (their names are the user's).
STORES_SECTION = "stores"
STORE_KEYS = ("url", "replica", "pooler")
# ``pooler``: "none" (a direct connection: the default) or "transaction" (PgBouncer's
# transaction pooling: no server-side prepared statements, docs/teams.md).
POOLERS = ("none", "transaction")


@dataclass(frozen=True)
class TeamSettings:
    """How the daemon talks to the PostgreSQL servers of team palaces: every statement's
    timeout and how long a connection may take (``[team]``), and the named connections of
    ``[stores.NAME] url = ...`` (``palace create NAME --store NAME``) with their read
    ``replicas`` and ``poolers`` (by store name; absent: none)."""

    # Under 0.1 s a statement timeout rounds to 0 ms, which PostgreSQL reads as "no timeout".
    statement_timeout_s: float = field(default=5.0, metadata=bounds(0.1, 3600, strict=False))
    connect_timeout_s: float = field(default=3.0, metadata=bounds(0.1, 3600, strict=False))
    # How far behind the primary a replica's reads may be: each palace re-reads the primary's
    # change counter at least this often, and a replica that has not replayed up to it
    # serves no read until it has (docs/teams.md, "Read replica").
    replica_max_lag_s: float = field(default=2.0, metadata=bounds(0.0, 3600))
    stores: dict[str, str] = field(default_factory=dict)
    replicas: dict[str, str] = field(default_factory=dict)
    poolers: dict[str, str] = field(default_factory=dict)


def team_settings(data: dict[str, Any]) -> TeamSettings:
    """The settings of a checked config file's ``[team]`` and ``[stores.NAME]`` tables."""
    tables = data.get(STORES_SECTION, {})
    return TeamSettings(**{k: float(v) for k, v in data.get("team", {}).items()},
                        stores={name: str(t["url"]) for name, t in tables.items()},
                        replicas={name: str(t["replica"]) for name, t in tables.items()
                                  if "replica" in t},
                        poolers={name: str(t["pooler"]) for name, t in tables.items()
                                 if "pooler" in t})


def check_stores(table: dict[str, Any], problem: Callable[[tuple[str, ...], str], None],
                 what: Callable[[Any], str]) -> None:
    """Check ``[stores.NAME]`` tables: each holds a string ``url``, optionally a string
    ``replica`` and a ``pooler`` of POOLERS, nothing else; ``problem(key path, message)``
    reports, ``what(value)`` names a value's type."""
    for name, store in table.items():
        where = (STORES_SECTION, name)
        if not isinstance(store, dict) or "url" not in store:
            problem(where, f"[stores.{name}] has no url")
        for key, value in (store if isinstance(store, dict) else {}).items():
            if key not in STORE_KEYS:
                problem((*where, key), f"unknown key {key!r} in [stores.{name}] (only "
                        f"{', '.join(STORE_KEYS)})")
            elif not isinstance(value, str):
                problem((*where, key), f"[stores.{name}] {key} must be a string, got "
                        f"{what(value)}")
            elif key == "pooler" and value not in POOLERS:
                problem((*where, key), f"[stores.{name}] pooler must be one of "
                        f"{', '.join(POOLERS)}, got {value!r}")
