"""What one episode produces, whoever directs it; the records evaluation and training consume."""

from __future__ import annotations

from typing import Literal, Protocol

from mcp import Client
from pydantic import BaseModel, Field

from flowsteer_mcp.canvas.options import TaskSpec


class TurnRecord(BaseModel):
    """One policy turn: what the policy saw and wrote, and what the canvas answered."""

    round: int
    kind: Literal["action", "prompt"]
    system: str | None = None  # None for prompt turns, which carry no system prompt
    prompt: str
    completion: str  # raw text sampled from the policy (thinking included)
    sent: str  # what was passed to `act` (thinking stripped)
    reasked: bool = False
    resampled: bool = False  # greedy repeated the turn refused just before; a sample was sent instead
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    ok: bool = False
    feedback: str = ""
    policy_prompt_tokens: int = 0
    policy_completion_tokens: int = 0


class EpisodeResult(BaseModel):
    director: str
    task: TaskSpec
    workflow_id: str | None = None
    answer: str | None = None  # the executed final answer (code tasks: the program); None when there is none
    dsl: str = ""
    finished: bool = False
    end_reason: str | None = None
    turns: int = 0
    llm_calls: int = 0  # executor calls, summed over every run of the episode
    tokens: int = 0  # executor tokens
    policy_tokens: int = 0
    wall_s: float = 0.0
    error: str | None = None
    # some executor call could not be answered (backend down, per-call limit): the episode measured the
    # infrastructure, not the director; evaluations run it again (a direct call's failure, or a trace row's flag)
    executor_unavailable: bool = False
    stats: dict[str, object] = Field(default_factory=dict)  # graph statistics at the end (rewards read these)
    records: list[TurnRecord] = Field(default_factory=list)
    trace: list[dict[str, object]] = Field(default_factory=list)  # per-node trace of the final run


class Director(Protocol):
    """Solves one task; canvas-based directors reach the canvas only through `client` (an MCP client)."""

    name: str

    async def run(self, task: TaskSpec, client: Client) -> EpisodeResult: ...
