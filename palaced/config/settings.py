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

    [trash]
    keep_days = 30                 # forgotten drawers stay restorable this long (0: not at all)

    [audit]
    keep_days = 365                # audit entries older than this are dropped
    max_entries = 100000           # and beyond this many per palace, the oldest

    [mcp]
    tools = "kg,memoir"            # opt-in MCP toolsets besides core (kg, memoir, upkeep, all)

    [upkeep]
    consolidate_hint_at = 7        # a room this full of unconsolidated drawers gets a hint
    promote_after = 20             # recalls per importance step up (0: never)
    promote_max = 0.8              # promotion stops at high
    recall_extends_ttl = true      # a recall restarts the lifetime of a drawer with a ttl

    [hooks]
    prompt_budget = 300            # tokens `palace hook prompt` may inject per prompt
    prompt_timeout_s = 1.0         # its whole wall time: past it, it injects nothing

Settings in the file matter because MCP clients strip the environment of the processes they
spawn: a daemon auto-started from a bridge still finds its model through the file.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from palaced.config.bounds import bounds, out_of_bound
from palaced.config.model import EmbedderSettings, settings_from_env
from palaced.config.team_settings import STORES_SECTION, TeamSettings, check_stores, team_settings
from palaced.config.toml_lines import key_lines, line_of
from palaced.wire.errors import InvalidArgs
from palaced.wire.paths import Paths, resolve
from palaced.wire.protocol import DEFAULT_MAX_FRAME
from palaced.wire.specs import parse_toolsets
from palaced.wire.vocab import DEFAULT_MODEL, HOOK_SETTINGS, MAX_BACKUP_KEEP

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
CENTURY_DAYS = 36_500


def _above(default: Any, bound: float, high: float, *, strict: bool = True) -> Any:
    """A settings field whose value must be ``> bound`` (``>= bound`` unless ``strict``) and
    ``<= high``: every number has both ends, so that no value (inf, 1e20, 1e-300) can wedge
    the daemon."""
    return field(default=default, metadata=bounds(bound, high, strict=strict))


class _Bounded:
    """Settings whose fields' bounds (``_above``) are checked on construction: ValueError
    names the field (``load`` reports it with the file's line)."""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            problem = out_of_bound(getattr(self, f.name), f.metadata)
            if problem:
                raise ValueError(f"{f.name} {problem}")


@dataclass(frozen=True)
class Limits(_Bounded):
    """Sizes and times the daemon enforces; each field's bound is in its metadata.

    Raises:
        ValueError: a value is out of its bound (``load`` reports it with the file's line).
    """

    # Upper ends: a frame's length is 4 bytes on the wire and a whole frame is held in memory
    # (1 GiB); a deadline beyond a week is a mistake, and beyond ~1e9 s the socket refuses it.
    # Lower ends of times: a deadline of 1e-300 s times every request out.
    max_frame: int = _above(DEFAULT_MAX_FRAME, 4096, 1 << 30, strict=False)
    max_text_chars: int = _above(200_000, 0, 100_000_000)
    max_batch: int = _above(10_000, 0, 1_000_000)
    request_timeout_s: float = _above(120.0, 0.1, WEEK_S, strict=False)
    max_request_timeout_s: float = _above(3600.0, 0.1, WEEK_S, strict=False)
    idle_close_s: float = _above(600.0, 0.1, WEEK_S, strict=False)
    checkpoint_idle_s: float = _above(5.0, 0.1, DAY_S, strict=False)
    max_connections: int = _above(256, 0, 100_000)
    # Connections accepted past max_connections that may only run the control ops (status,
    # stop): the owner always gets through, however many clients are stuck.
    reserve_connections: int = _above(8, 0, 10_000, strict=False)
    max_open_palaces: int = _above(0, 0, 1_000_000, strict=False)  # 0: open_files.palace_budget
    # A silent or half-sent peer must not hold a slot: see palaced.daemon.server.
    handshake_timeout_s: float = _above(5.0, 0.1, DAY_S, strict=False)
    frame_timeout_s: float = _above(10.0, 0.1, DAY_S, strict=False)
    # An MCP bridge may hold its connection open for hours; closing it when idle costs the
    # client one reconnect on its next call.
    connection_idle_s: float = _above(300.0, 1, WEEK_S, strict=False)
    # Palaces of this many drawers or more search keywords on palaced/palace/keywords.py (0: all).
    keyword_engine_min_drawers: int = _above(20_000, 0, 1_000_000_000, strict=False)


