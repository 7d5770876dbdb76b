"""What keeps the viewers safe to open: strict response headers and the token check (bearer or session cookie).

Everything a viewer shows is untrusted text, so every response forbids inline script and style and any
third-party resource (CSP), content sniffing and referrers. With a token, a request passes with
`Authorization: Bearer TOKEN` or with the session cookie, whose value is an HMAC of a fixed label keyed by the
token: it proves knowledge of the token without being it. A browser gets the cookie without the token ever
appearing in a URL the server sees: it opens `BASE/#token=TOKEN` (a fragment stays in the browser), receives
the data-free sign-in shell, and viewer.js POSTs the token as a bearer header to `BASE/session`.
"""

from __future__ import annotations

import hashlib
import hmac
import html
from collections.abc import Callable

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: dict[str, str] = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
SESSION_COOKIE = "flowsteer_view"
_SESSION_LABEL = b"flowsteer-viewer-session"


def session_cookie_value(token: str) -> str:
    """The session cookie for `token`: HMAC-SHA256(token, label) in hex, so the cookie never is the token."""
    return hmac.new(token.encode("utf-8"), _SESSION_LABEL, hashlib.sha256).hexdigest()


class SecurityHeadersMiddleware:
    """Pure ASGI: adds `SECURITY_HEADERS` to every HTTP response (a header the app set itself is kept)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def sign_in_shell(base_path: str) -> str:
    """The page an unauthenticated browser gets: no data, only viewer.js (which signs in from `#token=`)."""
    base_path = html.escape(base_path, quote=True)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>FlowSteer viewer: sign in</title>'
        f'<link rel="stylesheet" href="{base_path}/static/viewer.css">'
        f'<script src="{base_path}/static/viewer.js" defer></script></head>'
        '<body data-updates="0" data-sign-in="1"><main id="sign-in"><h1>FlowSteer viewer</h1>'
        "<p>This viewer needs the server's token. Open <code>"
        f"{base_path}/#token=YOUR_TOKEN</code> (the part after # never leaves your browser).</p>"
        '<p id="sign-in-status"></p></main></body></html>'
    )


class ViewerAuth:
    """The viewer's token check. With `token=None` everything is allowed (loopback-only servers)."""

    def __init__(self, token: str | None, base_path: str = "/view") -> None:
        if token is not None and not token.strip():
            raise ValueError("the viewer token is empty")  # callers vet tokens further (server.auth.token_problem)
        self.base_path = base_path.rstrip("/")
        self._bearer = hashlib.sha256(token.encode("utf-8")).digest() if token is not None else None
        self._cookie = session_cookie_value(token).encode("ascii") if token is not None else None
        self._token = token

    @property
    def enabled(self) -> bool:
        return self._token is not None

    @property
    def cookie_path(self) -> str:
        return self.base_path or "/"

    def bearer_ok(self, headers: Headers) -> bool:
        if self._bearer is None:
            return True
        supplied = headers.getlist("authorization")
        scheme, _, credentials = (supplied[0] if len(supplied) == 1 else "").partition(" ")
        digest = hashlib.sha256(credentials.lstrip(" ").encode("utf-8", "replace")).digest()
        token_ok = hmac.compare_digest(digest, self._bearer)
        return scheme.lower() == "bearer" and token_ok

    def cookie_ok(self, headers: Headers) -> bool:
        if self._cookie is None:
            return True
        value = _cookie(headers, SESSION_COOKIE)
        return value is not None and hmac.compare_digest(value.encode("utf-8", "replace"), self._cookie)

    def allows(self, headers: Headers) -> bool:
        return self._token is None or self.bearer_ok(headers) or self.cookie_ok(headers)

    async def sign_in(self, request: Request) -> Response:
        """`POST BASE/session` with the bearer header: 204 and the HttpOnly session cookie; anything else 401."""
        if self._token is None:
            return Response(status_code=204)
        if not self.bearer_ok(request.headers):
            return _unauthorized()
        response = Response(status_code=204)
        response.set_cookie(
            SESSION_COOKIE,
            session_cookie_value(self._token),
            path=self.cookie_path,
            httponly=True,
            samesite="strict",
        )
        return response


def _nothing_public(path: str) -> bool:
    return False


class ViewerAuthMiddleware:
    """Pure ASGI: refuses unauthenticated HTTP requests with 401, carrying the sign-in shell when a browser asks
    for a page. Paths for which `public(path)` holds (static files, the sign-in route) pass freely."""

    def __init__(self, app: ASGIApp, auth: ViewerAuth, public: Callable[[str], bool] = _nothing_public) -> None:
        self.app = app
        self.auth = auth
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.public(scope["path"]):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self.auth.allows(headers):
            await self.app(scope, receive, send)
            return
        wants_page = scope["method"] == "GET" and "text/html" in headers.get("accept", "")
        response = HTMLResponse(sign_in_shell(self.auth.base_path), status_code=401) if wants_page else _unauthorized()
        await response(scope, receive, send)


def _unauthorized() -> Response:
    return PlainTextResponse(
        "missing or invalid token", status_code=401, headers={"www-authenticate": 'Bearer realm="flowsteer"'}
    )


def _cookie(headers: Headers, name: str) -> str | None:
    for header in headers.getlist("cookie"):
        for pair in header.split(";"):
            key, _, value = pair.strip().partition("=")
            if key == name:
                return value
    return None
