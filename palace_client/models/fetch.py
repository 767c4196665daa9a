"""``palace model fetch``: downloading the default model's files from the model hub.

The files of ``REPO`` at ``REVISION`` are read over HTTPS from ``HF_ENDPOINT`` (default
``https://huggingface.co``, the Hugging Face hub; a mirror works the same), each checked
against the manifest (``model_files.KNOWN_EXPORTS``) as it streams in. The hub is probed first
with a bounded name lookup and TCP connect, so a machine that cannot reach it learns so in
seconds (naming the host, and pointing at ``palace model import``) instead of hanging; every
later socket operation has the same timeout.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from palace_client.models.files import FP32, KNOWN_EXPORTS, MODEL
from palaced.wire.errors import EmbedderUnavailable, InvalidContent

REPO = MODEL  # the model's own repository publishes its ONNX export and tokenizer files
REVISION = "main"
# Installed name -> path in the repository; the small files first (a changed repository is
# then noticed before the 90 MB download).
FILES = {"tokenizer.json": "tokenizer.json", "tokenizer_config.json": "tokenizer_config.json",
         "config.json": "config.json", "special_tokens_map.json": "special_tokens_map.json",
         "model.onnx": "onnx/model.onnx"}
EXPECTED = KNOWN_EXPORTS[FP32]
IMPORT_HINT = (f"on a machine that can reach it, download the files of {REPO} (onnx/model.onnx, "
               "tokenizer.json, tokenizer_config.json, config.json, special_tokens_map.json), "
               "copy them here and install them with `palace model import PATH` (a directory "
               "or a .tar.gz/.zip); see docs/operations.md#models")


def endpoint() -> str:
    """The model hub's base URL (``HF_ENDPOINT`` or the Hugging Face hub)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def probe(base: str, timeout: float) -> None:
    """Check that the hub answers a TCP connect within ``timeout`` seconds (lookup included).

    Raises:
        EmbedderUnavailable: it does not; the message names the host and the way out.
    """
    url = urlsplit(base)
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    found: list[list[tuple[Any, ...]]] = []
    failed: list[BaseException] = []

    def lookup() -> None:
        try:
            found.append(list(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))
        except OSError as exc:
            failed.append(exc)

    # getaddrinfo has no timeout of its own: a dead resolver would hang the command.
    worker = threading.Thread(target=lookup, daemon=True)
    worker.start()
    worker.join(timeout)
    why = None
    if failed:
        why = f"name lookup failed: {failed[0]}"
    elif not found:
        why = f"name lookup timed out after {timeout:g}s"
    else:
        try:
            address = found[0][0][4]
            socket.create_connection((address[0], address[1]), timeout=timeout).close()
        except OSError as exc:
            why = str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError | socket.timeout):
                why = f"no answer within {timeout:g}s"
    if why is not None:
        raise EmbedderUnavailable(
            f"cannot fetch the model: the model hub {host}:{port} is unreachable ({why}); "
            + IMPORT_HINT,
            details={"condition": "hub-unreachable", "host": host, "port": port})


def download(base: str, staging: Path, timeout: float,
             progress: Callable[[str, int, int | None, bool], None]) -> dict[str, str]:
    """Download every file into ``staging``, checking each sha256; ``{name: sha256}``.

    ``progress(name, bytes so far, total or None, done)`` is called as bytes arrive.

    Raises:
        EmbedderUnavailable: the hub failed (HTTP error, broken or stalled connection).
        InvalidContent: a file's sha256 is not the manifest's (the download is refused).
    """
    hashes: dict[str, str] = {}
    for name, remote in FILES.items():
        url = f"{base}/{REPO}/resolve/{REVISION}/{remote}"
        h = hashlib.sha256()
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(
                    staging / name, "wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or None
                got = 0
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    h.update(chunk)
                    got += len(chunk)
                    progress(name, got, total, False)
                progress(name, got, total, True)
        except (urllib.error.URLError, OSError) as exc:
            raise EmbedderUnavailable(f"cannot fetch the model: {url}: {exc}; " + IMPORT_HINT,
                                      details={"condition": "download-failed", "url": url}
                                      ) from exc
        hashes[name] = h.hexdigest()
        if hashes[name] != EXPECTED[name]:
            raise InvalidContent(
                f"refusing the download: {url} has sha256 {hashes[name]}, not the "
                f"{EXPECTED[name]} palace expects (the repository changed, or the download "
                "was tampered with); nothing was installed. " + IMPORT_HINT,
                details={"condition": "checksum", "file": name, "sha256": hashes[name],
                         "expected": EXPECTED[name]})
    return hashes


def tty_progress(name: str, got: int, total: int | None, done: bool) -> None:
    """Show a download's progress on stderr (a line per file when it is not a terminal)."""
    if not sys.stderr.isatty() and not done:
        return
    size = f"{got / 1e6:.1f}" + (f"/{total / 1e6:.1f}" if total else "") + " MB"
    sys.stderr.write(f"\r  {name}  {size}" + ("\n" if done else ""))
    sys.stderr.flush()
