"""Serve the MCP app over streamable HTTP with uvicorn, refusing unsafe binds."""

from __future__ import annotations

import uvicorn

from flowsteer_mcp.server.app import FlowSteerServer


class UnsafeBindError(RuntimeError):
    pass


def check_bind(server: FlowSteerServer) -> None:
    settings = server.settings
    if not settings.is_loopback() and settings.token is None:
        raise UnsafeBindError(
            f"Refusing to listen on {settings.host} without a bearer token: set FLOWSTEER_MCP_TOKEN (or pass "
            "--token-env NAME) or bind to 127.0.0.1."
        )


async def serve_http(server: FlowSteerServer, *, log_level: str = "warning") -> None:
    check_bind(server)
    config = uvicorn.Config(
        server.http_app(), host=server.settings.host, port=server.settings.port, log_level=log_level.lower()
    )
    await uvicorn.Server(config).serve()
