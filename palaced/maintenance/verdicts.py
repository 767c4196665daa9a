"""Judging what ``palace doctor`` found about one palace: ``PalaceFacts`` -> ``Check`` lines.

The rules, in one place: damage SQLite finds in the database (other than a full-text index
that disagrees with its rows) and a schema this palaced cannot use are ``fail`` and cannot be
repaired here (restore a backup, or upgrade); derived data that disagrees with the drawers
(full-text rows, vector rows) is ``fail`` but repairable, because recall silently misses
drawers until it is fixed; what the daemon mends by itself (a stale vector index file,
drawers waiting for vectors, an older schema, a missing identity file) is ``warn``.
Pure functions, no I/O.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

from palaced.maintenance.checks import FAIL, OK, WARN, Check, PalaceFacts
from palaced.store.conn.db import APPLICATION_ID
from palaced.store.schema.sqlite import SCHEMA_VERSION


class _Make(Protocol):
    """``judge``'s local factory of a check of the palace being judged."""

    def __call__(self, name: str, status: str, detail: str, fixable: bool = False,
                 advice: str | None = None) -> Check: ...


@dataclass(frozen=True)
class Context:
    """What the judge needs to know about the daemon and the run."""

    model: str | None  # identity of the loaded model, None when none is loaded
    keyword_only_by_choice: bool  # the configuration turned embedding off
    full: bool
    restore_hint: str | None = None  # the `palace restore ...` command, when a backup exists


def _n(count: int, noun: str, plural: str = "") -> str:
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _examples(facts: PalaceFacts, key: str) -> str:
    ids = facts.agreement.examples.get(key) if facts.agreement else None
    return f" (e.g. {', '.join(map(str, ids))})" if ids else ""


def _restore_advice(facts: PalaceFacts, ctx: Context) -> str:
    name = shlex.quote(facts.name)
    if ctx.restore_hint:
        return (f"restore it from its newest backup: {ctx.restore_hint} (the vector index is "
                "rebuilt on open)")
    return (f"restore it from a backup (palace restore BACKUP_DIR --palace {name} --force); "
            f"no backup of it was found: copy {facts.directory} somewhere safe first, then "
            f"delete it (palace delete {name} --yes) if nothing can be saved")


def judge(facts: PalaceFacts, ctx: Context) -> list[Check]:
    """The checks of one palace, in report order."""
    def check(name: str, status: str, detail: str, fixable: bool = False,
              advice: str | None = None) -> Check:
        return Check(name, status, detail, palace=facts.name, fixable=fixable, advice=advice)

    if facts.damage is not None:
        return [check("directory", FAIL, facts.damage, advice=_restore_advice(facts, ctx))]
    out = [_directory(facts, check)]
    if facts.error is not None:
        return [*out, check("sqlite", FAIL, facts.error, advice=_restore_advice(facts, ctx))]
    pragma = "integrity_check" if ctx.full else "quick_check"
    if facts.problems:
        shown = "; ".join(facts.problems[:3])
        more = f" (+{len(facts.problems) - 3} more)" if len(facts.problems) > 3 else ""
        out.append(check("sqlite", FAIL, f"{pragma} found damage: {shown}{more}",
                         advice=_restore_advice(facts, ctx)))
        return out
    out.append(check("sqlite", OK, f"{pragma} ok"))
    schema = _schema(facts, check)
    out.append(schema)
    if schema.status != OK or facts.agreement is None:  # None: not read (schema objects)
        return out
    out += [_fts(facts, check), _vectors(facts, check), _embeddings(facts, ctx, check),
            _index(facts, ctx, check), _closets(facts, ctx, check), _context(facts, ctx, check),
            _embedder(facts, ctx, check), _identity(facts, check)]
    return out


def _directory(facts: PalaceFacts, check: _Make) -> Check:
    if facts.dir_mode & 0o077:
        return check("directory", WARN, f"{facts.directory} is mode {facts.dir_mode:04o}: "
                     "other users may read it (palace keeps it 0700)", fixable=True)
    return check("directory", OK, f"{facts.directory} ({facts.dir_mode:04o})")


