"""Custom, AnswerGenerate and Programmer (which really runs its programs in the sandbox)."""

from __future__ import annotations

import pytest

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import AnswerGenerate, Custom, Programmer


def _runtime(backend: ScriptedBackend, max_reasks: int = 2) -> OperatorRuntime:
    return OperatorRuntime(llm=backend, max_reasks=max_reasks, sandbox_timeout_s=10.0)


def _py(code: str) -> str:
    return f"Here is the program:\n```python\n{code}\n```"


async def test_custom_instruction_is_the_job_and_context_is_shown() -> None:
    backend = ScriptedBackend(["<think>hmm</think>Both ropes: 7 m"])
    inputs = OperatorInput(
        problem="Rope lengths?",
        instruction="List the lengths, then add them.",
        solution="6 m",
        feedback="off by one",
        guidance=["Plan:\n1. add"],
        candidates=["7", "6"],
    )
    output = await Custom().run(inputs, _runtime(backend))
    assert output.text == "Both ropes: 7 m"  # think block removed
    prompt = backend.prompts[0]
    assert prompt.startswith("Carry out the following instruction for the problem below.\nList the lengths")
    for shown in ("Rope lengths?", "6 m", "off by one", "Plan:\n1. add", "Candidate 2:\n6"):
        assert shown in prompt


async def test_custom_without_instruction_solves() -> None:
    backend = ScriptedBackend(["7"])
    output = await Custom().run(OperatorInput(problem="3+4?"), _runtime(backend))
    assert output.text == "7"
    assert backend.prompts[0].startswith("Solve the problem below.")


async def test_custom_code_task_requires_the_entry_point() -> None:
    backend = ScriptedBackend([_py("def helper():\n    return 1"), _py("def add(a, b):\n    return a + b")])
    inputs = OperatorInput(problem="Add.", task_type="code", entry_point="add")
    output = await Custom().run(inputs, _runtime(backend))
    assert output.text == output.code == "def add(a, b):\n    return a + b"
    assert "must define `add`" in backend.prompts[1]


async def test_answer_generate_separates_answer_and_thought() -> None:
    backend = ScriptedBackend(["<thought>12 * 3 = 36</thought>\n<answer>36</answer>"])
    inputs = OperatorInput(problem="12 boxes of 3?", guidance=["Plan: multiply"], instruction="Be terse.")
    output = await AnswerGenerate().run(inputs, _runtime(backend))
    assert (output.text, output.thought) == ("36", "12 * 3 = 36")
    assert "Plan: multiply" in backend.prompts[0] and "Be terse." in backend.prompts[0]


async def test_programmer_runs_solve_in_the_sandbox() -> None:
    program = "def solve():\n    print('working...')\n    price = 4.2\n    return price * 9"
    backend = ScriptedBackend([_py(program)])
    output = await Programmer().run(OperatorInput(problem="9 items at 4.20?", task_type="math"), _runtime(backend))
    assert output.ok, output.error
    assert output.text == "37.8"  # the returned value, not the program's own prints, not 37.800000000000004
    assert output.code == program
    assert output.execution is not None and output.execution.succeeded
    assert output.execution.isolation
    assert output.attempts == 1
    assert "solve()" in backend.prompts[0]


@pytest.mark.parametrize(("body", "expected"), [("return 84 / 2", "42"), ("return 'x = 3'", "x = 3")])
async def test_programmer_value_formatting(body: str, expected: str) -> None:
    backend = ScriptedBackend([_py(f"def solve():\n    {body}")])
    output = await Programmer().run(OperatorInput(problem="?", task_type="math"), _runtime(backend))
    assert output.text == expected


async def test_programmer_reasks_with_the_execution_error() -> None:
    backend = ScriptedBackend([_py("def solve():\n    return 10 / 0"), _py("def solve():\n    return 10 / 4")])
    output = await Programmer().run(OperatorInput(problem="10 split 4 ways?", task_type="math"), _runtime(backend))
    assert output.ok and output.text == "2.5"
    assert output.attempts == 2
    reask = backend.prompts[1]
    assert "running the program failed" in reask and "ZeroDivisionError" in reask


async def test_programmer_rejects_none_and_missing_solve() -> None:
    backend = ScriptedBackend(
        [_py("def compute():\n    return 1"), _py("def solve():\n    x = 5"), _py("def solve():\n    return 5")]
    )
    output = await Programmer().run(OperatorInput(problem="?", task_type="math"), _runtime(backend))
    assert output.text == "5"
    assert "must define `solve`" in backend.prompts[1]
    assert "solve() returned None" in backend.prompts[2]


async def test_programmer_gives_up_with_an_error_value() -> None:
    backend = ScriptedBackend(default=_py("def solve():\n    raise ValueError('no idea')"))
    output = await Programmer().run(OperatorInput(problem="?", task_type="math"), _runtime(backend, max_reasks=1))
    assert not output.ok and output.text == ""
    assert output.error and "ValueError: no idea" in output.error
    assert output.attempts == 2 and len(backend.requests) == 2
    assert output.execution is not None and output.execution.status == "error"


async def test_programmer_code_task_loads_the_function() -> None:
    code = "def is_even(n):\n    return n % 2 == 0"
    backend = ScriptedBackend([_py("import nonexistent_module_xyz\n\ndef is_even(n):\n    return True"), _py(code)])
    inputs = OperatorInput(problem="Even?", task_type="code", entry_point="is_even", public_tests="assert is_even(2)")
    output = await Programmer().run(inputs, _runtime(backend))
    assert output.ok, output.error
    assert output.text == output.code == code
    assert "`is_even`" in backend.prompts[0]
    assert "ModuleNotFoundError" in backend.prompts[1] or "nonexistent_module_xyz" in backend.prompts[1]
