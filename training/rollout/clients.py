"""MCP client factories for rollouts: one in-process server, or several remote servers taken in turn.

Rollouts reach the canvas only through an MCP client; each trajectory opens its own client context.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from mcp import Client

from training.evaluate.clients import in_process_clients, remote_clients
from training.evaluate.runner import MakeClient

__all__ = ["MakeClient", "in_process_clients", "round_robin", "round_robin_remote"]


def round_robin(factories: Sequence[MakeClient]) -> MakeClient:
    """A factory that hands out clients from `factories` in turn (scale-out over several canvas servers)."""
    if not factories:
        raise ValueError("round_robin needs at least one client factory")
    cycle = itertools.cycle(list(factories))

    def connect() -> AbstractAsyncContextManager[Client]:
        return next(cycle)()

    return connect


def round_robin_remote(urls: Sequence[str], token: str | None = None) -> MakeClient:
    """Clients of several streamable-HTTP canvas servers, one URL after the other."""
    if not urls:
        raise ValueError("round_robin_remote needs at least one MCP URL")
    return round_robin([remote_clients(url, token) for url in urls])
