"""Assemble the MCP server: store + registry + executor -> workbench -> tools, resources, prompt.

Over HTTP the app is wrapped, outermost first, in the Host/Origin check of `host_policy` (DNS-rebinding
protection: off with a bearer token unless `--allowed-host` names are given; always on without a token, when
only loopback binds are allowed) and the bearer-token check of `auth`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

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


@dataclass
class FlowSteerServer:
    mcp: MCPServer
    bench: Workbench
    settings: ServerSettings

    def http_app(self) -> ASGIApp:
        """The streamable-HTTP ASGI app behind the host policy and, when a token is configured, bearer auth.

        Raises UnsafeBindError for a non-loopback host without a token."""
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
