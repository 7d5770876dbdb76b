"""Training samples built from rollouts, token-in/token-out.

A `TurnSample` is one training sequence: `prompt_ids` (context, never trained on) followed by
`completion_ids` (what came after the prompt). In `markovian` mode the completion is exactly what the policy
sampled; in `history` mode it also holds the canvas feedback tokens between turns, which get mask 0. Every id
and log-prob is the one the policy server (vLLM) returned: nothing is re-tokenised, because a re-tokenised
sequence can differ from the sampled one and silently corrupts the importance ratio.

`input_ids`, `mask` and `behaviour_logprobs_full` are aligned with token positions, which is the convention of
`training.logprobs.causal_token_logprobs`: position t holds token t, its mask and the behaviour log-prob of
sampling it. Position 0 is always a prompt token, so its mask is 0.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.errors import TrainingError
from training.reward import RewardBreakdown


class MissingTokenIds(TrainingError, ValueError):
    """A turn came back without token ids or log-probs, so it cannot be trained on without re-tokenising."""

    def __init__(self, episode_id: str, turn_index: int, missing: list[str]) -> None:
        self.episode_id = episode_id
        self.turn_index = turn_index
        self.missing = missing
        super().__init__(
            f"episode {episode_id}, turn {turn_index}: the policy server returned no {', '.join(missing)}. "
            "Training never re-tokenises text: serve the policy with vLLM (which honours `return_token_ids` "
            "and `logprobs` on chat completions) and keep `PolicySampling.request_token_ids=True`."
        )


class TokenCountMismatch(TrainingError, ValueError):
    """The server returned a different number of log-probs than completion token ids."""

    def __init__(self, episode_id: str, turn_index: int, n_ids: int, n_logprobs: int) -> None:
        self.episode_id = episode_id
        self.turn_index = turn_index
        super().__init__(
            f"episode {episode_id}, turn {turn_index}: {n_ids} completion token ids but {n_logprobs} log-probs; "
            "the policy server's response is inconsistent (check its `logprobs` support)"
        )


class TurnSample(BaseModel):
    """One training sequence: prompt tokens (mask 0) then completion tokens with their own mask."""

    model_config = ConfigDict(frozen=True)

    episode_id: str
    group_id: str
    turn_index: int = Field(ge=0)  # first turn this sequence covers
    n_turns: int = Field(default=1, ge=1)  # turns covered (history mode: all of them)
    prompt_ids: list[int] = Field(min_length=1)
    completion_ids: list[int]
    completion_mask: list[int]  # aligned with completion_ids: 1 on policy-sampled tokens, 0 on canvas tokens
    behaviour_logprobs: list[float]  # aligned with completion_ids; 0.0 where the mask is 0
    refused: bool = False  # markovian: the canvas refused this turn's action (it changed nothing)

    @model_validator(mode="after")
    def _aligned(self) -> TurnSample:
        n = len(self.completion_ids)
        if len(self.completion_mask) != n or len(self.behaviour_logprobs) != n:
            raise ValueError(
                f"completion ids ({n}), mask ({len(self.completion_mask)}) and behaviour log-probs "
                f"({len(self.behaviour_logprobs)}) must have the same length"
            )
        if any(m not in (0, 1) for m in self.completion_mask):
            raise ValueError("the mask must contain only 0 and 1")
        for flag, logprob in zip(self.completion_mask, self.behaviour_logprobs, strict=True):
            if flag and not (math.isfinite(logprob) and logprob <= 0.0):
                raise ValueError(f"behaviour log-probs of sampled tokens must be finite and <= 0, got {logprob!r}")
        return self

    @property
    def input_ids(self) -> list[int]:
        return [*self.prompt_ids, *self.completion_ids]

    @property
    def mask(self) -> list[int]:
        """The canvas token mask over `input_ids`: 1 exactly on policy-sampled tokens."""
        return [0] * len(self.prompt_ids) + list(self.completion_mask)

    @property
    def behaviour_logprobs_full(self) -> list[float]:
        """Behaviour log-probs over `input_ids` (0.0 on unmasked positions)."""
        return [0.0] * len(self.prompt_ids) + list(self.behaviour_logprobs)

    @property
    def n_policy_tokens(self) -> int:
        return sum(self.completion_mask)


TrajectoryStatus = Literal["ok", "timeout", "error"]


class TrajectoryMetrics(BaseModel):
    """What one trajectory did, for per-trajectory logging."""

    model_config = ConfigDict(frozen=True)

    status: TrajectoryStatus
    error: str | None = None
    finished: bool = False
    end_reason: str | None = None
    turns: int = 0
    valid_action_share: float = 0.0  # turns the canvas accepted (ok=True) / turns
    policy_prompt_tokens: int = 0
    policy_completion_tokens: int = 0
    executor_llm_calls: int = 0
    executor_tokens: int = 0
    score_method: str | None = None
    wall_s: float = 0.0
    dropped: str | None = None  # why the episode gives no training sequences (e.g. "prefix_mismatch")

    def flat(self, prefix: str = "rollout") -> dict[str, float]:
        return {
            f"{prefix}/finished": float(self.finished),
            f"{prefix}/turns": float(self.turns),
            f"{prefix}/valid_action_share": self.valid_action_share,
            f"{prefix}/policy_prompt_tokens": float(self.policy_prompt_tokens),
            f"{prefix}/policy_completion_tokens": float(self.policy_completion_tokens),
            f"{prefix}/executor_tokens": float(self.executor_tokens),
            f"{prefix}/wall_s": self.wall_s,
            f"{prefix}/failed": float(self.status != "ok"),
        }


class EpisodeSample(BaseModel):
    """One trajectory: its training sequences, reward breakdown and (after grouping) its advantage.

    Every sequence of an episode shares its advantage. A failed or dropped episode has no sequences but
    still carries its reward, which takes part in its group's baseline.
    """

    episode_id: str
    group_id: str
    problem_id: str
    source: str
    problem_type: str = ""  # code, math, qa, ...: workflow families depend on it
    rollout_index: int = Field(ge=0)
    sequences: list[TurnSample] = Field(default_factory=list)
    reward: RewardBreakdown
    advantage: float | None = None  # set by group_advantages once the whole group is in
    keep: bool = True  # False when its group was dropped (zero variance, when dropping is on)
    metrics: TrajectoryMetrics
    # The graph stats the canvas returned at the end (empty for a failed trajectory): what the reward read, kept
    # so the run's journal can say which workflow families the policy used.
    stats: dict[str, Any] = Field(default_factory=dict)

    @property
    def trainable(self) -> bool:
        return self.keep and bool(self.sequences) and self.advantage is not None
