"""The web app of ``palace ui`` (docs/ui.md): server-rendered pages over the same ops, in the
same server and behind the same guard as the HTTP API.

Pages: ``/`` palaces, ``/p/{palace}`` search, ``/p/{palace}/d/{id}`` a drawer (edit, forget,
restore), ``/p/{palace}/trash``. Every page needs the session cookie (or the bearer secret);
every write is a POST carrying the CSRF value in a hidden field (``csrf``) or the
``X-Palace-CSRF`` header, and answers with a 303 to the page to show next. Drawer text is
untrusted: templates are autoescaped and the CSP allows no inline script.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from palace_client.http import pages_graph, pages_pages, pages_upkeep
from palace_client.http.pages import HERE, UI, RunOp, palace_url, tags_of
from palace_client.http.security import Keys


def core_routes(ui: UI) -> list[BaseRoute]:
    """The first pages: palaces, search, a drawer (edit, forget, restore), the trash."""
    run_op, page = ui.run_op, ui.page

    async def palaces(request: Request) -> Response:
        # One op for every palace's counts and model (a palace that fails, a team palace's
        # server down, carries its ``error`` and leaves the others listed); the doctor's
        # verdict, slower, comes per row afterwards (pages_pages' doctor fragment).
        status = await run_op("daemon.status", None, {})
        projects = pages_pages.projects_by_palace()
        rows = [{**entry, "url": palace_url(entry["name"]),
                 "doctor": palace_url(entry["name"], "doctor"),
                 "projects": projects.get(entry["name"], [])}
                for entry in status["palaces"]]
        return page("palaces.html", palaces=rows, mode=status.get("mode"))

    async def search(request: Request) -> Response:
        palace = request.path_params["palace"]
        q = request.query_params
        query, wing, room = q.get("q", "").strip(), q.get("wing", ""), q.get("room", "")
        tag, since, until = q.get("tag", "").strip(), q.get("since", ""), q.get("until", "")
        # The filters both ops take: wing, room, tags (any of), the drawer's date in
        # [since, until).
        args: dict[str, Any] = {k: v for k, v in (("wing", wing), ("room", room),
                                                  ("since", since), ("until", until)) if v}
        if tags_of(tag):
            args["tags"] = tags_of(tag)
        result: dict[str, Any] | None = None
        listed: dict[str, Any] | None = None
        if query:
            # MCP's recall: the query and the filters, every other argument its default.
            result = await run_op("memory.recall", palace, {"query": query, **args})
        elif args:  # filters and no query (a room of the rooms page): its drawers, newest first
            listed = await run_op("memory.list", palace, args)
        info = await run_op("palace.info", palace, {})
        return page("search.html", palace=palace, query=query, wing=wing, room=room,
                    tag=tag, since=since, until=until, result=result, listed=listed,
                    rooms=info.get("rooms", []), drawers=info.get("drawers"))

    async def drawer(request: Request) -> Response:
        palace, did = request.path_params["palace"], request.path_params["id"]
        got = await run_op("memory.get", palace, {"id": did, "history": True})
        # The conflicts this drawer is a side of, resolved ones too (the newest 1,000 of the
        # palace: the op lists by palace, and a drawer's conflicts are recent ones).
        listed = await run_op("memory.conflicts", palace,
                              {"include_resolved": True, "limit": 1000})
        mine = [c for c in listed["conflicts"] if did in (c["older_id"], c["newer_id"])]
        return page("drawer.html", palace=palace, d=got["drawer"], conflicts=mine)

    async def edit(request: Request) -> Response:
        palace, did = request.path_params["palace"], request.path_params["id"]
        form = request.state.form
        args: dict[str, Any] = {"id": did}
        if "text" in form:
            args["text"] = form["text"]
        if "tags" in form:
            args["tags"] = tags_of(form["tags"])
        await run_op("memory.update", palace, args)
        return RedirectResponse(palace_url(palace, "d", str(did)), status_code=303)

    async def forget(request: Request) -> Response:
        palace, did = request.path_params["palace"], request.path_params["id"]
        await run_op("memory.forget", palace, {"id": did})
        return RedirectResponse(palace_url(palace, "trash"), status_code=303)

    async def restore(request: Request) -> Response:
        palace, did = request.path_params["palace"], request.path_params["id"]
        await run_op("memory.restore", palace, {"id": did})
        return RedirectResponse(palace_url(palace, "d", str(did)), status_code=303)

    async def trash(request: Request) -> Response:
        palace = request.path_params["palace"]
        listed = await run_op("memory.trash", palace, {})
        return page("trash.html", palace=palace, trash=listed)

    g = ui.guarded
    drawer_path = "/p/{palace}/d/{id:int}"
    return [
        Route("/", g(palaces), methods=["GET"]),
        Route("/p/{palace}", g(search), methods=["GET"]),
        Route(drawer_path, g(drawer), methods=["GET"]),
        Route(drawer_path + "/edit", g(edit), methods=["POST"]),
        Route(drawer_path + "/forget", g(forget), methods=["POST"]),
        Route(drawer_path + "/restore", g(restore), methods=["POST"]),
        Route("/p/{palace}/trash", g(trash), methods=["GET"]),
    ]


# Every page module's ``routes(ui)``: a new page module adds its own line here.
PAGE_MODULES: tuple[Callable[[UI], list[BaseRoute]], ...] = (
    core_routes,
    pages_pages.routes,
    pages_graph.routes,
    pages_upkeep.routes,
)


def ui_routes(keys: Keys, port: int, run_op: RunOp) -> list[BaseRoute]:
    """The web app's routes; ``run_op(op, palace, args)`` runs an op on the daemon."""
    ui = UI(keys, port, run_op)
    routes = [route for module in PAGE_MODULES for route in module(ui)]
    # The stylesheet and the vendored assets: public files, no secret in them.
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    return routes
