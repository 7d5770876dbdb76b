"""The finish gate: which constraints of the workflow's FinishPolicy are still unmet.

The gate judges the workflow, not how its last run went: a degraded run (the last stage failed, an earlier
stage's solution is the answer) finishes like an ok one, and its answer is what gets recorded and scored.
"""

from __future__ import annotations

from pydantic import BaseModel

from flowsteer_mcp.canvas.options import FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.stats import GraphStats


class Violation(BaseModel):
    constraint: str  # stable key, e.g. "min_operators"
    message: str  # what is missing and how to fix it


def is_verbose(output: str | None, limit: int) -> bool:
    """A final output that still needs a Format stage: longer than `limit` characters or several lines."""
    if output is None:
        return False
    text = output.strip()
    return len(text) > limit or "\n" in text


def finish_violations(
    policy: FinishPolicy, stats: GraphStats, task: TaskSpec, last_output: str | None
) -> list[Violation]:
    """All unmet constraints, most fundamental first; an empty list means finish is accepted."""
    found: list[Violation] = []
    ops = set(stats.operators)
    if stats.total_operators == 0:
        found.append(
            Violation(constraint="non_empty", message="The workflow is empty: add operators before finishing.")
        )
    if stats.total_operators < policy.min_operators:
        found.append(
            Violation(
                constraint="min_operators",
                message=f"The workflow has {stats.total_operators} operator(s); at least {policy.min_operators} are "
                "required. Add more stages (e.g. a checker and a Format stage).",
            )
        )
    if policy.require_structure and not stats.has_structure:
        found.append(
            Violation(
                constraint="structure",
                message="No structure used: add a parallel, conditional or loop stage (e.g. `Verify ? Revise : done`).",
            )
        )
    if policy.require_solver and not ops & set(policy.solver_operators):
        found.append(
            Violation(constraint="solver", message=f"No solver: add one of {', '.join(policy.solver_operators)}.")
        )
    if policy.require_checker and not ops & set(policy.checker_operators):
        found.append(
            Violation(constraint="checker", message=f"No checker: add one of {', '.join(policy.checker_operators)}.")
        )
    if policy.code_requires_programmer_and_test and task.task_type == "code" and task.public_tests:
        missing = [name for name in ("Programmer", "Test") if name not in ops]
        if missing:
            found.append(
                Violation(
                    constraint="code_operators",
                    message=f"This code task has tests: the workflow needs {' and '.join(missing)}.",
                )
            )
    if (
        policy.verbose_output_requires_format
        and "Format" not in ops
        and task.task_type != "code"
        and is_verbose(last_output, policy.verbose_output_chars)
    ):
        found.append(
            Violation(
                constraint="format",
                message=f"The final output is verbose (over {policy.verbose_output_chars} characters or several "
                "lines): add a Format stage to extract the short answer.",
            )
        )
    return found
