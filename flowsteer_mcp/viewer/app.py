"""The live canvas viewer: a read-only Starlette app over a workflow store, with server-sent change events.

Routes carry the full `base_path` (no Mount), so the app answers the same whether it runs alone
(`flowsteer-mcp view`) or beside `/mcp` behind a path dispatcher. Every route is GET except the sign-in POST,
which sets a cookie and changes no workflow.
"""

from __future__ import annotations

import math
import socket
from functools import cache
from importlib.resources import files

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from flowsteer_mcp.host_policy import HostGuard, HostPolicy
from flowsteer_mcp.store.base import WorkflowStore
from flowsteer_mcp.viewer import pages
from flowsteer_mcp.viewer.follow import ChangeFeed, event_stream
from flowsteer_mcp.viewer.security import SecurityHeadersMiddleware, ViewerAuth, ViewerAuthMiddleware

STATIC_TYPES = {"viewer.js": "text/javascript; charset=utf-8", "viewer.css": "text/css; charset=utf-8"}


@cache
def static_file(name: str) -> bytes:
    return files("flowsteer_mcp.viewer").joinpath("static", name).read_bytes()


class _Views:
    """The route handlers, bound to one store, feed and base path."""

    def __init__(self, store: WorkflowStore, feed: ChangeFeed, base_path: str, keepalive_s: float) -> None:
        self.store = store
        self.feed = feed
        self.base = base_path
        self.keepalive_s = keepalive_s

    async def list_page(self, request: Request) -> Response:
        return HTMLResponse(pages.list_page(await self.store.list(), self.base))

    async def list_fragment(self, request: Request) -> Response:
        return HTMLResponse(pages.list_fragment(await self.store.list(), self.base))

    async def workflow_page(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        record = await self.store.get(workflow_id)
        if record is None:
            return HTMLResponse(pages.missing_page(workflow_id, self.base), status_code=404)
        return HTMLResponse(pages.workflow_page(record, self.base))

    async def workflow_fragment(self, request: Request) -> Response:
        record = await self.store.get(request.path_params["workflow_id"])
        if record is None:
            return PlainTextResponse("no such workflow", status_code=404)
        return HTMLResponse(pages.canvas_fragment(record), headers={"x-updated-at": repr(record.updated_at)})

    async def events(self, request: Request) -> Response:
        since = await self.feed.snapshot()  # before the headers go out: a change right after them is not lost
        return StreamingResponse(
            event_stream(self.feed, keepalive_s=self.keepalive_s, since=since),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_TYPES:
            return PlainTextResponse("not found", status_code=404)
        return Response(static_file(name), media_type=STATIC_TYPES[name])

    async def to_base(self, request: Request) -> Response:
        return RedirectResponse(f"{self.base}/", status_code=308)


def viewer_app(
    store: WorkflowStore,
    *,
    token: str | None,
    base_path: str = "/view",
    poll_s: float = 0.5,
    keepalive_s: float = 15.0,
) -> Starlette:
    """The viewer of `store` at `base_path` ("" for the root); with `token`, behind bearer-or-cookie auth."""
    base = base_path.rstrip("/")
    auth = ViewerAuth(token, base)
    feed = ChangeFeed(store, poll_s=poll_s)
    views = _Views(store, feed, base, keepalive_s)
    routes = [
        Route(f"{base}/", views.list_page, methods=["GET"]),
        Route(f"{base}/list/fragment", views.list_fragment, methods=["GET"]),
        Route(f"{base}/w/{{workflow_id}}", views.workflow_page, methods=["GET"]),
        Route(f"{base}/w/{{workflow_id}}/fragment", views.workflow_fragment, methods=["GET"]),
        Route(f"{base}/events", views.events, methods=["GET"]),
        Route(f"{base}/static/{{name}}", views.static, methods=["GET"]),
        Route(f"{base}/session", auth.sign_in, methods=["POST"]),
    ]
    if base:
        routes.append(Route(base, views.to_base, methods=["GET"]))
    public = {f"{base}/session", *(f"{base}/static/{name}" for name in STATIC_TYPES)}
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeadersMiddleware),
            Middleware(ViewerAuthMiddleware, auth=auth, public=public.__contains__),
        ],
    )
    app.state.feed = feed
    return app


class ViewerServer(uvicorn.Server):
    """A uvicorn server that ends the viewer's open event streams first when stopping; otherwise a browser tab
    left open would hold a graceful shutdown until its timeout."""

    def __init__(self, config: uvicorn.Config, feed: ChangeFeed) -> None:
        super().__init__(config)
        self.feed = feed

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.feed.close()
        await super().shutdown(sockets)


async def serve_viewer(store: WorkflowStore, host: str, port: int, token: str | None, poll_s: float) -> None:
    """Serve the viewer alone (`flowsteer-mcp view`) behind the MCP server's Host/Origin check; prints
    `viewer: URL` once it listens, which is what scripts (and `make demo`) wait for."""
    bind = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    viewer = viewer_app(store, token=token, base_path="/view", poll_s=poll_s)
    app: ASGIApp = HostGuard(viewer, HostPolicy.for_server(bind, [], authenticated=token is not None))
    config = uvicorn.Config(
        app, host=bind, port=port, log_level="warning", timeout_graceful_shutdown=math.ceil(poll_s) + 5
    )
    server = ViewerServer(config, viewer.state.feed)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve)
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.05)
        shown = f"[{bind}]" if ":" in bind else bind
        print(f"viewer: http://{shown}:{port}/view/", flush=True)
