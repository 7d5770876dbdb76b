"""Bookkeeping of one run: usage totals, cache hits, progress events and what is in flight.

Why separate: the stage logic should read as control flow only; counting and progress reporting live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from flowsteer_mcp.canvas.execution import NodeTrace, ProgressCallback, ProgressEvent
from flowsteer_mcp.canvas.kinds import kind_of
from flowsteer_mcp.canvas.model import OperatorNode, Stage, WorkflowGraph

log = structlog.get_logger(__name__)


def planned_calls(stage: Stage) -> int:
    """Upper bound of operator calls for a stage (a loop counted at its full count)."""
    return kind_of(stage).planned_calls(stage)


def planned_total(graph: WorkflowGraph) -> int:
    return sum(planned_calls(stage) for stage in graph.stages)


@dataclass(frozen=True)
class CallPosition:
    """Where one operator call sits: which of its node's draws, and which loop iteration."""

    draw: int = 0
    draws: int = 1
    iteration: int | None = None


@dataclass
class RunContext:
    progress: ProgressCallback | None
    total: int
    trace: list[NodeTrace] = field(default_factory=list)
    completed: int = 0
    llm_calls: int = 0
    tokens: int = 0
    cache_hits: int = 0
    in_flight: dict[str, str] = field(default_factory=dict)  # node id -> operator
    _draws_in_flight: dict[str, int] = field(default_factory=dict)  # node id -> running draws (samples: k)

    def add_usage(self, calls: int, tokens: int) -> None:
        self.llm_calls += calls
        self.tokens += tokens

    async def node_started(self, node: OperatorNode, call: CallPosition) -> None:
        self.in_flight[node.id] = node.operator
        self._draws_in_flight[node.id] = self._draws_in_flight.get(node.id, 0) + 1
        await self._emit(node, "started", call)

    async def node_finished(self, node: OperatorNode, call: CallPosition) -> None:
        left = self._draws_in_flight.get(node.id, 1) - 1
        if left > 0:
            self._draws_in_flight[node.id] = left
        else:
            self._draws_in_flight.pop(node.id, None)
            self.in_flight.pop(node.id, None)
        self.completed += 1
        await self._emit(node, "finished", call)

    async def _emit(self, node: OperatorNode, phase: str, call: CallPosition) -> None:
        if self.progress is None:
            return
        event = ProgressEvent.model_validate(
            {
                "node_id": node.id,
                "operator": node.operator,
                "phase": phase,
                "completed": self.completed,
                "total": max(self.total, self.completed),
                "draw": call.draw,
                "draws": call.draws,
                "iteration": call.iteration,
                "llm_calls": self.llm_calls,
                "tokens": self.tokens,
            }
        )
        try:
            await self.progress(event)
        except Exception:
            # A broken progress consumer (e.g. a closed MCP session) must not fail the workflow.
            log.warning("progress_callback_failed", node_id=node.id, phase=phase, exc_info=True)
