"""The service files: systemd user units (``palaced.socket``, ``palaced.service``) and the
launchd LaunchAgent (``dev.palace.palaced.plist``), rendered from one description.

``palace service install`` renders them from the paths this client resolves (so the socket
the service manager listens on is the one every client connects to); ``docs/gen.py`` renders
the copies in ``systemd/`` and ``launchd/`` from :func:`default_spec`, with systemd specifiers
and placeholders instead of one user's paths.
"""

from __future__ import annotations

import os
import plistlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from palaced.wire.paths import ACTIVATION_NAME, Paths

SOCKET_UNIT = "palaced.socket"
SERVICE_UNIT = "palaced.service"
LAUNCHD_LABEL = "dev.palace.palaced"
FD_NAME = ACTIVATION_NAME
# systemd restarts a daemon whose event loop has not said WATCHDOG=1 for this long.
WATCHDOG_S = 120
# The variables that move palace's paths: a service must see the values the installing client
# saw, or it would serve another socket or data directory than the clients compute.
PATH_VARS = ("PALACE_HOME", "PALACE_SOCKET", "PALACE_CONFIG", "XDG_DATA_HOME",
             "XDG_STATE_HOME", "XDG_CONFIG_HOME")


@dataclass(frozen=True)
class Spec:
    """What the service files say, already in the target's syntax (systemd specifiers such
    as ``%h`` allowed in the systemd fields)."""

    palaced: tuple[str, ...]  # the command that runs palaced, before its "run"
    socket: str  # the socket path the service manager listens on
    writable: tuple[str, ...]  # directories the sandboxed daemon may write
    optional_writable: tuple[str, ...] = ()  # the same, which may not exist
    environment: Mapping[str, str] = field(default_factory=dict)
    private_tmp: bool = True
    logs: str = "~/Library/Logs"  # launchd: where stdout/stderr go


def default_spec() -> Spec:
    """The systemd spec of the copies in the repository: ``pip install --user`` / pipx
    layout, XDG defaults, the runtime dir of a systemd user session."""
    return Spec(palaced=("%h/.local/bin/palaced",), socket="%t/palace/palaced.sock",
                writable=("%h/.local/share/palace", "%h/.local/state/palace", "%t/palace"),
                optional_writable=("%h/.config/palace",))


def default_launchd_spec() -> Spec:
    """The launchd spec of the copy in the repository (``/Users/YOU`` and ``UID`` are
    placeholders: launchd expands neither ``~`` nor variables)."""
    return Spec(palaced=("/Users/YOU/.local/bin/palaced",),
                socket="/tmp/palace-UID/palaced.sock", writable=(), private_tmp=False,
                logs="/Users/YOU/Library/Logs")


def _systemd_path(path: Path, home: Path, runtime: Path) -> str:
    """``path`` as systemd should read it: ``%h/...``/``%t/...`` where that applies, ``%``
    escaped as ``%%``."""
    text = str(path).replace("%", "%%")
    for base, spec in ((runtime, "%t"), (home, "%h")):
        if path == base or path.is_relative_to(base):
            rel = str(path.relative_to(base)).replace("%", "%%")
            return spec if rel == "." else f"{spec}/{rel}"
    return text


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """``paths`` in their order, without repeats and those inside another one (nested
    ReadWritePaths= add nothing)."""
    kept: list[Path] = []
    for p in paths:
        if p not in kept and not any(p.is_relative_to(o) for o in paths if o != p):
            kept.append(p)
    return kept


def systemd_spec(paths: Paths, palaced: Sequence[str], home: Path, environ: Mapping[str, str],
                 uid: int | None = None) -> Spec:
    """The spec of the systemd units for the paths a client resolved."""
    runtime = Path(f"/run/user/{os.getuid() if uid is None else uid}")
    config_dir = paths.config_file.parent
    dirs = _outermost([paths.data_dir, paths.state_dir, paths.runtime_dir, config_dir])
    optional = [d for d in dirs if d == config_dir and d not in (
        paths.data_dir, paths.state_dir, paths.runtime_dir)]
    # /tmp holds the runtime dir when /run/user/<uid> is missing or PALACE_HOME is too long
    # for a socket path: a private /tmp would hide the lock file from on-demand daemons.
    private_tmp = not any(p.is_relative_to(t) for p in (paths.runtime_dir, paths.data_dir)
                          for t in (Path("/tmp"), Path("/var/tmp")))
    env = {k: environ[k] for k in PATH_VARS if environ.get(k)}
    return Spec(
        palaced=(_systemd_path(Path(palaced[0]), home, runtime), *palaced[1:]),
        socket=_systemd_path(paths.socket, home, runtime),
        writable=tuple(_systemd_path(d, home, runtime) for d in dirs if d not in optional),
        optional_writable=tuple(_systemd_path(d, home, runtime) for d in optional),
        environment=env, private_tmp=private_tmp)


