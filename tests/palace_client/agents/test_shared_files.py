"""Files palace's clients write and read in places another user can write to.

A shared directory (a team's export drop, a shared notes folder) may hold whatever another
local user put there: a file pre-created under the name palace is about to write, a symlink
to one of the owner's secrets, a FIFO, a link to a device. ``palace export`` writes through
a private temporary file made exclusively (``palaced.wire.safe_files.private_file``), and ``palace
import markdown`` reads regular files only, at most its size cap, and no symlink that leaves
the imported directory (``palaced.wire.safe_files.read_beneath``).

The other uid runs as in ``tests/e2e/test_security.py`` (root in CI switches a child to an unused
uid); the shared directory is a 0777 directory without the sticky bit, where the kernel's
``protected_regular``/``protected_symlinks`` do not apply.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DaemonProc
from tests.e2e.test_security import ATTACKER_PYTHON, ATTACKER_UID, _need_second_uid


def _as_attacker(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (stdlib Python) as the other uid."""
    return subprocess.run([ATTACKER_PYTHON, "-I", "-c", code, *args], user=ATTACKER_UID,
                          group=ATTACKER_UID, extra_groups=[], capture_output=True,
                          text=True, timeout=30, cwd="/")


@pytest.fixture
def keyword_daemon(shared_keyword_daemon: DaemonProc) -> DaemonProc:
    """The module's keyword-only daemon (``shared_keyword_daemon``), not one per test: each
    test here works in palaces of its own names and never stops, kills or damages it."""
    return shared_keyword_daemon


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may write to (0777, no sticky bit), reachable by the other uid."""
    path = Path(tempfile.mkdtemp(prefix="palace-shared-", dir="/tmp"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def secret() -> Iterator[Path]:
    """A private file of the owner's (in a 0700 directory) that must never change or leak."""
    base = Path(tempfile.mkdtemp(prefix="palace-owner-", dir="/tmp"))
    path = base / "netrc"
    path.write_text("machine example.com login me password hunter2-secret\n")
    os.chmod(path, 0o600)
    yield path
    shutil.rmtree(base, ignore_errors=True)


# -- palace export FILE -------------------------------------------------------------------------
PLANT = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
os.fchmod(fd, 0o666)
os.close(fd)
"""
READ = """
import sys
try:
    print(len(open(sys.argv[1], 'rb').read()))
except OSError as exc:
    print(type(exc).__name__)
"""


def test_export_writes_nothing_another_user_planted(keyword_daemon: DaemonProc, shared: Path,
                                                    secret: Path) -> None:
    _need_second_uid()
    with keyword_daemon.client() as c:
        c.create_palace("exp")
        c.remember("exp", "the launch code is 0000")
    before = secret.read_bytes()
    # The other uid pre-creates the temporary name the old export used (and keeps reading
    # it), and plants a symlink to the owner's secret under another one.
    res = _as_attacker(PLANT, str(shared / "out.jsonl.partial"))
    assert res.returncode == 0, res.stderr
    (shared / "two.jsonl.partial").symlink_to(secret)
    os.lchown(shared / "two.jsonl.partial", ATTACKER_UID, ATTACKER_UID)

    for name in ("out.jsonl", "two.jsonl"):
        keyword_daemon.cli("export", str(shared / name), "--palace", "exp", check=True)
        st = os.lstat(shared / name)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), name
        assert stat.S_IMODE(st.st_mode) == 0o600, name
        assert "launch code" in (shared / name).read_text()
        assert _as_attacker(READ, str(shared / name)).stdout.strip() == "PermissionError"

    # What the other uid planted got nothing: its file is empty, the secret is unchanged.
    assert _as_attacker(READ, str(shared / "out.jsonl.partial")).stdout.strip() == "0"
    assert secret.read_bytes() == before
    assert os.path.islink(shared / "two.jsonl.partial")
    # No temporary file is left behind.
    assert sorted(p.name for p in shared.iterdir()) == [
        "out.jsonl", "out.jsonl.partial", "two.jsonl", "two.jsonl.partial"]


def test_export_failure_leaves_no_file(keyword_daemon: DaemonProc, shared: Path) -> None:
    """A failed export (no such palace) leaves neither the file nor a temporary one."""
    res = keyword_daemon.cli("export", str(shared / "gone.jsonl"), "--palace", "nope")
    assert res.returncode != 0
    assert list(shared.iterdir()) == []


def test_export_over_a_symlink_replaces_the_link(keyword_daemon: DaemonProc, shared: Path,
                                                 secret: Path) -> None:
    """A symlink planted at the export's own name is replaced, its target never written."""
    with keyword_daemon.client() as c:
        c.create_palace("exp2")
        c.remember("exp2", "some memory")
    before = secret.read_bytes()
    (shared / "out.jsonl").symlink_to(secret)
    keyword_daemon.cli("export", str(shared / "out.jsonl"), "--palace", "exp2", check=True)
    assert secret.read_bytes() == before
    assert not os.path.islink(shared / "out.jsonl")
    assert json.loads((shared / "out.jsonl").read_text().splitlines()[0])["record"] == "header"


