"""Structured tool results (pydantic models give every tool an outputSchema and structured content)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.options import FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.session import EpisodeEnd
from flowsteer_mcp.canvas.step import ExecutionView, StateView, StepResult


class WorkflowOptionsInput(BaseModel):
    """Options a client may set per workflow (server limits still apply)."""

    model_config = ConfigDict(extra="forbid")

    max_rounds: int = Field(default=20, ge=1, description="round budget: every act / edit / finish call is one round")
    finish: Literal["paper", "relaxed"] | FinishPolicy = Field(
        default="paper",
        description="finish gate: 'paper' (>= 5 operators, a structure, solver + checker, ...) or 'relaxed' (>= 1 operator)",
    )
    execute_each_step: bool = Field(default=True, description="run the workflow after every completed edit")
    hints: bool = Field(default=True, description="include the [BLOCK_FINISH] [NEXT] [REASON] hint block in feedback")
    lenient: bool = Field(default=False, description="accept a lone finish phrase or a bare operator name without tags")
    prompt_turns: bool = Field(
        default=True, description="act: ask for a node's prompt in the next turn when none is inline"
    )
    disabled_operators: list[str] = Field(default_factory=list)


class WorkflowStep(StepResult):
    workflow_id: str


class CreatedWorkflow(WorkflowStep):
    system_prompt: str = Field(description="the Flow-Director system prompt for this workflow")
    observation: str = Field(description="the first user turn for a policy (task, state, 'your turn')")


class RunResult(BaseModel):
    workflow_id: str
    execution: ExecutionView
    trace: list[NodeTrace]


class WorkflowDetail(BaseModel):
    workflow_id: str
    task: TaskSpec
    options: dict[str, Any]
    graph: dict[str, Any] = Field(description="the typed graph (stages with ids, operators, prompts)")
    state: StateView
    last_execution: RunResult | None = None
    end: EpisodeEnd | None = None
    last_feedback: str
    history_length: int


class OperatorInfo(BaseModel):
    name: str
    category: str
    role: str
    summary: str
    when_to_use: str
    signature: str
    accepts_prompt: bool
    legacy: bool


class OperatorCatalog(BaseModel):
    operators: list[OperatorInfo]


class ExportResult(BaseModel):
    workflow_id: str
    format: Literal["json", "dsl", "mermaid"]
    content: str


class WorkflowSummary(BaseModel):
    workflow_id: str
    task_preview: str
    task_type: str
    status: str
    round: int
    max_rounds: int
    dsl: str


class WorkflowList(BaseModel):
    workflows: list[WorkflowSummary]


class Deleted(BaseModel):
    workflow_id: str
    deleted: bool
