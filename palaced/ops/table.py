"""The op table (each op's spec in ``palaced.wire.specs`` bound to its handler) and dispatch.

``dispatch`` is the one way into a handler: it decodes the arguments against the op's spec
(bad input is refused with INVALID_ARGS before anything runs), checks the palace name, hands
the handler a context naming the caller (agent) and op, checks the palace's policy for the
op's permission (FORBIDDEN before anything runs), and counts the request in flight,
daemon-wide (shutdown waits for it) and on its open palace (the registry does not close a
palace in use).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from palaced.memory import policy
from palaced.ops import (
    capture,
    daemon_ops,
    drawers,
    governance,
    graph,
    maintenance,
    memoirs,
    model,
    palaces,
    transfer,
    upkeep,
)
from palaced.ops.context import OpContext
from palaced.ops.fields import need_palace
from palaced.palace.layout import validate_name
from palaced.store.rows.audit import UNKNOWN_AGENT
from palaced.wire.args import decode_args
from palaced.wire.errors import PalaceError, PalaceNotFound, UnknownOp, quote
from palaced.wire.specs import SPECS, OpSpec

Handler = Callable[[OpContext, "str | None", dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Op:
    """An op the daemon serves: its spec (``palaced.wire.specs``) bound to its handler."""

    spec: OpSpec
    handler: Handler

    @property
    def name(self) -> str:
        return self.spec.name


class OpTable:
    """The ops the daemon serves, one per spec in ``palaced.wire.specs.SPECS``."""

    def __init__(self, handlers: Iterable[tuple[str, Handler]]) -> None:
        """Bind each ``(op name, handler)``.

        Raises:
            ValueError: a name has no spec, or a spec has no handler (a programming error).
        """
        self.ops: dict[str, Op] = {}
        for name, handler in handlers:
            if name not in SPECS or name in self.ops:
                raise ValueError(f"handler for unknown or repeated op {name!r}")
            self.ops[name] = Op(SPECS[name], handler)
        missing = sorted(set(SPECS) - set(self.ops))
        if missing:
            raise ValueError(f"ops without a handler: {', '.join(missing)}")

    def get(self, name: Any) -> Op:
        """Raises UnknownOp for names the daemon does not serve."""
        if not isinstance(name, str) or name not in self.ops:
            raise UnknownOp(f"unknown op {quote(name, 80)}",
                            details={"op": quote(name, 80), "known": sorted(self.ops)})
        return self.ops[name]

    def names(self) -> list[str]:
        return sorted(self.ops)


HANDLERS: tuple[tuple[str, Handler], ...] = (
    ("daemon.status", daemon_ops.op_status),
    ("daemon.stop", daemon_ops.op_stop),
    ("palace.list", palaces.op_palace_list),
    ("palace.create", palaces.op_palace_create),
    ("palace.delete", palaces.op_palace_delete),
    ("palace.info", palaces.op_palace_info),
    ("palace.reembed", palaces.op_reembed),
    ("model.load", model.op_model_load),
    ("model.use", model.op_model_use),
    ("model.check", model.op_model_check),
    ("palace.doctor", maintenance.op_doctor),
    ("palace.backup", maintenance.op_backup),
    ("palace.restore", maintenance.op_restore),
    ("memory.remember", drawers.op_remember),
    ("memory.remember_many", drawers.op_remember_many),
    ("memory.recall", drawers.op_recall),
    ("memory.recall_all", drawers.op_recall_all),
    ("memory.wake_up", drawers.op_wake_up),
    ("memory.get", drawers.op_get),
    ("memory.update", drawers.op_update),
    ("memory.forget", drawers.op_forget),
    ("memory.list", drawers.op_list),
    ("graph.assert", graph.op_graph_assert),
    ("graph.link", graph.op_graph_link),
    ("graph.invalidate", graph.op_graph_invalidate),
    ("graph.query", graph.op_graph_query),
    ("graph.timeline", graph.op_graph_timeline),
    ("graph.neighbors", graph.op_graph_neighbors),
    ("graph.path", graph.op_graph_path),
    ("graph.overview", graph.op_graph_overview),
    ("graph.search", graph.op_graph_search),
    ("graph.describe", graph.op_graph_describe),
    *memoirs.HANDLERS,
    ("memory.decay", upkeep.op_decay),
    ("memory.prune", upkeep.op_prune),
    ("memory.consolidate", upkeep.op_consolidate),
    ("memory.health", upkeep.op_health),
    ("memory.conflicts", drawers.op_conflicts),
    ("memory.resolve_conflict", drawers.op_resolve_conflict),
    ("memory.forget_many", upkeep.op_forget_many),
    ("memory.restore_batch", upkeep.op_restore_batch),
    ("memory.merge", upkeep.op_merge),
    ("memory.restore", governance.op_restore),
    ("memory.trash", governance.op_trash),
    ("memory.empty_trash", governance.op_empty_trash),
    ("palace.audit", governance.op_audit),
    ("palace.policy", governance.op_policy),
    ("palace.policy_set", governance.op_policy_set),
    ("palace.export", transfer.op_export),
    ("palace.import_records", transfer.op_import_records),
    ("source.list", transfer.op_source_list),
    ("source.sync", transfer.op_source_sync),
    ("source.drop", transfer.op_source_drop),
    ("capture.transcript", capture.op_capture_transcript),
)
# Every op the daemon serves (``daemon.hello`` is the server's own).
TABLE = OpTable(HANDLERS)


async def dispatch(ctx: OpContext, op_name: str, palace: str | None, raw_args: Any,
                   agent: str | None = None, table: OpTable = TABLE) -> dict[str, Any]:
    """Run op ``op_name`` on ``palace`` for ``agent`` (already checked by the protocol; None:
    ``UNKNOWN_AGENT``) with the raw request arguments; its result map.

    Raises:
        UnknownOp: no such op.
        InvalidArgs: the arguments do not match the op's spec, or it needs a palace and got
            none; InvalidPalaceName: a bad palace name.
        Forbidden: the palace's policy does not grant the op's permission to ``agent``.
        PalaceError: whatever the handler raises.
    """
    op = table.get(op_name)
    args = decode_args(op.spec, raw_args)
    if op.spec.palace == "required":
        palace = need_palace(palace)
    elif op.spec.palace == "optional" and palace is not None:
        palace = validate_name(palace)
    ctx = replace(ctx, agent=agent or UNKNOWN_AGENT, op=op.name)
    ctx.in_flight.enter()
    ctx.registry.budget.pin(palace)  # not closed to make room for another while in use
    opened = ctx.registry.open_palaces.get(palace) if palace else None
    if opened is not None:
        opened.begin_work()
    try:
        if op.spec.permission and palace is not None:
            try:
                target = await ctx.registry.get(palace)
            except PalaceNotFound:
                # No such palace: the request fails the same way either way (its first
                # report says why, e.g. deleted under the daemon), except a restore or a
                # capture, which may make a new palace (and need no permission then; the
                # capture's handler says how to create one when it may not).
                if op.name not in ("palace.restore", "capture.transcript"):
                    raise
                target = None
            except PalaceError:
                # Nothing to check: the palace cannot be opened, so it has no readable policy.
                # The handler reports why (and a damaged palace can still be deleted).
                target = None
            if target is not None:
                await policy.require(target, ctx.actor, op.spec.permission, args.get("id"))
        return await op.handler(ctx, palace, args)
    finally:
        if opened is not None:
            opened.end_work()
        ctx.registry.budget.unpin(palace)
        ctx.in_flight.leave()
