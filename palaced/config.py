"""Daemon configuration: frozen dataclasses loaded from defaults < TOML file < environment.

The TOML file (``paths.config_file``; ``palaced print-paths`` shows where) may hold::

    [embedder]
    model = "sentence-transformers/all-MiniLM-L6-v2"   # or "none" for keyword-only
    model_path = "/opt/models/all-MiniLM-L6-v2"        # local model dir (offline machines)
    threads = 2
    allow_download = true

    [tokenizer]
    bpe_file = "/opt/tiktoken/cl100k_base.tiktoken"

    [backup]
    dir = "/mnt/backup/palace"     # where `palace backup` writes (default <data_dir>/backups)
    keep = 7                       # backups kept per palace

    [limits]
    max_frame = 8388608
    max_text_chars = 200000
    request_timeout_s = 120
    idle_close_s = 600
    checkpoint_idle_s = 5
    max_connections = 256
    reserve_connections = 8        # beyond max_connections, for status/stop only
    handshake_timeout_s = 5        # accept -> complete daemon.hello
    frame_timeout_s = 10           # first byte of a frame -> its last (+1 s per MiB)
    connection_idle_s = 300        # no request for this long: the connection is closed

Settings in the file matter because MCP clients strip the environment of the processes they
spawn: a daemon auto-started from a bridge still finds its model through the file.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from palaced.embedder import DEFAULT_MODEL, EmbedderSettings, settings_from_env
from palaced.errors import InvalidArgs
from palaced.paths import Paths, resolve
from palaced.protocol import DEFAULT_MAX_FRAME
from palaced.vocab import MAX_BACKUP_KEEP


@dataclass(frozen=True)
class Limits:
    """Sizes and times the daemon enforces.

    Raises:
        ValueError: a connection limit or timeout is out of range (``load`` reports it as
            InvalidArgs naming the file).
    """

    max_frame: int = DEFAULT_MAX_FRAME
    max_text_chars: int = 200_000
    max_batch: int = 10_000
    request_timeout_s: float = 120.0
    max_request_timeout_s: float = 3600.0
    idle_close_s: float = 600.0
    checkpoint_idle_s: float = 5.0
    max_connections: int = 256
    # Connections accepted past max_connections that may only run the control ops (status,
    # stop): the owner always gets through, however many clients are stuck.
    reserve_connections: int = 8
    # A silent or half-sent peer must not hold a slot: see palaced.server.
    handshake_timeout_s: float = 5.0
    frame_timeout_s: float = 10.0
    # An MCP bridge may hold its connection open for hours; closing it when idle costs the
    # client one reconnect on its next call.
    connection_idle_s: float = 300.0

    def __post_init__(self) -> None:
        positive = ("max_connections", "handshake_timeout_s", "frame_timeout_s",
                    "connection_idle_s")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.reserve_connections < 0:
            raise ValueError(f"reserve_connections must be >= 0, got {self.reserve_connections}")


DEFAULT_BACKUP_KEEP = 7


@dataclass(frozen=True)
class BackupSettings:
    """Where ``palace backup`` writes by default (None: ``<data_dir>/backups``) and how many
    backups of each palace it keeps."""

    dir: Path | None = None
    keep: int = DEFAULT_BACKUP_KEEP


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the daemon needs, resolved once at start."""

    paths: Paths
    embedder: EmbedderSettings
    limits: Limits = field(default_factory=Limits)
    tokenizer_file: Path | None = None
    backup: BackupSettings = field(default_factory=BackupSettings)

    @property
    def backup_dir(self) -> Path:
        """The default root of backups: ``[backup] dir``, else ``<data_dir>/backups``."""
        return self.backup.dir or self.paths.data_dir / "backups"


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise InvalidArgs(f"config section [{name}] must be a table")
    return value


def _limits(lim: dict[str, Any], source: Path) -> Limits:
    """Limits from the file's [limits] table: known keys, each coerced to its default's type.

    Raises:
        InvalidArgs: an unknown key, or a value of the wrong type or out of range.
    """
    defaults = Limits()
    known = {f.name for f in fields(Limits)}
    values: dict[str, Any] = {}
    for key, value in lim.items():
        if key not in known:
            raise InvalidArgs(f"bad [limits] in {source}: unknown key {key!r}")
        try:
            values[key] = type(getattr(defaults, key))(value)
        except (TypeError, ValueError) as exc:
            raise InvalidArgs(f"bad [limits] in {source}: {key}: {exc}") from exc
    try:
        return Limits(**values)
    except ValueError as exc:
        raise InvalidArgs(f"bad [limits] in {source}: {exc}") from exc


def load(paths: Paths | None = None) -> DaemonConfig:
    """Resolve paths, read the TOML file if present, apply environment overrides.

    Raises:
        InvalidArgs: the config file is not valid TOML or has wrong types.
    """
    paths = paths or resolve()
    data: dict[str, Any] = {}
    if paths.config_file.is_file():
        try:
            data = tomllib.loads(paths.config_file.read_text("utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidArgs(f"cannot read config {paths.config_file}: {exc}") from exc
    emb = _section(data, "embedder")
    model = str(emb.get("model", DEFAULT_MODEL))
    disabled = model.strip().lower() in {"none", "off", ""}
    model_path = Path(str(emb["model_path"])).expanduser() if emb.get("model_path") else None
    threads = emb.get("threads")
    settings = EmbedderSettings(
        model_name=DEFAULT_MODEL if disabled else model,
        model_path=model_path,
        cache_dir=paths.state_dir / "models",
        threads=int(threads) if threads else None,
        allow_download=bool(emb.get("allow_download", True)),
        disabled=disabled,
    )
    settings = settings_from_env(settings)
    limits = _limits(_section(data, "limits"), paths.config_file)
    tok = _section(data, "tokenizer")
    tok_file = tok.get("bpe_file") or os.environ.get("PALACE_TIKTOKEN_FILE")
    bk = _section(data, "backup")
    return DaemonConfig(
        paths=paths,
        embedder=settings,
        limits=limits,
        tokenizer_file=Path(str(tok_file)).expanduser() if tok_file else None,
        backup=_backup(bk.get("dir"), bk.get("keep", DEFAULT_BACKUP_KEEP), paths.config_file),
    )


def _backup(directory: Any, keep: Any, source: Path) -> BackupSettings:
    """The [backup] table's settings.

    Raises:
        InvalidArgs: ``dir`` is not an absolute path (``~`` allowed) or ``keep`` is not an
            integer in 1..MAX_BACKUP_KEEP.
    """
    path = Path(str(directory)).expanduser() if directory else None
    if path is not None and not path.is_absolute():
        raise InvalidArgs(f"bad [backup] in {source}: dir must be an absolute path")
    if isinstance(keep, bool) or not isinstance(keep, int) or not 1 <= keep <= MAX_BACKUP_KEEP:
        raise InvalidArgs(f"bad [backup] in {source}: keep must be an integer in "
                          f"1..{MAX_BACKUP_KEEP}")
    return BackupSettings(dir=path, keep=keep)