def _schema(facts: PalaceFacts, check: _Make) -> Check:
    if facts.application_id not in (0, APPLICATION_ID):
        return check("schema", FAIL, f"not a palace database (application_id "
                     f"{facts.application_id:#x})", advice="move the file away; it is not "
                     "palace's")
    if facts.schema > SCHEMA_VERSION:
        return check("schema", FAIL, f"schema v{facts.schema} was written by a newer palaced "
                     f"(this one knows v{SCHEMA_VERSION})", advice="upgrade palace")
    if facts.schema < SCHEMA_VERSION:
        return check("schema", WARN, f"schema v{facts.schema}, migrated to v{SCHEMA_VERSION} "
                     "when the palace opens (the other checks run after that)", fixable=True)
    return check("schema", OK, f"v{facts.schema}")


def _fts(facts: PalaceFacts, check: _Make) -> Check:
    found = facts.agreement
    assert found is not None
    issues = []
    if facts.fts_index:
        issues.append("the drawers' full-text index disagrees with its rows")
    if found.fts_missing:
        issues.append(f"{_n(found.fts_missing, 'drawer')} without a full-text row"
                      + _examples(facts, "fts_missing"))
    if found.fts_orphans:
        issues.append(f"{_n(found.fts_orphans, 'full-text row')} of no drawer")
    if found.fts_stale:
        issues.append(f"{_n(found.fts_stale, 'full-text row')} with another text than its drawer's"
                      + _examples(facts, "fts_stale"))
    if facts.entities_fts:
        issues.append("the entity or substring index disagrees with its table")
    if issues:
        return check("fts", FAIL, "; ".join(issues) + ": keyword recall misses or "
                     "misranks those drawers", fixable=True)
    return check("fts", OK, f"{_n(found.drawers, 'drawer')} indexed"
                 + ("" if facts.entities_fts is not None else " (entity index not checked)"))


def _vectors(facts: PalaceFacts, check: _Make) -> Check:
    found = facts.agreement
    assert found is not None
    issues = []
    if found.embedded_without_vectors:
        issues.append(f"{_n(found.embedded_without_vectors, 'drawer')} marked embedded but "
                      f"without vectors{_examples(facts, 'embedded_without_vectors')}: vector "
                      "recall cannot find them")
    if found.orphan_vectors:
        issues.append(f"{_n(found.orphan_vectors, 'vector')} of deleted drawers")
    if issues:
        return check("vectors", FAIL, "; ".join(issues), fixable=True)
    return check("vectors", OK, f"{_n(found.vectors, 'vector')}, each of a drawer")


def _embeddings(facts: PalaceFacts, ctx: Context, check: _Make) -> Check:
    found = facts.agreement
    assert found is not None
    if not found.pending:
        return check("embeddings", OK, f"{found.drawers} of {_n(found.drawers, 'drawer')} "
                     "embedded")
    share = f"{found.pending} of {_n(found.drawers, 'drawer')} without vectors yet"
    if ctx.model is None:
        if ctx.keyword_only_by_choice:
            return check("embeddings", OK, f"{share} (keyword-only by configuration)")
        return check("embeddings", WARN, f"{share}: keyword-only until the model is loaded",
                     advice="see docs/configuration.md#offline-operation")
    if facts.mismatch or (facts.record and facts.record.embedder not in (None, ctx.model)):
        return check("embeddings", WARN, f"{share}; they are embedded after the reembed")
    return check("embeddings", WARN, f"{share}: embedded in the background while the palace "
                 "is open and idle (--repair embeds them now)", fixable=True)


