"""Running a tool call as a background job: which tools may, who owns the job, and the call itself.

Why one module: the plain job tools (`start_job`, any client) and MCP tasks (clients that speak protocol
2025-11-25) start jobs the same way, and a job must return exactly what the synchronous `tools/call` would:
the same argument check, the same `ToolError` messages, the same structured result.

Which tools: those that may run the workflow, i.e. call the executor, which is what their `openWorldHint`
annotation already says (see `toolkit.py`). Every other tool answers at once and gains nothing from a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import principal_components
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from flowsteer_mcp.server.errors import ToolArguments
from flowsteer_mcp.server.jobs import Job, JobBoard

STARTER = "start_job"  # open world too (it starts such tools), but a job that starts a job helps nobody


async def background_tools(server: MCPServer) -> list[str]:
    """The tools a job may run: every tool that may execute the workflow (open world), in listing order."""
    return [
        tool.name
        for tool in await server.list_tools()
        if tool.annotations is not None and tool.annotations.open_world_hint and tool.name != STARTER
    ]


def principal_of(ctx: ServerRequestContext[Any, Any] | None) -> str | None:
    """The OAuth principal behind a request (client, issuer, subject), or None without OAuth."""
    request = ctx.request if ctx is not None else None
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    if not isinstance(user, AuthenticatedUser):
        return None
    client_id, issuer, subject = principal_components(user.access_token)
    return f"{issuer or ''}|{client_id}|{subject or ''}"


async def call_tool(
    server: MCPServer,
    arguments: ToolArguments,
    name: str,
    args: Mapping[str, Any],
    request: ServerRequestContext[Any, Any],
) -> CallToolResult:
    """`tools/call` of `name` with `args`, as the synchronous request would answer it (errors as results).

    The tool gets a context on the request that started the job, for the server's lifespan state it reads (its
    progress goes to the job's activity, not to that request: see progress.py)."""
    problems = arguments.problems(name, args)
    if problems is not None:
        return _error_result(problems)
    try:
        result = await server.call_tool(name, dict(args), Context(request_context=request, mcp_server=server))
    except ToolError as error:
        return _error_result(str(error))
    except MCPError as error:
        return _error_result(error.message)
    if not isinstance(result, CallToolResult):  # an input-required interim answer: none of our tools asks one
        return _error_result(f"Error executing tool {name}: it asked for input, which a background job cannot give")
    return result


def start_tool_job(
    server: MCPServer,
    jobs: JobBoard,
    arguments: ToolArguments,
    name: str,
    args: Mapping[str, Any],
    *,
    request: ServerRequestContext[Any, Any],
    ttl_s: float | None = None,
) -> Job:
    """Start `name(args)` as a job on the workflow it names, owned by the principal behind `request` (raises
    JobError when that cannot be done)."""
    workflow_id = args.get("workflow_id")
    copied = dict(args)

    async def run() -> CallToolResult:
        return await call_tool(server, arguments, name, copied, request)

    owner = principal_of(request)
    return jobs.start(name, workflow_id if isinstance(workflow_id, str) else None, run, owner=owner, ttl_s=ttl_s)


def _error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
