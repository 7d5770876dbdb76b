"""Code scoring: the final program is re-run on the HIDDEN tests in the real sandbox."""

from __future__ import annotations

from typing import Any

import pytest

from training.data import IOCase, Problem
from training.scoring import score, score_text
from training.scoring.code_check import call_harness, extract_code, hidden_test_for

ADD_PROMPT = 'def add(a, b):\n    """Return a + b."""\n'


def humaneval_problem() -> Problem:
    return Problem(
        id="humaneval/t",
        source="humaneval",
        problem_type="code",
        problem=ADD_PROMPT,
        ground_truth=ADD_PROMPT + "    return a + b\n",
        meta={
            "entry_point": "add",
            "prompt": ADD_PROMPT,
            "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-4, 1) == -3\n",
            "public_tests": "assert add(2, 3) == 5",
        },
    )


def mbpp_problem() -> Problem:
    return Problem(
        id="mbpp/t",
        source="mbpp",
        problem_type="code",
        problem="Write a function to compute the square root, rounded to 2 places.\n\ndef root(x):",
        ground_truth="import math\ndef root(x):\n    return round(math.sqrt(x), 2)",
        meta={
            "entry_point": "root",
            "test": "import math\nassert root(4) == 2.0\nassert root(2) == 1.41\nassert math.isclose(root(9), 3)",
            "public_tests": "import math\nassert root(4) == 2.0",
        },
    )


def apps_problem(test_type: str, cases: list[dict[str, Any]], entry_point: str = "") -> Problem:
    return Problem(
        id=f"apps/{test_type}",
        source="apps",
        problem_type="code",
        problem="task",
        ground_truth="",
        meta={"test_type": test_type, "entry_point": entry_point, "test": "", "test_cases": cases},
    )


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n\nIt handles all cases."


# --------------------------------------------------------------------------------- pure helpers (fast)


def test_extract_code_prefers_the_block_defining_the_entry_point() -> None:
    answer = "```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n```"
    assert extract_code(answer, "add").code == "def add(a, b):\n    return a + b"
    assert extract_code(answer, None).code == "print(add(1, 2))"  # without a name: the last block
    assert extract_code("```\nx = 1\n```", None).how == "fenced"
    assert extract_code("```python\ndef f():\n    return 1", "f").code == "def f():\n    return 1"  # unclosed


@pytest.mark.parametrize(
    ("answer", "how"),
    [
        ("def add(a, b):\n    return a + b", "raw"),
        ("import sys\nprint(sys.stdin.read())", "raw"),
        ("def add(a, b)\n    return a + b", "raw_unparsed"),
        ("The answer is 5.", "none"),
        ("hello", "none"),
        ("", "none"),
        ("```text\nnot python\n```", "none"),
    ],
)
def test_extract_code_without_fences(answer: str, how: str) -> None:
    assert extract_code(answer, "add").how == how


def test_hidden_test_kinds() -> None:
    assert hidden_test_for(humaneval_problem()).kind == "check"
    mbpp = hidden_test_for(mbpp_problem())
    assert (mbpp.kind, mbpp.entry_point) == ("asserts", "root")
    assert "root(2) == 1.41" in (mbpp.tests or "")  # the hidden asserts, not only the public one
    stdin = hidden_test_for(apps_problem("stdin", [{"input": "1\n", "output": ["2\n"]}]))
    assert (stdin.kind, stdin.stdin_cases) == ("stdin", [("1\n", "2\n")])
    call = hidden_test_for(apps_problem("call", [{"input": "1", "output": [2]}], "double"))
    assert call.kind == "call" and call.entry_point == "double"


def test_call_harness_compiles_and_embeds_cases() -> None:
    source = call_harness([IOCase(input="a'b\"c\n[1, 2]", output=[{"k": [1, None, True]}])], "f")
    compile(source, "<harness>", "exec")
    assert "'f'" in source


def test_score_text_refuses_code() -> None:
    with pytest.raises(ValueError, match="await score"):
        score_text(humaneval_problem(), "def add(a, b): return a + b")