def _index(facts: PalaceFacts, ctx: Context, check: _Make) -> Check:
    found = facts.agreement
    assert found is not None
    if facts.open:
        if facts.live_index is None:
            when = ("when the model is loaded" if ctx.model is None
                    else "after the reembed" if facts.mismatch else "when the palace reopens")
            return check("index", OK, f"no vector index in memory: loaded or rebuilt {when}")
        if facts.live_index_agrees:
            return check("index", OK, f"{facts.live_index} vectors in memory, as in the "
                         "database")
        return check("index", WARN, f"the vector index in memory disagrees with the "
                     f"database ({facts.live_index} and {found.vectors} vectors): rebuilt at the "
                     "next idle checkpoint", fixable=True)
    if facts.index_file == "current":
        return check("index", OK, f"index file current ({facts.index_file_entries} vectors"
                     + (", every key checked)" if ctx.full else ")"))
    if facts.index_file == "behind":
        return check("index", OK, f"index file saved before the last writes "
                     f"({facts.index_file_entries} vectors, the database has {found.vectors}): "
                     "the open replays them" + (" (every key checked)" if ctx.full else ""))
    if facts.index_file == "missing":
        if not found.vectors:
            return check("index", OK, "no vectors, no index file")
        return check("index", WARN, f"index file missing ({found.vectors} vectors in the "
                     "database): rebuilt from them when the palace opens", fixable=True)
    held = "unreadable" if facts.index_file_entries is None else (
        f"{facts.index_file_entries} vectors")
    return check("index", WARN, f"index file stale ({held}, the database has {found.vectors})"
                 ": rebuilt from the database when the palace opens", fixable=True)


def _closets(facts: PalaceFacts, ctx: Context, check: _Make) -> Check:
    found = facts.agreement
    assert found is not None
    issues = []
    if found.orphan_closets:
        issues.append(f"{_n(found.orphan_closets, 'topic entry', 'topic entries')} of "
                      "deleted drawers")
    if facts.closet_mismatch:
        issues.append(f"{_n(len(facts.closet_mismatch), 'drawer')} filed under other topics "
                      "than its text yields")
    return _derived(check, ctx, "closets", issues, "", "topics agree with the drawers",
                    "no orphan topics (--full compares every drawer's topics)")


def _context(facts: PalaceFacts, ctx: Context, check: _Make) -> Check:
    found = facts.agreement
    assert found is not None
    issues = []
    if found.context_orphans:
        issues.append(f"{_n(found.context_orphans, 'context vector')} of drawers deleted or "
                      "superseded")
    if facts.context_stale:
        some = ", ".join(map(str, facts.context_stale[:5]))
        issues.append(f"{_n(len(facts.context_stale), 'drawer')} whose room context (the "
                      f"neighbours' words or vectors) is not its neighbours' now (e.g. {some})")
    return _derived(check, ctx, "context", issues,
                    ": recall scores them by what was around them before",
                    "every drawer's room context is its neighbours'",
                    "no orphan context vectors (--full recomputes every drawer's context)")


def _derived(check: _Make, ctx: Context, name: str, issues: list[str], why: str,
             full_ok: str, quick_ok: str) -> Check:
    """A repairable derived table's check: ``warn`` with its ``issues`` (and ``why`` they
    matter), else ``ok`` saying what was compared (everything with ``--full``)."""
    if issues:
        return check(name, WARN, "; ".join(issues) + why, fixable=True)
    return check(name, OK, full_ok if ctx.full else quick_ok)


def _embedder(facts: PalaceFacts, ctx: Context, check: _Make) -> Check:
    stored = facts.record.embedder if facts.record else None
    if stored is None:
        return check("embedder", OK, "no vectors recorded yet")
    if ctx.model is not None and stored != ctx.model:
        return check("embedder", WARN, f"embedded with {stored}, the daemon runs {ctx.model}: "
                     "remember and recall fail with EMBEDDER_MISMATCH",
                     advice=f"palace reembed --palace {shlex.quote(facts.name)}")
    return check("embedder", OK, stored)


def _identity(facts: PalaceFacts, check: _Make) -> Check:
    if facts.identity == "ok":
        return check("identity", OK, "identity.txt present")
    if facts.identity == "missing":
        return check("identity", WARN, "identity.txt is missing (L0 is empty); a new one is "
                     "written when the palace opens", fixable=True)
    return check("identity", WARN, f"identity.txt is {facts.identity}; L0 stays empty",
                 advice=f"replace {facts.directory / 'identity.txt'} with a text file")
