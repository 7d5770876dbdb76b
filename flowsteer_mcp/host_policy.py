"""Who may reach the HTTP transport: the bind rule and the Host/Origin policy (DNS rebinding, cross-site pages).

A DNS-rebinding attack points a name the attacker controls at this machine, so that a web page from that name
can send requests to a server listening here; the browser then sends the attacker's name in the Host header
(and its page's origin in Origin). A page on any other site can also make a browser send requests here. So:

- Without a credential (no bearer token, no OAuth) the server only binds loopback addresses (any 127.0.0.0/8
  address, ::1 in any spelling, `localhost`), and the Host must be a loopback name (`localhost`, a 127.x.y.z
  address, `[::1]`), the bind address or an `--allowed-host` name. Every loopback bind form gets the same check.
- With a credential (a bearer token or OAuth) a rebound page cannot learn it, so the Host check adds nothing and
  is off: any Host is accepted, so the server answers through 127.0.0.1, localhost, the machine's own address,
  a port forward or a reverse proxy. Naming hosts with `--allowed-host` turns it on for those names, loopback
  names and the bind address.
- The Origin check is on in every mode, because the MCP specification requires servers to validate Origin and
  a credential is no reason to answer pages of other sites: an Origin header, when a browser sends one, must be
  http(s) with a loopback name, the bind address or an `--allowed-host` name (any port), or be exactly one of
  the `--allowed-origin` origins (scheme, name and port). `null` and other schemes are refused. Requests
  without Origin (every non-browser client) are not affected.
- Names compare case-insensitively, without a trailing dot, IP addresses in canonical form. Malformed or
  repeated Host/Origin headers are refused.

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
_DEFAULT_PORTS = {"http": 80, "https": 443}


class UnsafeBindError(FlowSteerError, RuntimeError):
    """Listening on this address without a credential (bearer token or OAuth) would expose the canvas to the network."""


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


def split_origin(value: str) -> tuple[str, str, int]:
    """A browser Origin (`scheme://host[:port]`) as (scheme, canonical name, port), the default port filled in.

    Raises ValueError for anything else (`null`, other schemes, a path, user info...)."""
    scheme, separator, authority = value.partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in _DEFAULT_PORTS or "/" in authority:
        raise ValueError("not an http(s) origin")
    name, port = split_authority(authority)
    return scheme, name, _DEFAULT_PORTS[scheme] if port is None else port


def allowed_origin(value: str) -> str:
    """An `--allowed-origin` entry in canonical form: `scheme://name[:port]`, the default port left out."""
    try:
        scheme, name, port = split_origin(value.strip())
    except ValueError:
        raise ValueError(
            f"allowed origin {value[:_SHOWN_CHARS]!r} must be scheme://host[:port] with scheme http or https and no "
            "path, e.g. --allowed-origin https://app.example:8443"
        ) from None
    shown = f"[{name}]" if ":" in name else name
    return f"{scheme}://{shown}" + ("" if port == _DEFAULT_PORTS[scheme] else f":{port}")


def check_bind(host: str, *, authenticated: bool, oauth_available: bool = False) -> None:
    """Refuse to listen beyond loopback without a credential (the Host check alone cannot keep a network out).

    `oauth_available`: the command offers OAuth too (`flowsteer-mcp --transport http`), so the advice names it."""
    if not authenticated and not is_loopback_name(host):
        oauth = ", configure OAuth (--oauth-issuer URL --oauth-resource URL)" if oauth_available else ""
        raise UnsafeBindError(
            f"Refusing to listen on {host} without a bearer token: set FLOWSTEER_MCP_TOKEN (or pass "
            f"--token-env NAME){oauth} or bind to 127.0.0.1."
        )


@dataclass(frozen=True)
class HostPolicy:
    """What Host and Origin headers may carry (see the module docstring).

    `names`: besides every loopback name, the names accepted in Host and Origin, any port. `origins`: exact
    origins accepted besides, as (scheme, name, port). `check_host`: False with a credential and no named
    hosts, when only Origin is checked."""

    names: frozenset[str]
    origins: frozenset[tuple[str, str, int]] = frozenset()
    check_host: bool = True

    @classmethod
    def for_server(
        cls,
        bind_host: str,
        allowed_hosts: Iterable[str],
        *,
        authenticated: bool,
        allowed_origins: Iterable[str] = (),
    ) -> HostPolicy:
        """The policy of the module docstring for a server bound to `bind_host`."""
        named = {allowed_host_name(name) for name in allowed_hosts}
        check_host = not authenticated or bool(named)
        bind = canonical_name(bind_host)
        if bind not in _UNSPECIFIED:
            named.add(bind)
        origins = frozenset(split_origin(allowed_origin(origin)) for origin in allowed_origins)
        return cls(frozenset(named), origins, check_host)

    def accepts_name(self, name: str) -> bool:
        return name in self.names or is_loopback_name(name)

    def accepts_host(self, host: str) -> bool:
        try:
            name, _ = split_authority(host)
        except ValueError:
            return False
        return self.accepts_name(name)

    def accepts_origin(self, origin: str) -> bool:
        try:
            scheme, name, port = split_origin(origin)
        except ValueError:
            return False
        return self.accepts_name(name) or (scheme, name, port) in self.origins


_ADVICE = {
    "Host": "connect through 127.0.0.1 or localhost, or start the server with --allowed-host NAME (or with a "
    "bearer token)",
    "Origin": "pages may call this server only from loopback origins, the --allowed-host names or an "
    "--allowed-origin ORIGIN of the server's command line",
}


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
        message = f"{header} {value[:_SHOWN_CHARS]!r} is not accepted by this server; {_ADVICE[header]}"
        await JSONResponse({"error": f"invalid_{header.lower()}", "message": message}, status_code=status)(
            scope, receive, send
        )

    def _refusal(self, headers: Headers) -> tuple[int, str, str] | None:
        hosts = headers.getlist("host")
        if self.policy.check_host and (len(hosts) != 1 or not self.policy.accepts_host(hosts[0])):
            return 421, "Host", ", ".join(hosts)
        origins = headers.getlist("origin")
        if len(origins) > 1 or (origins and not self.policy.accepts_origin(origins[0])):
            return 403, "Origin", ", ".join(origins)
        return None
