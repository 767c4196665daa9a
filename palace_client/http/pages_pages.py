"""The browse pages of ``palace ui`` (issue 32, docs/ui.md): each palace's health (the doctor,
read-only), its hierarchy (wings and rooms with counts), a timeline of what was remembered
when and by which agent, and the audit log.

Every page is a GET over existing read ops; none writes.
"""

from __future__ import annotations

import datetime as dt
import logging
from itertools import groupby
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from palace_client.api.projects import map_file, read_map
from palace_client.http.openapi import EXPOSED
from palace_client.http.pages import UI
from palaced.wire import errors as E

log = logging.getLogger("palace.serve")
PAGE = 50  # timeline entries and audit entries per page


def projects_by_palace() -> dict[str, list[str]]:
    """The project roots each palace serves, from the project map (``palace init`` and the
    clients choose a project's palace by it: palace_client.api.projects); empty when the map
    cannot be read (a broken hand edit must not take the palaces page down)."""
    try:
        mapped = read_map(map_file())
    except (OSError, E.PalaceError) as exc:
        log.warning("palace ui: the project map is unreadable: %s", exc)
        return {}
    out: dict[str, list[str]] = {}
    for root, palace in sorted(mapped.items()):
        out.setdefault(palace, []).append(root)
    return out


def verdict(checks: list[dict[str, Any]], palace: str) -> dict[str, Any]:
    """A palace's worst status among its own doctor checks (the daemon's are the daemon's)
    and its first problem: ``{"status", "problem", "checks"}``."""
    own = [c for c in checks if c.get("palace") == palace]
    rank = {"ok": 0, "warn": 1, "fail": 2}
    worst = max((str(c.get("status")) for c in own), key=lambda s: rank.get(s, 2), default="ok")
    problems = [c for c in own if c.get("status") != "ok"]
    problems.sort(key=lambda c: -rank.get(str(c.get("status")), 2))
    first = problems[0] if problems else None
    return {"status": worst, "checks": own,
            "problem": f"{first['name']}: {first.get('detail') or ''}" if first else ""}


def day_of(ms: int) -> str:
    """The UTC day of a millisecond timestamp, ``YYYY-MM-DD``."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d")


def cursor_of(request: Request) -> int:
    """The page's cursor (the offset the previous page's ``next`` named); 0 when absent.

    Raises:
        InvalidArgs: not a whole number of at least 0.
    """
    raw = request.query_params.get("cursor", "0") or "0"
    if not raw.isdigit():
        raise E.InvalidArgs(f"bad cursor {E.quote(raw, 40)}: a page's `next` link gives one",
                            details={"arg": "cursor"})
    return int(raw)


def routes(ui: UI) -> list[BaseRoute]:
    """The pages: ``/p/{palace}/doctor``, ``/rooms``, ``/timeline``, ``/audit``."""
    run_op, page = ui.run_op, ui.page

    async def doctor(request: Request) -> Response:
        # Read-only (no repair); ~0.65 s for a 10k-drawer palace, so the palaces page loads
        # it per row afterwards (htmx) and this answers that row's cell alone.
        palace = request.path_params["palace"]
        got = await run_op("palace.doctor", palace, {})
        found = verdict(got.get("checks", []), palace)
        if request.headers.get("hx-request") == "true":
            return page("pages_verdict.html", v=found)
        return page("pages_doctor.html", palace=palace, v=found)

    async def rooms(request: Request) -> Response:
        palace = request.path_params["palace"]
        info = await run_op("palace.info", palace, {})
        wings = [{"wing": wing, "rooms": list(rs), "drawers": 0}
                 for wing, rs in groupby(info.get("rooms", []), key=lambda r: r["wing"])]
        for w in wings:
            w["drawers"] = sum(int(r["drawers"]) for r in w["rooms"])
        return page("pages_rooms.html", palace=palace, wings=wings,
                    drawers=info.get("drawers"))

    async def timeline(request: Request) -> Response:
        palace = request.path_params["palace"]
        agent = request.query_params.get("agent", "").strip()
        offset = cursor_of(request)
        args: dict[str, Any] = {"limit": PAGE, "offset": offset}
        if agent:
            args["created_by"] = agent
        got = await run_op("memory.list", palace, args)
        days = [(day, list(ds)) for day, ds in
                groupby(got["drawers"], key=lambda d: day_of(int(d["created_ms"])))]
        return page("pages_timeline.html", palace=palace, agent=agent, days=days,
                    total=got["total"], next=got["next_offset"], offset=offset)

    async def audit(request: Request) -> Response:
        palace = request.path_params["palace"]
        q = request.query_params
        action, agent = q.get("action", "").strip(), q.get("agent", "").strip()
        offset = cursor_of(request)
        args: dict[str, Any] = {"limit": PAGE, "offset": offset}
        args.update({k: v for k, v in (("op", action), ("agent", agent)) if v})
        got = await run_op("palace.audit", palace, args)
        # The actions to offer: the ops that change a palace (the log records those).
        actions = sorted(name for name, spec in EXPOSED.items() if not spec.read_only)
        return page("pages_audit.html", palace=palace, action=action, agent=agent,
                    entries=got["entries"], total=got["total"], next=got["next_offset"],
                    offset=offset, actions=actions)

    g = ui.guarded
    return [
        Route("/p/{palace}/doctor", g(doctor), methods=["GET"]),
        Route("/p/{palace}/rooms", g(rooms), methods=["GET"]),
        Route("/p/{palace}/timeline", g(timeline), methods=["GET"]),
        Route("/p/{palace}/audit", g(audit), methods=["GET"]),
    ]
