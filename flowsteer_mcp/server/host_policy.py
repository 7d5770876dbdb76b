"""Who may reach the HTTP transport: the bind rule and the DNS-rebinding (Host/Origin) policy.

A DNS-rebinding attack points a name the attacker controls at this machine, so that a web page from that name
can send requests to a server listening here; the browser then sends the attacker's name in the Host header
(and its page's origin in Origin). The page cannot learn a bearer token, so:

- With a bearer token the token is the guard and the Host check adds nothing: any Host is accepted, so the
  server answers through 127.0.0.1, localhost, the machine's own address, a port forward or a reverse proxy.
  Naming hosts with `--allowed-host` turns the check on: then only those names, loopback names and the bind
  address are accepted.
- Without a token the server only binds loopback addresses (any 127.0.0.0/8 address, ::1 in any spelling,
  `localhost`), and the Host must be a loopback name (`localhost`, a 127.x.y.z address, `[::1]`), the bind
  address or an `--allowed-host` name. Every loopback bind form gets the same check.
- While the check is on, an Origin header, when a browser sends one, must be http(s) with an accepted name;
  `null` and other schemes are refused. Any port matches; names compare case-insensitively, without a trailing
  dot, IP addresses in canonical form. Malformed or repeated Host/Origin headers are refused.

Refusals are 421 (Host) and 403 (Origin), as the MCP SDK's own check answers.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

import structlog
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from flowsteer_mcp.errors import FlowSteerError

log = structlog.get_logger(__name__)

_REG_NAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")
_UNSPECIFIED = frozenset({"0.0.0.0", "::"})
_SHOWN_CHARS = 100  # how much of a refused header is echoed back or logged


class UnsafeBindError(FlowSteerError, RuntimeError):
    """Listening on this address without a bearer token would expose the canvas to the network."""


def canonical_name(name: str) -> str:
    """`name` (a host name or IP address, IPv6 optionally in brackets) in the form names are compared in.

    Raises ValueError for anything else (a scheme, a port, a path, spaces...)."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    lowered = bare.lower()
    lowered = lowered[:-1] if lowered.endswith(".") else lowered
    if not _REG_NAME.fullmatch(lowered):
        raise ValueError(f"{name[:_SHOWN_CHARS]!r} is not a host name or IP address")
    return lowered


def allowed_host_name(value: str) -> str:
    """An `--allowed-host` entry: a bare name or address (any port matches), canonicalised."""
    try:
        return canonical_name(value.strip())
    except ValueError:
        raise ValueError(
            f"allowed host {value[:_SHOWN_CHARS]!r} must be a host name or IP address without scheme or port "
            "(any port matches), e.g. --allowed-host myhost.example"
        ) from None


def is_loopback_name(name: str) -> bool:
    """True for `localhost` and every loopback address (127.0.0.0/8, ::1 and ::ffff:127.x.y.z in any spelling)."""
    try:
        canonical = canonical_name(name)
    except ValueError:
        return False
    if canonical == "localhost":
        return True
    try:
        address = ipaddress.ip_address(canonical)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def split_authority(value: str) -> tuple[str, int | None]:
    """`host[:port]` as in a Host header or an origin, split into the canonical name and the port.

    Raises ValueError when malformed (bare IPv6 without brackets, user info, a non-numeric port, ...)."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError("unclosed IPv6 bracket")
        name, rest = value[: end + 1], value[end + 1 :]
        if not isinstance(ipaddress.ip_address(name[1:-1]), ipaddress.IPv6Address):
            raise ValueError("brackets hold an IPv6 address only")
    else:
        name, colon, port_text = value.partition(":")
        rest = colon + port_text
    if not rest:
        return canonical_name(name), None
    port_text = rest[1:]
    if not rest.startswith(":") or not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5:
        raise ValueError("malformed port")
    port = int(port_text)
    if port > 65535:
        raise ValueError("port out of range")
    return canonical_name(name), port


def check_bind(host: str, *, authenticated: bool) -> None:
    """Refuse to listen beyond loopback without a token (the Host check alone cannot keep a network out)."""
    if not authenticated and not is_loopback_name(host):
        raise UnsafeBindError(
            f"Refusing to listen on {host} without a bearer token: set FLOWSTEER_MCP_TOKEN (or pass "
            "--token-env NAME) or bind to 127.0.0.1."
        )


@dataclass(frozen=True)
class HostPolicy:
    """The names (besides every loopback name) that Host and Origin headers may carry; any port."""

    names: frozenset[str]

    @classmethod
    def for_server(cls, bind_host: str, allowed_hosts: Iterable[str], *, authenticated: bool) -> HostPolicy | None:
        """The policy of the module docstring; None when no Host check applies (a token and no named hosts)."""
        named = {allowed_host_name(name) for name in allowed_hosts}
        if authenticated and not named:
            return None
        bind = canonical_name(bind_host)
        if bind not in _UNSPECIFIED:
            named.add(bind)
        return cls(frozenset(named))

    def accepts_name(self, name: str) -> bool:
        return name in self.names or is_loopback_name(name)

    def accepts_host(self, host: str) -> bool:
        try:
            name, _ = split_authority(host)
        except ValueError:
            return False
        return self.accepts_name(name)

    def accepts_origin(self, origin: str) -> bool:
        scheme, separator, authority = origin.partition("://")
        if not separator or scheme.lower() not in ("http", "https") or "/" in authority:
            return False
        return self.accepts_host(authority)


class HostGuard:
    """Pure ASGI middleware applying a `HostPolicy` to every HTTP request; lifespan events pass through."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(Headers(scope=scope))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, header, value = refusal
        log.warning("http_request_refused", header=header, value=value[:_SHOWN_CHARS], status=status)
        if scope["type"] != "http":
            await WebSocketClose(code=1008)(scope, receive, send)
            return
        message = (
            f"{header} {value[:_SHOWN_CHARS]!r} is not accepted by this server; connect through 127.0.0.1 or "
            "localhost, or start the server with --allowed-host NAME (or with a bearer token)"
        )
        await JSONResponse({"error": f"invalid_{header.lower()}", "message": message}, status_code=status)(
            scope, receive, send
        )

    def _refusal(self, headers: Headers) -> tuple[int, str, str] | None:
        hosts = headers.getlist("host")
        if len(hosts) != 1 or not self.policy.accepts_host(hosts[0]):
            return 421, "Host", ", ".join(hosts)
        origins = headers.getlist("origin")
        if len(origins) > 1 or (origins and not self.policy.accepts_origin(origins[0])):
            return 403, "Origin", ", ".join(origins)
        return None
