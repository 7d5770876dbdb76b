"""Assemble the MCP server: store + registry + executor -> workbench -> tools, resources, prompt."""

from __future__ import annotations

from dataclasses import dataclass

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from flowsteer_mcp import __version__
from flowsteer_mcp.canvas.execution import NoExecutor, WorkflowExecutor
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.server.auth import BearerTokenMiddleware
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
        """The streamable-HTTP ASGI app, behind bearer-token auth when a token is configured."""
        settings = self.settings
        security = None
        if not settings.is_loopback() or settings.allowed_hosts:
            hosts = [f"{settings.host}:*", *settings.allowed_hosts]
            if settings.is_loopback():
                hosts += ["127.0.0.1:*", "localhost:*", "[::1]:*"]
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=hosts,
                allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
            )
        app = self.mcp.streamable_http_app(
            streamable_http_path=settings.path,
            max_request_body_size=settings.max_body_bytes,
            host=settings.host,
            transport_security=security,
        )
        token = self.settings.token
        return BearerTokenMiddleware(app, token.get_secret_value()) if token else app

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
    )
    observer = observer or ObservationBuilder.default()
    server = MCPServer(
        name="flowsteer", title="FlowSteer workflow canvas", version=__version__, instructions=INSTRUCTIONS
    )
    register_tools(server, bench, settings, observer)
    register_resources(server, bench, observer)
    return FlowSteerServer(mcp=server, bench=bench, settings=settings)
