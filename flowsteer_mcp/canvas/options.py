"""Per-workflow options: round budget, execution policy, hints, dialect leniency, limits, finish gate."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from operators.base import Role, TaskType
from operators.registry import OperatorRegistry, in_hint_order


class FinishPolicy(BaseModel):
    """Constraints a workflow must meet before `finish` is accepted."""

    model_config = ConfigDict(extra="forbid")

    preset: str = "custom"
    min_operators: int = Field(default=1, ge=0)
    require_structure: bool = False
    require_solver: bool = False
    require_checker: bool = False
    # Code tasks with public tests need a program runner and a test runner (spec flags `runs_programs` and
    # `runs_tests`: Programmer and Test among the built-ins).
    code_requires_programmer_and_test: bool = False
    verbose_output_requires_format: bool = False
    verbose_output_chars: int = 60
    solver_operators: list[str] | None = None  # None: every advertised operator whose spec says `solver`
    checker_operators: list[str] | None = None  # None: every advertised operator with the checker role

    def solvers(self, registry: OperatorRegistry) -> list[str]:
        """The operators that count as a solver: the names given, else those the specs declare."""
        if self.solver_operators is not None:
            return list(self.solver_operators)
        return [spec.name for spec in registry.matching(lambda spec: spec.solver)]

    def checkers(self, registry: OperatorRegistry) -> list[str]:
        """The operators that count as a checker: the names given, else those with the checker role, listed in
        the order of the task types their hints are for (math, code, qa, general)."""
        if self.checker_operators is not None:
            return list(self.checker_operators)
        return [spec.name for spec in in_hint_order(registry.matching(lambda spec: spec.role is Role.CHECKER))]


FINISH_PRESETS: dict[str, FinishPolicy] = {
    "paper": FinishPolicy(
        preset="paper",
        min_operators=5,
        require_structure=True,
        require_solver=True,
        require_checker=True,
        code_requires_programmer_and_test=True,
        verbose_output_requires_format=True,
    ),
    "relaxed": FinishPolicy(preset="relaxed", min_operators=1),
}


class CanvasLimits(BaseModel):
    """Size limits for everything a client sends; a state within them stays small however long the episode."""

    model_config = ConfigDict(extra="forbid")

    max_operators: int = Field(default=48, ge=1)
    max_branches: int = Field(default=6, ge=2)
    max_loop_body: int = Field(default=6, ge=1)
    max_loop_count: int = Field(default=10, ge=1)
    min_prompt_chars: int = Field(default=5, ge=0)
    max_prompt_chars: int = Field(default=4000, ge=1)
    max_act_chars: int = Field(default=32_000, ge=1)
    max_answer_chars: int = Field(default=10_000, ge=1)  # the claimed answer of a finish (recorded, never scored)
    max_entry_point_chars: int = Field(default=100, ge=1)  # a Python identifier
    # A few representative tests; with the server's task limit this keeps a new workflow under 256 KB even in
    # 4-byte characters (README, "Input limits"). States saved with the old default (100,000) keep theirs.
    max_public_tests_chars: int = Field(default=8_000, ge=1)


class CanvasOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_rounds: int = Field(default=20, ge=1, le=1000)
    finish: Literal["paper", "relaxed"] | FinishPolicy = "paper"
    execute_each_step: bool = True
    hints: bool = True
    lenient: bool = False  # dialect fallbacks for weak models (a lone finish phrase, a single bare operator name)
    prompt_turns: bool = True  # ask for a prompt after an add/modify without an inline prompt
    disabled_operators: list[str] = Field(default_factory=list)
    limits: CanvasLimits = Field(default_factory=CanvasLimits)

    def finish_policy(self) -> FinishPolicy:
        return FINISH_PRESETS[self.finish] if isinstance(self.finish, str) else self.finish


class TaskSpec(BaseModel):
    """The task a workflow is built for. Hidden grading tests never live here."""

    model_config = ConfigDict(extra="forbid")

    problem: str = Field(min_length=1)
    task_type: TaskType = "general"
    entry_point: str | None = None
    public_tests: str | None = None
