"""The upkeep pages of ``palace ui`` (docs/ui.md § Upkeep): duplicates, conflicts,
consolidation suggestions and a bulk forget with a preview, over the daemon's upkeep ops.

``/p/{palace}/upkeep`` shows the first three (``memory.health``'s duplicate pairs and hints,
``memory.conflicts``) and the bulk forget's filter form; ``/p/{palace}/upkeep/forget?…``
previews a bulk forget (``memory.forget_many`` with ``dry_run``). Every write is a POST behind
``ui.guarded`` (the CSRF value) that answers 303 back to the upkeep page with a one-line
result in ``?done=``. A confirmed bulk forget carries the preview's ``selection`` token as
``expect``: the daemon forgets that very set or nothing, so a selection that changed since
the preview is refused (and previewed again) instead of forgetting more.
"""

from __future__ import annotations

import difflib
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from palace_client.http.pages import UI, palace_url
from palace_client.render.results import counted
from palaced.wire import errors as E
from palaced.wire.specs import MAX_BULK

PAIRS_SHOWN = 20  # duplicate pairs on the page: each costs two memory.get
CONFLICTS_SHOWN = 20
PREVIEW_SHOWN = 50  # drawers a bulk forget's preview lists (the count is always whole)
DRAFT_DRAWERS = 100  # drawers of a room a consolidation's draft summary lists
HINTS_SHOWN = 5  # rooms due a consolidation with a draft on the page (the fullest first)
SELECTORS = ("wing", "room", "tags", "source", "older_than", "query")
RESOLUTIONS = ("supersede", "keep_both", "merge")


def upkeep_url(palace: str, *rest: str) -> str:
    """The URL of a palace's upkeep page (or of ``rest`` under it), each part quoted."""
    return palace_url(palace, "upkeep", *rest)


def word_diff(older: str, newer: str) -> list[tuple[str, str]]:
    """The two texts as ``(kind, words)`` runs: ``same``, ``del`` (only the older's), ``ins``
    (only the newer's), in reading order, for showing what a conflict changed."""
    a, b = older.split(), newer.split()
    runs: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            runs.append(("same", " ".join(a[i1:i2])))
            continue
        if i2 > i1:
            runs.append(("del", " ".join(a[i1:i2])))
        if j2 > j1:
            runs.append(("ins", " ".join(b[j1:j2])))
    return runs


def selection_of(values: Any) -> dict[str, Any]:
    """The bulk forget's selectors a form or query string gave (blanks left out; ``tags``
    comma-separated)."""
    sel: dict[str, Any] = {}
    for key in SELECTORS:
        value = str(values.get(key, "")).strip()
        if not value:
            continue
        sel[key] = [t.strip() for t in value.split(",") if t.strip()] if key == "tags" else value
    return sel


def ids_of(text: str, arg: str) -> list[int]:
    """The positive integers (drawer ids, a count) a form field gave, comma-separated.

    Raises:
        InvalidArgs: none given, or a part that is no positive integer.
    """
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ids = []
    if not ids or min(ids) < 1:
        raise E.InvalidArgs(f"{arg} must be positive integers (comma-separated)",
                            details={"arg": arg})
    return ids


def back(palace: str, line: str, **extra: str) -> Response:
    """The 303 to the upkeep page showing ``line`` (and ``extra``, e.g. a batch to undo)."""
    query = urlencode({"done": line, **extra})
    return RedirectResponse(upkeep_url(palace) + "?" + query, status_code=303)


