"""What a long tool call is doing right now, in one line: the calls running, their draws, the usage so far.

Why: one model call on a CPU executor can take minutes with no engine event in between, and a client (and
its user) must be able to tell a slow call from a stuck one. `RunActivity` folds the engine's progress events
into that picture; the MCP progress sender repeats it on a heartbeat, and a background job shows it when
polled. A tool that is not running a workflow (waiting for a policy turn, say) sets a plain `phase`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from flowsteer_mcp.canvas.execution import ProgressEvent
from flowsteer_mcp.canvas.text import clip

MESSAGE_CHARS = 400
SHOWN_CALLS = 3


@dataclass(frozen=True)
class _CallKey:
    node_id: str
    draw: int
    iteration: int | None


@dataclass
class _Running:
    operator: str
    draws: int
    since: float


@dataclass
class RunActivity:
    """The live state of one tool call's work, built from progress events (and a phase text between runs)."""

    phase: str = "working"
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    events: int = 0  # progress events recorded so far
    completed: int = 0  # operator calls finished in the current run
    planned: int = 0  # operator calls the current run plans (0: no run yet)
    llm_calls: int = 0
    tokens: int = 0
    _running: dict[_CallKey, _Running] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def record(self, event: ProgressEvent) -> None:
        """Take one engine event into account (an event never fails: it only describes)."""
        self.events += 1
        key = _CallKey(event.node_id, event.draw, event.iteration)
        if event.phase == "started":
            self._running[key] = _Running(operator=event.operator, draws=event.draws, since=self.clock())
        else:
            self._running.pop(key, None)
        self.completed, self.planned = event.completed, max(event.total, event.completed)
        self.llm_calls, self.tokens = event.llm_calls, event.tokens

    def describe(self) -> str:
        """One line: what runs now and for how long, calls done of planned, usage so far, time elapsed."""
        now = self.clock()
        parts: list[str] = []
        running = sorted(self._running.items(), key=lambda item: item[1].since)
        if running:
            shown = [self._call_text(key, call, now) for key, call in running[:SHOWN_CALLS]]
            more = len(running) - SHOWN_CALLS
            parts.append("running " + ", ".join(shown) + (f" and {more} more" if more > 0 else ""))
        else:
            parts.append(self.phase)
        if self.planned:
            parts.append(f"{self.completed} of {self.planned} operator calls done")
        if self.llm_calls or self.tokens:
            parts.append(f"{self.tokens:,} tokens in {self.llm_calls} executor calls so far")
        parts.append(f"{now - self.started:.0f} s elapsed")
        return clip("; ".join(parts), MESSAGE_CHARS)

    @staticmethod
    def _call_text(key: _CallKey, call: _Running, now: float) -> str:
        text = f"{key.node_id} ({call.operator})"
        if call.draws > 1:
            text += f" draw {key.draw + 1}/{call.draws}"
        if key.iteration is not None:
            text += f" iteration {key.iteration + 1}"
        return f"{text} for {now - call.since:.0f} s"


# Set while a tool runs as a background job: its progress goes to the job's activity instead of the request.
JOB_ACTIVITY: ContextVar[RunActivity | None] = ContextVar("flowsteer_job_activity", default=None)
