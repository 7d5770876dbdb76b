"""Running generated code in the sandbox and summarising the result for outputs, feedback and re-asks.

Why a summary model: operator outputs carry what happened when the code ran (status, verdict, trimmed
streams, the isolation actually applied), and the same text is quoted to the model when asking for a fix.
`count_passing` runs each public test on its own, so two programs can be compared by how many they pass.
"""

from __future__ import annotations

import ast
from typing import ClassVar

import anyio
from pydantic import BaseModel

from operators.base import PublicTestScore
from operators.sandbox import ExecResult, SandboxRefusedError, run_code

__all__ = ["ExecSummary", "TestTally", "count_passing", "execute", "split_public_tests"]

_STREAM_TAIL = 2_000  # characters of stdout/stderr kept; the end of a traceback is the informative part


def _tail(text: str, limit: int = _STREAM_TAIL) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} characters omitted ...]\n{text[-limit:]}"


class ExecSummary(BaseModel):
    """What one sandbox run did, trimmed for prompts and traces."""

    status: str
    succeeded: bool
    passed: bool | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    isolation: str = ""
    reason: str | None = None

    @classmethod
    def from_result(cls, result: ExecResult) -> ExecSummary:
        # A test run succeeds only on the sandbox's unforgeable pass record; a plain run on status "ok".
        succeeded = result.passed is True if result.passed is not None else result.status == "ok"
        isolation = result.isolation.mode + (" (degraded)" if result.isolation.degraded else "")
        return cls(
            status=result.status,
            succeeded=succeeded,
            passed=result.passed,
            stdout=_tail(result.stdout),
            stderr=_tail(result.stderr),
            duration_s=result.duration_s,
            isolation=isolation,
            reason=result.reason or None,
        )

    def report(self) -> str:
        """A compact description of a failed run, suitable for feedback and re-ask prompts."""
        lines = [f"status: {self.status}"]
        if self.reason:
            lines.append(f"reason: {self.reason}")
        if self.stderr.strip():
            lines.append(f"stderr:\n{self.stderr.strip()}")
        if self.stdout.strip():
            lines.append(f"stdout:\n{self.stdout.strip()}")
        return "\n".join(lines)


async def execute(
    code: str,
    *,
    timeout_s: float,
    tests: str | None = None,
    entry_point: str | None = None,
) -> ExecSummary:
    """Run `code` (optionally against `tests`) in the sandbox.

    Raises `SandboxRefusedError` when the sandbox refuses to run anything here: that is the host's problem,
    not the code's, so it must fail the node with the fix rather than be quoted to the model as a failed run.
    """
    result = await run_code(code, tests=tests, entry_point=entry_point, timeout_s=timeout_s)
    if result.status == "refused":
        raise SandboxRefusedError(result.reason)
    return ExecSummary.from_result(result)


class TestTally(BaseModel):
    """How many of the public tests one program passes: the evidence that compares two programs."""

    __test__: ClassVar[bool] = False  # not a pytest test class despite the name

    passed: int
    total: int

    def describe(self) -> str:
        return f"{self.passed}/{self.total} public tests"

    def score(self) -> PublicTestScore:
        return PublicTestScore(passed=self.passed, total=self.total)


def split_public_tests(tests: str) -> list[str]:
    """One runnable test per top-level `assert`, each preceded by the non-assert statements (imports,
    helpers) that appear before it. Tests that are not plain asserts (a HumanEval `check(candidate)`
    harness, or source that does not parse) stay one unit: they pass or fail as a whole."""
    try:
        module = ast.parse(tests)
    except SyntaxError:
        return [tests]
    units: list[str] = []
    preamble: list[str] = []
    for statement in module.body:
        source = ast.unparse(statement)  # exact semantics, decorators included, one statement at a time
        if isinstance(statement, ast.Assert):
            units.append("\n".join([*preamble, source]))
        else:
            preamble.append(source)
    return units or [tests]


async def count_passing(code: str, *, tests: str, entry_point: str | None, timeout_s: float) -> TestTally:
    """Run `code` against each public test separately (concurrently; the sandbox bounds how many run).

    Raises `SandboxRefusedError` like `execute`: a host that runs nothing cannot supply evidence.
    """
    units = split_public_tests(tests)
    outcomes = [False] * len(units)
    refusals: list[SandboxRefusedError] = []

    async def run_unit(index: int) -> None:
        try:
            summary = await execute(code, tests=units[index], entry_point=entry_point, timeout_s=timeout_s)
        except SandboxRefusedError as refused:  # re-raised bare below, not wrapped in an exception group
            refusals.append(refused)
            return
        outcomes[index] = summary.succeeded

    async with anyio.create_task_group() as group:
        for index in range(len(units)):
            group.start_soon(run_unit, index)
    if refusals:
        raise refusals[0]
    return TestTally(passed=sum(outcomes), total=len(units))
