"""A synchronous connection to palaced over its Unix socket.

Synchronous on purpose: one-shot CLI calls and the sequential MCP bridge need no event loop,
and it keeps cold start small. Imports only the daemon's wire leaf modules.

Before sending anything (the hello included) a connection checks, through the kernel's peer
credentials (``SO_PEERCRED``/``LOCAL_PEERCRED``), that the process serving the socket runs as
our own uid, as ssh-agent and gpg-agent clients do: another local user who plants a socket at
our path gets nothing from us (``UntrustedDaemon``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from palaced import __version__
from palaced.errors import (
    DaemonUnreachable,
    DataDirMismatch,
    PalaceError,
    UnsupportedProtocol,
    UntrustedDaemon,
)
from palaced.paths import Paths, resolve
from palaced.private import check_runtime_dir, make_private_dirs
from palaced.protocol import (
    DEFAULT_MAX_FRAME,
    HEADER_SIZE,
    HELLO_OP,
    PROTOCOL_VERSION,
    decode_response,
    encode_request,
    hello_args,
    parse_header,
    socket_peer_uid,
)

START_TIMEOUT_S = 20.0


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("daemon closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class RequestNotSent(ConnectionError):
    """The connection broke before a request was written whole: it was not applied."""


class ReplyLost(ConnectionError):
    """The connection broke after a request was written: it may or may not have run."""


class Connection:
    """One handshaken connection to the daemon. Not thread-safe; one request at a time."""

    def __init__(self, sock: socket.socket, client_name: str) -> None:
        self._sock = sock
        self._next_id = 1
        self.max_frame = DEFAULT_MAX_FRAME
        hello = self._roundtrip(HELLO_OP, None, hello_args(client_name, __version__))
        if hello.get("protocol") != PROTOCOL_VERSION:
            raise UnsupportedProtocol(f"daemon speaks protocol {hello.get('protocol')}")
        self.server_info: dict[str, Any] = hello
        self.ops: frozenset[str] = frozenset(hello.get("ops", ()))
        self.max_frame = int(hello.get("max_frame", DEFAULT_MAX_FRAME))

    @classmethod
    def open(cls, path: Path, client_name: str = "palace-client", timeout: float | None = None
             ) -> Connection:
        """Connect to the socket at ``path``, verify who serves it, and handshake.

        Raises:
            OSError: nothing is listening there.
            UntrustedDaemon: the server runs as another uid (root included, unless we are
                root); the connection is closed before a byte is sent.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(str(path))
            verify_server(sock, path)
            return cls(sock, client_name)
        except BaseException:
            sock.close()
            raise

    def _roundtrip(self, op: str, palace: str | None, args: dict[str, Any],
                   timeout_ms: int | None = None) -> dict[str, Any]:
        self._send_request(op, palace, args, timeout_ms)
        return self._read_response()

    def _send_request(self, op: str, palace: str | None, args: dict[str, Any],
                      timeout_ms: int | None) -> None:
        req_id = self._next_id
        self._next_id += 1
        self._sock.sendall(encode_request(req_id, op, palace, args, timeout_ms, self.max_frame))

    def _read_response(self) -> dict[str, Any]:
        """The next response's result.

        Raises:
            PalaceError: an error envelope (typed by its code), or a malformed frame.
            OSError: the connection broke.
        """
        length = parse_header(_recv_exactly(self._sock, HEADER_SIZE), max(self.max_frame, 1 << 20)
                              * 4)
        return decode_response(_recv_exactly(self._sock, length))

    def call(self, op: str, palace: str | None = None, args: dict[str, Any] | None = None,
             timeout_ms: int | None = None) -> dict[str, Any]:
        """Send one request and return its result map.

        Raises:
            PalaceError: the daemon answered with an error envelope (typed by code), or the
                request cannot be framed (FrameTooLarge).
            RequestNotSent: the connection broke before the whole request was written; the
                daemon cannot have applied it.
            ReplyLost: the connection broke after the request was written; the daemon may
                or may not have applied it.
        """
        try:
            self._send_request(op, palace, args or {}, timeout_ms)
        except OSError as exc:
            # sendall raising means some bytes never left: the daemon never read a whole
            # frame, so it cannot have run the request.
            raise RequestNotSent(f"could not send {op} to palaced: {exc}") from exc
        try:
            return self._read_response()
        except OSError as exc:
            raise ReplyLost(f"lost the connection to palaced waiting for {op}: {exc}") from exc

    def set_timeout(self, seconds: float | None) -> None:
        """Bound every later socket wait by ``seconds`` (None: wait as long as it takes)."""
        self._sock.settimeout(seconds)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def verify_server(sock: socket.socket, path: Path) -> None:
    """Refuse a daemon that does not run as our uid, before anything is sent to it.

    The server's uid comes from the kernel (the peer credentials of the connected socket);
    where the platform offers none, the owner of the socket file stands in, which is weaker
    but still stops a socket planted by another user.

    Raises:
        UntrustedDaemon: the server's uid is not ours.
    """
    me = os.geteuid()
    uid = socket_peer_uid(sock)
    if uid is None:
        uid = os.stat(path).st_uid
    if uid != me:
        raise UntrustedDaemon(
            f"refusing the palaced at {path}: it runs as uid {uid}, not as you (uid {me}); "
            "another local user may have planted it, and nothing was sent to it. Have "
            f"{path.parent} removed, or set PALACE_SOCKET to a path in a private directory "
            "you own",
            details={"socket": str(path), "server_uid": uid, "uid": me},
        )


