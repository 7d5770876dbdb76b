"""MCP progress notifications for one tool call, from the executor's node events.

Why a counter of its own: the spec requires `progress` to increase with every notification of a request, but
an executor's `completed` count repeats (a "started" event carries the count of the previous "finished" one,
and parallel branches start together). Numbering the events themselves, started and finished alike, is
strictly increasing over the whole tool call whatever the executor does; `total` is the number of events the
run plans (two per operator call, an upper bound when a loop may exit early), never below `progress`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from flowsteer_mcp.canvas.execution import ProgressEvent

ReportProgress = Callable[[float, float | None, str | None], Awaitable[None]]


class ToolProgress:
    """A `ProgressCallback` that forwards node events to `report(progress, total, message)`, numbered 1, 2, 3..."""

    def __init__(self, report: ReportProgress) -> None:
        self._report = report
        self._sent = 0
        self._lock = anyio.Lock()  # parallel branches report concurrently; numbers must reach the wire in order

    async def __call__(self, event: ProgressEvent) -> None:
        async with self._lock:
            self._sent += 1
            total = max(2 * event.total, self._sent) if event.total > 0 else None
            message = (
                f"{event.phase} {event.node_id} ({event.operator}); {event.completed}/{event.total} operator calls done"
            )
            await self._report(self._sent, total, message)
