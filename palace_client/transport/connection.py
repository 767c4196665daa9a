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
import random
import socket
import time
from pathlib import Path
from typing import Any

from palace_client.transport.peer import verify_launchd_daemon, verify_server
from palaced import __version__
from palaced.wire.errors import (
    Busy,
    ClientError,
    DaemonUnreachable,
    DataDirMismatch,
    OutcomeUnknown,
    PalaceError,
    UnsupportedProtocol,
)
from palaced.wire.paths import Paths, resolve
from palaced.wire.private import check_runtime_dir
from palaced.wire.protocol import (
    DEFAULT_MAX_FRAME,
    HEADER_SIZE,
    HELLO_OP,
    PROTOCOL_VERSION,
    decode_response,
    encode_request,
    hello_args,
    parse_header,
)

# Connect + handshake: a healthy daemon answers the hello in milliseconds, even while it
# loads its model; one that accepted and stays silent is stuck, and saying so beats waiting.
# Twice the daemon's own handshake deadline, so a daemon slowed by a loaded machine (the
# model load holds the GIL in stretches) is not mistaken for a stuck one.
CONNECT_TIMEOUT_S = 10.0
# Auto-start: until the spawned daemon listens (it exits at once on a bad config).
START_TIMEOUT_S = 20.0
# An op's reply is awaited for the daemon's own deadline of it plus this: when the daemon
# gives up it answers TIMEOUT, which needs a moment to arrive.
REPLY_GRACE_S = 10.0
# The daemon's default request deadline, for a daemon too old to state it in its hello.
DEFAULT_REQUEST_TIMEOUT_S = 120.0
# The longest any wait of the client may be (a week, the daemon's own cap on its deadlines):
# a socket refuses a timeout past ~1e9 s (OverflowError), so an absurd setting, or a daemon
# stating an infinite deadline, would fail every call instead of waiting.
MAX_WAIT_S = 7 * 86_400.0


