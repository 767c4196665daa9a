"""The op table (each op's spec in ``palaced.specs`` bound to its handler) and dispatch.

``dispatch`` is the one way into a handler: it decodes the arguments against the op's spec
(bad input is refused with INVALID_ARGS before anything runs), checks the palace name, and
counts the request in flight, daemon-wide (shutdown waits for it) and on its open palace (the
registry does not close a palace in use).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from palaced.args import decode_args
from palaced.errors import UnknownOp, quote
from palaced.layout import validate_name
from palaced.ops import daemon_ops, drawers, graph, maintenance, model, palaces, transfer, upkeep
from palaced.ops.context import OpContext
from palaced.ops.fields import need_palace
from palaced.specs import SPECS, OpSpec

Handler = Callable[[OpContext, "str | None", dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Op:
    """An op the daemon serves: its spec (``palaced.specs``) bound to its handler."""

    spec: OpSpec
    handler: Handler

    @property
    def name(self) -> str:
        return self.spec.name


class OpTable:
    """The ops the daemon serves, one per spec in ``palaced.specs.SPECS``."""

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
    ("palace.doctor", maintenance.op_doctor),
    ("palace.backup", maintenance.op_backup),
    ("palace.restore", maintenance.op_restore),
    ("memory.remember", drawers.op_remember),
    ("memory.remember_many", drawers.op_remember_many),
    ("memory.recall", drawers.op_recall),
    ("memory.recall_all", drawers.op_recall_all),
    ("memory.wake_up", drawers.op_wake_up),
    ("memory.get", drawers.op_get),
    ("memory.forget", drawers.op_forget),
    ("memory.list", drawers.op_list),
    ("graph.assert", graph.op_graph_assert),
    ("graph.link", graph.op_graph_link),
    ("graph.invalidate", graph.op_graph_invalidate),
    ("graph.query", graph.op_graph_query),
    ("graph.timeline", graph.op_graph_timeline),
    ("graph.neighbors", graph.op_graph_neighbors),
    ("graph.path", graph.op_graph_path),
    ("graph.search", graph.op_graph_search),
    ("memory.decay", upkeep.op_decay),
    ("memory.prune", upkeep.op_prune),
    ("memory.consolidate", upkeep.op_consolidate),
    ("memory.health", upkeep.op_health),
    ("palace.export", transfer.op_export),
    ("palace.import_records", transfer.op_import_records),
    ("source.list", transfer.op_source_list),
    ("source.sync", transfer.op_source_sync),
    ("source.drop", transfer.op_source_drop),
)
# Every op the daemon serves (``daemon.hello`` is the server's own).
TABLE = OpTable(HANDLERS)


async def dispatch(ctx: OpContext, op_name: str, palace: str | None, raw_args: Any,
                   table: OpTable = TABLE) -> dict[str, Any]:
    """Run op ``op_name`` on ``palace`` with the raw request arguments; its result map.

    Raises:
        UnknownOp: no such op.
        InvalidArgs: the arguments do not match the op's spec, or it needs a palace and got
            none; InvalidPalaceName: a bad palace name.
        PalaceError: whatever the handler raises.
    """
    op = table.get(op_name)
    args = decode_args(op.spec, raw_args)
    if op.spec.palace == "required":
        palace = need_palace(palace)
    elif op.spec.palace == "optional" and palace is not None:
        palace = validate_name(palace)
    ctx.in_flight.enter()
    opened = ctx.registry.open_palaces.get(palace) if palace else None
    if opened is not None:
        opened.in_flight += 1
    try:
        return await op.handler(ctx, palace, args)
    finally:
        if opened is not None:
            opened.in_flight -= 1
        ctx.in_flight.leave()