async def test_prose_answer_has_no_code() -> None:
    result = await score(humaneval_problem(), "I would add the two numbers together.")
    assert (result.score, result.method) == (0.0, "no_code")
    assert "no Python code" in result.details["reason"]


# ------------------------------------------------------------------------- through the sandbox (slow)


@pytest.mark.slow
async def test_humaneval_pass_fail_and_completion_style() -> None:
    problem = humaneval_problem()
    good = await score(problem, fenced("def add(a, b):\n    return a + b"))
    assert (good.score, good.correct, good.method) == (1.0, True, "sandbox")
    assert good.details["test_kind"] == "check" and good.details["status"] == "ok"

    public_only = await score(problem, fenced("def add(a, b):\n    return 5"))  # passes the public test only
    assert (public_only.score, public_only.details["status"]) == (0.0, "failed")

    body_only = await score(problem, "    return a + b\n")  # a completion of the prompt
    assert body_only.correct and body_only.details["prompt_prepended"] is True

    missing = await score(problem, fenced("def plus(a, b):\n    return a + b"))
    assert not missing.correct


@pytest.mark.slow
async def test_printed_verdicts_and_early_exits_do_not_pass() -> None:
    problem = humaneval_problem()
    liar = "def add(a, b):\n    return 0\nprint('PASS')\nprint('All tests passed')"
    assert (await score(problem, fenced(liar))).score == 0.0
    quitter = "import sys\ndef add(a, b):\n    return 0\nsys.exit(0)"
    assert (await score(problem, fenced(quitter))).score == 0.0
    claims = "def add(a, b):\n    return 0\n# TEST_PASSED: 2/2 tests passed"
    assert (await score(problem, claims + "\n\nVerdict: PASS")).score == 0.0


ALWAYS_EQUAL = "class Anything:\n    def __eq__(self, other):\n        return True\n"


@pytest.mark.slow
async def test_objects_with_permissive_operators_do_not_pass() -> None:
    humaneval = await score(humaneval_problem(), fenced(ALWAYS_EQUAL + "def add(a, b):\n    return Anything()"))
    assert not humaneval.correct and "overrides comparison operators" in humaneval.details["reason"]
    hidden_in_list = ALWAYS_EQUAL + "class Plain(list):\n    pass\ndef add(a, b):\n    return Plain([Anything()])"
    problem = humaneval_problem().model_copy(
        update={
            "meta": {**humaneval_problem().meta, "test": "def check(candidate):\n    assert candidate(1, 2) == [3]\n"}
        }
    )
    assert problem.code.test.endswith("== [3]\n")
    in_list = await score(problem, fenced(hidden_in_list))
    assert not in_list.correct and "overrides comparison operators" in in_list.details["reason"]
    near = "class Near(float):\n    def __sub__(self, other):\n        return 0.0\n    def __eq__(self, other):\n"
    near += "        return True\ndef root(x):\n    return Near(0)"
    near_result = await score(mbpp_problem(), fenced(near))
    assert not near_result.correct and "overrides comparison operators" in near_result.details["reason"]


@pytest.mark.slow
async def test_standard_value_types_are_still_accepted() -> None:
    problem = Problem(
        id="mbpp/frac",
        source="mbpp",
        problem_type="code",
        problem="Return a half of x as an exact fraction.",
        ground_truth="",
        meta={"entry_point": "half", "test": "from fractions import Fraction\nassert half(3) == Fraction(3, 2)"},
    )
    answer = "from fractions import Fraction\ndef half(x):\n    return Fraction(x, 2)"
    assert (await score(problem, fenced(answer))).correct


@pytest.mark.slow
async def test_mbpp_asserts_with_imports() -> None:
    problem = mbpp_problem()
    assert (await score(problem, problem.ground_truth)).correct
    wrong = "import math\ndef root(x):\n    return math.sqrt(x)"  # not rounded: root(2) != 1.41
    result = await score(problem, fenced(wrong))
    assert not result.correct and "1.41" in result.details["reason"] + result.details["stderr_tail"]


