"""The HTTP API's security: the per-launch secret, its file, the session cookie, and the
checks every request passes (Host, authentication, Origin, CSRF).

Another local user must get nothing: the server listens on loopback only, so any local
process can connect; what it cannot get is the secret, which lives in a 0600 file in a 0700
directory of the user's runtime directory and in the person's browser (an HttpOnly cookie).
A web page the person visits can make the browser send requests too; the ``Host`` check
stops DNS rebinding (a foreign name resolving to 127.0.0.1), SameSite=Strict keeps the cookie
off cross-site requests, and a cookie-authenticated request must also carry ``X-Palace-CSRF``
(a value derived from the secret, which a foreign page cannot read or send without a CORS
preflight this server never grants).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from palaced.wire.errors import RequestRefused, Unauthorized, UsageError
from palaced.wire.private import prepare_runtime_dir

COOKIE = "palace_session"
CSRF_HEADER = "x-palace-csrf"
AGENT_HEADER = "x-palace-agent"
SECRET_DIR = "http"  # under the runtime dir: <runtime>/http/serve-<port>.secret
LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")
TUNNEL_ADVICE = ("palace serve listens on loopback only; from another machine, tunnel: "
                 "`ssh -L 8765:127.0.0.1:8765 HOST` (docs/http.md#remote-access)")


def loopback_host(host: str) -> str:
    """``host`` if it is a loopback address (``localhost`` is ``127.0.0.1``).

    Raises:
        UsageError: any other address: the API is never served beyond this machine.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise UsageError(f"--host {host!r} is not a loopback address; {TUNNEL_ADVICE}",
                     details={"arg": "host"})


def _derive(secret: str, purpose: str) -> str:
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def same(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class Keys:
    """The secrets of one launch: the bearer secret and what is derived from it."""

    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def session(self) -> str:
        """The session cookie's value (not the secret: a cookie never carries it)."""
        return _derive(self.secret, "palace-session")

    @property
    def csrf(self) -> str:
        """The ``X-Palace-CSRF`` value a cookie-authenticated request must carry."""
        return _derive(self.secret, "palace-csrf")


def allowed_hosts(port: int) -> frozenset[str]:
    """The ``Host`` headers of this server's own origins (anything else: DNS rebinding)."""
    return frozenset(f"{name}:{port}" for name in LOCAL_NAMES)


def check_host(host: str | None, port: int) -> None:
    """Raises:
        RequestRefused: ``host`` is not one of ``allowed_hosts(port)``.
    """
    if host is None or host.lower() not in allowed_hosts(port):
        raise RequestRefused("the Host header is not this server's (127.0.0.1, localhost or "
                             f"[::1] with port {port})", details={"host": (host or "")[:100]})


def authenticate(headers: Mapping[str, str], cookies: Mapping[str, str], keys: Keys) -> str:
    """How the request proves it holds the secret: ``"bearer"`` or ``"cookie"``.

    Raises:
        Unauthorized: neither an ``Authorization: Bearer`` with the secret nor the session
            cookie (a wrong one of either is refused the same way).
    """
    auth = headers.get("authorization")
    if auth is not None:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and same(token.strip(), keys.secret):
            return "bearer"
        raise Unauthorized("wrong secret: send `Authorization: Bearer <secret>` with the "
                           "secret of the server's secret file (docs/http.md)")
    if COOKIE in cookies:
        if same(cookies[COOKIE], keys.session):
            return "cookie"
        raise Unauthorized("the session cookie is not this server's (it is per launch): open "
                           "the URL the server printed again")
    raise Unauthorized("no credentials: send `Authorization: Bearer <secret>` (the secret "
                       "file's content) or open the URL the server printed (docs/http.md)")


def check_origin(method: str, headers: Mapping[str, str], how: str, keys: Keys,
                 port: int, form_token: str | None = None) -> None:
    """A request that may change something (any but GET and HEAD) must come from this
    server's own origin, and, when authenticated by cookie, carry ``X-Palace-CSRF`` or, a
    web app form (docs/ui.md), the same value as its hidden field ``form_token``.

    Raises:
        RequestRefused: a foreign ``Origin``, or a cookie request without the CSRF value.
    """
    if method in ("GET", "HEAD"):
        return
    origin = headers.get("origin")
    if origin is not None and origin.lower() not in {f"http://{h}" for h in allowed_hosts(port)}:
        raise RequestRefused("a request from another origin", details={"origin": origin[:100]})
    if how == "cookie" and not (same(headers.get(CSRF_HEADER), keys.csrf)
                                or same(form_token, keys.csrf)):
        raise RequestRefused("a cookie-authenticated request must carry the X-Palace-CSRF "
                             "header (GET /api/v1/session gives its value)")


def agent_of(headers: Mapping[str, str]) -> str:
    """The agent a request names: ``X-Palace-Agent``, else ``http:<User-Agent's product>``
    (``http:curl``), else ``http``. A claim, like ``PALACE_AGENT``: the palace's policy
    applies to it (docs/http.md)."""
    explicit = headers.get(AGENT_HEADER, "").strip()
    if explicit:
        return explicit
    product = headers.get("user-agent", "").split("/")[0].split(" ")[0]
    product = "".join(ch for ch in product if ch.isprintable())[:64]
    return f"http:{product}" if product else "http"


class SecretFile:
    """The secret written for API clients to read: ``<runtime>/http/serve-<port>.secret``,
    0600 in a 0700 directory owned by the user (made and checked like the daemon's runtime
    directory), removed when the server stops.

    Raises:
        UnsafePath: the directory is not private to the user (``prepare_runtime_dir``).
    """

    def __init__(self, runtime_dir: Path, port: int, secret: str) -> None:
        self.path = runtime_dir / SECRET_DIR / f"serve-{port}.secret"
        dir_fd, _ = prepare_runtime_dir(self.path.parent, private=True)
        try:
            with contextlib.suppress(FileNotFoundError):  # a crashed server's, same port
                os.unlink(self.path.name, dir_fd=dir_fd)
            fd = os.open(self.path.name,
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dir_fd)
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.write(secret + "\n")
        finally:
            os.close(dir_fd)

    def remove(self) -> None:
        """Delete the file (the secret dies with the server)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
