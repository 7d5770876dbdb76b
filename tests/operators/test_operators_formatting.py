"""Format: the short answer span; code tasks keep the program."""

from __future__ import annotations

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Format


async def test_format_extracts_the_answer_span() -> None:
    backend = ScriptedBackend(["<answer>42</answer>"])
    inputs = OperatorInput(problem="6 * 7?", solution="Multiplying six by seven we obtain 42, done.")
    output = await Format().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok and output.text == "42"
    assert "Multiplying six by seven" in backend.prompts[0]


async def test_format_accepts_a_bare_reply() -> None:
    backend = ScriptedBackend(["  Paris \n"])
    output = await Format().run(
        OperatorInput(problem="Capital?", solution="It is Paris."), OperatorRuntime(llm=backend)
    )
    assert output.text == "Paris"


async def test_format_code_task_extracts_program_without_a_call() -> None:
    backend = ScriptedBackend(name="unused")
    solution = "Here it is:\n```python\ndef f(x):\n    return 2 * x\n```\nHope it helps."
    inputs = OperatorInput(problem="Double.", task_type="code", entry_point="f", solution=solution)
    output = await Format().run(inputs, OperatorRuntime(llm=backend))
    assert output.text == output.code == "def f(x):\n    return 2 * x"
    assert backend.requests == []


async def test_format_code_task_with_instruction_asks_the_executor() -> None:
    backend = ScriptedBackend(["```python\ndef f(x):\n    '''Double x.'''\n    return 2 * x\n```"])
    inputs = OperatorInput(
        problem="Double.",
        task_type="code",
        entry_point="f",
        solution="def f(x):\n    return x*2",
        instruction="Add a docstring.",
    )
    output = await Format().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok and "Double x." in output.text
    assert "Add a docstring." in backend.prompts[0]


async def test_a_bare_answer_passes_through_without_a_call() -> None:
    backend = ScriptedBackend(["<answer>3.5</answer>"], name="would-change-it")
    for solution in ("16", " -11.5\n", "\\frac{1}{2}", "Paris"):
        inputs = OperatorInput(problem="Amber ran 8 miles...", task_type="math", solution=solution)
        output = await Format().run(inputs, OperatorRuntime(llm=backend))
        assert output.ok and output.text == solution.strip()
    assert backend.requests == []


async def test_a_math_answer_the_solution_never_states_is_asked_again() -> None:
    backend = ScriptedBackend(["<answer>1500</answer>", "<answer>1,400</answer>"])
    solution = "Micah ran 3.5 times 400 metres, that is 1400 metres. So the total is 1400."
    inputs = OperatorInput(problem="How far?", task_type="math", solution=solution)
    output = await Format().run(inputs, OperatorRuntime(llm=backend))
    assert output.ok and output.text == "1,400" and len(backend.requests) == 2
    backend = ScriptedBackend(["<answer>56</answer>"] * 3)
    inputs = OperatorInput(problem="How many?", task_type="math", solution="Each box holds 4, so 7 * 2 = 14 boxes.")
    output = await Format().run(inputs, OperatorRuntime(llm=backend))
    assert not output.ok and "uses 56, which the current solution never states" in (output.error or "")


async def test_nothing_to_format_names_both_causes_without_a_call() -> None:
    backend = ScriptedBackend(name="unused")
    output = await Format().run(OperatorInput(problem="2+2?", task_type="math"), OperatorRuntime(llm=backend))
    assert not output.ok and backend.requests == []
    assert output.error == (
        "Format: there is no solution to format; put a solver before it, or see why the one before it produced none"
    )
