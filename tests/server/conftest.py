"""Fixtures for the MCP server tests: an in-process server with a scripted runner and an in-memory client.

Building an MCPServer costs ~0.2 s (tool schemas), so tests share one server with default settings and start
each test from an empty workbench and a reset runner. Tests that need other settings build their own
server with `connect(settings)`. Tests that call a tool function alone use `kit` (the server's state, on a
server with no tools) and `tool_context`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context

from flowsteer_mcp.canvas.observation import ObservationBuilder
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.errors import ToolArguments
from flowsteer_mcp.server.jobs import JobBoard
from flowsteer_mcp.server.toolkit import ToolKit
from flowsteer_mcp.server.workbench import Workbench
from flowsteer_mcp.store.memory import MemoryStore
from operators.registry import OperatorRegistry, default_registry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller, entered_in_own_task

Connect = Callable[..., AbstractAsyncContextManager[ToolCaller]]


@pytest.fixture(scope="session")
def registry() -> OperatorRegistry:
    return default_registry()


@pytest.fixture(scope="session")
def shared_runner() -> ScriptedRunner:
    return ScriptedRunner()


@pytest.fixture(scope="session")
def shared_app(registry: OperatorRegistry, shared_runner: ScriptedRunner) -> FlowSteerServer:
    return build_server(ServerSettings(), registry=registry, runner=shared_runner, store=MemoryStore())


@pytest.fixture
def runner(shared_runner: ScriptedRunner) -> ScriptedRunner:
    shared_runner.reset()
    return shared_runner


@pytest.fixture
async def app(shared_app: FlowSteerServer, runner: ScriptedRunner) -> AsyncIterator[FlowSteerServer]:
    assert await shared_app.bench.list() == [], "a previous test left workflows behind"
    yield shared_app
    for record in await shared_app.bench.list():
        await shared_app.bench.delete(record.workflow_id)


@pytest.fixture
async def tools(app: FlowSteerServer) -> AsyncIterator[ToolCaller]:
    async with entered_in_own_task(Client(app.mcp)) as client:
        yield ToolCaller(client)


@pytest.fixture
def connect(registry: OperatorRegistry) -> Connect:
    """`async with connect(settings, runner=...) as tools:` a private server (use inside the test body)."""

    @asynccontextmanager
    async def connected(
        settings: ServerSettings | None = None, *, runner: ScriptedRunner | None = None
    ) -> AsyncIterator[ToolCaller]:
        server = build_server(
            settings or ServerSettings(),
            registry=registry,
            runner=runner or ScriptedRunner(),
            store=MemoryStore(),
        )
        async with Client(server.mcp) as client:
            yield ToolCaller(client)

    return connected


@dataclass
class ProgressSink:
    """The one part of a session a tool uses: progress notifications, recorded."""

    reports: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        self.reports.append((progress, total, message))


def tool_context(kit: ToolKit, session: ProgressSink) -> Context:
    """A tool's context with `kit` as the lifespan state, as a request on a server would carry it."""
    request: ServerRequestContext[Any, Any] = ServerRequestContext(
        session=session,  # type: ignore[arg-type]
        lifespan_context=kit,
        protocol_version="2025-11-25",
        method="tools/call",
    )
    return Context(request_context=request)


@pytest.fixture
def kit(registry: OperatorRegistry) -> ToolKit:
    settings = ServerSettings()
    bench = Workbench(MemoryStore(), registry, ScriptedRunner(), max_workflows=8, ttl_s=60.0)
    return ToolKit(
        MCPServer("direct"), bench, JobBoard(max_running=1), settings, ObservationBuilder.default(), ToolArguments()
    )
