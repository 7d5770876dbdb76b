"""Checkers: Test (public tests in the sandbox, repair), Review, and Verify with its adopt policy."""

from __future__ import annotations

import pytest

from operators.backends.base import BackendError
from operators.backends.scripted import ScriptedBackend
from operators.base import OperatorInput, OperatorRuntime
from operators.library import Review, Test, Verify

BROKEN = "def add(a, b):\n    return a - b"
FIXED = "def add(a, b):\n    return a + b"
PUBLIC_TESTS = "assert add(2, 3) == 5\nassert add(0, 0) == 0"


def _code_inputs(code: str = BROKEN, tests: str | None = PUBLIC_TESTS, **extra: object) -> OperatorInput:
    return OperatorInput(
        problem="Write add(a, b).",
        task_type="code",
        entry_point="add",
        code=code,
        solution=code,
        public_tests=tests,
        **extra,
    )


def _runtime(backend: ScriptedBackend, **options: object) -> OperatorRuntime:
    return OperatorRuntime(llm=backend, sandbox_timeout_s=10.0, options=dict(options))


async def test_passing_code_passes_without_an_llm_call() -> None:
    backend = ScriptedBackend(name="never-called")
    output = await Test().run(_code_inputs(FIXED), _runtime(backend))
    assert (output.ok, output.verdict, output.text, output.code) == (True, True, FIXED, FIXED)
    assert output.execution is not None and output.execution.passed is True
    assert backend.requests == []


async def test_failing_code_is_repaired_and_rerun() -> None:
    backend = ScriptedBackend([f"```python\n{FIXED}\n```"])
    inputs = _code_inputs(instruction="Keep it one line.")
    output = await Test().run(inputs, _runtime(backend))
    assert (output.verdict, output.repaired, output.attempts) == (True, True, 1)
    assert output.text == output.code == FIXED
    prompt = backend.prompts[0]
    assert BROKEN in prompt and PUBLIC_TESTS in prompt
    assert "AssertionError" in prompt  # the failing run is quoted
    assert "Keep it one line." in prompt


async def test_unsuccessful_repairs_keep_the_original_and_fail() -> None:
    still_broken = "def add(a, b):\n    return a * b"
    backend = ScriptedBackend(default=f"```python\n{still_broken}\n```")
    output = await Test().run(_code_inputs(), _runtime(backend, test_max_repairs=2))
    assert (output.ok, output.verdict, output.repaired, output.attempts) == (True, False, False, 2)
    assert output.text == output.code == BROKEN
    assert output.feedback and "fails the public tests" in output.feedback and "2 repair attempt(s)" in output.feedback
    assert "still fails the public tests" in backend.prompts[1]


async def test_no_repairs_configured() -> None:
    backend = ScriptedBackend(name="never-called")
    output = await Test().run(_code_inputs(), _runtime(backend, test_max_repairs=0))
    assert (output.verdict, output.attempts) == (False, 0)
    assert backend.requests == []


async def test_without_public_tests_the_verdict_is_unknown_not_passed() -> None:
    backend = ScriptedBackend(name="never-called")
    output = await Test().run(_code_inputs(tests=None), _runtime(backend))
    assert output.ok and output.verdict is None
    assert output.feedback and "No public tests" in output.feedback
    assert output.text == BROKEN and backend.requests == []


async def test_without_code_is_an_error() -> None:
    output = await Test().run(
        OperatorInput(problem="?", task_type="code", public_tests="assert True"), _runtime(ScriptedBackend())
    )
    assert not output.ok and output.error and "no code" in output.error


async def test_backend_failure_during_repair_is_an_error_value() -> None:
    backend = ScriptedBackend([BackendError("timed out")])
    output = await Test().run(_code_inputs(), _runtime(backend))
    assert not output.ok and output.error and "timed out" in output.error
    assert output.text == ""


async def test_bad_repair_option_is_an_error_value() -> None:
    output = await Test().run(_code_inputs(), _runtime(ScriptedBackend(), test_max_repairs=-1))
    assert not output.ok and output.error and "test_max_repairs" in output.error


async def test_review_passes_the_solution_through() -> None:
    backend = ScriptedBackend(["<feedback>The total omits tax.</feedback><verdict>fail</verdict>"])
    inputs = OperatorInput(problem="Total with tax?", solution="100", instruction="Check the tax step.")
    output = await Review().run(inputs, _runtime(backend))
    assert (output.ok, output.verdict, output.feedback, output.text) == (True, False, "The total omits tax.", "100")
    assert "100" in backend.prompts[0] and "Check the tax step." in backend.prompts[0]


async def test_review_never_reads_a_verdict_from_a_stray_letter() -> None:
    backend = ScriptedBackend(
        ["<feedback>ok</feedback><verdict>A</verdict>", "<feedback>ok</feedback><verdict>yes</verdict>"]
    )
    output = await Review().run(OperatorInput(problem="?", solution="x"), _runtime(backend))
    assert output.verdict is True
    assert "<verdict>: expected one word" in backend.prompts[1]


def _verify_reply(independent: str, verdict: str, confidence: str) -> str:
    return (
        f"<working>...</working><independent_answer>{independent}</independent_answer>"
        f"<verdict>{verdict}</verdict><confidence>{confidence}</confidence><feedback>checked</feedback>"
    )


@pytest.mark.parametrize(
    ("options", "reply", "adopted"),
    [
        ({}, _verify_reply("12", "incorrect", "high"), False),  # default policy: never
        ({"verify_adopt": "high_confidence"}, _verify_reply("12", "incorrect", "high"), True),
        ({"verify_adopt": "high_confidence"}, _verify_reply("12", "incorrect", "medium"), False),
        (
            {"verify_adopt": "high_confidence", "verify_adopt_threshold": 0.5},
            _verify_reply("12", "incorrect", "medium"),
            True,
        ),
        ({"verify_adopt": "always"}, _verify_reply("12", "incorrect", "low"), True),
        ({"verify_adopt": "always"}, _verify_reply("12", "correct", "high"), False),  # passed: keep
        ({"verify_adopt": "always"}, _verify_reply("-12.0", "incorrect", "high"), False),  # same answer
    ],
)
async def test_verify_adopt_policy(options: dict[str, object], reply: str, adopted: bool) -> None:
    backend = ScriptedBackend([reply])
    inputs = OperatorInput(problem="Debt after paying 3 of 15?", solution="-12")
    output = await Verify().run(inputs, _runtime(backend, **options))
    assert output.ok
    assert output.adopted is adopted
    assert output.text == ("12" if adopted else "-12")
    assert output.independent_answer in {"12", "-12.0"}
    assert output.verdict is ("<verdict>correct" in reply)


async def test_verify_has_no_sign_flip_heuristic() -> None:
    backend = ScriptedBackend([_verify_reply("5", "incorrect", "high")])
    output = await Verify().run(OperatorInput(problem="?", solution="-5"), _runtime(backend))
    assert (output.text, output.verdict, output.confidence) == ("-5", False, 0.9)
    assert output.feedback and "Independent answer: 5" in output.feedback


async def test_verify_rejects_unknown_policy() -> None:
    backend = ScriptedBackend()
    output = await Verify().run(OperatorInput(problem="?", solution="1"), _runtime(backend, verify_adopt="sometimes"))
    assert not output.ok and output.error and "verify_adopt" in output.error
    assert backend.requests == []
