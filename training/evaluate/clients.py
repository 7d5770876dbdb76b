"""MCP client factories for the runner: an in-process server, or a running server over streamable HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from training.evaluate.runner import MakeClient

# The streamable-HTTP transport holds response streams open: long reads, short everything else.
MCP_HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def in_process_clients(server: Any) -> MakeClient:
    """Clients of an in-process `MCPServer` (each episode opens its own session)."""

    def connect() -> AbstractAsyncContextManager[Client]:
        return Client(server)

    return connect


def remote_clients(url: str, token: str | None = None) -> MakeClient:
    """Clients of a streamable-HTTP server; `token` is sent as a bearer token when the server requires one."""

    @asynccontextmanager
    async def connect() -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with (
            httpx2.AsyncClient(headers=headers, timeout=MCP_HTTP_TIMEOUT) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            yield client

    return connect
