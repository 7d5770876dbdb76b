"""Background jobs: a long tool call started now and collected later, so no client waits on one request.

Why: an `act` or a `run_workflow` on a CPU executor can take minutes, and many clients give up on a request
after 60 s whatever progress they hear. A job runs the very same tool call (same validation, same result)
in the server's job group and is polled by its id: through the plain tools `get_job` / `cancel_job` (any
client), or through MCP tasks (`tasks/get`, `tasks/result`, `tasks/cancel`) for clients that speak them.

Rules:
- Ids are 128-bit random (`job_...`): they cannot be guessed. When a request carries an OAuth identity, its
  jobs belong to that identity, and other identities are told they do not exist.
- At most `max_running` jobs run at once, and one per workflow: a second job on a busy workflow is refused,
  and so is a synchronous edit of it, with the job's id, instead of waiting minutes for the workflow's lock.
- A finished job (result included) is kept until `ttl_s` after its creation and at least `grace_s` after it
  finished; then it is forgotten, as are the oldest finished jobs beyond `max_kept`. A running job is kept.
- Cancelling a running job cancels its tool call, which leaves the workflow exactly as before the call.
- Jobs run in a task group the host opens with `serving()` (the HTTP app's lifespan, the stdio loop, an
  in-memory client's connection); a host that closes its group cancels the jobs it ran. Without a group,
  `start` refuses rather than run a job nobody can collect.

How jobs fit with heartbeats and MCP tasks: (docs/design/server.md, "Long calls").
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio
import structlog
from anyio.abc import TaskGroup
from mcp.types import CallToolResult, TextContent

from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.errors import FlowSteerError
from flowsteer_mcp.server.activity import JOB_ACTIVITY, RunActivity

log = structlog.get_logger(__name__)

JobStatus = Literal["working", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
ERROR_CHARS = 1000
ToolCall = Callable[[], Awaitable[CallToolResult]]
CANCELLED_BY_REQUEST = (
    "cancelled by request; a step stopped before it committed changed nothing (get_workflow shows the workflow)"
)


class JobError(FlowSteerError, RuntimeError):
    """A job request that cannot be served; the message says why and what to do."""


class JobNotFound(JobError, LookupError):
    pass


class JobFinished(JobError):
    """Cancelling a job that already ended."""


@dataclass
class Job:
    job_id: str
    tool: str
    workflow_id: str | None
    owner: str | None  # the OAuth principal that started it; None without OAuth
    created_at: float  # wall clock (timestamps clients see)
    ttl_s: float
    activity: RunActivity
    status: JobStatus = "working"
    updated_at: float = 0.0
    finished_at: float | None = None  # monotonic
    result: CallToolResult | None = None
    cancel_reason: str | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def status_message(self) -> str:
        """What a poller should read: the live activity, the cancellation reason, or the failure's text."""
        if self.status == "working":
            return self.activity.describe()
        if self.status == "cancelled":
            return self.cancel_reason or "cancelled"
        if self.status == "failed":
            return clip(error_text(self.result), ERROR_CHARS)
        return f"{self.tool} completed in {self.duration_s:.1f} s"

    @property
    def duration_s(self) -> float:
        """Seconds from start to end (to now while it runs)."""
        end = self.finished_at if self.finished_at is not None else self.activity.clock()
        return end - self.activity.started


def error_text(result: CallToolResult | None) -> str:
    if result is None:
        return "the job ended without a result"
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent)) or "failed"


