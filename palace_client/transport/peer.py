"""Who serves the socket: refusing a daemon that does not run as our uid.

Checked on every connection before a byte is sent (``verify_server``); on macOS, where launchd
(root) listens on a LaunchAgent's socket, the daemon behind it is checked once it has answered
the hello (``verify_launchd_daemon``).
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from palaced.wire.errors import UntrustedDaemon
from palaced.wire.protocol import socket_peer_uid


def verify_server(sock: socket.socket, path: Path) -> bool:
    """Refuse a daemon that does not run as our uid, before anything is sent to it.

    The server's uid comes from the kernel (the peer credentials of the connected socket);
    where the platform offers none, the owner of the socket file stands in, which is weaker
    but still stops a socket planted by another user. Returns True for the one exception, on
    macOS a listener of root's: launchd (root) listens on a LaunchAgent's socket and the kernel
    reports it, so the daemon behind it is checked once it has answered the hello
    (:func:`verify_launchd_daemon`).

    Raises:
        UntrustedDaemon: the server's uid is not ours.
    """
    me = os.geteuid()
    uid = socket_peer_uid(sock)
    if uid is None:
        uid = os.stat(path).st_uid
    if uid == 0 and me != 0 and sys.platform == "darwin":
        return True
    if uid != me:
        raise _untrusted(path, uid, me)
    return False


# macOS <sys/un.h>: the pid of the last process that used the peer's end of the socket.
_SOL_LOCAL, _LOCAL_PEERPID = 0, 0x002


def _darwin_peer_pid(sock: socket.socket) -> int | None:
    try:
        return int(sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID))
    except OSError:
        return None


def verify_launchd_daemon(sock: socket.socket, path: Path) -> None:
    """After the hello on a launchd socket: the process that answered must run as our uid.

    The kernel names it (``LOCAL_PEERPID``: the last process to use the server's end, the
    daemon that just sent the hello answer); it is ours when we may signal it, which an
    unprivileged process may only do to processes of its own uid. Only the hello was sent so
    far, which says nothing about the user's data.

    Raises:
        UntrustedDaemon: it runs as another uid, or cannot be identified.
    """
    me = os.geteuid()
    pid = _darwin_peer_pid(sock)
    if pid is not None and pid > 1:
        try:
            os.kill(pid, 0)
            return
        except OSError:
            pass
    raise _untrusted(path, None, me, sent="only the hello was sent to it")


def _untrusted(path: Path, uid: int | None, me: int,
               sent: str = "nothing was sent to it") -> UntrustedDaemon:
    who = f"uid {uid}" if uid is not None else "another uid"
    return UntrustedDaemon(
            f"refusing the palaced at {path}: it runs as {who}, not as you (uid {me}); "
            f"another local user may have planted it, and {sent}. Have "
            f"{path.parent} removed, or set PALACE_SOCKET to a path in a private directory "
            "you own",
            details={"socket": str(path), "server_uid": uid, "uid": me},
        )
