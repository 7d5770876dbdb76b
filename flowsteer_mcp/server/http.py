"""Serve the MCP app over streamable HTTP with uvicorn, refusing unsafe binds."""

from __future__ import annotations

import structlog
import uvicorn

from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.auth import MIN_RECOMMENDED_TOKEN_CHARS, TOKEN_ADVICE
from flowsteer_mcp.server.host_policy import HostPolicy, UnsafeBindError

__all__ = ["UnsafeBindError", "serve_http"]

log = structlog.get_logger(__name__)


def _log_access_policy(server: FlowSteerServer) -> None:
    settings = server.settings
    secret = settings.token.get_secret_value() if settings.token else None
    policy = HostPolicy.for_server(settings.host, settings.allowed_hosts, authenticated=secret is not None)
    log.info(
        "http_access_policy",
        host=settings.host,
        port=settings.port,
        auth="bearer" if secret else "none (loopback only)",
        host_check="off (bearer auth guards)" if policy is None else ["loopback names", *sorted(policy.names)],
    )
    if secret is not None and len(secret) < MIN_RECOMMENDED_TOKEN_CHARS:
        log.warning(
            "http_weak_bearer_secret",
            hint=f"use at least {MIN_RECOMMENDED_TOKEN_CHARS} random characters, e.g. `{TOKEN_ADVICE}`",
        )


async def serve_http(server: FlowSteerServer, *, log_level: str = "warning") -> None:
    app = server.http_app()  # refuses unsafe binds before anything listens
    _log_access_policy(server)
    # Open SSE streams (the viewer's, MCP's GET streams) never end by themselves: bound the graceful shutdown.
    config = uvicorn.Config(
        app,
        host=server.settings.bind_host,
        port=server.settings.port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=3,
    )
    await uvicorn.Server(config).serve()
