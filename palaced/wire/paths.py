"""Where palace keeps its data, config, state and socket.

Leaf module (stdlib + platformdirs): the daemon and every client resolve paths here, so they
agree. The socket path deliberately ignores ``XDG_RUNTIME_DIR``: MCP clients strip most
environment variables from the servers they spawn, and a bridge that computed a different
socket than the daemon would start a second daemon. Instead it uses ``/run/user/<uid>`` when
that directory exists (what ``XDG_RUNTIME_DIR`` normally points at) and a per-user directory
under ``/tmp`` otherwise. ``PALACE_HOME`` moves everything (data, state, config and, unless
``PALACE_SOCKET`` says otherwise, the socket) under one root, so each root gets its own daemon.

Keeping those paths private from other local users is ``palaced.wire.private``'s job.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

APP = "palace"
SOCKET_NAME = "palaced.sock"
# The name of the socket a service manager hands over: FileDescriptorName= in palaced.socket,
# the Sockets key of the LaunchAgent (palaced.daemon.activation looks for it).
ACTIVATION_NAME = "palaced"
# sun_path is 108 bytes on Linux and 104 on macOS; keep a margin.
MAX_SOCKET_PATH = 100
# An installed model (``palace model fetch|import``): <data_dir>/models/<model_dir_name>/, its
# files plus this record of where they came from, their sha256 and the vectors' dimensions.
MODEL_RECORD = "palace-model.json"


def model_dir_name(model: str) -> str:
    """The directory an installed copy of ``model`` lives in (``org/name`` -> ``org--name``)."""
    return model.replace("/", "--")


@dataclass(frozen=True)
class Paths:
    """The resolved locations of one palace installation."""

    data_dir: Path  # palaces live in data_dir / "palaces"
    state_dir: Path  # logs, model cache, tokenizer cache
    config_file: Path
    runtime_dir: Path  # holds the socket and the daemon lock
    socket: Path
    # True when the runtime dir is palace's own (made 0700 by the daemon); False for the
    # directory of a PALACE_SOCKET the user chose, which is checked but never chmod-ed.
    private_runtime: bool = True

    @property
    def palaces_dir(self) -> Path:
        return self.data_dir / "palaces"

    @property
    def models_dir(self) -> Path:
        """Installed model copies (``palace model fetch|import``)."""
        return self.data_dir / "models"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "palaced.log"

    @property
    def stderr_log(self) -> Path:
        """Where an auto-started daemon's stdout and stderr go: a failure before its log is
        set up (a bad config file, an unsafe path) is written here, and clients quote it."""
        return self.state_dir / "palaced-stderr.log"

    @property
    def client_log_file(self) -> Path:
        """The clients' log (one line per event worth a trace, e.g. a hook that failed)."""
        return self.state_dir / "palace.log"

    @property
    def lock_file(self) -> Path:
        """The single-instance lock of this socket, beside it: ``palaced.lock`` for the
        default ``palaced.sock``, ``<socket name>.lock`` for any other name. Derived from the
        socket, not the directory, so daemons of two sockets in one directory
        (``PALACE_SOCKET``) each get their own lock instead of one refusing to start."""
        return self.runtime_dir / lock_name(self.socket.name)


def lock_name(socket_name: str) -> str:
    """The lock file's name for a socket named ``socket_name`` (see ``Paths.lock_file``)."""
    if socket_name == SOCKET_NAME:
        return "palaced.lock"  # where it always was: tools, tests and older daemons look there
    return f"{socket_name}.lock"


def _home() -> Path | None:
    value = os.environ.get("PALACE_HOME")
    return Path(value).expanduser().resolve() if value else None


def _default_runtime_dir(home: Path | None) -> Path:
    uid = os.getuid()
    if home is not None:
        candidate = home / "run"
        if len(str(candidate / SOCKET_NAME)) <= MAX_SOCKET_PATH:
            return candidate
        digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
        return Path("/tmp") / f"palace-{uid}-{digest}"
    run_user = Path(f"/run/user/{uid}")
    if sys.platform.startswith("linux") and run_user.is_dir() and os.access(run_user, os.W_OK):
        return run_user / APP
    return Path("/tmp") / f"palace-{uid}"


def resolve() -> Paths:
    """Resolve every palace path from the environment and platform conventions."""
    home = _home()
    if home is not None:
        data_dir = home
        state_dir = home / "state"
        config_file = home / "config.toml"
    else:
        import platformdirs

        data_dir = Path(platformdirs.user_data_dir(APP, appauthor=False))
        state_dir = Path(platformdirs.user_state_dir(APP, appauthor=False))
        config_file = Path(platformdirs.user_config_dir(APP, appauthor=False)) / "config.toml"
    if os.environ.get("PALACE_CONFIG"):
        config_file = Path(os.environ["PALACE_CONFIG"]).expanduser()
    socket_env = os.environ.get("PALACE_SOCKET")
    if socket_env:
        socket = Path(socket_env).expanduser()
        runtime_dir = socket.parent
    else:
        runtime_dir = _default_runtime_dir(home)
        socket = runtime_dir / SOCKET_NAME
    return Paths(
        data_dir=data_dir,
        state_dir=state_dir,
        config_file=config_file,
        runtime_dir=runtime_dir,
        socket=socket,
        private_runtime=not socket_env,
    )
