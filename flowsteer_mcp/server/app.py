"""Assemble the MCP server: store + registry + executor -> workbench -> tools, resources, prompt.

Over HTTP the app is wrapped, outermost first, in the Host/Origin check of `host_policy` (DNS-rebinding
protection: off with a bearer token unless `--allowed-host` names are given; always on without a token, when
only loopback binds are allowed) and the bearer-token check of `auth`. Beside the MCP endpoint, `/view/` serves
the read-only canvas viewer of the same store; it checks the same token itself (bearer header or the session
cookie a browser gets by signing in), so it sits beside the bearer middleware rather than behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from flowsteer_mcp import __version__
from flowsteer_mcp.canvas.execution import NoExecutor, WorkflowExecutor
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.server.auth import BearerTokenMiddleware
from flowsteer_mcp.server.host_policy import HostGuard, HostPolicy, check_bind
from flowsteer_mcp.server.resources import register_resources
from flowsteer_mcp.server.settings import ServerSettings
from flowsteer_mcp.server.tools import register_tools
from flowsteer_mcp.server.workbench import Workbench
from flowsteer_mcp.store.base import WorkflowStore, open_store
from operators.registry import OperatorRegistry, default_registry

INSTRUCTIONS = (
    "FlowSteer canvas: build an agentic workflow for a task. create_workflow returns a workflow_id; edit it with "
    "act (Flow-Director tag dialect) or the typed tools (add_operator, add_structure, delete_node, modify_node, "
    "set_prompt); the workflow runs after each edit; finish checks the finish gate. list_operators shows the library."
)
VIEWER_PATH = "/view"


class PathDispatch:
    """Sends HTTP requests under `prefix` to `branch` and everything else, lifespan included, to `default`.

    A Starlette Mount would not forward lifespan events, which the streamable MCP app needs (its session
    manager runs inside them); the viewer needs none."""

    def __init__(self, default: ASGIApp, prefix: str, branch: ASGIApp) -> None:
        self.default = default
        self.prefix = prefix.rstrip("/")
        self.branch = branch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "lifespan" and (path == self.prefix or path.startswith(self.prefix + "/")):
            await self.branch(scope, receive, send)
            return
        await self.default(scope, receive, send)


@dataclass
class FlowSteerServer:
    mcp: MCPServer
    bench: Workbench
    settings: ServerSettings

    def http_app(self) -> ASGIApp:
        """The streamable-HTTP ASGI app behind the host policy and, when a token is configured, bearer auth; the
        viewer at `/view/` beside it, behind the same host policy and token.

        Raises UnsafeBindError for a non-loopback host without a token."""
        from flowsteer_mcp.viewer.app import viewer_app  # lazily: the viewer is not needed over stdio

        settings = self.settings
        token = settings.token.get_secret_value() if settings.token else None
        check_bind(settings.host, authenticated=token is not None)
        app: ASGIApp = self.mcp.streamable_http_app(
            streamable_http_path=settings.path,
            max_request_body_size=settings.max_body_bytes,
            host=settings.host,
            # Host/Origin are checked by HostGuard, which matches any port and every loopback spelling.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        if token is not None:
            app = BearerTokenMiddleware(app, token)
        app = PathDispatch(app, VIEWER_PATH, viewer_app(self.bench.store, token=token, base_path=VIEWER_PATH))
        policy = HostPolicy.for_server(settings.host, settings.allowed_hosts, authenticated=token is not None)
        return HostGuard(app, policy) if policy is not None else app

    async def aclose(self) -> None:
        await self.bench.store.close()


def build_server(
    settings: ServerSettings | None = None,
    *,
    registry: OperatorRegistry | None = None,
    executor: WorkflowExecutor | None = None,
    store: WorkflowStore | None = None,
    observer: ObservationBuilder | None = None,
) -> FlowSteerServer:
    settings = settings or ServerSettings()
    registry = registry or default_registry()
    bench = Workbench(
        store or open_store(settings.store),
        registry,
        executor or NoExecutor(),
        max_workflows=settings.max_workflows,
        ttl_s=settings.workflow_ttl_s,
        persistent_ttl_s=settings.persistent_ttl_s,
    )
    observer = observer or ObservationBuilder.default()
    server = MCPServer(
        name="flowsteer", title="FlowSteer workflow canvas", version=__version__, instructions=INSTRUCTIONS
    )
    register_tools(server, bench, settings, observer)
    register_resources(server, bench, observer)
    return FlowSteerServer(mcp=server, bench=bench, settings=settings)