@pytest.mark.slow
async def test_mbpp_entry_point_named_check_is_called_by_its_asserts_only() -> None:
    """Like mbpp/train-349: the scorer wraps the entry point `check` in the return-value guard; the sandbox must
    not take that for HumanEval's `check(candidate)` and call it with the function itself."""
    problem = Problem(
        id="mbpp/check",
        source="mbpp",
        problem_type="code",
        problem="Write a python function to check whether a string is binary.\n\ndef check(string):",
        ground_truth="def check(string):\n    return 'Yes' if set(string) <= {'0', '1'} else 'No'\n",
        meta={"entry_point": "check", "test": "assert check('0101') == 'Yes'\nassert check('name0') == 'No'"},
    )
    assert hidden_test_for(problem).kind == "asserts"
    result = await score(problem, problem.ground_truth)
    assert (result.score, result.method) == (1.0, "sandbox"), result.details.get("reason")
    wrong = await score(problem, "def check(string):\n    return 'Yes'\n")
    assert wrong.score == 0.0 and "AssertionError" in wrong.details["reason"]


@pytest.mark.slow
async def test_apps_stdin_cases() -> None:
    cases = [{"input": "2 3\n", "output": ["5\n"]}, {"input": "10 -4\n", "output": ["6\n"]}]
    problem = apps_problem("stdin", cases)
    good = await score(problem, fenced("a, b = map(int, input().split())\nprint(a + b)"))
    assert good.correct and (good.details["cases_passed"], good.details["cases_total"]) == (2, 2)
    half = await score(problem, fenced("a, b = map(int, input().split())\nprint(abs(a) + abs(b) if a > 5 else a + b)"))
    assert not half.correct and half.details["cases_passed"] == 1


@pytest.mark.slow
async def test_apps_call_based_cases() -> None:
    cases: list[dict[str, Any]] = [
        {"input": "[3, 1, 2]", "output": [[1, 2, 3]]},
        {"input": "[]", "output": [[]]},
    ]
    problem = apps_problem("call", cases, entry_point="sort_it")
    as_tuple = await score(problem, fenced("def sort_it(xs):\n    return tuple(sorted(xs))"))
    assert as_tuple.correct  # JSON has no tuples: a tuple result equals the expected list
    wrong = await score(problem, fenced("def sort_it(xs):\n    return xs"))
    assert not wrong.correct and "case 0 failed" in wrong.details["reason"]
    cheat = (
        "class Anything:\n    def __eq__(self, other):\n        return True\ndef sort_it(xs):\n    return Anything()"
    )
    assert not (await score(problem, fenced(cheat))).correct
    patched = (
        "import json, ast\nclass Agree(list):\n    def __eq__(self, other):\n        return True\n"
        "json.loads = lambda *a, **k: Agree()\n"
        "def sort_it(xs):\n    return Agree()"
    )
    assert not (await score(problem, fenced(patched))).correct


@pytest.mark.slow
async def test_apps_call_based_unquoted_string_arguments() -> None:
    """MapCoder writes string arguments unquoted: `123321` may be the text "123321"."""
    cases = [{"input": "123321", "output": [True]}, {"input": "12341234", "output": [False]}]
    problem = apps_problem("call", cases, entry_point="is_lucky")
    as_text = (
        "def is_lucky(ticket):\n    return len(ticket) == 6 and sum(map(int, ticket[:3])) == sum(map(int, ticket[3:]))"
    )
    assert (await score(problem, fenced(as_text))).correct
    as_number = "def is_lucky(ticket):\n    s = str(ticket)\n    return len(s) == 6 and s[:3] == s[3:][::-1]"
    assert (await score(problem, fenced(as_number))).correct
    always_true = "def is_lucky(ticket):\n    return True"
    assert not (await score(problem, fenced(always_true))).correct

    words = apps_problem("call", [{"input": "Across the rivers\nchris", "output": [True]}], "name_in_str")
    search = "def name_in_str(s, name):\n    it = iter(s.lower())\n    return all(c in it for c in name)"
    assert (await score(words, fenced(search))).correct
