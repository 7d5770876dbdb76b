"""The finish gate: which constraints of the workflow's FinishPolicy are still unmet.

The gate judges the workflow, not how its last run went: a degraded run (the last stage failed, an earlier
stage's solution is the answer) finishes like an ok one, and its answer is what gets recorded and scored.

Two parts, because only one needs a run: the structural verdict (`structural_violations`: operators, structure,
roles, a code task's runners) is read off the graph, so a finish that fails it is refused before anything
executes; only the output rule (`output_violations`: a verbose answer needs a Format stage) looks at what the
workflow produced, so it is checked after the run that finish makes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel

from flowsteer_mcp.canvas.kinds.registry import structures_in_words
from flowsteer_mcp.canvas.options import FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.stats import GraphStats
from operators.base import Category, Role
from operators.registry import OperatorRegistry


class Violation(BaseModel):
    constraint: str  # stable key, e.g. "min_operators"
    message: str  # what is missing and how to fix it


def is_verbose(output: str | None, limit: int) -> bool:
    """A final output that still needs a Format stage: longer than `limit` characters or several lines."""
    if output is None:
        return False
    text = output.strip()
    return len(text) > limit or "\n" in text


def program_runners(registry: OperatorRegistry) -> list[str]:
    """Operators that write and run a program: what a code task with tests must contain to produce code."""
    return [spec.name for spec in registry.matching(lambda spec: spec.runs_programs)]


def test_runners(registry: OperatorRegistry) -> list[str]:
    """Checkers that run the task's public tests: the check a code task with tests must contain."""
    return [spec.name for spec in registry.matching(lambda spec: spec.role is Role.CHECKER and spec.runs_tests)]


def has_formatter(stats: GraphStats) -> bool:
    return stats.category_counts.get(Category.FORMATTING.value, 0) > 0


def finish_violations(
    policy: FinishPolicy,
    stats: GraphStats,
    task: TaskSpec,
    last_output: str | None,
    *,
    registry: OperatorRegistry,
) -> list[Violation]:
    """All unmet constraints, most fundamental first; an empty list means finish is accepted."""
    return structural_violations(policy, stats, task, registry=registry) + output_violations(
        policy, stats, task, last_output
    )


async def finish_gate(
    policy: FinishPolicy,
    stats: GraphStats,
    task: TaskSpec,
    *,
    registry: OperatorRegistry,
    output: Callable[[], Awaitable[str | None]],
) -> list[Violation]:
    """The gate as a finish step applies it: the structural verdict first, and only when it passes the output
    rule on what `output()` returns (the step runs the workflow there when it has not run since its last edit).
    Why in this order: a refusal that needs no execution must not cost executor time."""
    found = structural_violations(policy, stats, task, registry=registry)
    if found:
        return found
    return output_violations(policy, stats, task, await output())


def structural_violations(
    policy: FinishPolicy, stats: GraphStats, task: TaskSpec, *, registry: OperatorRegistry
) -> list[Violation]:
    """The unmet constraints that the graph alone decides (no run needed), most fundamental first.

    Solvers, checkers and the code task's runners are found by what the registry's specs declare, so a plug-in
    that declares the role or capability satisfies the gate like a built-in."""
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
                message=f"No structure used: add a {structures_in_words()} stage (e.g. `Verify ? Revise : done`).",
            )
        )
    solvers = policy.solvers(registry)
    if policy.require_solver and not ops & set(solvers):
        found.append(Violation(constraint="solver", message=f"No solver: add one of {', '.join(solvers)}."))
    checkers = policy.checkers(registry)
    if policy.require_checker and not ops & set(checkers):
        found.append(Violation(constraint="checker", message=f"No checker: add one of {', '.join(checkers)}."))
    if policy.code_requires_programmer_and_test and task.task_type == "code" and task.public_tests:
        needed = [(program_runners(registry), "a program runner"), (test_runners(registry), "a test runner")]
        missing = [_one_of(names) or what for names, what in needed if not ops & set(names)]
        if missing:
            found.append(
                Violation(
                    constraint="code_operators",
                    message=f"This code task has tests: the workflow needs {' and '.join(missing)}.",
                )
            )
    return found


def output_violations(
    policy: FinishPolicy, stats: GraphStats, task: TaskSpec, last_output: str | None
) -> list[Violation]:
    """The unmet constraints that depend on what the workflow's run produced."""
    found: list[Violation] = []
    if (
        policy.verbose_output_requires_format
        and not has_formatter(stats)
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


def _one_of(names: list[str]) -> str:
    """`A`, or `(A or B)` when several operators would do."""
    return names[0] if len(names) == 1 else f"({' or '.join(names)})" if names else ""