def launchd_spec(paths: Paths, palaced: Sequence[str], home: Path,
                 environ: Mapping[str, str]) -> Spec:
    """The spec of the LaunchAgent for the paths a client resolved (launchd expands no ``~``)."""
    env = {k: environ[k] for k in PATH_VARS if environ.get(k)}
    return Spec(palaced=tuple(palaced), socket=str(paths.socket), writable=(),
                environment=env, private_tmp=False, logs=str(home / "Library" / "Logs"))


def _quote(word: str) -> str:
    """A systemd command-line or list word, double-quoted when it holds a space or quote."""
    if not any(c in word for c in " \t\"'\\"):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


SOCKET_HEADER = """\
# palaced's socket as a systemd *user* unit: systemd listens on the socket the clients
# connect to (`palaced print-paths`) and starts palaced.service on the first connection; the
# connection waits in the socket's queue meanwhile, and across daemon restarts.
# Installed by `palace service install` (removed by `palace service uninstall`); to install
# this copy by hand see docs/operations.md.
"""

SERVICE_HEADER = """\
# palaced as a systemd *user* service, started by palaced.socket (and at login). It serves
# the socket systemd hands over, says READY=1 once it does, and is restarted after a crash or
# when its event loop stops answering the watchdog. Without these units the first `palace`
# command starts palaced on demand instead.
# Installed by `palace service install` (removed by `palace service uninstall`); to install
# this copy by hand see docs/operations.md. ExecStart is the absolute path of `palaced`.
"""


def render_socket_unit(spec: Spec) -> str:
    """The text of ``palaced.socket``."""
    return SOCKET_HEADER + f"""
[Unit]
Description=palace memory daemon socket (palaced)

[Socket]
ListenStream={spec.socket}
FileDescriptorName={FD_NAME}
SocketMode=0600
DirectoryMode=0700
RemoveOnStop=yes

[Install]
WantedBy=sockets.target
"""


def render_service_unit(spec: Spec) -> str:
    """The text of ``palaced.service``."""
    env = "".join(f"Environment={_quote(f'{k}={v}')}\n" for k, v in spec.environment.items())
    writable = " ".join([*(_quote(w) for w in spec.writable),
                         *(_quote("-" + w) for w in spec.optional_writable)])
    return SERVICE_HEADER + f"""
[Unit]
Description=palace memory daemon for AI agents (palaced)
Requires={SOCKET_UNIT}
After={SOCKET_UNIT}

[Service]
Type=notify
NotifyAccess=main
ExecStart={" ".join(_quote(w) for w in spec.palaced)} run
# palaced exits 0 after `palace daemon stop`: not restarted then (the socket starts it again
# on the next connection).
Restart=on-failure
RestartSec=2
# SIGTERM makes palaced finish requests, save its vector indexes and close its databases.
TimeoutStopSec=60
WatchdogSec={WATCHDOG_S}
UMask=0077
{env}# Settings are better kept in config.toml (`palaced print-paths` shows where): a daemon
# started on demand reads the same file, while Environment= lines reach only this unit.
# Sandbox: the file system is read-only but for palace's own directories; the network stays
# open (AF_INET*) so that the embedding model can be downloaded on first start.
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={writable}
PrivateTmp={"yes" if spec.private_tmp else "no"}
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
SystemCallArchitectures=native
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes

[Install]
WantedBy=default.target
Also={SOCKET_UNIT}
"""


PLIST_COMMENT = """\
<!--
  palaced as a macOS LaunchAgent: launchd listens on the socket the clients connect to
  (`palaced print-paths`), starts palaced at login and on the first connection, and restarts
  it after a crash. Installed by `palace service install` (removed by
  `palace service uninstall`); to install this copy by hand see docs/operations.md.
-->
"""


def launchd_agent(spec: Spec) -> dict[str, object]:
    """The LaunchAgent as a dict (what plistlib writes)."""
    agent: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": [*spec.palaced, "run"],
        "Sockets": {FD_NAME: {"SockPathName": spec.socket, "SockPathMode": 0o600,
                              "SockType": "stream", "SockFamily": "Unix"}},
        "RunAtLoad": True,
        # Restart after a crash, not after a clean exit (`palace daemon stop`); the socket
        # starts it again on the next connection.
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 5,
        "ExitTimeOut": 60,
        "Umask": 0o077,
        "StandardOutPath": f"{spec.logs}/palaced.log",
        "StandardErrorPath": f"{spec.logs}/palaced.err.log",
    }
    if spec.environment:
        agent["EnvironmentVariables"] = dict(spec.environment)
    return agent


def render_plist(spec: Spec) -> str:
    """The text of ``dev.palace.palaced.plist``, with a comment after the DOCTYPE."""
    text = plistlib.dumps(launchd_agent(spec), sort_keys=False).decode()
    head, sep, rest = text.partition("<plist ")
    return head + PLIST_COMMENT + sep + rest
