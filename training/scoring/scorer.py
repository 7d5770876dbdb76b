"""The one entry point that grades an answer, for evaluation and for training rewards alike.

API choice: `score()` is async for every problem type (code needs the sandbox, and one call shape keeps
callers simple); `score_text()` is the synchronous path for the types whose scorer can grade without an event
loop (math and QA), for callers with none. Which scorer grades a type is the registry's to say
(`training/scoring/registry.py`, open to plug-ins).
"""

from __future__ import annotations

from training.data import Problem
from training.scoring.registry import scorer_for
from training.scoring.result import ScoreResult, ScoringConfig

_DEFAULT_CONFIG = ScoringConfig()


def score_text(problem: Problem, answer: str | None, *, config: ScoringConfig | None = None) -> ScoreResult:
    """Grade an answer synchronously. Code answers must be run: use `await score(...)`.

    Raises `ValueError` for a problem type no scorer is registered for, or whose scorer is async only.
    """
    return scorer_for(problem.problem_type).grade_text(problem, answer or "", config or _DEFAULT_CONFIG)


async def score(problem: Problem, answer: str | None, *, config: ScoringConfig | None = None) -> ScoreResult:
    """Grade `answer` for `problem` with its type's registered scorer (code: by running the hidden tests).

    A configured judge (`ScoringConfig.judge`) is consulted afterwards and reported in `result.judge` only.
    """
    config = config or _DEFAULT_CONFIG
    text = answer or ""
    result = await scorer_for(problem.problem_type).grade(problem, text, config)
    if config.judge is not None:
        verdict = await config.judge.judge(problem, text, result.score)
        result = result.model_copy(update={"judge": verdict})
    return result
