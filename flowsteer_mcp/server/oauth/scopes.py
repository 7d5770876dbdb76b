"""Which access a JSON-RPC message needs: read (the read scope or the write scope) or write (the write scope).

Why derived, not listed: a tool is read-only exactly when its own annotation says `readOnlyHint: true`, so a new
tool needs no entry anywhere, and the scope a call needs cannot drift from what `tools/list` tells clients.
The annotations are read from the server once, on the first call that needs them.

Fail closed: a call of a tool not known to be read-only (an unknown name included), a method not known to
only read, and a body that cannot be read as JSON-RPC (too large, not JSON, duplicate keys, whose meaning
parsers disagree on) all need write. Everything of the session itself (initialize, ping, notifications, the
list methods, resources/read, prompts/get, reading tasks, replies to the server's own requests) needs read.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
from mcp.types import Tool

from flowsteer_mcp.server.oauth.settings import OAuthSettings

ListTools = Callable[[], Awaitable[Sequence[Tool]]]

READ_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "tasks/get",
        "tasks/list",
        "tasks/result",
    }
)


class Access(enum.IntEnum):
    NONE = 0
    READ = 1
    WRITE = 2


def granted_access(scopes: Sequence[str], settings: OAuthSettings) -> Access:
    """What a token's scopes allow; the write scope implies the read scope (see OAuthSettings)."""
    if settings.write_scope in scopes:
        return Access.WRITE
    return Access.READ if settings.read_scope in scopes else Access.NONE


def challenge_scope(needed: Access, settings: OAuthSettings) -> str:
    """The scope a client should ask for to be allowed `needed`."""
    return settings.write_scope if needed is Access.WRITE else settings.read_scope


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def parse_body(body: bytes) -> Any:
    """The JSON of a request body; ValueError when it is not JSON or repeats a key in an object."""
    try:
        return json.loads(body, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("nested too deeply") from None


class ScopePolicy:
    """The access a request body needs, from the server's tool annotations (module docstring)."""

    def __init__(self, list_tools: ListTools) -> None:
        self._list_tools = list_tools
        self._read_only: frozenset[str] | None = None
        self._lock = anyio.Lock()

    async def read_only_tools(self) -> frozenset[str]:
        async with self._lock:
            if self._read_only is None:
                tools = await self._list_tools()
                self._read_only = frozenset(
                    tool.name for tool in tools if tool.annotations is not None and tool.annotations.read_only_hint
                )
            return self._read_only

    async def needed(self, body: bytes | None) -> Access:
        """The access a POSTed body needs; None (a body too large to look at) needs write."""
        if body is None:
            return Access.WRITE
        try:
            parsed = parse_body(body)
        except ValueError:
            return Access.WRITE
        messages = parsed if isinstance(parsed, list) else [parsed]
        if not messages:
            return Access.WRITE
        needs = [await self._message_needs(message) for message in messages]
        return max(needs)

    async def _message_needs(self, message: Any) -> Access:
        if not isinstance(message, dict):
            return Access.WRITE
        method = message.get("method")
        if method is None and ("result" in message or "error" in message):
            return Access.READ  # the client's reply to a request of the server (sampling, elicitation, roots)
        if not isinstance(method, str):
            return Access.WRITE
        if method in READ_METHODS or method.startswith("notifications/"):
            return Access.READ
        if method != "tools/call":
            return Access.WRITE
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        return Access.READ if isinstance(name, str) and name in await self.read_only_tools() else Access.WRITE
