"""The built-in scorers: math (multiple choice included), qa and code, as registry specs.

Math answers are compared by `operators.answers.math_equivalence` (exact numbers, then math-verify, then
normalised LaTeX), the code the equivalence votes inside workflows use, so a vote groups answers exactly as the
grade does. Math and QA are graded inline (math-verify's timeouts need the main thread).
"""

from __future__ import annotations

import math_verify  # noqa: F401  # the scorer requires it (a base dependency); the operators' votes only use it if present

from operators.answers.extract import extract_final_answer, extract_short_answer
from operators.answers.math_equivalence import check_math
from training.data import Problem
from training.scoring.multiple_choice import extract_choice
from training.scoring.qa_check import check_qa
from training.scoring.registry import ScorerSpec
from training.scoring.result import ScoreResult, ScoringConfig

__all__ = ["BUILTIN_SCORERS", "score_math", "score_qa"]


def score_math(problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
    """A letter when the gold is one of the problem's options (MathQA), else the final answer's equivalence."""
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


def score_qa(problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
    """F1 (or EM, as configured) of the short answer, best over the gold alternatives."""
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


async def _score_code(problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
    """The hidden tests, run in the sandbox: code has no synchronous scorer."""
    from training.scoring.code_check import score_code

    return await score_code(problem, answer, timeout_s=config.code_timeout_s)


BUILTIN_SCORERS = (
    ScorerSpec("math", score_text=score_math, task_type="math", binary=True),
    ScorerSpec("qa", score_text=score_qa, task_type="qa"),
    ScorerSpec("code", score=_score_code, task_type="code", binary=True),
)
