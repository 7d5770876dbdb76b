"""``run_code``: the one public entry point, turning raw process outcomes into an ``ExecResult``."""

from __future__ import annotations

import anyio
import structlog

from operators.sandbox.concurrency import get_concurrency_limiter
from operators.sandbox.isolation import IsolationPlan, refused_report
from operators.sandbox.models import CaseResult, ExecResult, ExecStatus, SandboxLimits, StdinCase
from operators.sandbox.output_match import outputs_match
from operators.sandbox.policy import SandboxRefusedError
from operators.sandbox.runner import RawRun, run_sandboxed
from operators.sandbox.selection import select_isolation
from operators.sandbox.verdict import new_nonce

log = structlog.get_logger(__name__)

_SIGNAL_HINTS = {9: "SIGKILL (memory or CPU-time limit)", 24: "SIGXCPU (CPU-time limit)", 11: "SIGSEGV"}


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _resource_status(raw: RawRun, limits: SandboxLimits) -> tuple[ExecStatus, str] | None:
    """Endings that override everything else: timeout, output flood, death by signal."""
    if raw.timed_out:
        return "timeout", f"wall-clock limit of {limits.wall_timeout_s:g} s exceeded; the sandbox was killed"
    if raw.output_overflow:
        return "output_limit", f"output exceeded {limits.max_output_bytes} bytes; the sandbox was killed"
    if raw.signal_number is not None:
        hint = _SIGNAL_HINTS.get(raw.signal_number, f"signal {raw.signal_number}")
        return "killed", f"killed by {hint}"
    return None


def _tests_outcome(raw: RawRun, limits: SandboxLimits) -> tuple[ExecStatus, bool, str]:
    ending = _resource_status(raw, limits)
    if ending is not None:
        return ending[0], False, ending[1]
    verdict = raw.verdict
    if verdict.passed and raw.exit_code == 0:
        return "ok", True, ""
    if verdict.outcome is not None:
        status: ExecStatus = verdict.outcome  # type: ignore[assignment]
        return status, False, verdict.reason
    return "failed", False, f"the program ended (exit code {raw.exit_code}) before its tests completed"


def _program_outcome(raw: RawRun, limits: SandboxLimits) -> tuple[ExecStatus, str]:
    ending = _resource_status(raw, limits)
    if ending is not None:
        return ending
    if raw.verdict.outcome == "sandbox_error":
        return "sandbox_error", raw.verdict.reason
    if raw.exit_code != 0:
        return "error", f"exited with code {raw.exit_code}"
    return "ok", ""


async def _run_once(
    plan: IsolationPlan,
    *,
    mode: str,
    code: str,
    tests: str | None,
    entry_point: str | None,
    stdin: bytes | None,
    limits: SandboxLimits,
) -> RawRun:
    async with get_concurrency_limiter():
        return await run_sandboxed(
            plan=plan,
            mode=mode,
            code=code,
            tests=tests,
            entry_point=entry_point,
            stdin=stdin,
            limits=limits,
            nonce=new_nonce(),
        )


async def _run_case(plan: IsolationPlan, code: str, index: int, case: StdinCase, limits: SandboxLimits) -> CaseResult:
    raw = await _run_once(
        plan, mode="program", code=code, tests=None, entry_point=None, stdin=case.input.encode(), limits=limits
    )
    status, reason = _program_outcome(raw, limits)
    stdout = _text(raw.stdout)
    passed = status == "ok" and outputs_match(stdout, case.expected_output)
    if status == "ok" and not passed:
        status, reason = "failed", "output differs from the expected output"
    elif status == "error":
        status = "failed"
    return CaseResult(
        index=index,
        passed=passed,
        status=status,
        stdout=stdout,
        stderr=_text(raw.stderr),
        stdout_truncated=raw.stdout_truncated,
        stderr_truncated=raw.stderr_truncated,
        exit_code=raw.exit_code,
        duration_s=raw.duration_s,
        reason=reason,
    )


