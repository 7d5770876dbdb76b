"""Code scoring: run the final program against the problem's HIDDEN tests in the sandbox.

pass@1 is the sandbox's verdict (`ExecResult.passed`, delivered on a channel the program cannot forge); no
text produced by the workflow (a Test operator's summary, a "PASS" printed by the program) is ever read.

How the hidden test is built:
- HumanEval (`meta.test` defines `check(candidate)`): the test text with the entry point; the sandbox calls
  `check(<entry_point>)` itself when the tests define `check` (see `operators/sandbox/harness.py`).
- MBPP and other assert lists: `meta.test` as is (its imports come first in the data), with the entry point
  so the sandbox reports a missing function clearly.
- APPS stdin problems: every `meta.test_cases` entry becomes a `StdinCase`.
- APPS call-based problems: a generated harness calls the entry point once per case. The MapCoder format
  writes one argument per line with string arguments unquoted, so each line is read with
  `ast.literal_eval`, falling back to the raw line. When that reading fails a case and some line was read as
  a number or bool, the case is retried with those lines kept as text (the format cannot tell `"13"` from
  `13`). Return values are converted to plain data (exact builtin types only; tuples become lists, dict
  keys become JSON strings) before the comparison, so an object with a permissive `__eq__` cannot pass.

Which code is graded: the answer's fenced code block (a `python`/`py`/untagged block that defines the entry
point, else the last such block), or the whole answer when it has no fence and is a Python program. When the
code does not define the entry point but the problem has a HumanEval-style prompt, the prompt is prepended
(the answer was a function body). An answer with no code at all scores 0 (`no_code`).

HumanEval/MBPP asserts compare inside the sandbox with `==`, `<`, `abs(...)`, so the entry point is wrapped
(`guarded_tests`): a return value containing an object whose class overrides comparison or arithmetic
operators in Python (an "always equal" object) fails the test. Standard-library value types (Fraction,
Counter, ...) and builtins are allowed. A program written against this harness (patching trusted classes,
introspecting frames) is the sandbox's stated residual risk.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any

import structlog

from training.data import CodeMeta, IOCase, Problem
from training.scoring.result import ScoreResult

log = structlog.get_logger(__name__)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})
_CODE_HINT = re.compile(r"^\s*(?:def |class |import |from \S+ import |print\()", re.MULTILINE)


@dataclass(frozen=True)
class CodeExtraction:
    code: str
    how: str  # "fenced", "raw", "completion", "raw_unparsed", "none"


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.MULTILINE) is not None


def _syntax_tree(code: str) -> ast.Module | None:
    with warnings.catch_warnings():  # e.g. "invalid escape sequence" in the answer's own strings
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code)
        except (SyntaxError, ValueError):
            return None


def _parses(code: str) -> bool:
    return _syntax_tree(code) is not None


def _is_program(code: str) -> bool:
    """Valid Python that does something: not just a bare name or constant (`hello`, `42`)."""
    tree = _syntax_tree(code)
    if tree is None:
        return False
    return any(not isinstance(node, ast.Expr) or isinstance(node.value, ast.Call) for node in tree.body)


def extract_code(answer: str, entry_point: str | None = None, prompt: str | None = None) -> CodeExtraction:
    """The program to grade from a free-form answer (see module docstring). With a HumanEval-style
    `prompt`, an unfenced function body that completes the prompt is accepted too (`completion`)."""
    blocks = [
        (tag.lower(), body) for tag, body in _FENCE.findall(answer) if tag.lower() in _PYTHON_TAGS and body.strip()
    ]
    if blocks:
        chosen = blocks[-1][1]
        if entry_point:
            defining = [body for _, body in blocks if _defines(body, entry_point)]
            if defining:
                chosen = defining[-1]
        return CodeExtraction(chosen.strip("\n"), "fenced")
    text = answer.strip("\n")
    if not text.strip():
        return CodeExtraction("", "none")
    if _is_program(text):
        return CodeExtraction(text, "raw")
    if prompt and entry_point and _defines(prompt, entry_point) and _parses(prompt.rstrip("\n") + "\n" + text):
        return CodeExtraction(text, "completion")
    if _CODE_HINT.search(text):
        return CodeExtraction(text, "raw_unparsed")  # code with a syntax error: the sandbox reports it
    return CodeExtraction("", "none")


def complete_with_prompt(code: str, meta: CodeMeta) -> tuple[str, bool]:
    """Prepend the HumanEval prompt when the answer is only the function body. Returns (code, prepended)."""
    if not meta.entry_point or _defines(code, meta.entry_point) or not meta.prompt:
        return code, False
    if not _defines(meta.prompt, meta.entry_point):
        return code, False
    candidate = meta.prompt.rstrip("\n") + "\n" + code
    if _parses(candidate):
        return candidate, True
    return code, False


_CALL_HARNESS = """
import ast as _fs_ast

