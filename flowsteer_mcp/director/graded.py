"""One graded episode as evaluations journal it (`items.jsonl`) and the episode browser shows it.

Why here and not in `training`: the browser (`flowsteer_mcp/viewer/`) reads what the evaluation harness
(`training/evaluate/`) writes, and `flowsteer_mcp` may not import `training`; one schema, owned by the lower
package, keeps the two from drifting apart.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# How an item was scored when the run, not the director, failed: the director or its client raised (a server down,
# a bug) or the scorer did. Such an item is no measurement: it withholds the report's figures and runs again on
# `--resume`.
RUN_FAILURE_METHODS = frozenset({"episode_error", "scoring_error", "executor_unavailable"})


class DirectorTurn(BaseModel):
    """One turn a policy director sent to the canvas, as sent (inline operator prompts included), and whether the
    canvas took it: the DSL alone hides the prompts, and a refused edit leaves no trace in the workflow."""

    model_config = ConfigDict(extra="forbid")

    round: int
    kind: Literal["action", "prompt"]
    sent: str
    ok: bool


class ItemResult(BaseModel):
    """One episode of one director on one problem, with its grade."""

    model_config = ConfigDict(extra="forbid")

    director: str
    problem_id: str
    source: str
    problem_type: str
    answer: str | None = None
    score: float = Field(default=0.0, ge=0.0, le=1.0)
    correct: bool = False
    score_method: str = ""
    score_details: dict[str, Any] = Field(default_factory=dict)
    # a sampled workflow's ceiling: some draw of its first sampled node graded correct (evaluate/oracle.py);
    # None when it sampled nothing (or in journals written before the oracle existed)
    oracle: bool | None = None
    workflow_id: str | None = None
    dsl: str = ""
    finished: bool = False
    end_reason: str | None = None
    turns: int = 0
    llm_calls: int = 0
    tokens: int = 0
    policy_tokens: int = 0
    wall_s: float = 0.0
    error: str | None = None
    # per-node trace of the episode's final run (NodeTrace rows, outputs clipped); older journals lack it
    trace: list[dict[str, Any]] = Field(default_factory=list)
    # the final workflow's graph statistics (training/train/families.py reads them); older journals lack them
    stats: dict[str, Any] = Field(default_factory=dict)
    director_turns: list[DirectorTurn] = Field(default_factory=list)  # a policy director's turns; others have none

    @property
    def failed(self) -> bool:
        """An episode that raised, reported an error, or produced no answer at all."""
        return self.error is not None or not (self.answer or "").strip()

    @property
    def run_failure(self) -> bool:
        """The episode could not run to an answer, or its answer could not be graded, through no act of the
        director's workflow (unlike a workflow that fails or answers nothing, which is an outcome scored 0)."""
        return self.score_method in RUN_FAILURE_METHODS
