"""The policy of an open palace: which agents may write, delete and administer it.

A policy maps each permission of ``vocab.PERMISSIONS`` to agent globs (``fnmatch`` rules,
case-sensitive: ``*``, ``?``, ``[...]``); a permission nobody set is open to every agent, so a
palace without a policy works as before. Which permission an op needs is its spec's
(``OpSpec.permission``); ``ops.table.dispatch`` calls ``require`` before the handler runs, so
a refused request changes nothing but the audit entry that records the refusal.

Agents name themselves (protocol envelope), so a policy keeps cooperating agents in their
lanes; it is no defence against a process of the same user that lies about its name.

Policies are cached per open local palace: only this module changes them, under the write
lock. A team palace's policy can be changed by another daemon, so it is read per request (one
small table).
"""

from __future__ import annotations

import fnmatch
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from palaced.memory import audit
from palaced.palace.handle import Palace, now_ms
from palaced.store.rows import audit as audit_sql
from palaced.store.rows.policy import read_policy, write_policy
from palaced.wire.errors import BadFrame, Forbidden, InvalidArgs
from palaced.wire.protocol import check_agent
from palaced.wire.vocab import PERMISSIONS

EVERYONE = ("*",)


@dataclass(frozen=True)
class Policy:
    """The agent globs of each permission (a missing permission: everyone)."""

    rules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def globs(self, permission: str) -> tuple[str, ...]:
        return self.rules.get(permission, EVERYONE)

    def allows(self, agent: str, permission: str) -> bool:
        return any(fnmatch.fnmatchcase(agent, g) for g in self.globs(permission))

    def to_wire(self) -> dict[str, list[str]]:
        return {p: list(self.globs(p)) for p in PERMISSIONS}


_CACHE: weakref.WeakKeyDictionary[Palace, Policy] = weakref.WeakKeyDictionary()


async def current(palace: Palace) -> Policy:
    """The palace's policy (read once per open local palace, per call on a team palace).

    Raises:
        StorageError: SQLite failed. StoreUnavailable: a team palace's server is unreachable.
    """
    cached = None if palace.storage.shared else _CACHE.get(palace)
    if cached is None:
        rules = await palace.read(read_policy)
        cached = Policy({p: tuple(g) for p, g in rules.items()})
        if not palace.storage.shared:
            _CACHE[palace] = cached
    return cached


async def require(palace: Palace, actor: audit_sql.Actor, permission: str,
                  target: object = None) -> None:
    """Pass when the palace's policy grants ``permission`` to ``actor.agent``.

    Raises:
        Forbidden: it does not; the refusal is recorded in the audit log (outcome
            ``denied``, with the request's ``target`` id if it is one), and nothing else
            changes.
    """
    policy = await current(palace)
    if policy.allows(actor.agent, permission):
        return
    globs = list(policy.globs(permission))
    detail: dict[str, Any] = {"permission": permission}
    if isinstance(target, int) and not isinstance(target, bool):
        detail["id"] = target
    await audit.record(palace, actor, "denied", detail=detail)
    raise Forbidden(
        f"agent {actor.agent!r} may not {permission} in palace {palace.name!r} ({actor.op}); "
        f"its policy grants {permission} to {', '.join(map(repr, globs)) or 'nobody'} "
        f"(`palace policy show --palace {palace.name}`)",
        details={"palace": palace.name, "agent": actor.agent, "op": actor.op,
                 "permission": permission, "allowed": globs})


def check_globs(permission: str, globs: Sequence[str]) -> tuple[str, ...]:
    """Validated, de-duplicated globs for ``permission``.

    Raises:
        InvalidArgs: an empty or unprintable glob (``details["arg"]`` is the permission).
    """
    out: list[str] = []
    for g in globs:
        try:
            out.append(check_agent(g))
        except BadFrame:
            raise InvalidArgs(f"{permission}: agent globs are 1-200 printable characters, got "
                              f"{g[:80]!r}", details={"arg": permission}) from None
    return tuple(dict.fromkeys(out))


async def set_policy(palace: Palace, actor: audit_sql.Actor,
                     changes: Mapping[str, Sequence[str]]) -> Policy:
    """Replace the globs of the permissions in ``changes`` (an empty list: nobody); the
    others keep theirs. Recorded in the audit log.

    Raises:
        InvalidArgs: an unknown permission or a bad glob, or the change would take ``admin``
            from the caller (who could then never change it back); nothing is changed.
    """
    unknown = sorted(set(changes) - set(PERMISSIONS))
    if unknown:
        raise InvalidArgs(f"unknown permission(s) {', '.join(unknown)}; the permissions are "
                          f"{', '.join(PERMISSIONS)}", details={"unknown": unknown})
    checked = {p: check_globs(p, g) for p, g in changes.items()}

    def tx(c: apsw.Connection) -> Policy:
        # Read under the write lock (and, for a team palace, the database's lock of its
        # policy): two changes at once must not undo each other.
        before = {p: tuple(g) for p, g in read_policy(c, to_change=True).items()}
        after = Policy({**before, **checked})
        if not after.allows(actor.agent, "admin"):
            raise InvalidArgs(
                f"this policy would take admin from you ({actor.agent!r}), and nobody matching "
                "you could change it back; include a glob that matches you in admin",
                details={"arg": "admin", "agent": actor.agent})
        write_policy(c, checked)
        audit_sql.append(c, actor, "set", now_ms(),
                         detail={p: len(g) for p, g in checked.items()})
        return after

    after = await palace.transact(tx)
    if not palace.storage.shared:
        _CACHE[palace] = after
    return after


def describe(policy: Policy, agent: str) -> dict[str, Any]:
    """The wire form: the globs per permission and what ``agent`` may do."""
    return {"policy": policy.to_wire(), "agent": agent,
            "allowed": {p: policy.allows(agent, p) for p in PERMISSIONS}}