_FS_CASES = {cases}
_FS_ENTRY = {entry_point!r}
_FS_SCALARS = (bool, int, float, str, type(None))


def _fs_key(key):
    kind = type(key)
    if kind is str:
        return key
    if kind is bool:
        return "true" if key else "false"
    if key is None:
        return "null"
    if kind is int or kind is float:
        return repr(key)
    raise TypeError("unsupported dict key type " + kind.__name__)


def _fs_plain(value):
    # Exact builtin types only (a subclass or a custom class could override __eq__); tuples become lists.
    kind = type(value)
    if kind in _FS_SCALARS:
        return value
    if kind is list or kind is tuple:
        return [_fs_plain(item) for item in value]
    if kind is dict:
        return {{_fs_key(key): _fs_plain(item) for key, item in value.items()}}
    raise TypeError("the return value is not plain data: " + kind.__name__)


def _fs_read_args(text, numbers_as_text):
    args = []
    for line in text.split("\\n"):
        try:
            value = _fs_ast.literal_eval(line.strip())
        except Exception:
            value = line
        if numbers_as_text and type(value) in (int, float, bool):
            value = line
        args.append(value)
    return args


def _fs_run_cases():
    function = globals().get(_FS_ENTRY)
    if not callable(function):
        raise AssertionError("the program does not define " + _FS_ENTRY)
    for index, (text, expected) in enumerate(_FS_CASES):
        readings = [_fs_read_args(text, False)]
        alternative = _fs_read_args(text, True)
        if [type(a) for a in alternative] != [type(a) for a in readings[0]]:
            readings.append(alternative)
        problem = "wrong answer"
        for args in readings:
            try:
                got = _fs_plain(function(*args))
            except Exception as exc:
                problem = type(exc).__name__ + ": " + str(exc)[:200]
                continue
            if got == expected:
                break
        else:
            raise AssertionError(
                "case " + str(index) + " failed (" + problem + "): input=" + repr(text)[:200]
                + " expected=" + repr(expected)[:200]
            )


_fs_run_cases()
"""


def call_harness(cases: list[IOCase], entry_point: str) -> str:
    """Test code that calls `entry_point` on every APPS call-based case (see module docstring).

    The cases are embedded as a Python literal, so the comparison uses no module the program could have
    patched. Raises ValueError for values a literal cannot hold (NaN, infinity)."""
    pairs = [(case.input, case.expected) for case in cases]
    json.dumps(pairs, allow_nan=False)  # plain JSON data only, so its repr is a valid Python literal
    return _CALL_HARNESS.format(cases=repr(pairs), entry_point=entry_point)


# Refuses return values whose class (defined by the program) overrides comparison or arithmetic operators,
# e.g. an object whose __eq__ always answers True, which would pass `assert candidate(x) == y`.
_RETURN_GUARD = """
import collections as _fs_collections
import fractions as _fs_fractions
import types as _fs_types

