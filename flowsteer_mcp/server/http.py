"""Serve the MCP app over streamable HTTP with uvicorn, refusing unsafe binds."""

from __future__ import annotations

from urllib.parse import urlsplit

import structlog
import uvicorn

from flowsteer_mcp.host_policy import HostPolicy, UnsafeBindError
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.auth import MIN_RECOMMENDED_TOKEN_CHARS, TOKEN_ADVICE
from flowsteer_mcp.server.oauth.gate import metadata_url
from flowsteer_mcp.server.oauth.settings import OAuthSettings

__all__ = ["UnsafeBindError", "serve_http"]

log = structlog.get_logger(__name__)


def _log_access_policy(server: FlowSteerServer) -> None:
    settings = server.settings
    secret = settings.token.get_secret_value() if settings.token else None
    policy = HostPolicy.for_server(
        settings.host,
        settings.allowed_hosts,
        authenticated=settings.authenticated,
        allowed_origins=settings.allowed_origins,
    )
    accepted = ["loopback names", *sorted(policy.names)]
    log.info(
        "http_access_policy",
        host=settings.host,
        port=settings.port,
        auth="oauth" if settings.oauth else "bearer" if secret else "none (loopback only)",
        host_check=accepted if policy.check_host else "off (the credential guards)",
        origin_check=[*accepted, *settings.allowed_origins],
    )
    if settings.oauth is not None:
        _log_oauth_policy(settings.oauth, settings.path)
    if secret is not None and len(secret) < MIN_RECOMMENDED_TOKEN_CHARS:
        log.warning(
            "http_weak_bearer_secret",
            hint=f"use at least {MIN_RECOMMENDED_TOKEN_CHARS} random characters, e.g. `{TOKEN_ADVICE}`",
        )


def _log_oauth_policy(oauth: OAuthSettings, path: str) -> None:
    log.info(
        "http_oauth_policy",
        issuer=oauth.issuer,
        resource=oauth.resource,
        jwks=oauth.jwks_url or "from the issuer's discovery document",
        metadata=metadata_url(oauth),
        read_scope=f"{oauth.read_scope} (read-only tools, resources, prompts, the viewer)",
        write_scope=f"{oauth.write_scope} (every other tool; implies {oauth.read_scope})",
    )
    resource_path = urlsplit(oauth.resource).path.rstrip("/") or "/"
    if resource_path != (path.rstrip("/") or "/"):
        log.warning(
            "http_oauth_resource_path_differs",
            resource_path=resource_path,
            path=path,
            hint="fine behind a proxy that maps the one onto the other; otherwise make --oauth-resource end in --path",
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
