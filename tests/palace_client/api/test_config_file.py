"""``palace_client.api.config_file``: a client's read of the config file never fails it and
never hangs on a file someone else shaped."""

from __future__ import annotations

import os
from pathlib import Path

from palace_client.api.config_file import config_section


def _read(path: Path) -> tuple[dict[str, object], list[str]]:
    warned: list[str] = []
    return config_section(path, "hooks", warned.append), warned


def test_a_missing_file_is_silent_and_a_table_is_read(tmp_path: Path) -> None:
    assert _read(tmp_path / "none.toml") == ({}, [])
    good = tmp_path / "config.toml"
    good.write_text("[hooks]\nprompt_budget = 200\n")
    assert _read(good) == ({"prompt_budget": 200}, [])
    link = tmp_path / "linked.toml"
    link.symlink_to(good)  # dotfile managers link the config: followed
    assert _read(link) == ({"prompt_budget": 200}, [])


def test_what_cannot_be_read_warns_and_reads_as_empty(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)  # would block a plain read forever (a hook before every prompt)
    broken = tmp_path / "broken.toml"
    broken.write_text("[hooks\n")
    scalar = tmp_path / "scalar.toml"
    scalar.write_text("hooks = 3\n")
    huge = tmp_path / "huge.toml"
    huge.write_bytes(b"#" * (2 * 1024 * 1024))
    for path in (fifo, broken, scalar, huge):
        table, warned = _read(path)
        assert table == {} and len(warned) == 1 and str(path) in warned[0], (path, warned)