_FS_OPERATORS = (
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__abs__",
    "__add__", "__radd__", "__sub__", "__rsub__", "__float__", "__int__", "__index__", "__round__",
    "__contains__", "__getattr__", "__getattribute__",
)
_FS_NATIVE = (_fs_types.WrapperDescriptorType, _fs_types.MethodDescriptorType, _fs_types.BuiltinFunctionType)
# Standard-library value types written in Python, with every class they inherit from (numbers ABCs ...).
_FS_TRUSTED = []
for _fs_klass in (
    _fs_fractions.Fraction,
    _fs_collections.Counter,
    _fs_collections.UserList,
    _fs_collections.UserDict,
    _fs_collections.UserString,
):
    _FS_TRUSTED.extend(_fs_klass.__mro__)


def _fs_overrides_operators(kind):
    for klass in kind.__mro__:
        if any(klass is trusted for trusted in _FS_TRUSTED):  # identity: a metaclass cannot fake it
            continue
        own = vars(klass)
        for name in _FS_OPERATORS:
            if name in own and own[name] is not None and not isinstance(own[name], _FS_NATIVE):
                return True
    return False


def _fs_check_return(value):
    pending = [value]
    budget = 100000
    while pending and budget > 0:
        budget -= 1
        item = pending.pop()
        kind = type(item)
        if _fs_overrides_operators(kind):
            raise TypeError("the return value's class " + kind.__name__ + " overrides comparison operators")
        # Look inside containers (subclasses too) with the base type's own iteration, which cannot be hidden.
        if issubclass(kind, dict):
            pending.extend(dict.keys(item))
            pending.extend(dict.values(item))
        else:
            for base in (list, tuple, set, frozenset):
                if issubclass(kind, base):
                    pending.extend(base.__iter__(item))
                    break


def _fs_guarded(function):
    def guarded(*args, **kwargs):
        result = function(*args, **kwargs)
        _fs_check_return(result)
        return result

    return guarded
"""


def guarded_tests(tests: str, entry_point: str, kind: str) -> str:
    """HumanEval/MBPP tests with the entry point's return values checked by `_RETURN_GUARD`."""
    if kind == "check":  # the sandbox calls check(<entry point>): wrap the candidate it receives
        return (
            f"{_RETURN_GUARD}\n{tests.rstrip()}\n\n\n_fs_original_check = check\n\n\n"
            "def check(candidate):\n    return _fs_original_check(_fs_guarded(candidate))\n"
        )
    rebind = f"if isinstance({entry_point}, _fs_types.FunctionType):\n    {entry_point} = _fs_guarded({entry_point})\n"
    return f"{_RETURN_GUARD}\n{rebind}\n{tests}"


@dataclass(frozen=True)
class HiddenTest:
    """What the sandbox must run besides the program: test code, or stdin/stdout cases."""

    tests: str | None = None
    stdin_cases: list[tuple[str, str]] | None = None
    entry_point: str | None = None
    kind: str = ""


def hidden_test_for(problem: Problem) -> HiddenTest:
    """The grading test of a code problem. Raises ValueError when the record cannot be graded."""
    meta = problem.code
    if meta.test_type == "stdin" or (meta.test_type is None and meta.test_cases and not meta.test.strip()):
        if not meta.test_cases:
            raise ValueError(f"{problem.id}: stdin problem without test_cases")
        cases = [(case.input, _as_stdout(case.expected)) for case in meta.test_cases]
        return HiddenTest(stdin_cases=cases, kind="stdin")
    if meta.test_type == "call":
        if not meta.entry_point:
            raise ValueError(f"{problem.id}: call-based problem without entry_point")
        harness = call_harness(meta.test_cases, meta.entry_point)
        return HiddenTest(tests=harness, entry_point=meta.entry_point, kind="call")
    if re.search(r"^\s*def\s+check\s*\(", meta.test, re.MULTILINE):
        if not meta.entry_point:
            raise ValueError(f"{problem.id}: check(candidate) test without entry_point")
        tests = guarded_tests(meta.test, meta.entry_point, "check")
        return HiddenTest(tests=tests, entry_point=meta.entry_point, kind="check")
    if not meta.entry_point:
        return HiddenTest(tests=meta.test, kind="asserts")
    tests = guarded_tests(meta.test, meta.entry_point, "asserts")
    return HiddenTest(tests=tests, entry_point=meta.entry_point, kind="asserts")


