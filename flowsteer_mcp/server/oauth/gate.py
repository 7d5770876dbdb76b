"""The OAuth resource server around the HTTP app, assembled from the SDK's parts and ours.

Order, outermost first: the protected resource metadata document (RFC 9728) is public; every other HTTP request
goes through the SDK's `AuthenticationMiddleware` with its `BearerAuthBackend` (our `JwtVerifier` inside, and
the SDK's own check that the token's resource is this one), `AuthContextMiddleware`, `RequireAuthMiddleware`
(401 with `resource_metadata=` for a missing or refused token), then our `ScopeGuard` (403 with the scope
challenge). Lifespan events go straight to the app, whose session manager lives in them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Router
from starlette.types import ASGIApp, Receive, Scope, Send

from flowsteer_mcp.server.oauth.guard import ScopeGuard
from flowsteer_mcp.server.oauth.scopes import ListTools, ScopePolicy
from flowsteer_mcp.server.oauth.settings import OAuthSettings
from flowsteer_mcp.server.oauth.verifier import JwtVerifier

RESOURCE_NAME = "FlowSteer workflow canvas"


def sdk_auth_settings(settings: OAuthSettings) -> AuthSettings:
    """The SDK's resource-server settings; its URL type keeps a path-less issuer without a trailing slash, so
    the metadata names the issuer exactly as its tokens do."""
    return AuthSettings.model_validate(
        {"issuer_url": settings.issuer, "resource_server_url": settings.resource, "validate_token_resource": True}
    )


def metadata_url(settings: OAuthSettings) -> str:
    """The URL of this resource's metadata document, which every 401 and 403 names."""
    resource = sdk_auth_settings(settings).resource_server_url
    assert resource is not None
    return str(build_resource_metadata_url(resource))


class OAuthGate:
    """Pure ASGI dispatch: lifespan to the app, the metadata path to the metadata route, the rest through auth."""

    def __init__(self, app: ASGIApp, protected: ASGIApp, metadata: ASGIApp, metadata_path: str) -> None:
        self.app = app
        self.protected = protected
        self.metadata = metadata
        self.metadata_path = metadata_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
        elif scope["type"] == "http" and scope.get("path") == self.metadata_path:
            await self.metadata(scope, receive, send)
        else:
            await self.protected(scope, receive, send)


def oauth_gate(
    app: ASGIApp,
    settings: OAuthSettings,
    *,
    list_tools: ListTools,
    mcp_path: str,
    max_body_bytes: int,
    verifier: TokenVerifier | None = None,
) -> OAuthGate:
    """`app` behind OAuth (module docstring); `list_tools` gives the tool annotations the scopes follow."""
    auth = sdk_auth_settings(settings)
    assert auth.resource_server_url is not None
    document_url = build_resource_metadata_url(auth.resource_server_url)
    guard = ScopeGuard(
        app,
        ScopePolicy(list_tools),
        settings,
        mcp_path=mcp_path,
        max_body_bytes=max_body_bytes,
        metadata_url=str(document_url),
    )
    backend = BearerAuthBackend(verifier or JwtVerifier(settings), resource_server_url=auth.resource_server_url)
    protected = AuthenticationMiddleware(
        AuthContextMiddleware(RequireAuthMiddleware(guard, required_scopes=[], resource_metadata_url=document_url)),
        backend=backend,
    )
    routes = create_protected_resource_routes(
        resource_url=auth.resource_server_url,
        authorization_servers=[auth.issuer_url],
        scopes_supported=settings.scopes,
        resource_name=RESOURCE_NAME,
    )
    return OAuthGate(app, protected, Router(routes=list(routes)), urlsplit(str(document_url)).path)
