"""``palaced.config.edit``: the config file's keys edited as text, comments kept, or refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from palaced.config import edit
from palaced.wire.errors import InvalidArgs

MPNET = "sentence-transformers/all-mpnet-base-v2"


def test_a_value_is_replaced_in_place_keeping_comments_and_layout() -> None:
    text = ('# mine\n[embedder]\nmodel = "sentence-transformers/all-MiniLM-L6-v2"  # small\n'
            "threads = 2\n\n[limits]\nmax_frame = 8388608\n")
    out = edit.edit_keys(text, "embedder", {"model": MPNET}, "c.toml")
    assert out == text.replace("sentence-transformers/all-MiniLM-L6-v2", MPNET)


def test_a_missing_key_goes_under_its_table_and_a_missing_table_at_the_end() -> None:
    text = "[embedder]\nthreads = 2\n"
    assert edit.edit_keys(text, "embedder", {"model": MPNET}, "c.toml") == (
        f'[embedder]\nmodel = "{MPNET}"\nthreads = 2\n')
    text = "# only limits\n[limits]\nmax_frame = 1\n"
    assert edit.edit_keys(text, "embedder", {"model": MPNET}, "c.toml") == (
        f'{text}\n[embedder]\nmodel = "{MPNET}"\n')
    assert edit.edit_keys("", "embedder", {"model": "a\"b"}, "c.toml") == (
        '[embedder]\nmodel = "a\\"b"\n')


def test_none_comments_the_line_out_and_crlf_is_kept() -> None:
    text = '[embedder]\r\nmodel_path = "/opt/m"\r\nthreads = 2\r\n'
    out = edit.edit_keys(text, "embedder", {"model": MPNET, "model_path": None}, "c.toml")
    assert out == (f'[embedder]\r\nmodel = "{MPNET}"\r\n# model_path = "/opt/m"{edit.CLEARED}'
                   "\r\nthreads = 2\r\n")


@pytest.mark.parametrize("text", [
    'embedder = { model = "x" }\n',  # an inline table
    '[embedder]\nmodel = """x"""\n',  # a multi-line string
    "embedder = 3\n",  # not a table at all
])
def test_shapes_it_does_not_handle_are_refused_naming_the_key(text: str) -> None:
    with pytest.raises(InvalidArgs) as err:
        edit.edit_keys(text, "embedder", {"model": MPNET}, "c.toml")
    assert err.value.details["condition"] == "config-edit"
    assert f'model = "{MPNET}"' in err.value.message and "by hand" in err.value.message


def test_write_text_replaces_a_symlinks_target_as_a_private_file(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_text("old\n")
    os.chmod(real, 0o640)
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    edit.write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["config.toml"]