def routes(ui: UI) -> list[BaseRoute]:
    """The upkeep page, the bulk forget's preview and every write they post."""
    run_op, page = ui.run_op, ui.page

    async def drawer_text(palace: str, did: int) -> dict[str, Any] | None:
        try:
            got = await run_op("memory.get", palace, {"id": did})
        except E.MemoryNotFound:  # forgotten since the health report: the pair is gone
            return None
        drawer: dict[str, Any] = got["drawer"]
        return drawer

    async def duplicates(palace: str, rooms: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pairs: list[dict[str, Any]] = []
        for room in rooms:
            for dup in room["duplicates"]:
                if len(pairs) == PAIRS_SHOWN:
                    return pairs
                a = await drawer_text(palace, dup["ids"][0])
                b = await drawer_text(palace, dup["ids"][1])
                if a is not None and b is not None:
                    pairs.append({**dup, "a": a, "b": b})
        return pairs

    async def draft(palace: str, wing: str, room: str) -> dict[str, Any]:
        # The room's active, unconsolidated drawers: what a summary of it would replace.
        listed = await run_op("memory.list", palace,
                              {"wing": wing, "room": room, "limit": DRAFT_DRAWERS})
        drawers = [d for d in listed["drawers"] if d.get("kind") == "drawer"
                   and d.get("consolidated_into") is None and d.get("superseded_by") is None]
        return {"ids": ",".join(str(d["id"]) for d in drawers), "count": len(drawers),
                "text": "\n".join("- " + " ".join(d["text"].split()) for d in drawers)}

    async def upkeep(request: Request) -> Response:
        palace = request.path_params["palace"]
        # limit: the duplicate pairs (and stale drawers) listed per room; no more are shown.
        health = await run_op("memory.health", palace, {"limit": PAIRS_SHOWN})
        rooms = health["rooms"]
        due = sorted((r for r in rooms if r["hint"]), key=lambda r: -r["unconsolidated"])
        hints = [{**r, "draft": await draft(palace, r["wing"], r["room"])}
                 for r in due[:HINTS_SHOWN]]
        conflicts = await run_op("memory.conflicts", palace, {"limit": CONFLICTS_SHOWN})
        for x in conflicts["conflicts"]:
            x["diff"] = word_diff(x["older_text"], x["newer_text"])
        q = request.query_params
        return page("upkeep.html", palace=palace, health=health,
                    pairs=await duplicates(palace, rooms), hints=hints, due=len(due),
                    conflicts=conflicts,
                    done=q.get("done", ""), batch=q.get("batch", ""), sel={})

    async def preview(request: Request) -> Response:
        palace = request.path_params["palace"]
        sel = selection_of(request.query_params)
        form = {k: ", ".join(v) if isinstance(v, list) else v for k, v in sel.items()}
        try:
            result = await run_op("memory.forget_many", palace,
                                  {**sel, "dry_run": True, "show": PREVIEW_SHOWN})
        except E.InvalidArgs as exc:  # no selector, a bad time: said beside the form
            return page("upkeep_forget.html", 400, palace=palace, sel=form, error=exc,
                        result=None, max_bulk=MAX_BULK)
        changed = request.query_params.get("changed") == "1"
        return page("upkeep_forget.html", palace=palace, sel=form, result=result,
                    error=None, changed=changed, max_bulk=MAX_BULK)

    async def forget(request: Request) -> Response:
        palace, form = request.path_params["palace"], request.state.form
        sel = selection_of(form)
        expect = form.get("expect", "")
        count = ids_of(form.get("count", ""), "count")[0]
        if not expect:
            raise E.InvalidArgs("a bulk forget confirms a preview: its selection token is "
                                "missing", details={"arg": "expect"})
        try:
            # max_drawers: the count the person saw; expect: the very set they saw.
            res = await run_op("memory.forget_many", palace,
                               {**sel, "expect": expect, "max_drawers": count, "show": 0})
        except E.InvalidArgs as exc:
            if exc.details.get("arg") not in ("expect", "max_drawers"):
                raise
            # The selection changed since the preview: nothing went; show the new one.
            query = urlencode({**{k: form[k] for k in SELECTORS if form.get(k, "").strip()},
                               "changed": "1"})
            return RedirectResponse(upkeep_url(palace, "forget") + "?" + query,
                                    status_code=303)
        done = int(res["forgotten"])
        if res["batch"]:
            return back(palace, f"moved {counted(done, 'drawer')} to the trash as batch "
                                f"{res['batch']}", batch=res["batch"])
        return back(palace, f"deleted {counted(done, 'drawer')} for good (the trash keeps "
                            "nothing)")

    async def restore_batch(request: Request) -> Response:
        palace, form = request.path_params["palace"], request.state.form
        res = await run_op("memory.restore_batch", palace, {"batch": form.get("batch", "")})
        line = f"restored {counted(len(res['restored']), 'drawer')} of batch {res['batch']}"
        if res["conflicts"]:
            line += (f"; {counted(len(res['conflicts']), 'drawer')} stayed in the trash (the "
                     "same text is active now)")
        return back(palace, line)

    async def merge(request: Request) -> Response:
        palace, form = request.path_params["palace"], request.state.form
        res = await run_op("memory.merge", palace, {"ids": ids_of(form.get("ids", ""), "ids")})
        others = ", ".join(f"#{i}" for i in res["merged"])
        line = f"merged {others} into drawer #{res['kept']}"
        if res["batch"]:
            return back(palace, line + f" (the trash holds {others} as batch {res['batch']})",
                        batch=res["batch"])
        return back(palace, line)

    async def keep(request: Request) -> Response:
        palace, form = request.path_params["palace"], request.state.form
        kept = ids_of(form.get("keep", ""), "keep")[0]
        dropped = ids_of(form.get("drop", ""), "drop")[0]
        await run_op("memory.forget", palace, {"id": dropped})
        return back(palace, f"kept drawer #{kept}; moved its duplicate #{dropped} to the trash")

    async def resolve(request: Request) -> Response:
        palace, form = request.path_params["palace"], request.state.form
        cid = ids_of(str(request.path_params["id"]), "id")[0]
        resolution = form.get("resolution", "")
        if resolution not in RESOLUTIONS:
            raise E.InvalidArgs("resolution must be supersede, keep_both or merge",
                                details={"arg": "resolution"})
        args: dict[str, Any] = {"id": cid, "resolution": resolution}
        if resolution == "merge":
            args["text"] = form.get("text", "")
        res = await run_op("memory.resolve_conflict", palace, args)
        if res.get("already"):
            return back(palace, f"conflict {cid} was already resolved ({res['resolution']})")
        line = f"resolved conflict {cid}: {res['resolution']}"
        if res.get("merged_id") is not None:
            line += f"; merged into drawer #{res['merged_id']}"
        if res["retired"]:
            line += "; retired " + ", ".join(f"#{i}" for i in res["retired"])
        return back(palace, line)

    async def consolidate(request: Request) -> Response:
        palace, form = request.path_params["palace"], request.state.form
        args: dict[str, Any] = {"room": form.get("room", ""), "summary": form.get("summary", ""),
                                "ids": ids_of(form.get("ids", ""), "ids")}
        if form.get("wing"):
            args["wing"] = form["wing"]
        res = await run_op("memory.consolidate", palace, args)
        return back(palace, f"summary drawer #{res['summary_id']} in {res['wing']}/"
                            f"{res['room']} consolidates "
                            f"{counted(len(res['source_ids']), 'drawer')}")

    g = ui.guarded
    at = "/p/{palace}/upkeep"
    return [
        Route(at, g(upkeep), methods=["GET"]),
        Route(at + "/forget", g(preview), methods=["GET"]),
        Route(at + "/forget", g(forget), methods=["POST"]),
        Route(at + "/restore-batch", g(restore_batch), methods=["POST"]),
        Route(at + "/merge", g(merge), methods=["POST"]),
        Route(at + "/keep", g(keep), methods=["POST"]),
        Route(at + "/conflicts/{id:int}", g(resolve), methods=["POST"]),
        Route(at + "/consolidate", g(consolidate), methods=["POST"]),
    ]
