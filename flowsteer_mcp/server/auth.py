"""Static bearer-token auth for the HTTP transport (pure ASGI).

The scheme name is case-insensitive (`bearer TOKEN` works, RFC 9110 section 11.1). The supplied credentials and
the token are compared as SHA-256 digests with `hmac.compare_digest`, and the scheme and token checks are both
always evaluated, so the time taken reveals neither the token's content nor its length.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

MIN_RECOMMENDED_TOKEN_CHARS = 16
TOKEN_ADVICE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def token_problem(token: str) -> str | None:
    """Why `token` can never work as a bearer token, or None. The answer never contains the token."""
    if not token.strip():
        return "is empty or only whitespace"
    if token != token.strip():
        return "has leading or trailing whitespace, which an Authorization header cannot carry"
    if not all("!" <= char <= "~" for char in token):
        return "contains spaces, control or non-ASCII characters; use visible ASCII characters only"
    return None


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class BearerTokenMiddleware:
    """Rejects requests without `Authorization: Bearer <token>` (one such header); lifespan events pass through."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if problem := token_problem(token):
            raise ValueError(f"the bearer token {problem}")
        self.app = app
        self._expected = _digest(token.encode("ascii"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or (scope["type"] == "http" and self._authorized(scope)):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await WebSocketClose(code=1008)(scope, receive, send)
            return
        response = JSONResponse(
            {"error": "unauthorized", "message": "missing or invalid bearer token"},
            status_code=401,
            headers={"www-authenticate": 'Bearer realm="flowsteer"'},
        )
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        supplied = [value for name, value in scope.get("headers") or [] if name.lower() == b"authorization"]
        scheme, _, credentials = (supplied[0] if len(supplied) == 1 else b"").partition(b" ")
        scheme_ok = scheme.lower() == b"bearer"
        token_ok = hmac.compare_digest(_digest(credentials.lstrip(b" ")), self._expected)
        return scheme_ok and token_ok
