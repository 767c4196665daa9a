"""Worker-thread hops for the async layers over an open Palace.

The rules of the knowledge graph and of the memory lifecycle are synchronous; ``knowledge``
and ``lifecycle_ops`` run them here with one worker-thread hop per unit of work. ``read`` runs
in one reader snapshot. ``write`` and ``exclusive`` run under the palace's ``write_lock`` in a
shielded scope, so a disconnecting client never leaves a half-applied write, and bump
``write_counter`` so caches keyed on it are invalidated.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
import apsw

from palaced.palace import Palace

T = TypeVar("T")


async def read(palace: Palace, fn: Callable[[apsw.Connection], T]) -> T:
    """Run ``fn(conn)`` in a worker thread on one reader snapshot."""
    return await anyio.to_thread.run_sync(palace.store.read, fn)


async def exclusive(palace: Palace, fn: Callable[[], T], *, wrote: bool = True) -> T:
    """Run ``fn`` in a worker thread under the write lock, shielded from cancellation."""
    async with palace.write_lock:
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(fn)
    if wrote:
        palace.write_counter += 1
        palace.last_write = time.monotonic()
    return result


async def write(palace: Palace, fn: Callable[[apsw.Connection], T]) -> T:
    """Run ``fn(conn)`` in one write transaction in a worker thread, as ``exclusive`` does."""
    async with palace.write_lock:
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(palace.store.write, fn)
    palace.write_counter += 1
    palace.last_write = time.monotonic()
    return result
