"""MCP client factories for the runner: an in-process server, or running servers over streamable HTTP.

Several servers (`--mcp-url` repeated) share the episodes: each episode opens its one session on the server with
the fewest sessions open (then the first), through a `ReplicaPool`, and keeps it to the end (its workflow lives
there). A connection failure marks the server dead, so later sessions go to the others. An evaluation's episode
on a server that died is a run failure that `--resume` runs again; a training rollout names its episode
(`CANVAS_EPISODE`), so the episode's session is a lease of the pool and the rollout worker runs an episode whose
server died again from scratch on another server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from operators.backends.replicas import CONNECTION_FAILURES, ReplicaPool
from training.evaluate.runner import MakeClient

# The streamable-HTTP transport holds response streams open: long reads, short everything else.
MCP_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
# The episode whose sessions are opened from this context (set by the rollout worker): its session is then a
# lease of the servers' pool, which remembers the servers it ran on and whether its server died under it.
CANVAS_EPISODE: ContextVar[str | None] = ContextVar("flowsteer_canvas_episode", default=None)


class _DeathWatch(httpx2.AsyncBaseTransport):
    """Marks its server dead in the pool when the connection itself fails (then raises as before)."""

    def __init__(self, pool: ReplicaPool, url: str) -> None:
        self._pool = pool
        self._url = url
        self._inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._inner.handle_async_request(request)
        except CONNECTION_FAILURES as error:
            self._pool.mark_dead(self._url, f"{type(error).__name__}: {error}")
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


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
        # the least busy live server (or the episode's own); the session is the episode's whole stay there
        server = self.pool.route(CANVAS_EPISODE.get())
        server.in_flight += 1
        try:
            headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
            watch = _DeathWatch(self.pool, server.url)
            async with (
                httpx2.AsyncClient(headers=headers, timeout=MCP_HTTP_TIMEOUT, transport=watch) as http,
                Client(streamable_http_client(server.url, http_client=http)) as client,
            ):
                yield client
        finally:
            server.in_flight -= 1


def remote_clients(urls: str | Sequence[str], token: str | None = None) -> RemoteClients:
    """Clients of one streamable-HTTP server, or of several sharing the episodes (`RemoteClients`)."""
    return RemoteClients(urls, token)
