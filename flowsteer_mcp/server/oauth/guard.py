"""The scope check of authenticated requests: 403 with the MCP scope challenge when the token lacks the scope.

Why an ASGI middleware that reads the body: which scope a POST needs depends on its JSON-RPC content (the
method, the tool's name), and the MCP specification wants a missing scope answered at the HTTP layer, with
`WWW-Authenticate: Bearer error="insufficient_scope", scope=..., resource_metadata=...`, so that a client can
ask its authorization server for the scope and retry. The body is read at most up to the server's body limit
(a larger one is not parsed and needs write; the app behind refuses it with 413 anyway), and the messages read
are replayed to the app unchanged. Requests other than POSTs to the MCP endpoint (its GET stream, DELETE of a
session, the viewer) need read.
"""

from __future__ import annotations

import json

import structlog
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flowsteer_mcp.server.oauth.scopes import Access, ScopePolicy, challenge_scope, granted_access
from flowsteer_mcp.server.oauth.settings import OAuthSettings

log = structlog.get_logger(__name__)


async def read_body(receive: Receive, headers: Headers, limit: int) -> tuple[bytes | None, list[Message]]:
    """The request body, or None when it is larger than `limit` or the client went away; and the messages
    taken from `receive`, to be replayed."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None, []
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return None, messages
        size += len(message.get("body", b""))
        if size > limit:
            return None, messages
        if not message.get("more_body", False):
            return b"".join(m.get("body", b"") for m in messages), messages


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """A `receive` that hands out `messages` first, then whatever `receive` brings."""
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay


def challenge_header(error: str, description: str, metadata_url: str, scope: str | None = None) -> str:
    """A `WWW-Authenticate` value (RFC 6750 section 3, plus RFC 9728's `resource_metadata`)."""
    parts = [f'error="{error}"', f'error_description="{description}"']
    if scope is not None:
        parts.append(f'scope="{scope}"')
    parts.append(f'resource_metadata="{metadata_url}"')
    return "Bearer " + ", ".join(parts)


class ScopeGuard:
    """Pure ASGI, behind the SDK's authentication (it reads `scope["auth"].scopes`); lifespan passes through."""

    def __init__(
        self,
        app: ASGIApp,
        policy: ScopePolicy,
        settings: OAuthSettings,
        *,
        mcp_path: str,
        max_body_bytes: int,
        metadata_url: str,
    ) -> None:
        self.app = app
        self.policy = policy
        self.settings = settings
        self.mcp_path = mcp_path.rstrip("/") or "/"
        self.max_body_bytes = max_body_bytes
        self.metadata_url = metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        credentials = scope.get("auth")
        granted = granted_access(list(getattr(credentials, "scopes", []) or []), self.settings)
        needed = Access.READ
        path = scope.get("path", "").rstrip("/") or "/"
        if scope.get("method") == "POST" and path == self.mcp_path:
            body, messages = await read_body(receive, Headers(scope=scope), self.max_body_bytes)
            receive = replaying(messages, receive)
            needed = await self.policy.needed(body)
        if granted >= needed:
            await self.app(scope, receive, send)
            return
        wanted = challenge_scope(needed, self.settings)
        log.info("oauth_scope_refused", needed=wanted, path=path)
        description = f"this request needs the {wanted} scope"
        body_bytes = json.dumps({"error": "insufficient_scope", "error_description": description}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body_bytes)).encode()),
                    (
                        b"www-authenticate",
                        challenge_header("insufficient_scope", description, self.metadata_url, wanted).encode(),
                    ),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body_bytes})
