"""A small filesystem of its own for one directory, seen only by one daemon: for full-disk tests.

``PrivateTmpfs`` starts a holder process in a new mount namespace (``unshare -m``, private
propagation) in which a size-limited tmpfs is mounted over a directory, with that directory's
files copied in. The daemon under test joins that namespace (``nsenter``); nothing outside it
sees the mount, and the mount goes away with the holder, whatever happens to the test. The
test reaches the files through ``/proc/<holder>/root``, which resolves paths in the holder's
namespace, and so can fill the filesystem and free it. SQLite must not open a database
through that path: it resolves symlinks in database paths by text (``/proc/<pid>/root`` reads
as ``/``) and would open the file hidden *under* the mount. ``copy_out`` copies the files
out (the kernel walks ``/proc/<pid>/root`` properly) to check them after the daemon stopped.

Needs root (or CAP_SYS_ADMIN) and util-linux's ``unshare``/``nsenter``; ``why_not`` says
whether that works here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from tests.conftest import DaemonProc

HOLD = ('tmp=$(mktemp -d) && cp -a "$1/." "$tmp" && mount -t tmpfs -o "size=$2,mode=0700" '
        'tmpfs "$1" && cp -a "$tmp/." "$1" && rm -rf "$tmp" && echo ready && exec sleep 3600')


def why_not() -> str | None:
    """None if a private tmpfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        return "unshare/nsenter not installed"
    probe = Path(tempfile.mkdtemp(prefix="pal-mnt-", dir="/tmp"))
    try:
        res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              'mount -t tmpfs -o size=64k tmpfs "$1"', "sh", str(probe)],
                             capture_output=True, text=True, timeout=30)
        return None if res.returncode == 0 else f"tmpfs mount refused: {res.stderr.strip()}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)


class PrivateTmpfs:
    """A tmpfs of ``size`` over ``directory`` in a mount namespace of its own."""

    def __init__(self, directory: Path, size: str) -> None:
        self.directory = directory
        self.holder = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", HOLD, "sh",
             str(directory), size], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            self.close()
            err = self.holder.stderr.read() if self.holder.stderr else ""
            raise RuntimeError(f"tmpfs not mounted: {err}")

    def view(self, path: Path | None = None) -> Path:
        """``path`` (default: the mounted directory) as the holder's namespace sees it."""
        target = path or self.directory
        return Path(f"/proc/{self.holder.pid}/root") / str(target).lstrip("/")

    def copy_out(self, dest: Path) -> Path:
        """Copy the mounted directory's files to ``dest`` (made); returns ``dest``."""
        shutil.copytree(self.view(), dest)
        return dest

    def start_daemon(self, d: DaemonProc) -> None:
        """Start ``d``'s palaced inside the namespace (so it sees the tmpfs)."""
        d.proc = subprocess.Popen(
            ["nsenter", "-t", str(self.holder.pid), "-m", "--", sys.executable, "-m",
             "palaced", "run", "--quiet"], env=d.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        d.wait_ready()

    def fill(self) -> Path:
        """Fill the filesystem to the last byte; returns the filler file (unlink to free)."""
        filler = self.view() / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for chunk in (1 << 16, 512, 1):  # unbuffered: nothing left to fail at close
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError:
                    pass
        finally:
            os.close(fd)
        assert shutil.disk_usage(self.view()).free < 4096
        return filler

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
        self.holder.wait()

    def __enter__(self) -> PrivateTmpfs:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
