"""MCP client factories for the runner: an in-process server, or running servers over streamable HTTP.

Several servers (`--mcp-url` repeated) share the episodes: each episode opens its one session on the server with
the fewest sessions open (then the first), through a `ReplicaPool`, and keeps it to the end (its workflow lives
there). A server that fails fails its episode, a run failure that `--resume` runs again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from operators.backends.replicas import ReplicaPool
from training.evaluate.runner import MakeClient

# The streamable-HTTP transport holds response streams open: long reads, short everything else.
MCP_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def in_process_clients(server: Any) -> MakeClient:
    """Clients of an in-process `MCPServer` (each episode opens its own session)."""

    def connect() -> AbstractAsyncContextManager[Client]:
        return Client(server)

    return connect


class RemoteClients:
    """Clients of streamable-HTTP servers (one URL, or several sharing the episodes); `token` is sent as a bearer
    token when the servers require one. `pool` holds the servers with their open sessions (`in_flight`)."""

    def __init__(self, urls: str | Sequence[str], token: str | None = None) -> None:
        self.pool = ReplicaPool([urls] if isinstance(urls, str) else urls, role="MCP server")
        self._token = token

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[Client]:
        server = self.pool.route(None)  # the least busy server; the session is the episode's whole stay there
        server.in_flight += 1
        try:
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
            async with (
                httpx2.AsyncClient(headers=headers, timeout=MCP_HTTP_TIMEOUT) as http,
                Client(streamable_http_client(server.url, http_client=http)) as client,
            ):
                yield client
        finally:
            server.in_flight -= 1


def remote_clients(urls: str | Sequence[str], token: str | None = None) -> RemoteClients:
    """Clients of one streamable-HTTP server, or of several sharing the episodes (`RemoteClients`)."""
    return RemoteClients(urls, token)
