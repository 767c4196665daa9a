"""What every page of the web app shares (docs/ui.md): the ``UI`` context a page module's
``routes(ui)`` receives (templates, the daemon, the guard), the header's links and URLs.

Its own module so that page modules (``pages_*``) import it while ``ui`` imports them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from palace_client.http.bodies import read_body
from palace_client.http.openapi import status_of
from palace_client.http.security import Keys, authenticate, check_origin
from palace_client.render.results import counted
from palaced.wire import errors as E

log = logging.getLogger("palace.serve")
HERE = Path(__file__).parent
MAX_FORM = 1 << 20  # a drawer edit's form: 1 MiB is far above any drawer a person types
RunOp = Callable[[str, "str | None", dict[str, Any]], Awaitable[dict[str, Any]]]
Handler = Callable[[Request], Awaitable[Response]]


def when(ms: Any) -> str:
    """A millisecond timestamp as ``YYYY-MM-DD HH:MM`` UTC (empty when there is none)."""
    if not isinstance(ms, int | float):
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M")


def environment() -> Environment:
    """The templates of the package, every value autoescaped (drawer text is untrusted)."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["when"] = when
    env.filters["counted"] = counted  # "1 drawer", "2 drawers": never a fixed plural
    return env


def tags_of(text: str) -> list[str]:
    """The tags a person typed, comma-separated (blanks dropped)."""
    return [t.strip() for t in text.split(",") if t.strip()]


# The links every palace page's header shows, (label, path under /p/{palace}): a page module
# adds its own line here.
NAV: tuple[tuple[str, str], ...] = (
    ("search", ""),
    ("trash", "/trash"),
    ("rooms", "/rooms"), ("timeline", "/timeline"), ("audit", "/audit"),
    ("graph", "/graph"), ("memoirs", "/memoirs"),
    ("upkeep", "/upkeep"),
)


def palace_url(palace: str, *rest: str) -> str:
    """The app's URL of a palace's page, each part quoted."""
    return "/p/" + "/".join(quote(part, safe="") for part in (palace, *rest))


class UI:
    """What every page handler needs: templates, the daemon, the guard, URLs.

    A page module (``palace_client.http.pages_*``) takes one and returns its routes; every
    handler it writes is wrapped in ``guarded``, so none can forget the secret or the CSRF.
    """

    def __init__(self, keys: Keys, port: int, run_op: RunOp) -> None:
        self.keys, self.port, self.run_op = keys, port, run_op
        self.env = environment()

    def page(self, name: str, status: int = 200, **values: Any) -> Response:
        """Render template ``name`` (the CSRF value and the nav always passed)."""
        palace = values.get("palace")
        nav = [(label, palace_url(palace) + path) for label, path in NAV] if palace else []
        if palace and "base" not in values:
            values["base"] = palace_url(palace)
        html = self.env.get_template(name).render(csrf=self.keys.csrf, nav=nav, **values)
        return HTMLResponse(html, status_code=status)

    async def form_of(self, request: Request) -> dict[str, str]:
        """A POSTed form's fields (bounded, url-encoded only).

        Raises:
            RequestRefused: another content type or a body over ``MAX_FORM``.
        """
        body = await read_body(request, "application/x-www-form-urlencoded", MAX_FORM)
        return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))

    def guarded(self, handler: Callable[[Request], Awaitable[Response]]
                ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` behind the secret (cookie or bearer) and, for a POST, the CSRF check;
        a typed error becomes the error page with its HTTP status. A POST's form is in
        ``request.state.form``."""
        async def endpoint(request: Request) -> Response:
            try:
                how = authenticate(request.headers, request.cookies, self.keys)
                if request.method == "POST":
                    request.state.form = await self.form_of(request)
                    check_origin("POST", request.headers, how, self.keys, self.port,
                                 request.state.form.get("csrf"))
                return await handler(request)
            except E.PalaceError as exc:
                return self.page("error.html", status_of(exc), error=exc)
            except Exception as exc:  # a bug: still a typed page, the traceback on stderr
                log.exception("palace ui: unexpected error")
                return self.page("error.html", 500, error=E.ClientError(
                    f"unexpected {type(exc).__name__} in palace ui (a bug; its stderr has "
                    "the traceback)"))
        return endpoint
