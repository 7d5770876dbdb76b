"""Revise: uses the feedback, returns the complete revised solution (a program for code tasks)."""

from __future__ import annotations

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Revise


async def test_revise_sees_solution_and_feedback() -> None:
    backend = ScriptedBackend(["<changes>fixed the sum</changes><solution>3 + 4 = 7, so 7.</solution>"])
    inputs = OperatorInput(problem="3 + 4?", solution="3 + 4 = 8", feedback="the sum is off by one")
    output = await Revise().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok
    assert output.text == "3 + 4 = 7, so 7."
    assert output.changes == "fixed the sum"
    prompt = backend.prompts[0]
    assert "3 + 4 = 8" in prompt and "the sum is off by one" in prompt
    assert "addresses the feedback" in prompt


async def test_revise_without_feedback_re_examines_and_accepts_an_untagged_reply() -> None:
    backend = ScriptedBackend(["The corrected answer is 7."])
    output = await Revise().run(OperatorInput(problem="3 + 4?", solution="8"), OperatorRuntime(llm=backend))
    assert output.text == "The corrected answer is 7."
    assert "No checker feedback is available" in backend.prompts[0]


async def test_revise_code_task_returns_a_program() -> None:
    backend = ScriptedBackend(["Fixed:\n```python\ndef inc(x):\n    return x + 1\n```"])
    inputs = OperatorInput(
        problem="Increment.",
        task_type="code",
        entry_point="inc",
        code="def inc(x):\n    return x",
        solution="def inc(x):\n    return x",
        feedback="inc(1) returned 1, expected 2",
    )
    output = await Revise().run(inputs, OperatorRuntime(llm=backend))
    assert output.text == output.code == "def inc(x):\n    return x + 1"
    assert "expected 2" in backend.prompts[0]
