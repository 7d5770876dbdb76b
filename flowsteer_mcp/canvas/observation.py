"""Observation builder: the text a policy sees each turn (one builder for director, evaluation and training).

The system template is loadable from a file so users can supply their own wording; `$operators` (one line
per operator), `$operator_names` (a comma-separated list, for compact templates), `$stage_actions` (how to add
each registered stage kind, its `dialect_help`), `$examples` and `$finish_constraints` are filled from the
registries and the workflow's finish policy.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from string import Template

from pydantic import BaseModel

from flowsteer_mcp.canvas.kinds import kinds
from flowsteer_mcp.canvas.kinds.registry import structures_in_words
from flowsteer_mcp.canvas.options import FinishPolicy, TaskSpec
from flowsteer_mcp.canvas.step import StateView
from operators.registry import OperatorRegistry

EXAMPLE_WORKFLOWS = [
    ("math", "Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format"),
    ("code", "Programmer -> Test ? Revise : done -> (Review -> Revise) * 2"),
    ("qa", "Decompose -> [Custom, AnswerGenerate] -> Aggregate -> Review ? Revise : done -> Format"),
    ("any", "Custom -> (Verify -> Revise) * 3 -> Format"),
]
TASK_HINTS = {
    "math": "This is a math problem: compute exactly (Programmer is good at arithmetic), verify, end with Format.",
    "code": "This is a coding task: Programmer writes the function with the exact signature; Test runs the public tests.",
    "qa": "This is a question-answering task: the final answer should be a short span (a few words).",
    "general": "Choose operators that fit the task; verify before finishing.",
}


class ObservationBuilder(BaseModel):
    """Builds system, per-turn and prompt-turn texts."""

    system_template: str

    @classmethod
    def default(cls) -> ObservationBuilder:
        return cls(system_template=files("flowsteer_mcp.canvas").joinpath("templates/director_system.txt").read_text())

    @classmethod
    def from_file(cls, path: Path) -> ObservationBuilder:
        return cls(system_template=path.read_text(encoding="utf-8"))

    def system_prompt(self, registry: OperatorRegistry, policy: FinishPolicy) -> str:
        operators = "\n".join(
            f"- {s.name} [{s.category.value}]: {s.summary} When: {s.when_to_use}" for s in registry.specs()
        )
        examples = "\n".join(f"- {kind}: {dsl}" for kind, dsl in EXAMPLE_WORKFLOWS)
        return Template(self.system_template).safe_substitute(
            operators=operators,
            operator_names=", ".join(s.name for s in registry.specs()),
            stage_actions="\n".join(kind.dialect_help for kind in kinds()),
            examples=examples,
            finish_constraints=describe_policy(policy, registry),
        )

    def turn(self, task: TaskSpec, state: StateView, last_feedback: str | None) -> str:
        parts = [f"## Task type\n{TASK_HINTS[task.task_type]}", f"## Problem\n{task.problem}"]
        if task.entry_point:
            parts.append(f"## Entry point\n{task.entry_point}")
        parts.append(
            "## Current state\n"
            f"DSL: {state.dsl or '(empty)'}\n"
            f"Operators: {state.stats.total_operators} ({state.stats.unique_types} unique types)\n"
            f"Node ids: {', '.join(n.id for n in state.nodes) or '(none)'}\n"
            f"Round: {state.round + 1}/{state.max_rounds}"
        )
        if last_feedback:
            parts.append(f"## Last feedback\n{last_feedback}")
        parts.append("## Your turn\nWrite one action.")
        return "\n\n".join(parts)

    def prompt_turn(self, task: TaskSpec, state: StateView, registry: OperatorRegistry) -> str:
        request = state.awaiting_prompt_for
        assert request is not None, "prompt_turn needs a pending prompt request"
        spec = registry.spec(request.operator)
        return (
            f"Write the prompt (instruction) for the {request.operator} operator at {request.node_id} "
            f"({request.slot}, prompt {request.index}/{request.total}).\n"
            f"What {request.operator} does: {spec.summary}\n\n"
            f"## Problem\n{task.problem}\n\n"
            "Write one to three sentences telling this operator how to handle this specific problem and what to "
            "output. Plain text only: no tags, no thinking. Do not restate or change the problem's facts."
        )


def describe_policy(policy: FinishPolicy, registry: OperatorRegistry) -> str:
    rules = [f"- at least {policy.min_operators} operator(s)"]
    if policy.require_structure:
        rules.append(f"- at least one structure ({structures_in_words()})")
    if policy.require_solver:
        rules.append(f"- a solver ({', '.join(policy.solvers(registry))})")
    if policy.require_checker:
        rules.append(f"- a checker ({', '.join(policy.checkers(registry))})")
    if policy.code_requires_programmer_and_test:
        rules.append("- code tasks with public tests: Programmer and Test")
    if policy.verbose_output_requires_format:
        rules.append(
            f"- a Format stage when the output is verbose (over {policy.verbose_output_chars} characters or several lines)"
        )
    return "\n".join(rules)
