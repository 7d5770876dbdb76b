"""Sandbox behaviour on ordinary programs: the three test styles, failures, limits and concurrency."""

from __future__ import annotations

import shutil

import anyio
import pytest
from pydantic import ValidationError

from operators.sandbox import (
    ALLOW_WEAK_ENV,
    ISOLATION_ENV,
    SandboxLimits,
    StdinCase,
    get_concurrency_limiter,
    outputs_match,
    run_code,
    set_concurrency_limit,
)
from operators.sandbox.concurrency import concurrency_limit

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def weak_isolation_without_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """These programs are benign and test the harness, not the isolation: without bubblewrap (a dev machine;
    CI installs it) opt into the weak modes instead of getting every run refused."""
    if shutil.which("bwrap") is None:
        monkeypatch.setenv(ALLOW_WEAK_ENV, "1")


ADD = "def add(a, b):\n    return a + b\n"
ADD_WRONG = "def add(a, b):\n    return a - b\n"
HUMANEVAL_TESTS = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n"


async def test_humaneval_style_passes_and_reports_isolation() -> None:
    result = await run_code(ADD, tests=HUMANEVAL_TESTS, entry_point="add")
    assert result.status == "ok"
    assert result.passed is True
    assert result.exit_code == 0
    assert result.duration_s > 0
    assert result.isolation.mode in ("bwrap", "unshare", "rlimits-only")


async def test_humaneval_style_wrong_answer_fails_with_the_failing_line() -> None:
    result = await run_code(ADD_WRONG, tests=HUMANEVAL_TESTS, entry_point="add")
    assert result.status == "failed"
    assert result.passed is False
    assert "AssertionError" in result.reason
    assert "candidate(1, 2) == 3" in result.reason


async def test_humaneval_helpers_from_the_prompt_are_visible_to_check() -> None:
    code = "def encode(s):\n    return s[::-1]\n\ndef decode(s):\n    return s[::-1]\n"
    tests = "def check(candidate):\n    assert candidate(encode('abc')) == 'abc'\n"
    result = await run_code(code, tests=tests, entry_point="decode")
    assert result.passed is True


async def test_check_is_called_only_when_the_tests_define_it() -> None:
    """An entry point named `check` that the asserts call (and rebind, as the scorer's return guard does) is
    not HumanEval's `check(candidate)`: calling it with itself would fail a correct solution."""
    code = "def check(x):\n    return 2 * x\n"
    tests = "check = (lambda f: lambda *a: f(*a))(check)\nassert check(2) == 4\n"
    assert (await run_code(code, tests=tests, entry_point="check")).passed is True
    humaneval = "def check(candidate):\n    assert candidate(2) == 5\n"  # defined by the tests: it runs
    assert (await run_code(code, tests=humaneval, entry_point="check")).passed is False


async def test_mbpp_style_asserts_with_imports() -> None:
    code = "import math\ndef area(r):\n    return math.pi * r * r\n"
    tests = "import math\nassert math.isclose(area(1), 3.14159, rel_tol=1e-3)\nassert area(0) == 0\n"
    assert (await run_code(code, tests=tests)).passed is True
    wrong = "def area(r):\n    return 3 * r * r\n"
    failed = await run_code(wrong, tests=tests)
    assert failed.passed is False
    assert failed.status == "failed"


async def test_missing_entry_point_fails() -> None:
    result = await run_code("def other():\n    return 1\n", tests=HUMANEVAL_TESTS, entry_point="add")
    assert result.passed is False
    assert "entry point 'add'" in result.reason


async def test_syntax_error_in_solution_is_an_error_not_a_crash() -> None:
    result = await run_code("def add(a, b)\n    return a + b\n", tests=HUMANEVAL_TESTS, entry_point="add")
    assert result.status == "error"
    assert result.passed is False
    assert "does not compile" in result.reason


async def test_syntax_error_in_tests_is_reported_as_such() -> None:
    result = await run_code(ADD, tests="assert add(1, 2) ==\n")
    assert result.status == "error"
    assert "tests do not compile" in result.reason


async def test_solution_raising_at_import_is_an_error() -> None:
    result = await run_code("raise RuntimeError('boom')\n", tests="assert True\n")
    assert result.status == "error"
    assert result.passed is False
    assert "RuntimeError: boom" in result.reason


async def test_plain_run_returns_output_and_no_verdict() -> None:
    result = await run_code("print('hello')\nimport sys\nprint('warn', file=sys.stderr)\n")
    assert result.status == "ok"
    assert result.passed is None
    assert result.stdout == "hello\n"
    assert result.stderr == "warn\n"


