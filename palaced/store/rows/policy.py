"""Synchronous queries of a palace's policy: the agent globs allowed each permission.

A permission without a row is open to every agent (``["*"]``), as every palace was before
policies existed. Writers run inside the caller's transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import apsw

from palaced.store.conn.dialect import serialise


def read_policy(conn: apsw.Connection, *, to_change: bool = False) -> dict[str, list[str]]:
    """``{permission: [glob, ...]}`` of the permissions that have a row; ``to_change`` (in a
    write transaction) makes the daemons changing a team palace's policy take turns."""
    if to_change:
        serialise(conn, "\x1fpolicy")
    return {str(p): [str(g) for g in json.loads(a)]
            for p, a in conn.execute("SELECT permission, agents FROM policy")}


def write_policy(conn: apsw.Connection, changes: Mapping[str, Sequence[str]]) -> None:
    """Set the globs of the given permissions (the others keep theirs)."""
    conn.executemany(
        "INSERT INTO policy(permission, agents) VALUES(?, ?) "
        "ON CONFLICT(permission) DO UPDATE SET agents = excluded.agents",
        [(p, json.dumps(list(globs))) for p, globs in changes.items()])
