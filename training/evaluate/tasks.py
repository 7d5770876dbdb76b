"""Turn a benchmark `Problem` into the `TaskSpec` a director sees.

Built from `Problem.public_view()` only, so hidden grading tests and gold answers cannot reach a director or
the canvas by construction.
"""

from __future__ import annotations

from flowsteer_mcp.api import TaskSpec
from training.data import Problem


def task_for(problem: Problem) -> TaskSpec:
    view = problem.public_view()
    if view.problem_type != "code":
        return TaskSpec(problem=view.problem, task_type=view.problem_type)
    return TaskSpec(
        problem=view.problem,
        task_type="code",
        entry_point=view.entry_point,
        public_tests=view.public_tests or None,
    )