@dataclass(frozen=True)
class Retention(_Bounded):
    """How long a palace keeps forgotten drawers (its trash) and its audit log."""

    # 0: a forgotten drawer is gone at once (never listed, never restorable).
    # Days as milliseconds must stay a 64-bit integer: a century is plenty.
    trash_keep_days: float = _above(30.0, 0, CENTURY_DAYS, strict=False)
    audit_keep_days: float = _above(365.0, 0, CENTURY_DAYS)
    audit_max_entries: int = _above(100_000, 0, 1_000_000_000)

    @property
    def trash_keep_ms(self) -> int:
        return int(self.trash_keep_days * 86_400_000)

    @property
    def audit_keep_ms(self) -> int:
        return int(self.audit_keep_days * 86_400_000)


@dataclass(frozen=True)
class Upkeep(_Bounded):
    """How use shapes memories: consolidation hints, promotion and TTL renewal on recall.

    ``consolidate_hint_at``: a room with this many active, unconsolidated drawers makes
    ``remember`` and ``health`` suggest consolidating it (0: never). ``promote_after``: every
    this many recalls that return a drawer raise its importance one preset step (low ->
    medium -> high), never beyond ``promote_max`` (0: never). ``recall_extends_ttl``: a recall
    that returns a drawer with a ttl pushes its expiry to recall time + its ttl.
    """

    consolidate_hint_at: int = _above(7, 0, 1_000_000, strict=False)
    # LoCoMo dev, every question asked twice (bench/access.py "repeat", the ranking before
    # the second hop, access boost 0.05), turn R@1/5/10: never .403/.728/.821, 20
    # .401/.729/.821, 10 .395/.726/.821 (fresh .401/.730/.823).
    promote_after: int = _above(20, 0, 1_000_000, strict=False)
    promote_max: float = field(default=0.8, metadata=bounds(0, 1, strict=False))
    recall_extends_ttl: bool = True


@dataclass(frozen=True)
class Key:
    """One key of the config file: its type (``string``, ``path``, ``integer``, ``number``,
    ``boolean``), its default (None: unset), for numbers its bound, and ``parse``, which
    raises ``InvalidArgs`` for a value of the right type that is still wrong (its message
    is the problem reported)."""

    kind: str
    default: Any = None
    bound: dict[str, Any] = field(default_factory=dict)
    parse: Callable[[Any], object] | None = None


DEFAULT_BACKUP_KEEP = 7

