"""What an evaluation run produces: one `ItemResult` per (director, problem) and the run's `EvalReport`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class EvalConfig(BaseModel):
    """How the run was set up, written into the report so a result can be traced back to its inputs."""

    model_config = ConfigDict(extra="forbid")

    directors: list[str]  # `workflow:STEM` for a --workflow file, `template:NAME` for a library workflow
    workflows: list[str] = Field(default_factory=list)  # the --workflow files, in order
    # director name -> sha256 of its workflow file: a resumed run must evaluate the same workflows
    workflow_digests: dict[str, str] = Field(default_factory=dict)
    concurrency: int = Field(ge=1)
    data: list[str] = Field(default_factory=list)
    limit: int | None = None
    skip: int = Field(default=0, ge=0)  # each source's first N problems left out (--skip)
    sources: list[str] | None = None
    seed: int | None = None
    executor: str | None = None  # the executor model's identity (backend cache key), never a secret
    # the in-process engine's `[engine]` settings (re-asks and timeouts change results); None: a remote server's
    engine: dict[str, Any] | None = None
    mcp_url: str | None = None  # None: an in-process server; else the first of `mcp_urls`
    policy_url: str | None = None  # the first of `policy_urls` (`shipped:NAME` for the shipped director)
    # Where episodes ran (recorded, not compared on --resume: they choose where an item runs, not what it is):
    mcp_urls: list[str] = Field(default_factory=list)  # the MCP servers sharing the episodes (--mcp-url)
    policy_urls: list[str] = Field(default_factory=list)  # the policy's replicas (--policy-url)
    executor_urls: list[str] = Field(default_factory=list)  # the openai executor's endpoints (base_url(s))
    policy_model: str | None = None
    # what the server serves under policy_model (training/evaluate/policy_weights.py); None: unknown or replayed
    policy_weights: str | None = None
    policy_play: dict[str, Any] | None = None  # --policy-config's rollout settings (PolicyPlay.identity())
    record: str | None = None
    replay: str | None = None
    episode_timeout_s: float | None = None


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


class EvalReport(BaseModel):
    """Everything one `evaluate` call measured, in the order the pairs were scheduled."""

    model_config = ConfigDict(extra="forbid")

    config: EvalConfig
    started_at: str
    wall_s: float  # this invocation only; resumed items keep their own wall_s
    items: list[ItemResult]
    resumed_items: int = 0  # items reused from an interrupted earlier run of the same journal
