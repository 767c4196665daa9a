"""Handlers of export, restore and the import ledger: palace.export, palace.import_records,
source.list, source.sync, source.drop."""

from __future__ import annotations

import time
from typing import Any

import anyio.to_thread

from palaced.maintenance import transfer
from palaced.memory import sources
from palaced.ops.context import OpContext
from palaced.ops.fields import check_label, check_text, drawers_from_items, need_palace
from palaced.store.rows.drawers import SUMMARY_KIND, content_hash
from palaced.text.timeparse import parse_when
from palaced.text.topics import extract_topics
from palaced.wire.args import decode_args
from palaced.wire.errors import InvalidArgs, InvalidContent, PalaceError
from palaced.wire.export_format import FORMAT, RECORDS, VERSION, record_kind

_TIMES = ("created_ms", "updated_ms", "occurred_ms", "accessed_ms", "expires_ms",
          "valid_from_ms", "valid_to_ms", "invalidated_ms", "imported_ms", "exported_ms",
          "decayed_ms")


async def op_export(ctx: OpContext, palace: str | None, args: dict[str, Any]
                    ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    # A page stays well inside a frame (texts grow a little as msgpack).
    return await transfer.export_page(p, args["cursor"], int(args["limit"]),
                                      ctx.config.limits.max_frame // 4)


def _required_label(value: str, what: str) -> str:
    label = check_label(value, what)
    assert label is not None  # a required field is never None
    return label


def prepare(index: int, raw: Any, max_text_chars: int) -> transfer.Prepared:
    """Check one export record: its fields (``export_format.RECORDS``) and what they hold.

    Raises:
        InvalidArgs, InvalidContent, TextTooLarge: the record is malformed.
    """
    kind = record_kind(raw)
    if kind is None:
        raise InvalidArgs("not an export record: a map whose `record` is one of "
                          f"{', '.join(RECORDS)}", details={"index": index})
    rec = decode_args(RECORDS[kind], raw)
    for key in _TIMES:
        if rec.get(key) is not None:
            parse_when(rec[key], now_ms=0)  # years 1-9999
    if kind == "header":
        if rec["format"] != FORMAT:
            raise InvalidContent(f"not a palace export (format {rec['format']!r})")
        if rec["version"] > VERSION:
            raise InvalidContent(f"export format version {rec['version']} is newer than this "
                                 f"palaced reads ({VERSION}); upgrade palace")
    elif kind == "identity" and "\x00" in rec["text"]:
        raise InvalidContent("identity text contains NUL bytes")
    elif kind == "drawer":
        rec["text"] = check_text(rec["text"], max_text_chars)
        rec["wing"] = _required_label(rec["wing"], "wing")
        rec["room"] = _required_label(rec["room"], "room")
        rec["source"] = check_label(rec["source"], "source")
        rec["tags"] = list(dict.fromkeys(_required_label(t, "tag") for t in rec["tags"]))
        if rec["kind"] not in ("drawer", SUMMARY_KIND):
            raise InvalidContent(f"unknown drawer kind {rec['kind']!r}")
        if rec["id"] in (rec["superseded_by"], rec["consolidated_into"]):
            raise InvalidContent(f"drawer {rec['id']} links to itself")
        return transfer.Prepared(index, kind, rec, content_hash(rec["wing"], rec["room"],
                                                                rec["text"]),
                                 tuple(extract_topics(rec["text"])))
    elif kind == "source":
        rec["importer"] = _required_label(rec["importer"], "importer")
        if not rec["key"] or "\x00" in rec["key"]:
            raise InvalidContent("a source key must be non-empty, without NUL")
    return transfer.Prepared(index, kind, rec)


async def op_import_records(ctx: OpContext, palace: str | None, args: dict[str, Any]
                     ) -> dict[str, Any]:
    """Restore a batch; records refused by their checks are listed in ``rejected`` (with
    their ``index`` in the batch) and the others restored. A bad header refuses the batch.

    Raises:
        InvalidArgs: more than ``max_batch`` records, or a malformed header.
        InvalidContent: a header of another format or a newer version; no header and no
            restore started in this palace.
        PalaceNotEmpty: the palace holds other memories.
    """
    name = need_palace(palace)
    records = args["records"]
    limits = ctx.config.limits
    if len(records) > limits.max_batch:
        raise InvalidArgs(f"at most {limits.max_batch} records per batch",
                          details={"records": len(records)})

    def check() -> tuple[list[transfer.Prepared], list[dict[str, Any]]]:
        batch: list[transfer.Prepared] = []
        rejected: list[dict[str, Any]] = []
        for i, raw in enumerate(records):
            try:
                try:
                    batch.append(prepare(i, raw, limits.max_text_chars))
                except transfer.UNFORESEEN as exc:
                    raise transfer.unforeseen(i, exc) from None
            except PalaceError as exc:
                if record_kind(raw) == "header":
                    exc.details["index"] = i
                    raise
                rejected.append({"index": i, "code": exc.code, "name": exc.name,
                                 "message": exc.message})
        return batch, rejected

    # Topic extraction of a thousand texts would stall the event loop: in a thread.
    batch, rejected = await anyio.to_thread.run_sync(check)
    return await transfer.restore(await ctx.registry.get(name), batch, rejected, ctx.actor)


# -- the import ledger ------------------------------------------------------------------------
def _source_key(args: dict[str, Any]) -> tuple[str, str]:
    importer = _required_label(args["importer"], "importer")
    key = args["key"]
    if not key or "\x00" in key:
        raise InvalidArgs("a source key must be non-empty, without NUL", details={"arg": "key"})
    return importer, key


async def op_source_list(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    importer = _required_label(args["importer"], "importer")
    return await sources.list_page(p, importer, args["prefix"], args["after"],
                                   int(args["limit"]))


async def op_source_sync(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    importer, key = _source_key(args)
    unchanged = await sources.unchanged(p, importer, key, args["hash"])
    if unchanged is not None:  # a re-run: no need to check (and extract topics of) the items
        return unchanged
    limits = ctx.config.limits
    now = int(time.time() * 1000)
    items = await anyio.to_thread.run_sync(lambda: drawers_from_items(
        limits.max_text_chars, limits.max_batch, args["items"], now))
    return await sources.sync(p, importer, key, args["hash"], items, ctx.actor)


async def op_source_drop(ctx: OpContext, palace: str | None, args: dict[str, Any]
                         ) -> dict[str, Any]:
    p = await ctx.registry.get(need_palace(palace))
    importer, key = _source_key(args)
    return await sources.drop(p, importer, key, ctx.actor)
