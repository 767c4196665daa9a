"""The daemon's C heap: keep glibc malloc from holding on to freed memory (``tune``).

glibc serves a request of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with a
private mapping it unmaps on ``free``. By default that threshold is dynamic: each time such
a mapping is freed it rises to the freed size (up to 32 MiB), so from then on buffers of
that size come from the heap arenas, and freeing them leaves holes that small live objects
around them keep resident. In the daemon the large transient buffers are the embedding runs'
(onnxruntime tensors, the token and vector arrays of a batch) and request texts. glibc also
gives each thread that allocates its own arena, up to 8 per core, each with its own holes:
SQLite's page caches, filled and dropped by the reader threads, spread over all of them.
Under the soak's mixed multi-client load (``bench/soak.py``; ``docs/benchmarks.md``, Soak)
the arenas held ~120 MB of freed memory at the end of the prefill alone and ~280 MB after
six minutes; pinned threshold and two arenas: 9-21 MB, still growing with the churn of
SQLite's pages: ``start_trimmer`` hands the free pages of every arena back once a minute
(``malloc_trim``, a few ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

# glibc's mallopt parameter numbers (malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
# glibc's start value; set explicitly, it no longer moves.
MMAP_THRESHOLD = 128 * 1024
# The daemon's allocating threads mostly run Python (under the GIL) or wait on SQLite and
# onnxruntime, which lock their own structures: two arenas cost no throughput measured.
ARENA_MAX = 2
# Seconds between two malloc_trim calls of the trimmer thread.
TRIM_EVERY_S = 60.0


def tune() -> list[int]:
    """Pin glibc's mmap threshold at ``MMAP_THRESHOLD`` and cap its arenas at
    ``ARENA_MAX`` for this process; returns the parameters set.

    A parameter the user set through the environment (``MALLOC_*_`` or ``GLIBC_TUNABLES``)
    is left alone; nothing is set on a C library other than glibc (musl, macOS: no such
    parameters). Never raises.
    """
    if not _glibc():
        return []
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return []
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # What the user set through glibc's environment variables or tunables wins.
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    wanted = []
    if not (os.environ.get("MALLOC_MMAP_THRESHOLD_")
            or "glibc.malloc.mmap_threshold" in tunables):
        wanted.append((M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not os.environ.get("MALLOC_ARENA_MAX") and "glibc.malloc.arena_max" not in tunables:
        wanted.append((M_ARENA_MAX, ARENA_MAX))
    return [param for param, value in wanted if mallopt(param, value)]


def start_trimmer(every_s: float = TRIM_EVERY_S) -> threading.Thread | None:
    """Start a daemon thread that gives the free pages of glibc's arenas back to the system
    every ``every_s`` seconds (``malloc_trim(0)``); None (nothing started) on a C library
    other than glibc. Never raises.
    """
    if not _glibc():
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int

    def run() -> None:
        while True:
            time.sleep(every_s)
            trim(0)

    thread = threading.Thread(target=run, name="heap-trim", daemon=True)
    thread.start()
    return thread


def _glibc() -> bool:
    """Whether this process runs on glibc (``os.confstr`` is cheap; ``platform.libc_ver``
    reads the interpreter's binary)."""
    with contextlib.suppress(ValueError, OSError):
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    return False
