"""The one entry point that grades an answer, for evaluation and for training rewards alike.

API choice: `score()` is async for every problem type (code needs the sandbox, and one call shape keeps
callers simple); `score_text()` is the synchronous core for math and QA, for callers with no event loop.
Math and QA are graded inline (math-verify's timeouts need the main thread, see `math_check`).
"""

from __future__ import annotations

import structlog

from operators.answers.extract import extract_final_answer, extract_short_answer
from training.data import Problem
from training.scoring.code_check import score_code
from training.scoring.math_check import check_math
from training.scoring.multiple_choice import extract_choice
from training.scoring.qa_check import check_qa
from training.scoring.result import ScoreResult, ScoringConfig

log = structlog.get_logger(__name__)

_DEFAULT_CONFIG = ScoringConfig()


def _score_math(problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
    options = problem.options
    gold = problem.ground_truth.strip()
    if options is not None and gold.lower() in options:
        chosen, extraction = extract_choice(answer, options)
        correct = chosen == gold.lower()
        details = {"chosen": chosen, "gold": gold.lower(), "rule": extraction.how}
        if chosen is None:
            details["reason"] = "no option chosen explicitly"
        return ScoreResult(
            score=float(correct),
            correct=correct,
            method="multiple_choice",
            extracted=extraction.text,
            details=details,
        )
    extraction = extract_final_answer(answer)
    verdict = check_math(extraction.text, gold, timeout_s=config.math_timeout_s)
    details = {"rule": extraction.how, **verdict.details}
    return ScoreResult(
        score=float(verdict.correct),
        correct=verdict.correct,
        method=verdict.method,
        extracted=extraction.text,
        details=details,
    )


def _score_qa(problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
    extraction = extract_short_answer(answer)
    verdict = check_qa(extraction.text, problem.gold_alternatives)
    value = verdict.f1 if config.qa_metric == "f1" else verdict.em
    method = "qa_unanswerable" if verdict.unanswerable else f"qa_{config.qa_metric}"
    return ScoreResult(
        score=value,
        correct=verdict.em == 1.0,
        method=method,
        extracted=extraction.text,
        details={"f1": verdict.f1, "em": verdict.em, "best_gold": verdict.best_gold, "rule": extraction.how},
    )


def score_text(problem: Problem, answer: str | None, *, config: ScoringConfig | None = None) -> ScoreResult:
    """Grade a math or QA answer synchronously. Code answers must be run: use `await score(...)`."""
    config = config or _DEFAULT_CONFIG
    text = answer or ""
    if problem.problem_type == "code":
        raise ValueError(f"{problem.id}: code answers are graded by running them; use `await score(...)`")
    if problem.problem_type == "qa":
        return _score_qa(problem, text, config)
    return _score_math(problem, text, config)


async def score(problem: Problem, answer: str | None, *, config: ScoringConfig | None = None) -> ScoreResult:
    """Grade `answer` for `problem`: math and QA as in `score_text`, code by running the hidden tests.

    A configured judge (`ScoringConfig.judge`) is consulted afterwards and reported in `result.judge` only.
    """
    config = config or _DEFAULT_CONFIG
    text = answer or ""
    if problem.problem_type == "code":
        result = await score_code(problem, text, timeout_s=config.code_timeout_s)
    else:
        result = score_text(problem, text, config=config)
    if config.judge is not None:
        verdict = await config.judge.judge(problem, text, result.score)
        result = result.model_copy(update={"judge": verdict})
    return result
