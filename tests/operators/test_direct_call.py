"""A solver with nothing but the task asks exactly the direct baseline's call (issue #10)."""

from __future__ import annotations

import pytest

from operators.backends.scripted import ScriptedBackend
from operators.base import Operator, OperatorInput, OperatorRuntime, TaskType
from operators.direct_call import INSTRUCTIONS, direct_prompt, fresh_start, with_task_imports
from operators.library import Custom, Programmer
from operators.prompting import SYSTEM_PROMPT

STUB = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
PROGRAM = "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```"


def _code_task(**update: object) -> OperatorInput:
    task = OperatorInput(problem=STUB, task_type="code", entry_point="total", public_tests="assert total([1]) == 1")
    return task.model_copy(update=update)


@pytest.mark.parametrize(
    "update",
    [
        {"guidance": ["a plan"]},
        {"candidates": ["7"]},
        {"solution": "7"},
        {"code": "x = 1"},
        {"feedback": "wrong"},
    ],
)
def test_any_earlier_step_ends_the_fresh_start(update: dict[str, object]) -> None:
    assert fresh_start(OperatorInput(problem="3+4?"))
    assert fresh_start(OperatorInput(problem="3+4?", instruction="Be brief.", candidates=[" "]))
    assert not fresh_start(OperatorInput(problem="3+4?").model_copy(update=update))


@pytest.mark.parametrize(
    ("operator", "task", "reply"),
    [
        (Custom, OperatorInput(problem="What is 3+4?", task_type="math"), "3+4 = 7, so \\boxed{7}"),
        (Custom, OperatorInput(problem="Capital of Norway?", task_type="qa"), "Oslo"),
        (Custom, _code_task(), PROGRAM),
        (Programmer, _code_task(), PROGRAM),
    ],
)
async def test_fresh_start_solver_sends_the_direct_call(
    operator: type[Operator], task: OperatorInput, reply: str
) -> None:
    backend = ScriptedBackend([reply])
    output = await operator().run(task, OperatorRuntime(llm=backend))
    assert output.ok, output.error
    [request] = backend.requests
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", direct_prompt(task.problem, task.task_type, task.public_tests))
    ]
    assert request.max_tokens is None  # no reply cap of ours, as direct has none


async def test_fresh_start_program_gets_the_stub_imports_and_loads_first_time() -> None:
    backend = ScriptedBackend([PROGRAM])
    output = await Programmer().run(_code_task(), OperatorRuntime(llm=backend))
    assert output.ok, output.error
    assert output.code is not None and output.code.startswith("from typing import List\n")
    assert len(backend.requests) == 1  # List resolved: no re-ask for a NameError


async def test_a_reask_keeps_the_direct_form() -> None:
    backend = ScriptedBackend(["no code here", PROGRAM])
    output = await Custom().run(_code_task(), OperatorRuntime(llm=backend))
    assert output.ok, output.error
    assert [m.role for m in backend.requests[1].messages] == ["user", "assistant", "user"]


@pytest.mark.parametrize(
    ("task", "reply"),
    [
        (OperatorInput(problem="What is 3+4?", task_type="math"), "\\boxed{7}"),
        (OperatorInput(problem="Capital of Norway?", task_type="qa"), "Oslo"),
    ],
)
async def test_a_first_solvers_prompt_is_added_to_the_direct_call(task: OperatorInput, reply: str) -> None:
    backend = ScriptedBackend([reply])
    prompted = task.model_copy(update={"instruction": "  Check the units.  "})
    output = await Custom().run(prompted, OperatorRuntime(llm=backend))
    assert output.ok, output.error
    [(role, content)] = [(m.role, m.content) for m in backend.requests[0].messages]
    assert role == "user"  # no system message of ours: the direct call's form
    assert content == direct_prompt(task.problem, task.task_type, extra_instruction="Check the units.")
    assert "Check the units.\n" in content


@pytest.mark.parametrize("operator", [Custom, Programmer])
async def test_a_prompted_first_code_solver_keeps_the_workflow_framing(operator: type[Operator]) -> None:
    """Its draws feed selection by execution, which did better on the framing's candidates (direct_call)."""
    backend = ScriptedBackend([PROGRAM])
    output = await operator().run(_code_task(instruction="Use a loop."), OperatorRuntime(llm=backend))
    assert output.ok, output.error
    system, user = backend.requests[0].messages
    assert (system.role, system.content) == ("system", SYSTEM_PROMPT)
    assert "Use a loop." in user.content


def test_the_added_prompt_never_follows_the_answer_format() -> None:
    math = direct_prompt("What is 3+4?", "math", extra_instruction="Answer in words.")
    assert math == "What is 3+4?\nAnswer in words.\n" + INSTRUCTIONS["math"]
    code = direct_prompt(STUB, "code", extra_instruction="Use a loop.")
    assert code.startswith(INSTRUCTIONS["code"] + "\nUse a loop.\n\n" + STUB.strip("\n"))
    assert direct_prompt(STUB, "code", extra_instruction="   ") == direct_prompt(STUB, "code")


@pytest.mark.parametrize("task_type", ["math", "qa"])
async def test_after_earlier_steps_the_prompt_is_the_job(task_type: TaskType) -> None:
    backend = ScriptedBackend(["7"])
    await Custom().run(
        OperatorInput(problem="3+4?", task_type=task_type, instruction="Be brief.", candidates=["6", "7"]),
        OperatorRuntime(llm=backend),
    )
    system, user = backend.requests[0].messages
    assert (system.role, system.content) == ("system", SYSTEM_PROMPT)
    assert "Be brief." in user.content


async def test_program_of_thought_has_no_direct_form() -> None:
    backend = ScriptedBackend(["```python\ndef solve():\n    return 3 + 4\n```"])
    output = await Programmer().run(OperatorInput(problem="3+4?", task_type="math"), OperatorRuntime(llm=backend))
    assert output.text == "7"
    assert backend.requests[0].messages[0].role == "system"


def test_task_imports_fill_only_what_the_program_lacks() -> None:
    assert with_task_imports("def total(xs):\n    return sum(xs)", STUB).startswith("from typing import List\n")
    has_it = "from typing import List\n\ndef total(xs: List[int]):\n    return 0"
    assert with_task_imports(has_it, STUB) == has_it
