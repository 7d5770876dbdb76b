"""The global cap on concurrently running sandboxes (one anyio CapacityLimiter per event loop).

A limiter binds to the event loop that first waits on it, so we keep one per running loop; a process
normally has a single loop, which makes this the process-wide limit. ``set_concurrency_limit`` changes
the default for loops created later and resizes the limiters that already exist.
"""

from __future__ import annotations

import asyncio
import os
import weakref

import anyio

_default_limit: int = max(1, os.cpu_count() or 1)
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def concurrency_limit() -> int:
    """The configured number of sandboxes that may run at once."""
    return _default_limit


def set_concurrency_limit(limit: int) -> None:
    """Set how many sandboxes may run at once (default: the CPU count)."""
    global _default_limit
    if limit < 1:
        raise ValueError(f"concurrency limit must be >= 1, got {limit}")
    _default_limit = limit
    for limiter in list(_limiters.values()):
        limiter.total_tokens = limit


def get_concurrency_limiter() -> anyio.CapacityLimiter:
    """The limiter every sandbox run acquires, for the running event loop."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = anyio.CapacityLimiter(_default_limit)
        _limiters[loop] = limiter
    return limiter