async def _run_cases(plan: IsolationPlan, code: str, cases: list[StdinCase], limits: SandboxLimits) -> list[CaseResult]:
    results: list[CaseResult | None] = [None] * len(cases)

    async def one(index: int, case: StdinCase) -> None:
        results[index] = await _run_case(plan, code, index, case, limits)

    async with anyio.create_task_group() as group:
        for index, case in enumerate(cases):
            group.start_soon(one, index, case)
    return [result for result in results if result is not None]


def _cases_result(plan: IsolationPlan, cases: list[CaseResult]) -> ExecResult:
    failing = next((case for case in cases if not case.passed), None)
    shown = failing or cases[-1]
    passed_count = sum(case.passed for case in cases)
    reason = "" if failing is None else f"case {failing.index + 1}/{len(cases)}: {failing.reason}"
    return ExecResult(
        status="ok" if failing is None else shown.status,
        passed=failing is None,
        stdout=shown.stdout,
        stderr=shown.stderr,
        stdout_truncated=shown.stdout_truncated,
        stderr_truncated=shown.stderr_truncated,
        exit_code=shown.exit_code,
        duration_s=sum(case.duration_s for case in cases),
        isolation=plan.report,
        reason=reason if failing is None else f"{reason} ({passed_count}/{len(cases)} cases passed)",
        cases=cases,
    )


async def run_code(
    code: str,
    *,
    tests: str | None = None,
    entry_point: str | None = None,
    stdin_cases: list[StdinCase] | None = None,
    timeout_s: float | None = None,
    limits: SandboxLimits | None = None,
) -> ExecResult:
    """Run untrusted Python ``code`` in the sandbox and judge it.

    - ``tests`` (HumanEval ``check(candidate)`` source with ``entry_point``, or MBPP assert lines):
      ``passed`` comes from the harness's private verdict channel.
    - ``stdin_cases`` (APPS): each case is a separate run fed ``input``; its stdout must match
      ``expected_output`` after whitespace normalisation.
    - neither: a plain run; ``passed`` is None and ``status`` tells how it ended.

    ``timeout_s`` overrides ``limits.wall_timeout_s`` (per run; for stdin cases, per case).
    When no isolation here keeps the host safe and no weaker mode was opted into, nothing runs: the
    result has status ``refused``, ``passed`` None and the fix in ``reason`` (see ``operators.sandbox``).
    Raises ``ValueError`` when both ``tests`` and ``stdin_cases`` are given, or a sandbox environment
    variable is malformed.
    """
    if tests is not None and stdin_cases is not None:
        raise ValueError("give either tests or stdin_cases, not both")
    if stdin_cases is not None and not stdin_cases:
        raise ValueError("stdin_cases is empty: give at least one case or None")
    limits = limits or SandboxLimits()
    if timeout_s is not None:
        limits = limits.model_copy(update={"wall_timeout_s": timeout_s})
    try:
        plan = await select_isolation()
    except SandboxRefusedError as exc:
        return ExecResult(status="refused", passed=None, isolation=refused_report(), reason=str(exc))
    if stdin_cases is not None:
        return _cases_result(plan, await _run_cases(plan, code, stdin_cases, limits))
    with_tests = tests is not None or entry_point is not None
    try:
        raw = await _run_once(
            plan,
            mode="tests" if with_tests else "program",
            code=code,
            tests=tests,
            entry_point=entry_point,
            stdin=None,
            limits=limits,
        )
    except OSError as exc:
        log.error("sandbox_start_failed", error=str(exc))
        return ExecResult(status="sandbox_error", passed=None, isolation=plan.report, reason=str(exc))
    if with_tests:
        status, passed, reason = _tests_outcome(raw, limits)
        passed_field: bool | None = passed
    else:
        status, reason = _program_outcome(raw, limits)
        passed_field = None
    return ExecResult(
        status=status,
        passed=passed_field,
        stdout=_text(raw.stdout),
        stderr=_text(raw.stderr),
        stdout_truncated=raw.stdout_truncated,
        stderr_truncated=raw.stderr_truncated,
        exit_code=raw.exit_code,
        duration_s=raw.duration_s,
        isolation=plan.report,
        reason=reason,
    )
