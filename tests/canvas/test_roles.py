"""Finish gate, hints and the engine's data flow decide by spec (role, capabilities, `hinted_for`), not by name."""

from __future__ import annotations

from flowsteer_mcp.canvas.finish import finish_violations
from flowsteer_mcp.canvas.hints import advise
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import FINISH_PRESETS, FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.stats import GraphStats
from flowsteer_mcp.engine.state import FlowState
from operators.base import Category, OperatorSpec, Role
from operators.library.ensemble import EnsembleOutput
from operators.registry import OperatorRegistry
from operators.specs import BUILTIN_SPECS

STRICT_TEST = OperatorSpec(
    name="StrictTest",
    category=Category.VERIFICATION,
    role=Role.CHECKER,
    runs_tests=True,
    hinted_for=("code",),
    summary="A stricter test runner.",
    when_to_use="Tests only.",
    signature="StrictTest(code) -> {text, passed}",
)
CODE_TASK = TaskSpec(problem="Write f.", task_type="code", entry_point="f", public_tests="assert f() == 1")
PAPER = FINISH_PRESETS["paper"]


def _registry(*extra: OperatorSpec) -> OperatorRegistry:
    return OperatorRegistry([*BUILTIN_SPECS.values(), *extra])


def _stats(*operators: str, registry: OperatorRegistry, conditional: bool = False) -> GraphStats:
    specs = [registry.spec(name) for name in operators]
    return GraphStats(
        total_operators=len(operators),
        unique_types=len(set(operators)),
        operators=list(operators),
        stage_count=len(operators),
        has_conditional=conditional,
        category_counts={c.value: sum(s.category is c for s in specs) for c in Category},
        has_checker=any(s.role is Role.CHECKER for s in specs),
    )


def test_default_solver_and_checker_lists_come_from_the_specs() -> None:
    registry = _registry(STRICT_TEST)
    assert PAPER.solvers(registry) == ["Custom", "AnswerGenerate", "Programmer", "Revise", "Aggregate"]
    assert PAPER.checkers(registry) == ["Verify", "Test", "StrictTest", "Review"]


def test_a_plugin_test_runner_satisfies_the_checker_and_code_constraints() -> None:
    registry = _registry(STRICT_TEST)
    stats = _stats("Programmer", "StrictTest", registry=registry)
    found = {v.constraint for v in finish_violations(PAPER, stats, CODE_TASK, None, registry=registry)}
    assert "checker" not in found and "code_operators" not in found


def test_missing_test_runner_names_every_operator_that_would_do() -> None:
    registry = _registry(STRICT_TEST)
    stats = _stats("Programmer", "Review", registry=registry)
    violations = finish_violations(PAPER, stats, CODE_TASK, None, registry=registry)
    assert [v.message for v in violations if v.constraint == "code_operators"] == [
        "This code task has tests: the workflow needs (Test or StrictTest)."
    ]


def test_checker_names_given_by_the_user_still_decide() -> None:
    registry = _registry(STRICT_TEST)
    policy = FinishPolicy(require_checker=True, checker_operators=["Verify"])
    stats = _stats("Custom", "StrictTest", registry=registry)
    violations = finish_violations(policy, stats, TaskSpec(problem="q"), None, registry=registry)
    assert [v.message for v in violations] == ["No checker: add one of Verify."]


def test_hint_builds_the_conditional_on_the_plugin_checker_in_the_workflow() -> None:
    registry = _registry(STRICT_TEST)
    stats = _stats("Programmer", "StrictTest", registry=registry)
    violations = finish_violations(PAPER, stats, CODE_TASK, None, registry=registry)
    hint = advise(WorkflowGraph(), stats, CODE_TASK, violations, None, PAPER, registry=registry)
    assert hint.next == "ADD:conditional(StrictTest,Revise,done)"


def test_ensemble_code_follows_the_chosen_index_not_the_first_equal_text() -> None:
    state = FlowState(problem="p", task_type="code").with_candidates(["same", "same"], ["code_a", "code_b"])
    chosen = state.apply(Role.SOLUTION, EnsembleOutput(text="same", index=1), uses_candidates=True)
    assert chosen.code == "code_b"
