"""Extension point for an optional LLM judge (off by default; no implementation ships here).

Why only an interface: a judge is not a verifiable reward. The design allows one only when it is configured
explicitly, cached, and reported separately (docs/design/evaluation.md, "Scoring"). `score()` therefore
calls a configured judge *after* the deterministic scorer and stores its verdict in `ScoreResult.judge`;
`score` and `correct` never change.
An implementation (for example an OpenAI-compatible chat model with a fixed prompt) must do its own
caching, keyed by (problem id, answer, gold, judge model), and must not see hidden code tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from training.data import Problem


class JudgeVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    judge: str  # which judge (model and prompt version) produced this
    correct: bool
    score: float = Field(ge=0.0, le=1.0)
    rationale: str = ""
    cached: bool = False


@runtime_checkable
class AnswerJudge(Protocol):
    """Grades an answer against the gold with a model; the deterministic score is passed for context."""

    name: str

    async def judge(self, problem: Problem, answer: str, deterministic_score: float) -> JudgeVerdict: ...
