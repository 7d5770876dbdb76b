"""Plan and Decompose: guidance operators that never answer."""

from __future__ import annotations

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Decompose, Plan


def _runtime(backend: ScriptedBackend) -> OperatorRuntime:
    return OperatorRuntime(llm=backend)


async def test_plan_parses_steps_without_splitting_numbers_inside_them() -> None:
    backend = ScriptedBackend(
        ["<approach>Work in cents.</approach>\n<steps>\n1. Multiply 3.5 by 2\n2. Subtract 1.25\n</steps>"]
    )
    output = await Plan().run(OperatorInput(problem="Price maths", guidance=["earlier hint"]), _runtime(backend))
    assert output.ok
    assert output.steps == ["Multiply 3.5 by 2", "Subtract 1.25"]
    assert output.approach == "Work in cents."
    assert output.text == "Approach: Work in cents.\nPlan:\n1. Multiply 3.5 by 2\n2. Subtract 1.25"
    assert output.verdict is None and output.code is None  # guidance, not an answer
    prompt = backend.prompts[0]
    assert "Price maths" in prompt and "earlier hint" in prompt
    assert "<steps>" in prompt  # the reply format is requested


async def test_plan_accepts_a_fenced_json_reply() -> None:
    backend = ScriptedBackend(['```json\n{"steps": ["read the input", "count words"]}\n```'])
    output = await Plan().run(OperatorInput(problem="Count words"), _runtime(backend))
    assert output.steps == ["read the input", "count words"]
    assert output.approach is None


async def test_decompose_lists_subproblems() -> None:
    backend = ScriptedBackend(
        [
            "<subproblems>\n- Find the area of the square\n- Find the area of the circle\n</subproblems>"
            "<rationale>the shaded part is their difference</rationale>"
        ]
    )
    output = await Decompose().run(OperatorInput(problem="Shaded area"), _runtime(backend))
    assert output.subproblems == ["Find the area of the square", "Find the area of the circle"]
    assert output.rationale == "the shaded part is their difference"
    assert output.text == "Sub-problems:\n1. Find the area of the square\n2. Find the area of the circle"
