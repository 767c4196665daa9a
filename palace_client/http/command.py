"""The ``palace serve`` and ``palace ui`` commands (typer command functions, registered by
``palace_client.cli``): bind loopback, write the per-launch secret, print the URL once and run
uvicorn; ``palace ui`` serves the web app too and opens the browser on the login URL."""

from __future__ import annotations

import json
import signal
import socket
import sys
from pathlib import Path

import typer

DEFAULT_PORT = 8765


class _Stopped(Exception):
    """SIGINT or SIGTERM arrived (after uvicorn's own graceful stop)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def serve_command(
    port: int = typer.Option(DEFAULT_PORT, "--port", min=0, max=65535,
                             help="TCP port on loopback (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Loopback address to listen on (127.0.0.1, ::1 or localhost); "
                                  "any other is refused: tunnel with ssh -L (docs/http.md)."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print one JSON document on stdout when listening."),
) -> None:
    """Serve the ops as a local HTTP API (docs/http.md) until Ctrl-C."""
    raise typer.Exit(run(host, port, as_json))


def ui_command(
    port: int = typer.Option(DEFAULT_PORT, "--port", min=0, max=65535,
                             help="TCP port on loopback (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Loopback address to listen on (as `palace serve`)."),
    no_browser: bool = typer.Option(False, "--no-browser",
                                    help="Only print the login URL; open no browser."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print one JSON document on stdout when listening."),
) -> None:
    """Open the local web app (docs/ui.md): `palace serve` plus pages, in your browser."""
    raise typer.Exit(run(host, port, as_json, ui=True, browser=not no_browser))


def run(host: str, port: int, as_json: bool, ui: bool = False, browser: bool = False) -> int:
    """Listen on ``host``:``port`` until stopped (SIGINT/SIGTERM); returns the exit code.
    With ``ui``, the web app's pages are served too; with ``browser``, the person's browser
    is opened on the login URL (as Jupyter does).

    Raises:
        UsageError: ``host`` is not loopback, or ``port`` cannot be bound.
        PalaceError: the daemon cannot be reached (it is started if it is not running).
    """
    # Imported here so that the other commands load neither Starlette nor uvicorn (cold start).
    import uvicorn

    from palace_client.api.client import Client
    from palace_client.http.app import ClientPool, build_app
    from palace_client.http.security import Keys, SecretFile, loopback_host
    from palaced.wire.errors import UsageError

    address = loopback_host(host)
    probe = Client(client_name="palace-serve")
    probe.server_info  # noqa: B018 (reach, or start, the daemon before listening)
    # IPPROTO_TCP stated: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every response waited ~40 ms (Nagle against the client's delayed ACK).
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET,
                         socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        probe.close()
        raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror} (--port 0 picks "
                         "a free port)", details={"arg": "port"}) from None
    sock.listen(128)
    port = sock.getsockname()[1]
    # Set before the secret file exists: uvicorn stops on SIGINT/SIGTERM, then raises the
    # signal again with the handlers it found, these, so the file is removed and we exit 0.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop)
    keys = Keys()
    pool = ClientPool(lambda: Client(client_name="palace-serve"), idle=[probe])
    secret_file = SecretFile(probe.paths.runtime_dir, port, keys.secret)
    try:
        url = _announce(address, port, keys.secret, secret_file.path, as_json)
        if browser:
            # The socket already listens: the browser's first request waits in its backlog.
            import webbrowser

            webbrowser.open(url)
        # No access log: the login URL carries the secret; no proxy headers: none forwards.
        config = uvicorn.Config(build_app(keys, port, pool, ui=ui), log_level="warning",
                                access_log=False, server_header=False, proxy_headers=False,
                                lifespan="off", timeout_graceful_shutdown=5)
        uvicorn.Server(config).run(sockets=[sock])
    except _Stopped:
        pass
    finally:
        secret_file.remove()
        pool.close()
        sock.close()
    return 0


def _announce(address: str, port: int, secret: str, secret_file: Path, as_json: bool) -> str:
    """Print, once, the URL a person opens (it carries the secret) and where clients find it;
    returns that URL."""
    shown = f"[{address}]" if ":" in address else address
    base = f"http://{shown}:{port}"
    url = f"{base}/login?token={secret}"
    if as_json:
        sys.stdout.write(json.dumps({"url": url, "base": base,
                                     "port": port, "secret_file": str(secret_file),
                                     "openapi": f"{base}/api/v1/openapi.json",
                                     "mcp": f"{base}/mcp"}) + "\n")
    else:
        sys.stdout.write(f"palace serve: open {url}\n"
                         f"  API clients: Authorization: Bearer <the content of {secret_file}>\n"
                         f"  OpenAPI: {base}/api/v1/openapi.json  (Ctrl-C stops; docs/http.md)\n"
                         f"  MCP (Streamable HTTP, the same secret): {base}/mcp?palace=NAME\n")
    sys.stdout.flush()
    return url
