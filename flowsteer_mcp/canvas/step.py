"""What every canvas operation returns: one shape for act, typed edits, run and finish."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.stats import GraphStats

CanvasStatus = Literal["building", "awaiting_prompt", "finished", "exhausted"]


class NodeView(BaseModel):
    id: str
    kind: Literal["operator", "parallel", "conditional", "loop"]
    operator: str | None = None
    parent: str | None = None
    slot: str | None = None  # role inside the parent: "branch 1/2", "check", "on_fail", "on_pass", "body 1/2"
    count: int | None = None  # loops
    prompt: str | None = None


class PromptRequest(BaseModel):
    """The pending prompt turn: the next `act` text becomes this node's prompt."""

    node_id: str
    operator: str
    slot: str
    index: int  # 1-based position among this edit's prompt turns
    total: int
    edit: Literal["add", "modify"]


class StateView(BaseModel):
    dsl: str
    nodes: list[NodeView]
    stats: GraphStats
    round: int
    max_rounds: int
    status: CanvasStatus
    awaiting_prompt_for: PromptRequest | None = None


class ExecutionView(BaseModel):
    """The workflow's latest run. `fresh` says whether that run happened during this step (count usage only then)."""

    fresh: bool = False
    status: str
    ok: bool
    output: str | None = None
    error: str | None = None
    llm_calls: int = 0
    tokens: int = 0
    duration_s: float = 0.0
    cache_hits: int = 0


class StepResult(BaseModel):
    ok: bool
    message: str
    feedback: str = Field(description="the feedback text a policy sees after this step")
    state: StateView
    execution: ExecutionView | None = None
    done: bool = False
    error_code: str | None = None
    end_reason: Literal["finished", "budget_exhausted"] | None = None
    final_answer: str | None = None