class JobBoard:
    """The server's jobs: started, polled, cancelled and expired here; run in the host's job group."""

    def __init__(
        self,
        *,
        max_running: int = 8,
        max_kept: int = 200,
        default_ttl_s: float = 3600.0,
        max_ttl_s: float = 86_400.0,
        grace_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_running = max_running
        self.max_kept = max_kept
        self.default_ttl_s = default_ttl_s
        self.max_ttl_s = max_ttl_s
        self.grace_s = grace_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._jobs: dict[str, Job] = {}
        self._groups: list[TaskGroup] = []

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Open a job group for as long as the host runs; closing it cancels the jobs it still runs."""
        async with anyio.create_task_group() as group:
            self._groups.append(group)
            try:
                yield
            finally:
                self._groups.remove(group)
                group.cancel_scope.cancel()

    @property
    def running(self) -> list[Job]:
        return [job for job in self._jobs.values() if not job.finished]

    def running_on(self, workflow_id: str) -> Job | None:
        return next((job for job in self.running if job.workflow_id == workflow_id), None)

    def start(
        self, tool: str, workflow_id: str | None, call: ToolCall, *, owner: str | None, ttl_s: float | None = None
    ) -> Job:
        """Start `call` as a job and return it at once (status working)."""
        self._sweep()
        if not self._groups:
            raise JobError("Background jobs are not available in this server process (no job group is running).")
        if len(self.running) >= self.max_running:
            raise JobError(
                f"This server already runs {self.max_running} background jobs; wait for one to finish "
                "(get_job) or cancel one (cancel_job)."
            )
        if workflow_id is not None and (busy := self.running_on(workflow_id)) is not None:
            raise JobError(busy_message(workflow_id, busy))
        now = self._wall_clock()
        ttl = min(self.max_ttl_s, ttl_s if ttl_s and ttl_s > 0 else self.default_ttl_s)
        job = Job(
            job_id="job_" + secrets.token_hex(16),
            tool=tool,
            workflow_id=workflow_id,
            owner=owner,
            created_at=now,
            updated_at=now,
            ttl_s=ttl,
            activity=RunActivity(phase=f"{tool} queued", clock=self._clock),
        )
        self._jobs[job.job_id] = job
        self._groups[-1].start_soon(self._run, job, call)
        log.info("job_started", job_id=job.job_id, tool=tool, workflow_id=workflow_id)
        return job

    def get(self, job_id: str, owner: str | None) -> Job:
        self._sweep()
        job = self._jobs.get(job_id)
        if job is None or (job.owner is not None and job.owner != owner):
            raise JobNotFound(
                f"Unknown job_id {clip(job_id, 80)!r} (never started, or forgotten after its ttl); "
                "list_jobs shows the jobs this server keeps for you."
            )
        return job

    def list(self, owner: str | None) -> list[Job]:
        self._sweep()
        return [job for job in self._jobs.values() if job.owner is None or job.owner == owner]

    async def cancel(self, job_id: str, owner: str | None) -> Job:
        job = self.get(job_id, owner)
        if job.finished:
            raise JobFinished(f"Job {job_id} already ended ({job.status}); nothing to cancel.")
        self._end(job, "cancelled", None, reason=CANCELLED_BY_REQUEST)
        job.scope.cancel()
        return job

    async def wait(self, job: Job, timeout_s: float) -> None:
        """Return when `job` has ended or after `timeout_s` seconds, whichever comes first."""
        with anyio.move_on_after(timeout_s):
            await job.done.wait()

    # ----- internals -------------------------------------------------------------------------------------
    async def _run(self, job: Job, call: ToolCall) -> None:
        JOB_ACTIVITY.set(job.activity)  # this task's own context: the tool reports its progress into the job
        job.activity.phase = f"{job.tool} running"
        result: CallToolResult | None = None
        try:
            with job.scope:
                result = await call()
        except Exception:  # the tool layer turns every agent mistake into a result; this is a server bug
            log.exception("job_crashed", job_id=job.job_id, tool=job.tool)
            result = CallToolResult(
                content=[TextContent(type="text", text=f"Error executing tool {job.tool}: internal error")],
                is_error=True,
            )
        finally:
            if not job.finished:
                if result is None:  # the host closed the job group
                    self._end(job, "cancelled", None, reason="cancelled: the server stopped")
                else:
                    self._end(job, "failed" if result.is_error else "completed", result)
            log.info("job_ended", job_id=job.job_id, tool=job.tool, status=job.status)

    def _end(self, job: Job, status: JobStatus, result: CallToolResult | None, *, reason: str | None = None) -> None:
        job.status, job.result, job.cancel_reason = status, result, reason
        job.updated_at = self._wall_clock()
        job.finished_at = self._clock()
        job.done.set()

    def _sweep(self) -> None:
        now_wall, now = self._wall_clock(), self._clock()
        for job in list(self._jobs.values()):
            if (
                job.finished
                and now_wall > job.created_at + job.ttl_s
                and job.finished_at is not None
                and now - job.finished_at > self.grace_s
            ):
                del self._jobs[job.job_id]
        finished = sorted((job for job in self._jobs.values() if job.finished), key=lambda job: job.finished_at or 0.0)
        for job in finished[: max(0, len(self._jobs) - self.max_kept)]:
            del self._jobs[job.job_id]


def busy_message(workflow_id: str, job: Job) -> str:
    return (
        f"Workflow {workflow_id} is busy: background job {job.job_id} ({job.tool}) has been running on it for "
        f"{job.activity.elapsed_s:.0f} s. Wait for it with get_job, or stop it with cancel_job."
    )
