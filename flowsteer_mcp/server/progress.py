"""MCP progress notifications for one tool call: one per engine event, and a heartbeat in between.

Why a heartbeat: a single executor call can take minutes (300 s is the default per-call limit), and clients
give up on a request that stays silent (the TypeScript SDK's default is 60 s; with `resetTimeoutOnProgress`
every notification restarts that clock). So while a call runs, the current activity ("running node_2
(Programmer) draw 3/8 for 41 s; ...") is sent every `interval_s` seconds, whatever the engine does.

Numbering: the spec wants `progress` to increase with every notification of a request. Engine events are
numbered 1, 2, 3, ... (an executor's own `completed` count repeats, so it cannot serve); the k-th heartbeat
after event n is sent as n + k/(k+1), which increases with every beat and never reaches n + 1, so the next
event still goes out as n + 1. `total` is the number of events the run plans (two per operator call, an upper
bound when a loop may exit early), never below `progress`, and absent until a run has planned something.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import structlog

from flowsteer_mcp.canvas.execution import ProgressCallback, ProgressEvent
from flowsteer_mcp.server.activity import JOB_ACTIVITY, RunActivity

log = structlog.get_logger(__name__)

ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]
DEFAULT_HEARTBEAT_S = 5.0


class ToolProgress:
    """A `ProgressCallback` that reports events and heartbeats through `report(progress, total, message)`."""

    def __init__(self, report: ReportProgress, activity: RunActivity) -> None:
        self._report = report
        self.activity = activity
        self._events = 0
        self._beats = 0  # heartbeats since the last event
        self._lock = anyio.Lock()  # parallel branches report concurrently; values must reach the wire in order

    async def __call__(self, event: ProgressEvent) -> None:
        async with self._lock:
            self.activity.record(event)
            self._events += 1
            self._beats = 0
            await self._send(float(self._events))

    async def beat(self) -> None:
        """Repeat what is running now, with a value above the last one sent."""
        async with self._lock:
            self._beats += 1
            await self._send(self._events + self._beats / (self._beats + 1))

    async def _send(self, value: float) -> None:
        planned_events = 2 * self.activity.planned
        total = float(max(planned_events, math.ceil(value))) if planned_events else None
        await self._report(value, total, self.activity.describe())

    @asynccontextmanager
    async def heartbeat(self, interval_s: float) -> AsyncIterator[None]:
        """Beat every `interval_s` seconds while the block runs."""

        async def beating() -> None:
            while True:
                await anyio.sleep(interval_s)
                try:
                    await self.beat()
                except Exception:  # a closed stream must not fail the call whose progress it reports
                    log.debug("progress_heartbeat_failed", exc_info=True)

        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(beating)
            try:
                yield
            except Exception as error:  # re-raised below as itself, not inside an ExceptionGroup
                failure = error
            finally:
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure


@asynccontextmanager
async def tool_progress(report: ReportProgress, phase: str, interval_s: float) -> AsyncIterator[ProgressCallback]:
    """The progress callback for a tool's work: inside a background job its activity (polled, not sent);
    otherwise MCP notifications to the caller with a heartbeat every `interval_s` seconds."""
    job_activity = JOB_ACTIVITY.get()
    if job_activity is not None:
        job_activity.phase = phase

        async def into_job(event: ProgressEvent) -> None:
            job_activity.record(event)

        yield into_job
        return
    progress = ToolProgress(report, RunActivity(phase=phase))
    async with progress.heartbeat(interval_s):
        yield progress
