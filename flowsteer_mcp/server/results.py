"""Structured tool results (pydantic models give every tool an outputSchema and structured content)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import EpisodeEnd
from flowsteer_mcp.canvas.step import ExecutionView, StateView, StepResult
from flowsteer_mcp.server.arguments import FinishPolicyInput, OperatorNames


class WorkflowOptionsInput(BaseModel):
    """Options a client may set per workflow (server limits still apply)."""

    model_config = ConfigDict(extra="forbid")

    max_rounds: int = Field(
        default=20, ge=1, le=1_000_000, description="round budget: every act / edit / finish call is one round"
    )
    finish: Literal["paper", "relaxed"] | FinishPolicyInput = Field(
        default="paper",
        description="finish gate: 'paper' (>= 5 operators, a structure, solver + checker, ...) or 'relaxed' (>= 1 operator)",
    )
    execute_each_step: bool = Field(default=True, description="run the workflow after every completed edit")
    hints: bool = Field(default=True, description="include the [BLOCK_FINISH] [NEXT] [REASON] hint block in feedback")
    lenient: bool = Field(default=False, description="accept a lone finish phrase or a bare operator name without tags")
    prompt_turns: bool = Field(
        default=True, description="act: ask for a node's prompt in the next turn when none is inline"
    )
    disabled_operators: OperatorNames = Field(
        default_factory=list, description="operator names this workflow may not use (from list_operators)"
    )


WORKFLOW_ID = "the workflow's handle, as returned by create_workflow"


class WorkflowStep(StepResult):
    workflow_id: str = Field(description=WORKFLOW_ID)


class CreatedWorkflow(WorkflowStep):
    system_prompt: str = Field(description="the Flow-Director system prompt for this workflow")
    observation: str = Field(description="the first user turn for a policy (task, state, 'your turn')")


class RunResult(BaseModel):
    workflow_id: str = Field(description=WORKFLOW_ID)
    execution: ExecutionView = Field(description="the run: status, output (the answer), error, usage")
    trace: list[NodeTrace] = Field(description="one entry per operator call, in execution order")


class WorkflowDetail(BaseModel):
    workflow_id: str = Field(description=WORKFLOW_ID)
    task: TaskSpec = Field(description="the problem, its type, and for code tasks the entry point and tests")
    options: dict[str, Any] = Field(description="the workflow's options, server limits included")
    graph: dict[str, Any] = Field(description="the typed graph (stages with ids, operators, prompts)")
    state: StateView = Field(description="DSL, nodes, stats, round and status")
    last_execution: RunResult | None = Field(default=None, description="the latest run with its trace; null if none")
    end: EpisodeEnd | None = Field(default=None, description="how the episode ended; null while it is open")
    last_feedback: str = Field(description="the feedback text of the latest step")
    history_length: int = Field(description="steps taken so far (every act, edit and finish)")


class OperatorInfo(BaseModel):
    name: str = Field(description="the name to use in act, add_operator, add_structure and modify_node")
    category: str = Field(description="planning, solving, verification, revision, ensemble or formatting")
    role: str = Field(
        description="guidance (adds a plan), solution (replaces the solution) or checker (sets a verdict)"
    )
    summary: str = Field(description="what it does")
    when_to_use: str = Field(description="when it helps")
    signature: str = Field(description="its inputs and outputs")
    accepts_prompt: bool = Field(description="whether a custom instruction (prompt) changes what it does")
    legacy: bool = Field(description="kept for old workflows; prefer the others")


class OperatorCatalog(BaseModel):
    operators: list[OperatorInfo] = Field(description="every operator of this server's library")


class ExportResult(BaseModel):
    workflow_id: str = Field(description=WORKFLOW_ID)
    format: Literal["json", "dsl", "mermaid"] = Field(description="the format of `content`")
    content: str = Field(description="the export: canonical JSON (import_workflow reads it), DSL or Mermaid")


class WorkflowSummary(BaseModel):
    workflow_id: str = Field(description=WORKFLOW_ID)
    task_preview: str = Field(description="the first 120 characters of the task")
    task_type: str = Field(description="math, code, qa or general")
    status: str = Field(description="building, awaiting_prompt, finished or exhausted")
    round: int = Field(description="rounds used so far")
    max_rounds: int = Field(description="the round budget")
    dsl: str = Field(description="the workflow in the DSL")


class WorkflowList(BaseModel):
    workflows: list[WorkflowSummary] = Field(description="the live workflows of this server")


class Deleted(BaseModel):
    workflow_id: str = Field(description=WORKFLOW_ID)
    deleted: bool = Field(description="true: the workflow and its stored state are gone")
