"""A workflow's state as plain data: what the stores persist and every step of a turn reads or writes.

Plain pydantic data with no behaviour beyond reading itself, so a restarted server carries on exactly from the
stored JSON. `Canvas` (`session.py`) takes steps on it; `session.py` re-exports these names for its callers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.actions import AddStage, ModifyNode
from flowsteer_mcp.canvas.execution import ExecutionReport
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasOptions, TaskSpec
from flowsteer_mcp.canvas.step import CanvasStatus, PromptRequest

StepSource = Literal["act", "tool"]  # a dialect turn, or a typed tool call


class PendingEdit(BaseModel):
    """An add/modify waiting for prompt turns; applied atomically once every prompt has arrived."""

    action: AddStage | ModifyNode
    node_ids: list[str]
    slots: list[str]
    operators: list[str]
    prompts: list[str | None]

    @property
    def next_slot(self) -> int:
        return next(i for i, p in enumerate(self.prompts) if p is None)

    def request(self) -> PromptRequest:
        """The prompt turn this edit waits for next (what the feedback asks the policy to write)."""
        i = self.next_slot
        return PromptRequest(
            node_id=self.node_ids[i],
            operator=self.operators[i],
            slot=self.slots[i],
            index=i + 1,
            total=len(self.prompts),
            edit="add" if isinstance(self.action, AddStage) else "modify",
        )


class HistoryEntry(BaseModel):
    round: int
    source: StepSource
    input: str
    ok: bool
    message: str
    dsl: str


class EpisodeEnd(BaseModel):
    reason: Literal["finished", "budget_exhausted"]
    round: int
    final_answer: str | None = None  # the executed output of an ok or degraded run; this is what gets scored
    final_code: str | None = None
    claimed_answer: str | None = None  # the `<answer>` a policy wrote with finish: recorded, never scored


class CanvasState(BaseModel):
    task: TaskSpec
    options: CanvasOptions = Field(default_factory=CanvasOptions)
    graph: WorkflowGraph = Field(default_factory=WorkflowGraph)
    status: CanvasStatus = "building"
    rounds_used: int = 0
    pending: PendingEdit | None = None
    last_execution: ExecutionReport | None = None
    last_feedback: str = ""
    history: list[HistoryEntry] = Field(default_factory=list)
    end: EpisodeEnd | None = None

    @property
    def done(self) -> bool:
        return self.status in ("finished", "exhausted")


__all__ = ["CanvasState", "EpisodeEnd", "HistoryEntry", "PendingEdit", "StepSource"]