def env_seconds(name: str, raw: str | None, default: float | None) -> float | None:
    """The number of seconds ``raw`` (environment variable ``name``), else ``default`` when it
    is unset or empty.

    Raises:
        ClientError: the variable is set but is not a number of seconds > 0 and <= MAX_WAIT_S.
    """
    raw = (raw or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    return checked_seconds(name, value, raw)


def checked_seconds(name: str, value: float, shown: object = None) -> float:
    """``value``, a number of seconds set as ``name`` (a variable or an argument).

    Raises:
        ClientError: it is not > 0 and <= MAX_WAIT_S (NaN and infinities never are); the
            message names ``name``, the value (``shown``, else ``value``) and the bounds.
    """
    if not 0 < value <= MAX_WAIT_S:  # False for NaN too
        raise ClientError(f"{name} must be a number of seconds > 0 and <= {MAX_WAIT_S:.0f}, "
                          f"got {value if shown is None else shown!r}",
                          details={"variable": name})
    return value


class Backoff:
    """Jittered exponential pauses until a deadline, for retrying a daemon that said BUSY.

    Each pause is random in [delay/2, delay] (clients refused together do not come back
    together), the delay doubling from ``first`` up to ``cap``; none outlasts the deadline.
    """

    def __init__(self, deadline: float, first: float = 0.05, cap: float = 1.0) -> None:
        self.deadline = deadline
        self._delay = first
        self._cap = cap

    def pause(self) -> bool:
        """Sleep the next pause and return True; False (at once) when the deadline has
        passed, so the caller gives up."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(random.uniform(self._delay / 2, self._delay), left))
        self._delay = min(self._delay * 2, self._cap)
        return True


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        sock.settimeout(left)
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


class ReplyTimeout(ReplyLost):
    """No reply came within the client's deadline: the request may or may not have run (or
    may still be running), and the connection is out of step and must be closed."""

    def __init__(self, message: str, timeout_s: float) -> None:
        super().__init__(message)
        self.timeout_s = timeout_s


class Connection:
    """One handshaken connection to the daemon. Not thread-safe; one request at a time.

    Every exchange has a deadline: the hello ``hello_timeout`` seconds, an op the daemon's
    own deadline for it (its ``timeout_ms``, else ``request_timeout``, else the default the
    daemon stated in its hello) plus REPLY_GRACE_S.

    Raises (constructor):
        DaemonUnreachable: no hello answer within ``hello_timeout``.
        UnsupportedProtocol: the daemon speaks another protocol.
        Busy: the daemon has no connection slot free (it closes the connection).
        OSError: the connection broke during the handshake.
    """

    def __init__(self, sock: socket.socket, client_name: str, *,
                 hello_timeout: float = CONNECT_TIMEOUT_S,
                 request_timeout: float | None = None, peer: str = "palaced") -> None:
        self._sock = sock
        self._next_id = 1
        self.max_frame = DEFAULT_MAX_FRAME
        self.request_timeout = request_timeout
        try:
            try:
                self._send_request(HELLO_OP, None, hello_args(client_name, __version__), None,
                                   time.monotonic() + hello_timeout)
            except (BrokenPipeError, ConnectionResetError) as exc:
                # A daemon with no slot free answers BUSY and closes, perhaps before our hello
                # arrived: its answer is still ours to read, and says more than a broken pipe.
                try:
                    self._read_response(time.monotonic() + hello_timeout)
                except (OSError, ConnectionError):
                    pass
                raise exc from None
            hello = self._read_response(time.monotonic() + hello_timeout)
        except TimeoutError:
            raise DaemonUnreachable(
                f"{peer} accepted the connection but did not answer the handshake within "
                f"{hello_timeout:g}s: it is stuck or overloaded (see its log; `palace daemon "
                "restart` replaces it; PALACE_CONNECT_TIMEOUT waits longer)",
                details={"timeout_s": hello_timeout}) from None
        if hello.get("protocol") != PROTOCOL_VERSION:
            raise UnsupportedProtocol(f"daemon speaks protocol {hello.get('protocol')}")
        self.server_info: dict[str, Any] = hello
        self.ops: frozenset[str] = frozenset(hello.get("ops", ()))
        # Optional envelope keys the daemon accepts (one that predates a key refuses it).
        self.request_keys: frozenset[str] = frozenset(hello.get("request_keys") or ())
        self.max_frame = int(hello.get("max_frame", DEFAULT_MAX_FRAME))
        self._daemon_timeout = float(hello.get("request_timeout_s") or DEFAULT_REQUEST_TIMEOUT_S)
        self._daemon_max_timeout = float(hello.get("max_request_timeout_s") or float("inf"))

    @classmethod
    def open(cls, path: Path, client_name: str = "palace-client",
             timeout: float = CONNECT_TIMEOUT_S, request_timeout: float | None = None
             ) -> Connection:
        """Connect to the socket at ``path``, verify who serves it, and handshake, all
        within ``timeout`` seconds.

        Raises:
            OSError: nothing is listening there.
            UntrustedDaemon: the server runs as another uid (root included, unless we are
                root); the connection is closed before a byte is sent.
            DaemonUnreachable: the connect or the handshake took longer than ``timeout``.
            Busy: the daemon has no connection slot free.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            try:
                sock.connect(str(path))
            except TimeoutError:
                raise DaemonUnreachable(
                    f"palaced at {path} did not accept the connection within {timeout:g}s",
                    details={"socket": str(path), "timeout_s": timeout}) from None
            launchd = verify_server(sock, path)
            conn = cls(sock, client_name, hello_timeout=timeout,
                       request_timeout=request_timeout, peer=f"palaced at {path}")
            if launchd:
                verify_launchd_daemon(sock, path)
            return conn
        except BaseException:
            sock.close()
            raise

    def deadline_s(self, timeout_ms: int | None) -> float:
        """How long the client waits for the reply to a request sent with ``timeout_ms``."""
        if timeout_ms is None:
            return min(self._daemon_timeout, MAX_WAIT_S) + REPLY_GRACE_S
        return min(timeout_ms / 1000, self._daemon_max_timeout, MAX_WAIT_S) + REPLY_GRACE_S

    def _send_request(self, op: str, palace: str | None, args: dict[str, Any],
                      timeout_ms: int | None, deadline: float, agent: str | None = None
                      ) -> None:
        req_id = self._next_id
        self._next_id += 1
        data = encode_request(req_id, op, palace, args, timeout_ms, self.max_frame, agent)
        self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
        self._sock.sendall(data)

    def _read_response(self, deadline: float) -> dict[str, Any]:
        """The next response's result.

        Raises:
            PalaceError: an error envelope (typed by its code), or a malformed frame.
            TimeoutError: no whole response by ``deadline``.
            OSError: the connection broke.
        """
        header = _recv_exactly(self._sock, HEADER_SIZE, deadline)
        length = parse_header(header, max(self.max_frame, 1 << 20) * 4)
        return decode_response(_recv_exactly(self._sock, length, deadline))

    def call(self, op: str, palace: str | None = None, args: dict[str, Any] | None = None,
             timeout_ms: int | None = None, agent: str | None = None) -> dict[str, Any]:
        """Send one request and return its result map, within its deadline (``deadline_s``).

        ``agent`` (the caller's identity) goes in the envelope when the daemon accepts it.

        Without ``timeout_ms``, the connection's ``request_timeout`` (if set) is sent as the
        request's ``timeout_ms``, so that daemon and client give up together.

        Raises:
            PalaceError: the daemon answered with an error envelope (typed by code), or the
                request cannot be framed (FrameTooLarge).
            RequestNotSent: the connection broke (or stalled) before the whole request was
                written; the daemon cannot have applied it.
            ReplyTimeout: no reply within the deadline; the request may or may not have run.
            ReplyLost: the connection broke after the request was written; the daemon may
                or may not have applied it.
        """
        if timeout_ms is None and self.request_timeout is not None:
            timeout_ms = max(int(self.request_timeout * 1000), 1)
        wait_s = self.deadline_s(timeout_ms)
        deadline = time.monotonic() + wait_s
        try:
            self._send_request(op, palace, args or {}, timeout_ms, deadline,
                               agent if "agent" in self.request_keys else None)
        except OSError as exc:
            # sendall raising means some bytes never left: the daemon never read a whole
            # frame, so it cannot have run the request.
            raise RequestNotSent(f"could not send {op} to palaced: {exc}") from exc
        try:
            return self._read_response(deadline)
        except TimeoutError:
            raise ReplyTimeout(f"palaced did not answer {op} within {wait_s:g}s", wait_s
                               ) from None
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


