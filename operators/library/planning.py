"""Planning operators: they add guidance (a plan, sub-problems) for later solvers; they never answer."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._dialogue import ask_for_fields
from operators.parsing import ReplyField, ReplySchema
from operators.prompting import context_sections
from operators.specs import BUILTIN_SPECS

__all__ = ["Decompose", "DecomposeOutput", "Plan", "PlanOutput"]


def _numbered_lines(items: list[str]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, start=1))


class PlanOutput(OperatorOutput):
    steps: list[str] = Field(default_factory=list)
    approach: str | None = None


_PLAN_SCHEMA = ReplySchema(
    fields=(
        ReplyField("approach", required=False, hint="one or two sentences on the overall approach"),
        ReplyField("steps", kind="list", hint="the plan as a numbered list, one concrete step per line"),
    )
)

_PLAN_JOB = (
    "Write a plan for solving the problem below. Do not solve it and do not state a final answer: list, "
    "in order, the concrete steps a solver should carry out, and point out anything easy to overlook."
)


class Plan(Operator):
    """Writes an ordered plan; the text is guidance, so the current solution is left untouched."""

    spec = BUILTIN_SPECS["Plan"]
    output_model = PlanOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> PlanOutput:
        return await ask_for_fields(
            runtime,
            self.spec,
            PlanOutput,
            job=_PLAN_JOB,
            sections=context_sections(inputs, guidance=True),
            instruction=inputs.instruction,
            schema=_PLAN_SCHEMA,
            build=_plan_output,
        )


def _plan_output(reply: dict[str, Any]) -> PlanOutput:
    steps: list[str] = reply["steps"]
    approach: str | None = reply["approach"]
    body = f"Plan:\n{_numbered_lines(steps)}"
    text = f"Approach: {approach}\n{body}" if approach else body
    return PlanOutput(text=text, steps=steps, approach=approach)


class DecomposeOutput(OperatorOutput):
    subproblems: list[str] = Field(default_factory=list)
    rationale: str | None = None


_DECOMPOSE_SCHEMA = ReplySchema(
    fields=(
        ReplyField("subproblems", kind="list", hint="the sub-problems as a numbered list, one per line"),
        ReplyField("rationale", required=False, hint="why these parts together solve the whole problem"),
    )
)

_DECOMPOSE_JOB = (
    "Split the problem below into two to five smaller sub-problems that can be worked on separately and "
    "whose results together solve the whole problem. State each sub-problem so that it can be understood "
    "on its own. Do not solve them."
)


class Decompose(Operator):
    """Lists sub-problems as guidance; a later Aggregate can combine their answers."""

    spec = BUILTIN_SPECS["Decompose"]
    output_model = DecomposeOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> DecomposeOutput:
        return await ask_for_fields(
            runtime,
            self.spec,
            DecomposeOutput,
            job=_DECOMPOSE_JOB,
            sections=context_sections(inputs, guidance=True),
            instruction=inputs.instruction,
            schema=_DECOMPOSE_SCHEMA,
            build=_decompose_output,
        )


def _decompose_output(reply: dict[str, Any]) -> DecomposeOutput:
    subproblems: list[str] = reply["subproblems"]
    text = f"Sub-problems:\n{_numbered_lines(subproblems)}"
    return DecomposeOutput(text=text, subproblems=subproblems, rationale=reply["rationale"])