# Runs in a throwaway interpreter (-S: stdlib only, fast): starts the daemon in a new session
# and exits at once, so the daemon is orphaned and reparented to init. Were it our own child,
# it would linger as our zombie after it exits, for as long as this client process lives.
_LAUNCHER = (
    "import subprocess, sys\n"
    "subprocess.Popen(sys.argv[1:], start_new_session=True, close_fds=True)\n"
)
_LAUNCH_TIMEOUT_S = 10.0


def spawn_daemon(paths: Paths) -> None:
    """Start palaced fully detached from this process; the daemon's lock arbitrates races.

    The daemon is started through a launcher that exits at once (reaped here), so it is not
    a child of this process. Its stdout/stderr are appended to the daemon log, so a crash
    before logging is set up still leaves a trace where the startup error points.

    Raises:
        DaemonUnreachable: the launcher could not be run or failed.
    """
    make_private_dirs(paths.state_dir)
    env = dict(os.environ)
    # The daemon runs from "/": make path settings absolute so it finds what we meant.
    for key in ("PALACE_HOME", "PALACE_SOCKET", "PALACE_CONFIG", "PALACE_EMBED_MODEL_PATH",
                "PALACE_TIKTOKEN_FILE"):
        if env.get(key):
            env[key] = os.path.abspath(os.path.expanduser(env[key]))
    daemon_cmd = [sys.executable, "-m", "palaced", "run", "--quiet"]
    log: IO[bytes] | int
    try:
        # 0600 like everything of the daemon's (it would tighten a 0644 log and say so);
        # no symlink is followed. Closed below, once the launcher is done.
        fd = os.open(paths.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                     0o600)
        log = os.fdopen(fd, "ab")
    except OSError:
        log = subprocess.DEVNULL  # start it anyway; only its early stderr is lost
    try:
        launcher = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCHER, *daemon_cmd],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True,
            env=env, cwd="/", timeout=_LAUNCH_TIMEOUT_S, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise DaemonUnreachable(f"cannot start palaced: {exc}",
                                details={"log": str(paths.log_file)}) from None
    finally:
        if not isinstance(log, int):
            log.close()
    if launcher.returncode != 0:
        raise DaemonUnreachable(
            f"cannot start palaced: its launcher exited with {launcher.returncode}; see the "
            f"log at {paths.log_file}", details={"log": str(paths.log_file)})


def same_store(conn: Connection, paths: Paths) -> Connection:
    """``conn``, if its daemon serves ``paths.data_dir``; else close it and raise.

    The default socket does not depend on ``HOME``, but the data directory does: a client run
    with another ``HOME`` (or ``PALACE_HOME``) would otherwise silently read and write the
    store of whichever daemon holds the socket. Daemons too old to say are trusted.

    Raises:
        DataDirMismatch: the daemon serves another data directory.
    """
    served = conn.server_info.get("server", {}).get("data_dir")
    if served is None or os.path.realpath(served) == os.path.realpath(paths.data_dir):
        return conn
    conn.close()
    raise DataDirMismatch(
        f"the palaced on {paths.socket} serves the data directory {served}, but this client "
        f"resolved {paths.data_dir} (a different HOME or PALACE_HOME?); set PALACE_HOME to "
        "the one you mean, or PALACE_SOCKET to use that daemon anyway",
        details={"socket": str(paths.socket), "daemon_data_dir": served,
                 "client_data_dir": str(paths.data_dir)},
    )


def connect(paths: Paths | None = None, *, autostart: bool = True,
            client_name: str = "palace-client",
            start_timeout: float = START_TIMEOUT_S, check_store: bool = False) -> Connection:
    """Connect to the daemon, starting it first if it is not running.

    With ``check_store`` (the socket was not chosen explicitly), the daemon must serve the
    data directory ``paths`` names (see :func:`same_store`).

    Raises:
        DaemonUnreachable: it is not running and could not be started in time.
        UntrustedDaemon: the socket is served by a process of another uid.
        UnsafePath: it is not running and its runtime directory is a symlink or another
            uid's (the daemon would refuse it; we say why at once rather than time out).
        DataDirMismatch: with ``check_store``, the daemon serves another data directory.
    """
    paths = paths or resolve()
    try:
        conn = Connection.open(paths.socket, client_name)
        return same_store(conn, paths) if check_store else conn
    except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        if not autostart:
            raise DaemonUnreachable(
                f"palaced is not running (socket {paths.socket}); start it with "
                "`palace daemon start` or `palaced run`",
                details={"socket": str(paths.socket)},
            ) from None
    except PalaceError:
        raise
    except OSError as exc:
        raise DaemonUnreachable(f"cannot reach palaced at {paths.socket}: {exc}") from None
    check_runtime_dir(paths.runtime_dir)
    spawn_daemon(paths)
    deadline = time.monotonic() + start_timeout
    delay = 0.01
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            conn = Connection.open(paths.socket, client_name)
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError,
                BrokenPipeError) as exc:
            last = exc
        else:
            return same_store(conn, paths) if check_store else conn
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
    raise DaemonUnreachable(
        f"started palaced but it did not answer on {paths.socket} within {start_timeout:.0f}s "
        f"({last}); see the log at {paths.log_file}",
        details={"socket": str(paths.socket), "log": str(paths.log_file)},
    )