def _as_stdout(expected: Any) -> str:
    return expected if isinstance(expected, str) else str(expected)


_STDERR_TAIL = 2000
DEFAULT_RUN_TIMEOUT_S = 10.0  # the sandbox's default wall limit per run
CALL_CASE_BUDGET_S = 2.0
CALL_BUDGET_CAP_S = 60.0


async def score_code(problem: Problem, answer: str, *, timeout_s: float | None = None) -> ScoreResult:
    """Grade `answer` by running it on the hidden tests of `problem` in the sandbox.

    timeout_s: wall limit per sandbox run (a HumanEval/MBPP test run, or one stdin case); None uses the
    sandbox default. An APPS call-based run executes all its cases at once and gets
    max(timeout_s, min(60 s, 2 s x cases)).

    Raises `SandboxRefusedError` when the sandbox refuses to run code on this host (see `operators.sandbox`).
    """
    from operators.sandbox import SandboxRefusedError, StdinCase, run_code

    meta = problem.code
    extraction = extract_code(answer, meta.entry_point, meta.prompt if meta.test_type is None else None)
    if not extraction.code.strip():
        return ScoreResult(
            score=0.0,
            correct=False,
            method="no_code",
            extracted="",
            details={"reason": "the answer contains no Python code (no fenced block and not a program)"},
        )
    try:
        hidden = hidden_test_for(problem)
    except ValueError as exc:
        return ScoreResult(
            score=0.0, correct=False, method="ungradable", extracted=extraction.code, details={"reason": str(exc)}
        )
    code, prepended = extraction.code, False
    if hidden.kind in ("check", "asserts"):
        code, prepended = complete_with_prompt(code, meta)
    stdin_cases = (
        [StdinCase(input=stdin, expected_output=stdout) for stdin, stdout in hidden.stdin_cases]
        if hidden.stdin_cases is not None
        else None
    )
    if hidden.kind == "call":  # one run executes every case: give it a budget that grows with the cases
        timeout_s = max(
            timeout_s or DEFAULT_RUN_TIMEOUT_S, min(CALL_BUDGET_CAP_S, CALL_CASE_BUDGET_S * len(meta.test_cases))
        )
    details: dict[str, Any] = {"test_kind": hidden.kind, "code_from": extraction.how, "prompt_prepended": prepended}
    try:
        result = await run_code(
            code, tests=hidden.tests, entry_point=hidden.entry_point, stdin_cases=stdin_cases, timeout_s=timeout_s
        )
    except Exception as exc:  # a fault of the sandbox, not of the answer: say so instead of a silent 0
        log.error("sandbox_failed", problem=problem.id, error=repr(exc))
        details["reason"] = f"sandbox failure: {exc!r}"
        return ScoreResult(score=0.0, correct=False, method="sandbox_error", extracted=code, details=details)
    if result.status == "refused":  # nothing ran: grading it 0 would corrupt the evaluation, so stop here
        raise SandboxRefusedError(result.reason)
    passed = result.passed is True
    details.update(
        status=result.status,
        reason=result.reason,
        duration_s=result.duration_s,
        isolation=result.isolation.mode,
        isolation_degraded=result.isolation.degraded,
        stderr_tail=result.stderr[-_STDERR_TAIL:],
    )
    if result.cases:
        details["cases_passed"] = sum(1 for case in result.cases if case.passed)
        details["cases_total"] = len(result.cases)
    method = "sandbox_error" if result.status == "sandbox_error" else "sandbox"
    return ScoreResult(score=1.0 if passed else 0.0, correct=passed, method=method, extracted=code, details=details)