# -- palace import markdown DIR -----------------------------------------------------------------
def _cli(d: DaemonProc, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI with a short deadline: an import that hangs on a FIFO fails the test quickly."""
    import sys

    return subprocess.run([sys.executable, "-m", "palace_client", *args], env=d.env,
                          capture_output=True, text=True, timeout=timeout)


def test_markdown_reads_only_regular_files_of_the_folder(keyword_daemon: DaemonProc,
                                                         shared: Path, secret: Path) -> None:
    """What another user placed in a shared notes folder: a symlink to the owner's secret, a
    FIFO named ``*.md``, a symlink to ``/dev/zero``. None is read; each is reported."""
    _need_second_uid()
    root = shared / "notes"
    root.mkdir(mode=0o777)
    (root / "plan.md").write_text("# Plan\n\nShip the importer on Friday.\n")
    (root / "sub").mkdir()
    (root / "sub" / "alias.md").symlink_to(root / "plan.md")  # inside the folder: read
    planted = {"netrc.md": secret, "zero.md": Path("/dev/zero")}
    for name, target in planted.items():
        (root / name).symlink_to(target)
        os.lchown(root / name, ATTACKER_UID, ATTACKER_UID)
    os.mkfifo(root / "pipe.md")
    os.chown(root / "pipe.md", ATTACKER_UID, ATTACKER_UID)

    res = _cli(keyword_daemon, "import", "markdown", str(root), "--palace", "shared-md",
               "--json", timeout=30)
    assert res.returncode == 10, res.stderr
    out = json.loads(res.stdout)
    problems = {p["file"]: p["message"] for p in out["problems"]}
    assert problems["netrc.md"] == (f"a symlink leading outside {root} (to {secret}): "
                                    "not followed")
    assert problems["zero.md"] == f"a symlink leading outside {root} (to /dev/zero): not followed"
    assert problems["pipe.md"] == "cannot be read: it is a fifo, not a regular file"
    assert set(problems) == {"netrc.md", "zero.md", "pipe.md"}
    with keyword_daemon.client() as c:
        drawers = c.drawers("shared-md", limit=100)["drawers"]
    assert sorted(d["source"] for d in drawers) == ["plan.md#Plan", "sub/alias.md#Plan"]
    assert not any("hunter2" in d["text"] for d in drawers)


# -- palace init: config files in a (possibly shared) project ------------------------------------
def test_init_writes_no_config_through_a_link_another_user_planted(shared: Path,
                                                                   secret: Path) -> None:
    """A project directory may be shared: a symlink another uid planted at a config's name,
    or at the name of its ``.palace-bak`` backup, is never written through. (Links of the
    user's own, from a dotfile manager, still are: tests/palace_client/agents/test_init.py.)"""
    _need_second_uid()
    from palace_client.agents.safe_write import atomic_write, backup_once

    before = secret.read_bytes()
    config = shared / ".mcp.json"
    config.symlink_to(secret)
    os.lchown(config, ATTACKER_UID, ATTACKER_UID)
    with pytest.raises(PermissionError, match=f"symlink owned by uid {ATTACKER_UID}"):
        backup_once(config)
    with pytest.raises(PermissionError, match=f"symlink owned by uid {ATTACKER_UID}"):
        atomic_write(config, '{"mcpServers": {}}\n')
    assert secret.read_bytes() == before and config.is_symlink()

    # A dangling link at the backup's name would have the config copied wherever it points.
    config.unlink()
    config.write_text('{"mcpServers": {}}\n')
    where = secret.parent / "authorized_keys"
    (shared / ".mcp.json.palace-bak").symlink_to(where)
    os.lchown(shared / ".mcp.json.palace-bak", ATTACKER_UID, ATTACKER_UID)
    backup_once(config)
    assert not where.exists()
    assert os.path.islink(shared / ".mcp.json.palace-bak")
