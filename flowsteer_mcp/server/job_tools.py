"""The background-job tools: `start_job`, `get_job`, `cancel_job`, `list_jobs`.

Why plain tools besides MCP tasks: every MCP client can call a tool, while only some speak the tasks protocol
(2025-11-25) and many time out on any request after 60 s. With these, a client starts a long call
(`act`, an edit that runs the workflow, `run_workflow`, `finish`, `solve`), gets a job id at once, and polls
it; `get_job(wait_s=...)` holds the poll open up to 50 s so a client needs few of them.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from flowsteer_mcp.server.background import background_tools, principal_of, start_tool_job
from flowsteer_mcp.server.jobs import Job, JobError, error_text
from flowsteer_mcp.server.progress import ToolProgress
from flowsteer_mcp.server.toolkit import ToolEntry, kit_of

MAX_WAIT_S = 50.0  # under the 60 s request timeout many clients use
POLL_INTERVAL_S = 5.0
JobId = Annotated[str, Field(min_length=1, max_length=80, description="the job_id start_job returned")]

# start_job may start any tool that runs the workflow: destructive and open world like the most of them.
STARTS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
CANCELS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


class JobView(BaseModel):
    job_id: str = Field(description="the job's handle for get_job and cancel_job")
    tool: str = Field(description="the tool the job runs")
    workflow_id: str | None = Field(description="the workflow it works on (null for solve, which creates one)")
    status: Literal["working", "completed", "failed", "cancelled"] = Field(
        description="working; completed (result holds the tool's result); failed (error says why; the tool "
        "reported an error, as the synchronous call would have); cancelled"
    )
    message: str = Field(description="what runs now (node, draw, tokens so far, time), or how it ended")
    created_at: str = Field(description="ISO 8601, UTC")
    elapsed_s: float = Field(description="seconds since the job started (until it ended, once it has)")
    ttl_s: float = Field(description="the server keeps the job this long after its creation (longer if running)")
    poll_interval_s: float = Field(description="a sensible pause between polls")
    result: dict[str, Any] | None = Field(
        default=None, description="completed: the tool's structured result, exactly as a synchronous call returns it"
    )
    error: str | None = Field(default=None, description="failed: the tool's error message")


class JobList(BaseModel):
    jobs: list[JobView] = Field(description="the jobs this server keeps for you, oldest first")


def job_view(job: Job) -> JobView:
    result = job.result
    return JobView(
        job_id=job.job_id,
        tool=job.tool,
        workflow_id=job.workflow_id,
        status=job.status,
        message=job.status_message(),
        created_at=iso_time(job.created_at),
        elapsed_s=round(job.duration_s, 3),
        ttl_s=job.ttl_s,
        poll_interval_s=POLL_INTERVAL_S,
        result=result.structured_content if result is not None and not result.is_error else None,
        error=error_text(result) if job.status == "failed" else None,
    )


def iso_time(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def owned_job(job_id: str, ctx: Context) -> Job:
    """The job `job_id` of the principal behind the request, or a ToolError saying it is not there."""
    try:
        return kit_of(ctx).jobs.get(job_id, principal_of(ctx.request_context))
    except JobError as error:
        raise ToolError(str(error)) from None


async def start_job(
    name: Annotated[
        str,
        Field(
            max_length=64,
            description="a tool that may run the workflow: act, the typed edits, run_workflow, finish, solve",
        ),
    ],
    arguments: Annotated[dict[str, Any], Field(description="that tool's arguments, exactly as for a direct call")],
    ctx: Context,
) -> JobView:
    """Start a long tool call in the background and return its job at once; poll it with get_job."""
    kit = kit_of(ctx)
    allowed = await background_tools(kit.server)
    if name not in allowed:
        raise ToolError(f"{name[:64]!r} cannot run as a job; these can: {', '.join(allowed)}.")
    try:  # the arguments are checked as the synchronous call would check them
        job = start_tool_job(kit.server, kit.jobs, kit.arguments, name, arguments, request=ctx.request_context)
    except JobError as error:
        raise ToolError(str(error)) from None
    return job_view(job)


async def get_job(
    job_id: JobId,
    ctx: Context,
    wait_s: Annotated[
        float, Field(ge=0, le=MAX_WAIT_S, description="wait up to this many seconds for the job to end (0-50)")
    ] = 0.0,
) -> JobView:
    """A job's status, what it is running now, and once it ended its result or error."""
    kit, job = kit_of(ctx), owned_job(job_id, ctx)
    if wait_s > 0 and not job.finished:
        waiting = ToolProgress(ctx.report_progress, job.activity)  # a long poll is a long call too
        async with waiting.heartbeat(kit.settings.progress_interval_s):
            await kit.jobs.wait(job, wait_s)
    return job_view(job)


async def cancel_job(job_id: JobId, ctx: Context) -> JobView:
    """Stop a running job; the step it ran is discarded unless it had already committed."""
    job = owned_job(job_id, ctx)
    try:
        await kit_of(ctx).jobs.cancel(job.job_id, principal_of(ctx.request_context))
    except JobError as error:
        raise ToolError(str(error)) from None
    return job_view(job)


async def list_jobs(ctx: Context) -> JobList:
    """The background jobs this server keeps for you (running, and finished ones until their ttl)."""
    return JobList(jobs=[job_view(job) for job in kit_of(ctx).jobs.list(principal_of(ctx.request_context))])


def job_tools() -> list[ToolEntry]:
    """The job tools' rows of the server's registration table."""
    return [
        ToolEntry(start_job, "Start a background job", STARTS),
        ToolEntry(get_job, "Get a background job", READS),
        ToolEntry(cancel_job, "Cancel a background job", CANCELS),
        ToolEntry(list_jobs, "List background jobs", READS),
    ]
