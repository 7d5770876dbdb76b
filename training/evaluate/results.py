"""What an evaluation run produces: one `ItemResult` per (director, problem) and the run's `EvalReport`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from flowsteer_mcp.director.graded import ItemResult


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


class EvalReport(BaseModel):
    """Everything one `evaluate` call measured, in the order the pairs were scheduled."""

    model_config = ConfigDict(extra="forbid")

    config: EvalConfig
    started_at: str
    wall_s: float  # this invocation only; resumed items keep their own wall_s
    items: list[ItemResult]
    resumed_items: int = 0  # items reused from an interrupted earlier run of the same journal
