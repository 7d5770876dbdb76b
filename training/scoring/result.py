"""What a scoring call returns, and how it is configured."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from training.scoring.judge import AnswerJudge, JudgeVerdict


class ScoreResult(BaseModel):
    """One graded answer.

    score: the reward-ready value in [0, 1] (math and code: 0 or 1; QA: F1, or EM if configured).
    correct: strict correctness (math/code: the verdict; QA: normalised exact match).
    method: which rule decided (`exact_number`, `math_verify`, `string`, `multiple_choice`, `qa_f1`,
        `qa_em`, `qa_unanswerable`, `sandbox`, `no_answer`, `no_code`, `ungradable`, `sandbox_error`).
    extracted: what was compared against the gold (the extracted final answer, or the graded program).
    details: method-specific evidence (gold form, F1/EM, sandbox status and reason ...).
    judge: an optional LLM judge's verdict, reported beside the score and never mixed into it.
    """

    model_config = ConfigDict(frozen=True)

    score: float = Field(ge=0.0, le=1.0)
    correct: bool
    method: str
    extracted: str
    details: dict[str, Any] = Field(default_factory=dict)
    judge: JudgeVerdict | None = None


class ScoringConfig(BaseModel):
    """Knobs of the scorer; the defaults are what evaluation and training use."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    qa_metric: Literal["f1", "em"] = "f1"
    math_timeout_s: int = Field(default=5, ge=1, le=60)
    code_timeout_s: float | None = Field(
        default=None, gt=0, le=600, description="Wall limit per sandbox run; None uses the sandbox default."
    )
    judge: AnswerJudge | None = None  # off by default; see training.scoring.judge
