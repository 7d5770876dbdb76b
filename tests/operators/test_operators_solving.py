"""Custom, AnswerGenerate and Programmer (which really runs its programs in the sandbox)."""

from __future__ import annotations

import pytest

from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.engine import WorkflowEngine
from operators.answers import majority_index
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import AnswerGenerate, Custom, Programmer
from operators.registry import default_registry
from tests.engine.doubles import op
from training.data import Problem
from training.scoring import score_text


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
    inputs = OperatorInput(problem="3+4?", guidance=["Add the two numbers."])  # not a fresh start
    output = await Custom().run(inputs, _runtime(backend))
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
    assert "ModuleNotFoundError" in backend.prompts[1] or "nonexistent_module_xyz" in backend.prompts[1]


@pytest.mark.parametrize("feedback", [None, "The last attempt returned None."])
@pytest.mark.parametrize("operator", [Programmer, Custom])
async def test_code_solvers_see_the_example_tests_that_direct_sees(
    operator: type[Programmer] | type[Custom], feedback: str | None
) -> None:
    """A workflow step must not know less than one direct call: the visible tests fix the output form. First in
    a workflow the step is the direct call itself; after earlier steps, the tests are a section of its prompt."""
    backend = ScriptedBackend([_py('def check(s):\n    return "Valid"')])
    tests = 'assert check("abba") == "Valid"'
    inputs = OperatorInput(
        problem="Check the ends.", task_type="code", entry_point="check", public_tests=tests, feedback=feedback
    )
    output = await operator().run(inputs, _runtime(backend))
    assert output.ok, output.error
    heading = "## Example tests\n" if feedback else "Example tests:\n"
    assert heading + tests in backend.prompts[0]


async def test_example_tests_are_not_shown_outside_code_tasks() -> None:
    backend = ScriptedBackend(["7"])
    await Custom().run(OperatorInput(problem="3+4?", public_tests="assert 1"), _runtime(backend))
    assert "Example tests" not in backend.prompts[0]


# ------------------------------------------------------------------------------------ program-of-thought


async def test_programmer_math_answer_is_the_executed_value_and_the_trace_says_so() -> None:
    program = "def solve():\n    apples = 6 * 7\n    return apples"
    backend = ScriptedBackend([_py(program)])
    output = await Programmer().run(OperatorInput(problem="6 bags of 7?", task_type="math"), _runtime(backend))
    assert (output.text, output.code) == ("42", program)
    assert output.note == "program-of-thought: executed value 42"


async def test_programmer_takes_the_printed_value_when_solve_returns_none() -> None:
    program = "def solve():\n    print('step 1')\n    print(6 * 7)"
    backend = ScriptedBackend([_py(program)])
    output = await Programmer().run(OperatorInput(problem="6 bags of 7?", task_type="math"), _runtime(backend))
    assert output.text == "42"
    assert output.note == "program-of-thought: printed value 42"
    assert len(backend.requests) == 1  # accepted without a re-ask


async def test_programmer_code_task_has_no_program_of_thought_note() -> None:
    backend = ScriptedBackend([_py("def one():\n    return 1")])
    inputs = OperatorInput(problem="One.", task_type="code", entry_point="one")
    output = await Programmer().run(inputs, _runtime(backend))
    assert output.ok and output.note is None


async def test_an_executed_value_is_the_run_answer_the_scorer_grades_and_a_vote_counts() -> None:
    backend = ScriptedBackend(rules=[lambda request: _py("def solve():\n    return 3 / 4 * 8")], name="pot")
    engine = WorkflowEngine(default_registry(), backend, max_reasks=0)
    task = TaskSpec(problem="Three quarters of 8?", task_type="math")
    report = await engine.run(WorkflowGraph(stages=[op("node_1", "Programmer")], next_index=2), task)
    assert (report.status, report.output) == ("ok", "6")
    assert report.output is not None
    assert report.trace[0].note is not None and "program-of-thought: executed value 6" in report.trace[0].note
    problem = Problem(id="pot-1", source="test", problem_type="math", problem=task.problem, ground_truth="6")
    assert score_text(problem, report.output).correct
    written = [r"Three quarters is \frac{3}{4}, times 8 gives $\boxed{6}$.", "So the answer is 5."]
    assert majority_index([*written, report.output], "math") == 0
