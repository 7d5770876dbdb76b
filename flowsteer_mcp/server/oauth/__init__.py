"""OAuth 2.1 resource server for the HTTP transport: JWT access tokens from an outside authorization server.

What comes from the MCP SDK (`mcp.server.auth`) and what is ours:

- SDK: `BearerAuthBackend` (reads the bearer header, asks our verifier, checks the token's resource),
  `AuthContextMiddleware`, `RequireAuthMiddleware` (the 401 with `resource_metadata=`), the RFC 9728 protected
  resource metadata route and its well-known URL, and the `TokenVerifier`/`AccessToken`/`AuthSettings` types.
- Ours: `verifier.JwtVerifier` (signature against the issuer's JWKS, issuer, audience, expiry; the SDK ships no
  JWT verifier), `jwks.SigningKeys` (discovery, fetching and caching the JWKS), `scopes` (which scope a JSON-RPC
  message needs, from the tools' own annotations), `guard.ScopeGuard` (the 403 scope challenge, which needs the
  request body), and `gate` (the composition). MCPServer's own `auth=` wiring is not used: it demands every
  listed scope on every request and leaves no place between authentication and the app for a per-call check.

Design and deployment: docs/security.md, "OAuth 2.1 resource server".
"""

from flowsteer_mcp.server.oauth.settings import OAuthSettings

__all__ = ["OAuthSettings"]
