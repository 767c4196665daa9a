"""Telling systemd how the daemon is doing: ``sd_notify(3)`` without libsystemd.

Under ``Type=notify`` systemd sets ``NOTIFY_SOCKET`` (a datagram socket path, or ``@name`` for
a Linux abstract socket) and waits for ``READY=1`` before it counts the service as started;
``STOPPING=1`` says a shutdown has begun, ``STATUS=...`` is shown by ``systemctl status``, and
with ``WatchdogSec=`` (``WATCHDOG_USEC``) ``WATCHDOG=1`` must arrive at least that often or
systemd restarts the daemon. The variables are removed from the environment once read, so that
no child process speaks for the daemon. Without ``NOTIFY_SOCKET`` every call does nothing.

Sending never raises and never blocks: a notification that cannot be delivered is logged and
dropped (the daemon serves either way).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

log = logging.getLogger("palaced")


def notify_address(value: str | None) -> str | None:
    """The ``sendto`` address of a ``NOTIFY_SOCKET`` value; None for none or an unsupported
    kind (``@name`` is the abstract socket ``\\0name``; only paths and those are supported)."""
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


class Notifier:
    """Sends state lines to the service manager's notification socket (if any)."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """A notifier for what systemd passed; the variables are removed from ``environ``
        (default ``os.environ``). A malformed or foreign watchdog setting is ignored."""
        env = os.environ if environ is None else environ
        raw = env.pop("NOTIFY_SOCKET", None)
        usec = env.pop("WATCHDOG_USEC", None)
        pid = env.pop("WATCHDOG_PID", None)
        address = notify_address(raw)
        if raw and address is None:
            log.warning("ignoring NOTIFY_SOCKET=%r: only paths and @abstract names", raw)
        watchdog: int | None = None
        if usec and (pid is None or pid == str(os.getpid())):
            try:
                watchdog = int(usec)
            except ValueError:
                log.warning("ignoring WATCHDOG_USEC=%r", usec)
            if watchdog is not None and watchdog <= 0:
                watchdog = None
        return cls(address, watchdog if address else None)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send ``WATCHDOG=1``: half the deadline, as sd_watchdog_enabled(3)
        advises; None without a watchdog."""
        return self.watchdog_usec / 2e6 if self.watchdog_usec else None

    def send(self, *lines: str) -> bool:
        """Send ``lines`` as one notification; True when it was delivered."""
        if self.address is None or not lines:
            return False
        message = "\n".join(line.replace("\n", " ") for line in lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                sock.sendto(message, self.address)
        except OSError as exc:
            log.warning("could not notify the service manager (%s): %s", lines[0], exc)
            return False
        return True

    def ready(self, status: str) -> bool:
        """``READY=1`` with a status line and our pid (the daemon serves from now on)."""
        return self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, status: str) -> bool:
        """A new ``STATUS=`` line for ``systemctl status``."""
        return self.send(f"STATUS={status}")

    def stopping(self, status: str = "shutting down") -> bool:
        """``STOPPING=1``: a shutdown has begun."""
        return self.send("STOPPING=1", f"STATUS={status}")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the event loop is alive."""
        return self.send("WATCHDOG=1")
