"""The scorer registry: which scorer grades each problem type, built-in or plugged in.

A plug-in scorer is a `ScorerSpec` for its problem type, registered with `register_scorer(spec)` or published
under the `flowsteer.scorers` entry point group; `score` (and `score_text`, when the spec can grade without an
event loop) then grade that type's problems with it. A type nothing registered is a clear error, never a 0.
The registered types are also the valid `problem_type`s of a dataset (`training.data`), and each spec names the
canvas task type its problems are posed as (`task_type_of`), "general" unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import get_args

from operators.base import TaskType
from operators.plugins import PluginRegistry
from training.data import Problem
from training.scoring.result import ScoreResult, ScoringConfig

__all__ = ["ENTRY_POINT_GROUP", "ScorerSpec", "register_scorer", "scorer_for", "scorers", "task_type_of"]

ENTRY_POINT_GROUP = "flowsteer.scorers"

SyncScore = Callable[[Problem, str, ScoringConfig], ScoreResult]
AsyncScore = Callable[[Problem, str, ScoringConfig], Awaitable[ScoreResult]]


@dataclass(frozen=True)
class ScorerSpec:
    """How answers to `problem_type` are graded: synchronously (`score_text`), asynchronously (`score`), or both.

    Give `score` when grading must wait on something (code runs in the sandbox); `score` without it falls back
    to `score_text`, and `score_text` without it refuses, naming `await score(...)`. `task_type` is the canvas
    task type a director is given for these problems (it picks hints and library workflows): "general" fits any
    task, a specific one when the problems are math, qa or code in another guise. `binary` says every score is 0
    or 1 (pass/fail), which picks the report's interval: Wilson for pass/fail, Student-t for graded scores.
    """

    problem_type: str
    score_text: SyncScore | None = None
    score: AsyncScore | None = None
    task_type: TaskType = "general"
    binary: bool = False

    def __post_init__(self) -> None:
        if self.score_text is None and self.score is None:
            raise TypeError(f"scorer for {self.problem_type!r}: give score_text, score, or both")
        if self.task_type not in get_args(TaskType):
            raise ValueError(
                f"scorer for {self.problem_type!r}: task_type {self.task_type!r} is not one of {get_args(TaskType)}"
            )

    def grade_text(self, problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
        if self.score_text is None:
            raise ValueError(
                f"{problem.id}: {self.problem_type} answers are graded asynchronously (code by running it); "
                "use `await score(...)`"
            )
        return self.score_text(problem, answer, config)

    async def grade(self, problem: Problem, answer: str, config: ScoringConfig) -> ScoreResult:
        if self.score is not None:
            return await self.score(problem, answer, config)
        return self.grade_text(problem, answer, config)


@lru_cache(maxsize=1)
def scorers() -> PluginRegistry[ScorerSpec]:
    """The built-in scorers plus every installed plug-in (loaded once, on first use)."""
    from training.scoring.builtin import BUILTIN_SCORERS

    registry = PluginRegistry(
        kind="problem type",
        group=ENTRY_POINT_GROUP,
        spec_type=ScorerSpec,
        name_of=lambda spec: spec.problem_type,
        builtins=BUILTIN_SCORERS,
    )
    registry.load_entry_points()
    return registry


def scorer_for(problem_type: str) -> ScorerSpec:
    """The scorer of `problem_type`; raises `UnknownPluginError` (a `ValueError`) listing the registered types."""
    return scorers().get(problem_type)


def task_type_of(problem_type: str) -> TaskType:
    """The canvas task type `problem_type` problems are posed as (its scorer's `task_type`)."""
    return scorer_for(problem_type).task_type


def register_scorer(spec: ScorerSpec) -> ScorerSpec:
    """Make `score` grade `spec.problem_type` problems with `spec` in this process."""
    return scorers().register(spec)
