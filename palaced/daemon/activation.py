"""Socket activation: the listening socket a service manager (systemd, launchd) hands over.

With ``palaced.socket`` (systemd) or a LaunchAgent's ``Sockets`` entry (launchd) the service
manager owns the socket path: it binds and listens before palaced runs, starts palaced on the
first connection, and keeps the socket (and the connections queued on it) across restarts.
palaced then serves that socket instead of binding its own, and never unlinks the path.

* systemd (``sd_listen_fds(3)``): ``LISTEN_PID`` is our pid, ``LISTEN_FDS`` the number of
  descriptors passed from fd 3 on, ``LISTEN_FDNAMES`` their colon-separated names
  (``FileDescriptorName=palaced`` in the unit). The variables are removed from the environment
  once read, so that no child process takes the descriptors for its own.
* launchd: ``launch_activate_socket("palaced")`` from libSystem, through ctypes (macOS only).

Whatever the manager passes must be an AF_UNIX stream socket in the listening state, bound to
the very path the clients compute (``palaced.wire.paths``); anything else stops the daemon with an
:class:`ActivationError` naming the problem, rather than leaving clients to wait on a socket
nobody serves.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import sys
from collections.abc import MutableMapping
from pathlib import Path

from palaced.wire.paths import ACTIVATION_NAME

log = logging.getLogger("palaced")

SD_LISTEN_FDS_START = 3
SOCKET_NAME = ACTIVATION_NAME


class ActivationError(Exception):
    """The service manager handed over a socket palaced cannot serve (wrong kind or path)."""


def inherited_listener(expected: Path,
                       environ: MutableMapping[str, str] | None = None) -> socket.socket | None:
    """The listening socket systemd or launchd passed to this process, checked; else None.

    ``expected`` is the socket path the clients compute. ``environ`` (default
    ``os.environ``) loses the ``LISTEN_*`` variables.

    Raises:
        ActivationError: a socket was passed but is not an AF_UNIX stream socket listening on
            ``expected`` (or the ``LISTEN_*`` variables are malformed).
    """
    env = os.environ if environ is None else environ
    sock = systemd_listener(env)
    if sock is None and sys.platform == "darwin":
        sock = launchd_listener()
    if sock is None:
        return None
    try:
        check_listener(sock, expected)
    except BaseException:
        sock.close()
        raise
    return sock


def systemd_listener(environ: MutableMapping[str, str]) -> socket.socket | None:
    """The socket passed by systemd (``LISTEN_FDS``), or None when none was passed to us.

    The ``LISTEN_*`` variables are removed from ``environ`` in every case. Descriptors passed
    beside ours are closed.

    Raises:
        ActivationError: malformed variables, several sockets and none named ``palaced``,
            or the descriptor is not a socket.
    """
    pid = environ.pop("LISTEN_PID", None)
    count = environ.pop("LISTEN_FDS", None)
    names = environ.pop("LISTEN_FDNAMES", None)
    if pid is None or count is None:
        return None
    try:
        listen_pid, n = int(pid), int(count)
    except ValueError:
        raise ActivationError(f"malformed LISTEN_PID={pid!r} / LISTEN_FDS={count!r}") from None
    if listen_pid != os.getpid():
        # Meant for our parent (e.g. a shell run by systemd): not ours to take.
        log.warning("ignoring LISTEN_FDS meant for pid %d (we are %d)", listen_pid, os.getpid())
        return None
    if n <= 0:
        return None
    labels = names.split(":") if names else []
    if n == 1:
        index = 0
    elif SOCKET_NAME in labels:
        index = labels.index(SOCKET_NAME)
    else:
        raise ActivationError(f"systemd passed {n} sockets ({names or 'unnamed'}) and none is "
                              f"named {SOCKET_NAME!r}: set FileDescriptorName={SOCKET_NAME}")
    fds = range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + n)
    ours = SD_LISTEN_FDS_START + index
    for fd in fds:
        if fd != ours:
            with contextlib.suppress(OSError):
                os.close(fd)
    return _adopt(ours, f"fd {ours} passed by systemd")


def _adopt(fd: int, what: str) -> socket.socket:
    """A socket object owning ``fd`` (close-on-exec).

    Raises:
        ActivationError: ``fd`` is not open or not a socket.
    """
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise ActivationError(f"{what} is not open: {exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        os.close(fd)
        raise ActivationError(f"{what} is not a socket")
    os.set_inheritable(fd, False)
    return socket.socket(fileno=fd)


def check_listener(sock: socket.socket, expected: Path) -> None:
    """Refuse a passed socket that is not an AF_UNIX stream socket listening on ``expected``.

    Raises:
        ActivationError: it is not.
    """
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ActivationError(f"the passed socket is {sock.family.name}/{sock.type.name}, not "
                              "an AF_UNIX stream socket (ListenStream= with a path)")
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except OSError:
        listening = 1  # the platform cannot say; accept() would fail loudly later
    if not listening:
        raise ActivationError("the passed socket is not listening (use Accept=no)")
    bound = sock.getsockname()
    if not isinstance(bound, str) or not bound:
        raise ActivationError(f"the passed socket is bound to {bound!r}, not to a path")
    if not same_path(Path(bound), expected):
        raise ActivationError(
            f"the passed socket listens on {bound}, but clients connect to {expected}: make "
            f"the unit's ListenStream= (or the plist's SockPathName) {expected}, or give the "
            "daemon and every client the same PALACE_HOME / PALACE_SOCKET")


def same_path(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same file, symlinked parents resolved (macOS /tmp)."""
    return os.path.realpath(a) == os.path.realpath(b)


def socket_in_use(path: Path) -> bool:
    """Whether a process listens on the Unix socket ``path`` (a non-blocking connect is
    accepted, or finds the backlog full); False when the connection is refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(str(path))
        except BlockingIOError:
            return True  # listening, its backlog full
        except OSError:
            return False
    return True


def launchd_listener(name: str = SOCKET_NAME) -> socket.socket | None:
    """The socket launchd made for the plist's ``Sockets`` entry ``name``; None when we were
    not started by launchd or it has no such entry. macOS only (libSystem via ctypes).

    Raises:
        ActivationError: launchd reported another error, or passed nothing usable.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    activate = getattr(libc, "launch_activate_socket", None)
    if activate is None:
        return None
    c_int_p = ctypes.POINTER(ctypes.c_int)
    activate.argtypes = [ctypes.c_char_p, ctypes.POINTER(c_int_p),
                         ctypes.POINTER(ctypes.c_size_t)]
    activate.restype = ctypes.c_int
    fds = c_int_p()
    count = ctypes.c_size_t(0)
    err = activate(name.encode(), ctypes.byref(fds), ctypes.byref(count))
    if err in (errno.ESRCH, errno.ENOENT):
        return None  # not managed by launchd / no such Sockets entry
    if err:
        raise ActivationError(f"launch_activate_socket({name!r}): {os.strerror(err)}")
    try:
        got = [int(fds[i]) for i in range(count.value)]
    finally:
        libc.free(fds)
    if not got:
        raise ActivationError(f"launchd passed no descriptor for Sockets entry {name!r}")
    for extra in got[1:]:
        with contextlib.suppress(OSError):
            os.close(extra)
    return _adopt(got[0], f"the {name!r} socket passed by launchd")
