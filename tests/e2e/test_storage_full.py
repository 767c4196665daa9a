"""A full disk is reported as STORAGE_FULL naming the storage that is full, with SQLite's real
reason: an online backup's copy step fails with an error whose text SQLite has already reset
("not an error"), which once read "SQLite: not an error" about the palace's own storage."""

from __future__ import annotations

from pathlib import Path

import pytest

from palaced.wire.errors import StorageFull
from tests.conftest import DaemonProc, base_env
from tests.support import mounts


@pytest.mark.daemon
def test_a_backup_onto_a_full_disk_is_storage_full_of_the_backup(home: Path) -> None:
    why = mounts.why_not()
    assert why is None, f"cannot mount a private tmpfs here: {why}"
    d = DaemonProc(home, base_env(home, model=False))
    d.start(wait_model=False)
    with d.client() as c:
        c.create_palace("big")
        c.remember_many("big", [{"text": f"note {i} " + "otters hold hands " * 200}
                                for i in range(200)])
    d.stop()
    target = home / "bk"
    target.mkdir()
    with mounts.PrivateTmpfs(target, "8m") as fs:
        try:
            fs.start_daemon(d)
            filler = fs.fill()
            with d.client() as c:
                with pytest.raises(StorageFull) as info:
                    c.backup("big", to=target)
                err = info.value
                assert (err.name, err.details["condition"]) == ("STORAGE_FULL", "full")
                assert "not an error" not in err.message, err.message
                assert "database or disk is full" in err.message, err.message
                assert str(target) in err.message and "free some space" in err.message
                filler.unlink()
                assert c.backup("big", to=target)["backups"][0]["counts"]["drawers"] == 200
        finally:
            d.stop()
