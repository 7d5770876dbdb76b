"""What every canvas operation returns: one shape for act, typed edits, run and finish."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.execution import AnswerEvidence, ExecutionReport
from flowsteer_mcp.canvas.stats import GraphStats

CanvasStatus = Literal["building", "awaiting_prompt", "finished", "exhausted"]


class NodeView(BaseModel):
    id: str = Field(description="stable node id, e.g. node_3 (a stage), node_2_p0 (a branch), node_4_cond (a check)")
    kind: str = Field(
        description="the node's stage kind: 'operator', or a registered structure kind (parallel, conditional, loop, "
        "fallback, ...)"
    )
    operator: str | None = Field(default=None, description="the operator name; null for a structure node")
    parent: str | None = Field(default=None, description="the structure this node belongs to; null at top level")
    slot: str | None = Field(
        default=None, description="role inside the parent: 'branch 1/2', 'check', 'on_fail', 'on_pass', 'body 1/2'"
    )
    count: int | None = Field(default=None, description="loops: the maximum number of iterations")
    prompt: str | None = Field(default=None, description="the node's custom instruction; null = operator default")


class PromptRequest(BaseModel):
    """The pending prompt turn: the next `act` text becomes this node's prompt."""

    node_id: str = Field(description="the node whose prompt the next act text sets")
    operator: str = Field(description="that node's operator")
    slot: str = Field(description="its role in the pending edit (e.g. 'branch 1/2', 'check', 'modify')")
    index: int = Field(description="1-based position among this edit's prompt turns")
    total: int = Field(description="prompt turns this edit needs in all")
    edit: Literal["add", "modify"] = Field(description="the edit that waits for its prompts")


class StateView(BaseModel):
    dsl: str = Field(
        description="the workflow in the DSL, e.g. 'Plan -> [Programmer, Custom] -> Verify ? Revise : done'"
    )
    nodes: list[NodeView] = Field(description="every node in stage order, structures before their children")
    stats: GraphStats = Field(description="graph statistics the finish gate and rewards read")
    round: int = Field(description="rounds used so far")
    max_rounds: int = Field(description="the round budget; the episode ends when it is spent")
    status: CanvasStatus = Field(
        description="building; awaiting_prompt (the next act text is a prompt); finished; exhausted (budget spent)"
    )
    awaiting_prompt_for: PromptRequest | None = Field(
        default=None, description="the pending prompt turn while status is awaiting_prompt, else null"
    )


class ExecutionView(BaseModel):
    """The workflow's latest run. `fresh` says whether that run happened during this step (count usage only then)."""

    fresh: bool = Field(default=False, description="true when this run happened during this call (count usage then)")
    status: str = Field(
        description="ok; degraded (the last stage failed, the answer is the best earlier solution); failed, "
        "no_executor, empty or timeout (no answer)"
    )
    ok: bool = Field(description="true when the run produced an answer (status ok or degraded)")
    output: str | None = Field(default=None, description="the run's final answer; null whenever there is none")
    error: str | None = Field(
        default=None, description="why the run failed or did not happen, or (degraded) which stage failed"
    )
    llm_calls: int = Field(default=0, description="executor LLM calls the run made")
    tokens: int = Field(default=0, description="executor tokens the run used")
    duration_s: float = Field(default=0.0, description="wall-clock seconds of the run")
    cache_hits: int = Field(default=0, description="operator calls answered from the memo cache (unchanged inputs)")
    evidence: AnswerEvidence | None = Field(
        default=None,
        description="what the run's own checks established about `output` (public tests passed, candidates "
        "agreeing), the [Evidence] line of the feedback; null when nothing was",
    )


def execution_view(report: ExecutionReport | None, *, fresh: bool = False) -> ExecutionView | None:
    """The typed view of a run (None: the workflow has not run since its last edit)."""
    if report is None:
        return None
    return ExecutionView(
        fresh=fresh,
        status=report.status,
        ok=report.ok,
        output=report.output,
        error=report.error,
        llm_calls=report.llm_calls,
        tokens=report.tokens,
        duration_s=report.duration_s,
        cache_hits=report.cache_hits,
        evidence=report.evidence,
    )


class StepResult(BaseModel):
    ok: bool = Field(description="false when the step was rejected (act: the round is still used)")
    message: str = Field(description="what happened, or what was wrong and how to fix it")
    feedback: str = Field(description="the feedback text a policy sees after this step")
    state: StateView = Field(description="the workflow after this step")
    execution: ExecutionView | None = Field(
        default=None,
        description="the latest run of the workflow; null when it has not run since its last edit "
        "(a new workflow, or execute_each_step=false)",
    )
    done: bool = Field(default=False, description="true once the episode is over (finished or budget exhausted)")
    error_code: str | None = Field(
        default=None,
        description="when ok is false: parse_error, unknown_operator, invalid_structure, unknown_node, "
        "invalid_prompt, limit_exceeded, wrong_state, finish_rejected, ...",
    )
    end_reason: Literal["finished", "budget_exhausted"] | None = Field(
        default=None, description="why the episode ended, once done; else null"
    )
    final_answer: str | None = Field(
        default=None, description="once done: the executed output of the last successful run (what is scored)"
    )
