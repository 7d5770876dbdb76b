"""Turn a benchmark `Problem` into the `TaskSpec` a director sees.

Built from `Problem.public_view()` only, so hidden grading tests and gold answers cannot reach a director or
the canvas by construction. The canvas task type is the one the problem type's scorer declares
(`training.scoring.registry.task_type_of`), so a plugged-in problem type is posed as "general" or as what its
scorer says it resembles.
"""

from __future__ import annotations

from flowsteer_mcp.api import TaskSpec
from training.data import Problem
from training.scoring.registry import task_type_of


def task_for(problem: Problem) -> TaskSpec:
    view = problem.public_view()
    if view.problem_type != "code":
        return TaskSpec(problem=view.problem, task_type=task_type_of(view.problem_type))
    return TaskSpec(
        problem=view.problem,
        task_type="code",
        entry_point=view.entry_point,
        public_tests=view.public_tests or None,
    )
