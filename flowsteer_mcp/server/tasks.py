"""MCP tasks (protocol 2025-11-25): task-augmented `tools/call` for the tools that may run the workflow.

The SDK (mcp 2.3) leaves `tasks/*` out of its core on purpose, so this module serves them, for the clients
that speak them (the TypeScript SDK's `experimental.tasks.callToolStream`, among others):
- `initialize`: at 2025-11-25 the capabilities gain `tasks {list, cancel, requests.tools.call}`;
- `tools/list`: at 2025-11-25 each tool that may run the workflow gains `execution.taskSupport: "optional"`
  (a plain call still works; other tools refuse task augmentation with -32601, as the spec asks);
- `tools/call` with `params.task`: the call starts as a job (jobs.py) and a `CreateTaskResult` comes back at
  once, even when the arguments are wrong (the task then fails with the same message a direct call gives);
- `tasks/get`, `tasks/result` (waits for the end, then returns exactly the `CallToolResult` with the
  related-task `_meta`; a cancelled task's result is an error result saying so), `tasks/cancel` (-32602 for an
  ended task), `tasks/list`.
A task IS a job: `get_job` reads it too, and the same ownership, limits and retention apply. A tool result
with `isError` makes the task `failed`, as 2025-11-25 defines. The 2026-07-28 revision moves tasks into an
extension (SEP-2663) of another shape; clients on it use the job tools. The tasks/* handlers are module-level
functions that read the job board from the server's state (`kit_in`), like the tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.types import INVALID_PARAMS, METHOD_NOT_FOUND, CallToolResult, RequestParams, TextContent
from pydantic import Field

from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.server.background import background_tools, principal_of, start_tool_job
from flowsteer_mcp.server.errors import ToolArguments
from flowsteer_mcp.server.job_tools import iso_time
from flowsteer_mcp.server.jobs import Job, JobBoard, JobError, JobFinished
from flowsteer_mcp.server.toolkit import ToolKit, kit_in

TASK_VERSIONS = frozenset({"2025-11-25"})
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
POLL_INTERVAL_MS = 2000


class TaskIdParams(RequestParams):
    task_id: str = Field(alias="taskId", min_length=1, max_length=80)


class TaskListParams(RequestParams):
    cursor: str | None = Field(default=None, max_length=200)


def task_of(job: Job) -> dict[str, Any]:
    """The spec's `Task` object for a job."""
    return {
        "taskId": job.job_id,
        "status": job.status,
        "statusMessage": job.status_message(),
        "createdAt": iso_time(job.created_at),
        "lastUpdatedAt": iso_time(job.updated_at),
        "ttl": int(job.ttl_s * 1000),
        "pollInterval": POLL_INTERVAL_MS,
    }


class TaskAugmentedCalls:
    """Middleware: the `tasks` capability, `taskSupport` in the tool list, and task-augmented tool calls."""

    def __init__(self, server: MCPServer, jobs: JobBoard, checker: ToolArguments) -> None:
        self.server = server
        self.jobs = jobs
        self.checker = checker

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            return self._with_capability(await call_next(ctx))
        if ctx.method == "tools/list" and ctx.protocol_version in TASK_VERSIONS:
            return await self._with_task_support(await call_next(ctx))
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if (
            ctx.method == "tools/call"
            and ctx.protocol_version in TASK_VERSIONS
            and isinstance(params.get("task"), dict)
        ):
            return await self._start(ctx, params)
        return await call_next(ctx)

    @staticmethod
    def _with_capability(result: HandlerResult) -> HandlerResult:
        if isinstance(result, dict) and result.get("protocolVersion") in TASK_VERSIONS:
            capabilities = dict(result.get("capabilities") or {})
            capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
            result = {**result, "capabilities": capabilities}
        return result

    async def _with_task_support(self, result: HandlerResult) -> HandlerResult:
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return result
        capable = set(await background_tools(self.server))
        tools = [
            {**tool, "execution": {"taskSupport": "optional"}} if tool.get("name") in capable else tool
            for tool in result["tools"]
        ]
        return {**result, "tools": tools}

    async def _start(self, ctx: ServerRequestContext[Any, Any], params: Mapping[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        capable = await background_tools(self.server)
        if not isinstance(name, str) or name not in capable:
            shown = clip(name, 64) if isinstance(name, str) else "?"
            raise MCPError(
                METHOD_NOT_FOUND,
                f"Tool {shown!r} does not support task-augmented calls (call it directly); these do: "
                f"{', '.join(capable)}.",
            )
        arguments = params.get("arguments")
        ttl_ms = params["task"].get("ttl")
        ttl_s = ttl_ms / 1000 if isinstance(ttl_ms, int | float) and not isinstance(ttl_ms, bool) else None
        try:
            job = start_tool_job(
                self.server,
                self.jobs,
                self.checker,
                name,
                arguments if isinstance(arguments, Mapping) else {},
                request=ctx,
                ttl_s=ttl_s,
            )
        except JobError as error:
            raise MCPError(INVALID_PARAMS, str(error)) from None
        note = f"{name} is running as background task {job.job_id}; its result comes when it ends."
        return {"task": task_of(job), "_meta": {IMMEDIATE_RESPONSE: note}}


def owned_task(ctx: ServerRequestContext[Any, Any], task_id: str) -> Job:
    """The job behind `task_id` of the principal behind the request, or INVALID_PARAMS."""
    try:
        return kit_in(ctx).jobs.get(task_id, principal_of(ctx))
    except JobError as error:
        raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: {error}") from None


async def get_task(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
    return task_of(owned_task(ctx, params.task_id))


async def task_result(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
    job = owned_task(ctx, params.task_id)
    await job.done.wait()
    final = job.result or CallToolResult(content=[TextContent(type="text", text=job.status_message())], is_error=True)
    dumped = final.model_dump(by_alias=True, mode="json", exclude_none=True)
    dumped["_meta"] = {**(dumped.get("_meta") or {}), RELATED_TASK: {"taskId": job.job_id}}
    return dumped


async def cancel_task(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
    job = owned_task(ctx, params.task_id)
    try:
        await kit_in(ctx).jobs.cancel(job.job_id, principal_of(ctx))
    except JobFinished:
        raise MCPError(INVALID_PARAMS, f"Cannot cancel task: already in terminal status {job.status!r}") from None
    return task_of(job)


async def list_tasks(ctx: ServerRequestContext[Any, Any], params: TaskListParams) -> dict[str, Any]:
    if params.cursor:
        raise MCPError(INVALID_PARAMS, "Invalid cursor: tasks/list returns every task in one page")
    return {"tasks": [task_of(job) for job in kit_in(ctx).jobs.list(principal_of(ctx))]}


def register_tasks(kit: ToolKit) -> None:
    """Serve MCP tasks: the middleware (outermost, so a task call is answered before argument checks) and
    the tasks/* methods."""
    server = kit.server
    server.middleware.insert(0, TaskAugmentedCalls(server, kit.jobs, kit.arguments))
    lowlevel = server._lowlevel_server  # the SDK has no public way to add a request method to an MCPServer
    lowlevel.add_request_handler("tasks/get", TaskIdParams, get_task)
    lowlevel.add_request_handler("tasks/result", TaskIdParams, task_result)
    lowlevel.add_request_handler("tasks/cancel", TaskIdParams, cancel_task)
    lowlevel.add_request_handler("tasks/list", TaskListParams, list_tasks)
