"""``palace model fetch|import|load`` against a real daemon that starts without a model.

The daemon runs without ``PALACE_EMBED_MODEL_PATH`` and with ``HF_ENDPOINT`` on a closed local
port, so it starts keyword-only at once (as on a machine that cannot reach the model hub).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from palace_client.models import archive as model_archive
from palace_client.models import fetch as model_fetch
from palace_client.models import files as model_files
from palaced.wire.errors import InvalidContent
from palaced.wire.paths import MODEL_RECORD
from tests.conftest import MODEL_DIR, DaemonProc, base_env

DEAD_HUB = "http://127.0.0.1:9"  # the discard port: nothing listens there
INSTALLED = "models/sentence-transformers--all-MiniLM-L6-v2"


@pytest.fixture
def bare_daemon(home: Path) -> Iterator[DaemonProc]:
    env = base_env(home)
    del env["PALACE_EMBED_MODEL_PATH"]
    env["HF_ENDPOINT"] = DEAD_HUB
    d = DaemonProc(home, env)
    d.start()
    yield d
    d.stop()


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palace_client", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _record(home: Path) -> dict[str, object]:
    return dict(json.loads((home / INSTALLED / MODEL_RECORD).read_text()))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_a_model_status_names_the_commands_and_fetch_fails_fast(
        bare_daemon: DaemonProc) -> None:
    d = bare_daemon
    status = d.cli("status", check=True).stdout
    assert "UNAVAILABLE - keyword-only" in status
    assert "`palace model fetch`" in status and "`palace model import PATH`" in status
    d.cli("create", "p", check=True)
    d.cli("remember", "Deploys happen on Tuesdays", "--palace", "p", check=True)
    rec = d.cli("recall", "when are deploys?", "--palace", "p", check=True)
    assert "(keyword-only: no embedding model" in rec.stderr and "palace model fetch" in rec.stderr
    assert rec.stderr.count("palace model fetch") == 1, rec.stderr  # the hint said once

    for endpoint, host in ((DEAD_HUB, "127.0.0.1:9"), ("", "huggingface.co:443")):
        env = dict(d.env, HF_ENDPOINT=endpoint)
        started = time.monotonic()
        res = _cli(env, "model", "fetch", "--timeout", "2")
        assert time.monotonic() - started < 15
        assert res.returncode == 1, res.stderr
        assert f"the model hub {host} is unreachable" in res.stderr
        assert "palace model import PATH" in res.stderr and "[EMBEDDER_UNAVAILABLE]" in res.stderr
    assert not (d.home / INSTALLED).exists()
    assert not list((d.home / "models").glob(".staging-*"))


def _tar(path: Path, top: str = "all-MiniLM-L6-v2", extra: dict[str, bytes] | None = None,
         replace: dict[str, bytes] | None = None) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for f in sorted(MODEL_DIR.iterdir()):
            data = (replace or {}).get(f.name, f.read_bytes())
            info = tarfile.TarInfo(f"{top}/{f.name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_import_directory_and_archives_verify_and_load(bare_daemon: DaemonProc,
                                                       tmp_path: Path) -> None:
    d = bare_daemon
    res = d.cli("model", "import", str(MODEL_DIR))
    assert res.returncode == 0, res.stderr
    assert f"verified: {model_files.INT8}" in res.stdout
    assert _sha(MODEL_DIR / "model.onnx") in res.stdout and "warning" not in res.stderr
    record = _record(d.home)
    assert record["verified"] == model_files.INT8 and record["dims"] == 384
    assert record["files"] == {f.name: _sha(f) for f in MODEL_DIR.iterdir()}
    with d.client() as c:
        model = c.status()["model"]
        assert model["state"] == "ready" and model["source"] == str(d.home / INSTALLED)
        c.create_palace("p")
        c.remember("p", "Alice owns the payment gateway integration")
        r = c.recall_ex("p", "who is responsible for billing?")
        assert r["mode"] == "hybrid" and r["results"][0]["vector"] > 0.2

    # A different but complete export (here: a reformatted tokenizer_config.json) is
    # installed with a warning and its hashes recorded; the archive's top folder is skipped.
    config = (MODEL_DIR / "tokenizer_config.json").read_bytes() + b"\n"
    res = d.cli("model", "import", str(_tar(tmp_path / "other.tar.gz",
                                              replace={"tokenizer_config.json": config})),
                "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["verified"] is None and "tokenizer_config.json" in out["warnings"][0]
    assert "palace: warning: these files differ" in res.stderr
    assert _record(d.home)["files"]["tokenizer_config.json"] == hashlib.sha256(config).hexdigest()
    assert out["daemon"]["state"] == "ready"

    zipped = tmp_path / "model.zip"
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_STORED) as zf:
        for f in MODEL_DIR.iterdir():
            zf.write(f, f.name)
    res = d.cli("model", "import", str(zipped))
    assert res.returncode == 0 and f"verified: {model_files.INT8}" in res.stdout, res.stderr


def test_import_refuses_unsafe_incomplete_and_unloadable_copies(bare_daemon: DaemonProc,
                                                                tmp_path: Path) -> None:
    d = bare_daemon
    d.cli("model", "import", str(MODEL_DIR), check=True)
    good = _record(d.home)

    escape = tmp_path / "deep" / "er"
    escape.mkdir(parents=True)
    evil = _tar(escape / "evil.tar.gz", extra={"../../escaped.json": b"{}"})
    res = d.cli("model", "import", str(evil))
    assert res.returncode == 5 and "refusing archive" in res.stderr, res.stderr
    assert "'../../escaped.json'" in res.stderr and "[INVALID_CONTENT]" in res.stderr
    assert not list(tmp_path.rglob("escaped.json")) and not list(d.home.rglob("escaped.json"))

    linked = tmp_path / "linked.tar.gz"
    with tarfile.open(linked, "w:gz") as tar:
        info = tarfile.TarInfo("tokenizer.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    res = d.cli("model", "import", str(linked))
    assert res.returncode == 5 and "is a link, not a regular file" in res.stderr

    partial = tmp_path / "partial"
    shutil.copytree(MODEL_DIR, partial)
    (partial / "tokenizer.json").unlink()
    res = d.cli("model", "import", str(partial))
    assert res.returncode == 5 and "missing tokenizer.json" in res.stderr

    broken = tmp_path / "broken"
    shutil.copytree(MODEL_DIR, broken)
    (broken / "model.onnx").write_bytes(b"not an onnx model")
    res = d.cli("model", "import", str(broken))
    assert res.returncode == 1 and "[EMBEDDER_UNAVAILABLE]" in res.stderr, res.stderr
    assert _record(d.home) == good  # rolled back to the copy that loads
    assert not list((d.home / "models").glob(".previous-*"))

    # A copy whose vectors do not have the size its record promises is not loaded; the model
    # in use stays.
    record_file = d.home / INSTALLED / MODEL_RECORD
    record_file.write_text(json.dumps({**good, "dims": 512}))
    res = d.cli("model", "load")
    assert res.returncode == 1 and "makes 384-dimensional vectors, not the 512" in res.stderr
    with d.client() as c:
        assert c.status()["model"]["state"] == "ready"
    record_file.write_text(json.dumps(good))
    res = d.cli("model", "load", check=True)
    assert "model ready: fastembed:sentence-transformers/all-MiniLM-L6-v2:384" in res.stdout


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[str]:
    """A local stand-in for the model hub serving the shared (int8) files."""
    root = tmp_path / "hub"
    base = root / model_fetch.REPO / "resolve" / model_fetch.REVISION
    for name, remote in model_fetch.FILES.items():
        (base / remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MODEL_DIR / name, base / remote)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_refuses_files_that_are_not_the_manifests(bare_daemon: DaemonProc, hub: str
                                                        ) -> None:
    d = bare_daemon
    res = _cli(dict(d.env, HF_ENDPOINT=hub), "model", "fetch", "--timeout", "5")
    assert res.returncode == 5 and "refusing the download" in res.stderr, res.stderr
    assert _sha(MODEL_DIR / "model.onnx") in res.stderr  # the int8 file, not the fp32 one
    assert "  tokenizer.json  0.5/0.5 MB" in res.stderr  # progress, a line per file
    assert not (d.home / INSTALLED).exists()
    assert not list((d.home / "models").glob(".staging-*"))


def test_fetch_downloads_verifies_installs_and_loads(bare_daemon: DaemonProc, hub: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole fetch, in-process, with the manifest of the files the local hub serves."""
    from typer.testing import CliRunner

    from palace_client.cli import app

    monkeypatch.setattr(model_fetch, "EXPECTED", model_files.KNOWN_EXPORTS[model_files.INT8])
    for key in ("PALACE_HOME", "HF_ENDPOINT", "PALACE_TIKTOKEN_FILE", "PALACE_EMBED_MODEL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PALACE_HOME", str(bare_daemon.home))
    monkeypatch.setenv("HF_ENDPOINT", hub)
    res = CliRunner().invoke(app, ["model", "fetch", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["verified"] == model_files.INT8 and out["daemon"]["state"] == "ready"
    assert _record(bare_daemon.home)["source"] == f"{hub}/{model_fetch.REPO}@main"
    with bare_daemon.client() as c:
        assert c.status()["model"]["source"] == str(bare_daemon.home / INSTALLED)


@pytest.mark.parametrize("name", ["/etc/x.json", "a/../../x.json", "..", "C:/x.json",
                                  "..\\x.json"])
def test_unpack_refuses_names_escaping_the_directory(tmp_path: Path, name: str) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("model.onnx", b"x")
        zf.writestr(name, b"{}")
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(InvalidContent, match="outside the directory"):
        model_archive.unpack(archive, dest)
    assert list(dest.iterdir()) == []  # nothing written, not even the safe member


def _small_tar(path: Path, members: list[tuple[str, bytes | None]]) -> Path:
    """A tar of ``(name, data)`` members (data None: a directory), without the model."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.daemon
def test_import_refuses_a_duplicate_member_with_a_typed_error(home: Path,
                                                              tmp_path: Path) -> None:
    """Two members of one name: which one is the model's is ambiguous. Refused as unsafe
    (INVALID_CONTENT, exit 5) before anything is written; no daemon is needed for that."""
    dup = _small_tar(tmp_path / "dup.tar.gz", [("m/model.onnx", b"first"),
                                                ("m/tokenizer.json", b"{}"),
                                                ("m/model.onnx", b"second")])
    res = _cli(base_env(home, model=False), "model", "import", str(dup))
    assert res.returncode == 5, res.stderr
    assert "'m/model.onnx' appears twice in the archive" in res.stderr
    assert "[INVALID_CONTENT]" in res.stderr and "a bug in palace" not in res.stderr
    assert not list((home / "models").glob("*/**/model.onnx"))


@pytest.mark.parametrize("members, why", [
    ([("a/x.json", b"1"), ("./a/x.json", b"2")], "appears twice"),
    ([("a", b"file"), ("a/x.json", b"{}")], "lies under a member that is a file"),
    ([("a/x.json", b"{}"), ("a", b"file")], "appears twice"),
    ([("a/", None), ("a", b"file")], "appears twice"),
])
def test_unpack_refuses_ambiguous_names(tmp_path: Path, members: list[tuple[str, bytes | None]],
                                        why: str) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(InvalidContent, match=why):
        model_archive.unpack(_small_tar(tmp_path / "a.tar.gz", members), dest)
    assert list(dest.iterdir()) == []


def test_unpack_refuses_hard_links_zip_symlinks_and_damaged_archives(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    hard = tmp_path / "hard.tar"
    with tarfile.open(hard, "w") as tar:
        info = tarfile.TarInfo("model.onnx")
        info.type, info.linkname = tarfile.LNKTYPE, "/etc/shadow"
        tar.addfile(info)
    with pytest.raises(InvalidContent, match="is a link, not a regular file"):
        model_archive.unpack(hard, dest)
    linked = tmp_path / "linked.zip"
    with zipfile.ZipFile(linked, "w") as zf:
        info = zipfile.ZipInfo("tokenizer.json")
        info.external_attr = (0o120777 << 16)
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(InvalidContent, match="is a link, not a regular file"):
        model_archive.unpack(linked, dest)
    # A gzip cut short: a typed error, not a crash.
    whole = _small_tar(tmp_path / "whole.tar.gz", [("model.onnx", bytes(range(256)) * 4096)])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole.read_bytes()[:2000])
    with pytest.raises(InvalidContent) as got:
        model_archive.unpack(cut, dest)
    assert got.value.details["condition"] == "damaged-archive"
    assert list(dest.iterdir()) == []


def test_unpack_refuses_too_many_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setattr(model_archive, "MAX_MEMBERS", 3, raising=False)
    dest = tmp_path / "out"
    dest.mkdir()
    for archive in (_small_tar(tmp_path / "many.tar.gz",
                               [(f"f{i}.txt", b"x") for i in range(4)]),
                    tmp_path / "many.zip"):
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive, "w") as zf:
                for i in range(4):
                    zf.writestr(f"f{i}.txt", b"x")
        with pytest.raises(InvalidContent, match="more than 3 members"):
            model_archive.unpack(archive, dest)


def test_stage_files_copies_regular_files_only_and_bounded(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A model directory may be shared: a FIFO swapped in after ``locate`` looked is refused
    (not waited on), a file past the cap is refused; a symlink to a regular file is followed
    (a Hugging Face cache is made of them) and copied 0600."""
    from palaced.wire.errors import SourceUnreadable

    staging = tmp_path / "staging"
    staging.mkdir()
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    with pytest.raises(SourceUnreadable, match="it is a fifo, not a regular file"):
        model_files.stage_files({"model.onnx": fifo}, staging)
    monkeypatch.setattr(model_files, "MAX_FILE_BYTES", 1024, raising=False)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(InvalidContent, match="is larger than"):
        model_files.stage_files({"tokenizer.json": big}, staging)
    (tmp_path / "blob").write_text("{}")
    (tmp_path / "config.json").symlink_to(tmp_path / "blob")
    checked = model_files.stage_files({"config.json": tmp_path / "config.json"}, staging)
    assert checked.files["config.json"] == hashlib.sha256(b"{}").hexdigest()
    assert (staging / "config.json").stat().st_mode & 0o777 == 0o600


def test_import_of_a_fastembed_catalog_model_puts_its_onnx_file_where_fastembed_loads_it(
        bare_daemon: DaemonProc) -> None:
    # No bge-small files can be had offline: MiniLM's stand in (same tokenizer family and
    # dimension; fastembed reads bge-small's vector from the first token, which any BERT
    # graph gives). This proves the install and loading path of fastembed's own catalog
    # models, not their quality.
    d = bare_daemon
    res = d.cli("model", "import", str(MODEL_DIR), "--name", "bge-small", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    installed = d.home / "models" / "BAAI--bge-small-en-v1.5"
    assert out["installed"] == str(installed) and out["model"] == "BAAI/bge-small-en-v1.5"
    assert (installed / "model_optimized.onnx").is_file()
    assert not (installed / "model.onnx").exists()
    assert "accepted as another export of BAAI/bge-small-en-v1.5" in out["warnings"][0]
    assert out["daemon"]["checked"] is True
    assert out["daemon"]["identity"] == "fastembed:BAAI/bge-small-en-v1.5:384"
    record = json.loads((installed / MODEL_RECORD).read_text())
    assert record["model_file"] == "model_optimized.onnx" and record["dims"] == 384
    with d.client() as c:  # checked on the side: the daemon still has no model
        assert c.status()["model"]["state"] == "unavailable"
