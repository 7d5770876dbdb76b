"""Revise: uses the feedback, returns the complete revised solution (a program for code tasks), and keeps
its input unless the revision is better by evidence (do no harm, issue 10)."""

from __future__ import annotations

import pytest

from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Revise
from operators.library._execution import count_passing, split_public_tests


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


async def test_revise_accepts_an_untagged_reply_to_feedback() -> None:
    backend = ScriptedBackend(["The corrected answer is 7."])
    inputs = OperatorInput(problem="3 + 4?", solution="8", feedback="the sum is wrong")
    output = await Revise().run(inputs, OperatorRuntime(llm=backend))
    assert (output.text, output.kept_input) == ("The corrected answer is 7.", False)
    assert output.note and output.note.startswith("revision accepted")


async def test_revise_without_feedback_or_tests_keeps_the_input_without_an_llm_call() -> None:
    # Do no harm (issue 10): with nothing to check a revision against, the input is carried forward.
    backend = ScriptedBackend(["The corrected answer is 7."])
    output = await Revise().run(OperatorInput(problem="3 + 4?", solution="8"), OperatorRuntime(llm=backend))
    assert (output.ok, output.text, output.kept_input) == (True, "8", True)
    assert output.note and "no checker feedback and no public tests" in output.note
    assert backend.requests == []


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
    assert output.note and "no public tests to compare by" in output.note  # accepted on the feedback alone


# --- do no harm: code with public tests ----------------------------------------------------------------------

THREE_TESTS = "assert add(2, 3) == 5\nassert add(0, 0) == 0\nassert add(1, 1) == 2"
ONE_OF_THREE = "def add(a, b):\n    return a - b"  # passes only add(0, 0) == 0
ALSO_ONE_OF_THREE = "def add(a, b):\n    return a * b"  # passes only add(0, 0) == 0
NONE_OF_THREE = "def add(a, b):\n    return 99"
ALL_THREE = "def add(a, b):\n    return a + b"


def _add_inputs(program: str, tests: str | None = THREE_TESTS) -> OperatorInput:
    return OperatorInput(
        problem="Write add(a, b).",
        task_type="code",
        entry_point="add",
        code=program,
        solution=program,
        public_tests=tests,
        feedback="The code fails the public tests.",
    )


def _reply(program: str) -> str:
    return f"```python\n{program}\n```"


@pytest.mark.parametrize(
    ("revision", "revision_passes"), [(NONE_OF_THREE, "0/3"), (ALSO_ONE_OF_THREE, "1/3")], ids=["fewer", "equal"]
)
async def test_a_revision_passing_no_more_public_tests_is_rejected(revision: str, revision_passes: str) -> None:
    backend = ScriptedBackend([_reply(revision)])
    output = await Revise().run(_add_inputs(ONE_OF_THREE), OperatorRuntime(llm=backend))
    assert (output.ok, output.kept_input) == (True, True)
    assert output.text == output.code == ONE_OF_THREE
    assert output.note == (
        f"revision rejected: the revision passes {revision_passes} public tests, the input passes 1/3; input kept"
    )
    assert len(backend.requests) == 1


async def test_a_revision_passing_strictly_more_public_tests_is_kept() -> None:
    backend = ScriptedBackend([_reply(ALL_THREE)])
    output = await Revise().run(_add_inputs(ONE_OF_THREE), OperatorRuntime(llm=backend))
    assert (output.ok, output.kept_input) == (True, False)
    assert output.text == output.code == ALL_THREE
    assert output.note == "revision accepted: the revision passes 3/3 public tests, the input passes 1/3"


async def test_an_input_passing_every_public_test_is_kept_without_an_llm_call() -> None:
    backend = ScriptedBackend([_reply(ONE_OF_THREE)])
    output = await Revise().run(_add_inputs(ALL_THREE), OperatorRuntime(llm=backend))
    assert (output.text, output.kept_input) == (ALL_THREE, True)
    assert output.note and "already passes 3/3 public tests" in output.note
    assert backend.requests == []


async def test_a_revision_that_cannot_be_parsed_fails_instead_of_replacing_the_input() -> None:
    backend = ScriptedBackend(default="I would rather not.")
    output = await Revise().run(_add_inputs(ONE_OF_THREE), OperatorRuntime(llm=backend, max_reasks=0))
    assert not output.ok and output.error


def test_public_tests_split_into_one_unit_per_assert_with_the_setup_before_it() -> None:
    tests = "import math\nassert root(4) == 2.0\nLIMIT = 3\nassert root(9) == LIMIT"
    assert split_public_tests(tests) == [
        "import math\nassert root(4) == 2.0",
        "import math\nLIMIT = 3\nassert root(9) == LIMIT",
    ]


@pytest.mark.parametrize(
    "tests",
    ["def check(candidate):\n    assert candidate(1) == 2\n", "assert add(1, 2) == 3 +"],
    ids=["check-harness", "unparseable"],
)
def test_public_tests_without_top_level_asserts_stay_one_unit(tests: str) -> None:
    assert split_public_tests(tests) == [tests]


async def test_count_passing_counts_each_public_test() -> None:
    tally = await count_passing(ONE_OF_THREE, tests=THREE_TESTS, entry_point="add", timeout_s=10.0)
    assert (tally.passed, tally.total) == (1, 3)