# Every key the file may hold, by section: the one list the check and docs/gen.py read.
SCHEMA: dict[str, dict[str, Key]] = {
    "embedder": {
        "model": Key("string", DEFAULT_MODEL),
        "model_path": Key("path"),
        "threads": Key("integer", bound=bounds(0, 1024, strict=False)),
        "allow_download": Key("boolean", True),
    },
    "tokenizer": {"bpe_file": Key("path")},
    "backup": {"dir": Key("path"),
               "keep": Key("integer", DEFAULT_BACKUP_KEEP, bounds(0, MAX_BACKUP_KEEP))},
    "limits": {f.name: Key("integer" if f.type in ("int", int) else "number",
                           f.default, dict(f.metadata)) for f in fields(Limits)},
    # Retention fields are "<section>_<key>": trash_keep_days is [trash] keep_days.
    **{section: {f.name.removeprefix(f"{section}_"): Key(
        "integer" if f.type in ("int", int) else "number", f.default, dict(f.metadata))
        for f in fields(Retention) if f.name.startswith(f"{section}_")}
       for section in ("trash", "audit")},
    # Read by the MCP bridge (palace_client.mcp.stdio), checked here like every key.
    "mcp": {"tools": Key("string", "core", parse=parse_toolsets)},
    # Read by the prompt hook (palace_client.hooks.prompt), checked here like every key.
    "hooks": {key: Key("integer" if isinstance(default, int) else "number", default,
                       bounds(low, high)) for key, (default, low, high) in HOOK_SETTINGS.items()},
    "upkeep": {f.name: Key({"int": "integer", "bool": "boolean"}.get(str(f.type), "number"),
                           f.default, dict(f.metadata)) for f in fields(Upkeep)},
    "team": {f.name: Key("number", f.default, dict(f.metadata))
             for f in fields(TeamSettings) if f.metadata},  # not the [stores] tables
}


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
    retention: Retention = field(default_factory=Retention)
    upkeep: Upkeep = field(default_factory=Upkeep)
    backup: BackupSettings = field(default_factory=BackupSettings)
    team: TeamSettings = field(default_factory=TeamSettings)

    @property
    def backup_dir(self) -> Path:
        """The default root of backups: ``[backup] dir``, else ``<data_dir>/backups``."""
        return self.backup.dir or self.paths.data_dir / "backups"


_KINDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "string": ("a string", (str,)),
    "path": ("a string (a path)", (str,)),
    "integer": ("an integer", (int,)),
    "number": ("a number", (int, float)),
    "boolean": ("true or false", (bool,)),
}