# What connecting to a socket nobody serves (any more) raises.
_ABSENT = (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError)


def connect(paths: Paths | None = None, *, autostart: bool = True,
            client_name: str = "palace-client", start_timeout: float = START_TIMEOUT_S,
            check_store: bool = False, connect_timeout: float = CONNECT_TIMEOUT_S,
            request_timeout: float | None = None) -> Connection:
    """Connect to the daemon, starting it first if it is not running.

    With ``check_store`` (the socket was not chosen explicitly), the daemon must serve the
    data directory ``paths`` names (see :func:`same_store`). ``connect_timeout`` bounds the
    connect and handshake, ``start_timeout`` an auto-start, ``request_timeout`` (None: the
    daemon's default) every request of the connection (see ``Connection``).

    Raises:
        DaemonStartFailed: the daemon it started exited before answering (its exit status
            and the end of its stderr are in the message), typically within a second.
        DaemonUnreachable: it is not running and could not be started in time, or it does
            not answer the handshake within ``connect_timeout``.
        UntrustedDaemon: the socket is served by a process of another uid.
        UnsafePath: it is not running and its runtime directory is a symlink or another
            uid's (the daemon would refuse it; we say why at once rather than time out).
        DataDirMismatch: with ``check_store``, the daemon serves another data directory.
        Busy: the daemon still had no connection slot free after ``connect_timeout`` of
            retries (jittered exponential backoff).
    """
    paths = paths or resolve()

    def attempt() -> Connection:
        # BUSY here (every slot and the reserve taken) came before our hello was read: it is
        # always safe to connect again, and slots free up as the daemon's handshake deadline
        # closes silent connections.
        backoff = Backoff(time.monotonic() + connect_timeout)
        while True:
            try:
                conn = Connection.open(paths.socket, client_name, connect_timeout,
                                       request_timeout)
            except Busy:
                if not backoff.pause():
                    raise
                continue
            return same_store(conn, paths) if check_store else conn

    try:
        return attempt()
    except _ABSENT:
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
    # Imported here: starting a daemon needs subprocess and more, which a connection to a
    # running daemon (the capture hook's, with its 200 ms budget) does not.
    from palace_client.transport.autostart import start_and_wait

    return start_and_wait(paths, start_timeout, attempt, _ABSENT)


def outcome_unknown(op: str, cause: Exception | None) -> OutcomeUnknown:
    """The error of a request that was sent and whose answer never came."""
    return OutcomeUnknown(
        f"the connection to palaced broke after {op} was sent ({cause}); it may or may not "
        "have been applied: check the palace before repeating it",
        details={"op": op})