async def test_plain_run_nonzero_exit_is_an_error() -> None:
    result = await run_code("import sys\nsys.exit(3)\n")
    assert result.status == "error"
    assert result.exit_code == 3


async def test_stdin_cases_are_judged_per_case_with_whitespace_normalised() -> None:
    code = "a, b = map(int, input().split())\nprint(a + b, ' ')\nprint()\n"
    cases = [
        StdinCase(input="1 2\n", expected_output="3"),
        StdinCase(input="10 5", expected_output="15\n\n"),
        StdinCase(input="2 2\n", expected_output="5\n"),
    ]
    result = await run_code(code, stdin_cases=cases)
    assert result.cases is not None
    assert [case.passed for case in result.cases] == [True, True, False]
    assert result.passed is False
    assert result.status == "failed"
    assert result.reason.startswith("case 3/3")
    assert "2/3 cases passed" in result.reason


async def test_stdin_cases_all_passing() -> None:
    code = "import sys\nprint(sys.stdin.read().upper(), end='')\n"
    result = await run_code(code, stdin_cases=[StdinCase(input="ab\ncd\n", expected_output="AB\nCD")])
    assert result.passed is True
    assert result.status == "ok"


async def test_stdin_case_crash_fails_that_case() -> None:
    result = await run_code("int(input())\n", stdin_cases=[StdinCase(input="x", expected_output="")])
    assert result.passed is False
    assert result.cases is not None
    assert result.cases[0].status == "failed"
    assert "ValueError" in result.cases[0].stderr


def test_output_normalisation_rules() -> None:
    assert outputs_match("1  2 \r\n3\n\n", "1 2\n3")
    assert not outputs_match("1 2 3", "1 2\n3")
    assert not outputs_match("12", "1 2")


async def test_tests_and_stdin_cases_together_are_rejected() -> None:
    with pytest.raises(ValueError, match="not both"):
        await run_code(ADD, tests="assert True", stdin_cases=[StdinCase(input="", expected_output="")])


def test_limits_are_validated() -> None:
    with pytest.raises(ValidationError):
        SandboxLimits(wall_timeout_s=0)
    with pytest.raises(ValidationError):
        SandboxLimits(memory_bytes=1)
    assert SandboxLimits(wall_timeout_s=2.5).effective_cpu_s() == 4
    assert SandboxLimits(cpu_time_s=1.2).effective_cpu_s() == 2


async def test_timeout_argument_overrides_limits() -> None:
    result = await run_code("import time\ntime.sleep(30)\n", timeout_s=0.5)
    assert result.status == "timeout"
    assert result.duration_s < 30


async def test_event_loop_keeps_serving_during_a_long_run() -> None:
    ticks = 0
    finished = anyio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not finished.is_set():
            ticks += 1
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        result = await run_code("import time\ntime.sleep(1.0)\nprint('done')\n")
        finished.set()
    assert result.stdout == "done\n"
    assert ticks >= 20, f"the event loop ticked only {ticks} times during a 1 s sandbox run"


@pytest.fixture
def limit_two() -> object:
    previous = concurrency_limit()
    set_concurrency_limit(2)
    yield
    set_concurrency_limit(previous)


@pytest.mark.usefixtures("limit_two")
async def test_concurrency_limit_holds() -> None:
    limiter = get_concurrency_limiter()
    observed: list[float] = []
    done = anyio.Event()

    async def watch() -> None:
        while not done.is_set():
            observed.append(limiter.borrowed_tokens)
            await anyio.sleep(0.005)

    async def one() -> None:
        result = await run_code("import time\ntime.sleep(0.4)\n")
        assert result.status == "ok"

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        async with anyio.create_task_group() as runs:
            for _ in range(5):
                runs.start_soon(one)
        done.set()
    assert max(observed) == 2
    assert limiter.total_tokens == 2


def test_concurrency_limit_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        set_concurrency_limit(0)


async def test_forced_degraded_mode_is_reported_honestly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ISOLATION_ENV, "rlimits-only")
    result = await run_code(ADD, tests=HUMANEVAL_TESTS, entry_point="add")
    assert result.passed is True
    assert result.isolation.mode == "rlimits-only"
    assert result.isolation.network_isolated is False
    assert result.isolation.degraded is True


async def test_unknown_forced_mode_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ISOLATION_ENV, "chroot")
    with pytest.raises(ValueError, match=ISOLATION_ENV):
        await run_code("pass")