def _what(value: Any) -> str:
    """How a TOML value's type reads in a message: ``the string 'two'``."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    names = {int: "the integer", float: "the number", str: "the string"}
    for kind, name in names.items():
        if type(value) is kind:
            return f"{name} {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"


def _closest(name: str, known: list[str], shown: str = "{!r}") -> str:
    """`` (did you mean 'model'?)`` for a misspelt ``name``, or ""."""
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return f" (did you mean {shown.format(match[0])}?)" if match else ""


def check(data: dict[str, Any], text: str, source: Path) -> None:
    """Check a parsed config file against SCHEMA; every problem is reported at once.

    Raises:
        InvalidArgs: unknown sections or keys (with the closest known name), values of the
            wrong type or out of bounds; one ``file:line: problem`` line each, and
            ``details["problems"]`` with the lines and keys.
    """
    lines = key_lines(text)
    problems: list[dict[str, Any]] = []

    def problem(path: tuple[str, ...], message: str) -> None:
        problems.append({"line": line_of(lines, *path), "key": ".".join(path),
                         "message": message})

    owners = {key: section for section, keys in SCHEMA.items() for key in keys}
    for section, table in data.items():
        if section == STORES_SECTION and isinstance(table, dict):
            check_stores(table, problem, _what)
            continue
        if section not in SCHEMA:
            known = ", ".join(f"[{s}]" for s in SCHEMA)
            if isinstance(table, dict):
                problem((section,), f"unknown section [{section}]"
                        f"{_closest(section, list(SCHEMA), '[{}]')}; the sections are {known}")
            elif section in owners:
                problem((section,), f"{section!r} belongs in the [{owners[section]}] section")
            else:
                problem((section,), f"unknown key {section!r} outside any section; the "
                        f"sections are {known}")
            continue
        if not isinstance(table, dict):
            problem((section,), f"[{section}] must be a table, got {_what(table)}")
            continue
        for key, value in table.items():
            spec = SCHEMA[section].get(key)
            if spec is None:
                elsewhere = owners.get(key)
                hint = (f" ({key!r} belongs in [{elsewhere}])" if elsewhere
                        else _closest(key, list(SCHEMA[section])))
                problem((section, key), f"unknown key {key!r} in [{section}]{hint}")
                continue
            label, types = _KINDS[spec.kind]
            if isinstance(value, bool) is not (spec.kind == "boolean") or not isinstance(
                    value, types):
                problem((section, key), f"[{section}] {key} must be {label}, got {_what(value)}")
                continue
            wrong = out_of_bound(value, spec.bound)
            if not wrong and spec.parse is not None:
                try:
                    spec.parse(value)
                except InvalidArgs as exc:
                    wrong = exc.message
            if wrong:
                problem((section, key), f"[{section}] {key} {wrong}")
    if problems:
        text_lines = [f"{source}:{p['line']}: {p['message']}" if p["line"] else
                      f"{source}: {p['message']}" for p in problems]
        raise InvalidArgs("bad config file " + "\n".join(text_lines) if len(text_lines) == 1
                          else f"bad config file {source}:\n" + "\n".join(text_lines),
                          details={"file": str(source), "problems": problems})


def read_file(path: Path) -> dict[str, Any]:
    """The checked contents of the config file at ``path``; {} when there is none.

    Raises:
        InvalidArgs: it cannot be read, is not valid TOML (the message has the line), or does
            not pass ``check``.
    """
    if not path.is_file():
        return {}
    try:
        text = path.read_text("utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgs(f"cannot read config {path}: {exc}",
                          details={"file": str(path)}) from exc
    check(data, text, path)
    return data


def _typed(data: dict[str, Any], section: str) -> dict[str, Any]:
    """The keys of a checked section, numbers as floats (like the defaults)."""
    return {k: float(v) if SCHEMA[section][k].kind == "number" else v
            for k, v in data.get(section, {}).items()}


def _retention(data: dict[str, Any]) -> Retention:
    """Retention from the checked ``[trash]`` and ``[audit]`` tables."""
    return Retention(**{f"{section}_{key}": value for section in ("trash", "audit")
                        for key, value in _typed(data, section).items()})


def load(paths: Paths | None = None) -> DaemonConfig:
    """Resolve paths, read and check the TOML file if present, apply environment overrides.

    Precedence: defaults < file < environment (``PALACE_EMBED_MODEL``,
    ``PALACE_EMBED_MODEL_PATH``, ``PALACE_TIKTOKEN_FILE``).

    Raises:
        InvalidArgs: the config file is unreadable, not valid TOML, or has unknown keys or
            wrong values (see ``check``).
    """
    paths = paths or resolve()
    data = read_file(paths.config_file)
    emb, tok = data.get("embedder", {}), data.get("tokenizer", {})
    model = emb.get("model", DEFAULT_MODEL)
    disabled = model.strip().lower() in {"none", "off", ""}
    model_path = Path(emb["model_path"]).expanduser() if emb.get("model_path") else None
    settings = settings_from_env(EmbedderSettings(
        model_name=DEFAULT_MODEL if disabled else model,
        model_path=model_path,
        cache_dir=paths.state_dir / "models",
        threads=emb.get("threads") or None,
        allow_download=emb.get("allow_download", True),
        disabled=disabled,
        install_dir=paths.models_dir,
    ))
    env_tok = os.environ.get("PALACE_TIKTOKEN_FILE")
    tok_file = env_tok if env_tok is not None else tok.get("bpe_file")
    return DaemonConfig(
        paths=paths,
        embedder=settings,
        limits=Limits(**_typed(data, "limits")),
        tokenizer_file=Path(tok_file).expanduser() if tok_file else None,
        retention=_retention(data),
        upkeep=Upkeep(**_typed(data, "upkeep")),
        backup=_backup(data.get("backup", {}), paths.config_file),
        team=team_settings(data),
    )


def _backup(table: dict[str, Any], source: Path) -> BackupSettings:
    """The settings of a checked [backup] table (``keep`` is within its bound).

    Raises:
        InvalidArgs: ``dir`` is not an absolute path (``~`` allowed).
    """
    directory, keep = table.get("dir"), table.get("keep", DEFAULT_BACKUP_KEEP)
    path = Path(str(directory)).expanduser() if directory else None
    if path is not None and not path.is_absolute():
        raise InvalidArgs(f"bad config file {source}: [backup] dir must be an absolute path")
    return BackupSettings(dir=path, keep=int(keep))
