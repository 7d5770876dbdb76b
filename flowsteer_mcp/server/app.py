"""Assemble the MCP server: store + registry + runner -> workbench and jobs -> tools, resources, prompt.

Over HTTP the app is wrapped, outermost first, in the Host/Origin check of `host_policy` (a browser Origin is
checked in every mode; the Host check is off with a credential unless `--allowed-host` names are given, and
always on without one, when only loopback binds are allowed), then the credential: OAuth (`oauth/`) or the
static bearer token of `auth`. Beside the MCP endpoint, `/view/` serves the read-only canvas viewer of the same
store; with a static token it checks the token itself (bearer header or the session cookie a browser gets by
signing in), so it sits beside the bearer middleware rather than behind it.

Background jobs (`jobs.py`) run in the job group the server's lifespan opens: once for the HTTP app and the
stdio loop, once per connection of an in-memory client. The lifespan's state is the `ToolKit` the tools share:
a tool reads it from its context (`toolkit.kit_of`). Every tool, resource and prompt is a module-level function;
`server_tools` is the table of the tools, in the order clients list them, and resources.py has the others'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from mcp.server import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Receive, Scope, Send

from flowsteer_mcp import __version__
from flowsteer_mcp.canvas.execution import NoRunner, WorkflowRunner
from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.director.served import DirectorServing
from flowsteer_mcp.host_policy import HostGuard, HostPolicy, check_bind
from flowsteer_mcp.server.auth import BearerTokenMiddleware
from flowsteer_mcp.server.errors import ToolArguments, ToolCallErrors
from flowsteer_mcp.server.job_tools import job_tools
from flowsteer_mcp.server.jobs import JobBoard
from flowsteer_mcp.server.library import library_tools
from flowsteer_mcp.server.policy import PolicySource
from flowsteer_mcp.server.resources import register_resources
from flowsteer_mcp.server.settings import ServerSettings
from flowsteer_mcp.server.solve import solve_tools
from flowsteer_mcp.server.subscriptions import register_subscriptions
from flowsteer_mcp.server.tasks import register_tasks
from flowsteer_mcp.server.toolkit import ToolEntry, ToolKit
from flowsteer_mcp.server.tools import canvas_tools
from flowsteer_mcp.server.workbench import Workbench
from flowsteer_mcp.store.base import WorkflowStore, open_store
from operators.registry import OperatorRegistry, default_registry

INSTRUCTIONS = (
    "FlowSteer canvas: agentic workflows built and run on an executor LLM. For an answer in one call, solve(task, "
    "task_type) runs the task type's best measured workflow (list_library shows the library with its measured "
    "scores and tokens). To design a workflow, create_workflow (empty, or library_workflow=NAME) returns a "
    "workflow_id; edit it with act (Flow-Director tag dialect) or the typed tools (add_operator, add_structure, "
    "delete_node, modify_node, set_prompt); it runs after each edit; finish checks the finish gate. Long calls "
    "report progress every few seconds; if your client gives up on long requests, run them with start_job and "
    "poll get_job. list_operators shows the operators."
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
    jobs: JobBoard
    policy: PolicySource  # where solve(director="policy") finds its Flow-Director

    def http_app(self) -> ASGIApp:
        """The streamable-HTTP ASGI app and the viewer at `/view/` beside it, behind the Host/Origin policy (Origin
        checked in every mode) and the credential: a static bearer token (the viewer checks it itself, to also
        accept its session cookie) or OAuth (server/oauth: both behind it, the viewer needing the read scope).

        Raises UnsafeBindError for a non-loopback host without a credential."""
        from flowsteer_mcp.server.oauth.gate import oauth_gate  # lazily, like the viewer: not needed over stdio
        from flowsteer_mcp.viewer.app import viewer_app

        settings = self.settings
        token = settings.token.get_secret_value() if settings.token else None
        check_bind(settings.host, authenticated=settings.authenticated, oauth_available=True)
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
        if settings.oauth is not None:
            app = oauth_gate(
                app,
                settings.oauth,
                list_tools=self.mcp.list_tools,
                mcp_path=settings.path,
                max_body_bytes=settings.max_body_bytes,
            )
        policy = HostPolicy.for_server(
            settings.host,
            settings.allowed_hosts,
            authenticated=settings.authenticated,
            allowed_origins=settings.allowed_origins,
        )
        return HostGuard(app, policy)

    async def aclose(self) -> None:
        await self.bench.store.close()


def build_server(
    settings: ServerSettings | None = None,
    *,
    registry: OperatorRegistry | None = None,
    runner: WorkflowRunner | None = None,
    store: WorkflowStore | None = None,
    observer: ObservationBuilder | None = None,
    serve_director: DirectorServing | None = None,
) -> FlowSteerServer:
    """The server. `serve_director` serves the shipped director when the settings ask for it (`--serve-director`);
    raises ValueError (a DirectorCardError among them) when they ask and it cannot be done."""
    settings = settings or ServerSettings()
    policy = PolicySource.from_settings(settings, serve_director)
    registry = registry or default_registry()
    bench = Workbench(
        store or open_store(settings.store),
        registry,
        runner or NoRunner(),
        max_workflows=settings.max_workflows,
        ttl_s=settings.workflow_ttl_s,
        persistent_ttl_s=settings.persistent_ttl_s,
    )
    observer = observer or ObservationBuilder.default()
    jobs = JobBoard(max_running=settings.max_running_jobs)
    server = MCPServer(
        name="flowsteer",
        title="FlowSteer workflow canvas",
        version=__version__,
        instructions=INSTRUCTIONS,
        subscriptions=(bus := InMemorySubscriptionBus()),  # what 2026-07-28 `subscriptions/listen` delivers
        lifespan=lambda _: _lifespan(kit),  # `kit` is bound below, before any lifespan can start
    )
    arguments = ToolArguments()
    server.middleware.append(ToolCallErrors(server, arguments))
    kit = ToolKit(server, bench, jobs, settings, observer, arguments, policy)
    kit.register(server_tools())
    kit.check_tool_filter()
    register_tasks(kit)
    register_resources(kit)
    register_subscriptions(server, bench, bus)
    return FlowSteerServer(mcp=server, bench=bench, settings=settings, jobs=jobs, policy=policy)


def server_tools() -> list[ToolEntry]:
    """Every tool this server has, in the order clients list them (the tool filter may leave some out); built
    when a server is built (add_structure's schema names the structure kinds registered by then)."""
    return [*canvas_tools(), *library_tools(), *solve_tools(), *job_tools()]


@asynccontextmanager
async def _lifespan(kit: ToolKit) -> AsyncIterator[ToolKit]:
    """The job group, and the shipped director served in the background when the server serves it; the state
    the tools read from their context (`kit_of`). Entered once by the HTTP app and the stdio loop, once per
    connection of an in-memory client."""
    async with kit.jobs.serving(), kit.policy.running():
        yield kit
