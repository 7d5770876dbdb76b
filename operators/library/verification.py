"""Checkers: judge the current solution (verdict + feedback) and carry it forward in `text`.

A checker's verdict is True when the check passed, False when it failed, and None when nothing could be
checked (for example a code task without public tests): an unchecked solution is never reported as passed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime, PublicTestScore
from operators.library._answers import answers_agree
from operators.library._dialogue import Failure, ask, ask_for_fields, code_reply_format
from operators.library._execution import ExecSummary, execute, split_public_tests
from operators.library._options import choice_option, float_option, int_option
from operators.parsing import ReplyError, ReplyField, ReplySchema, extract_code
from operators.prompting import Section, compose_prompt, context_sections, current_solution, missing_solution_error
from operators.specs import BUILTIN_SPECS

__all__ = ["Review", "ReviewOutput", "Test", "TestOutput", "Verify", "VerifyOutput"]


class TestOutput(OperatorOutput):
    __test__: ClassVar[bool] = False  # not a pytest test class despite the name

    execution: ExecSummary | None = None  # the run that decided the verdict
    attempts: int = 0  # repair attempts made (executor replies)
    repaired: bool = False  # True when `text`/`code` hold a repaired program


_REPAIR_JOB = (
    "The program below fails some of the task's public tests. Find the cause and fix the program. Keep "
    "the required function name and signature; do not special-case the tests."
)


class Test(Operator):
    """Runs the current code against the public tests; on failure asks for repairs, re-running each one.

    Only `public_tests` are used (hidden grading tests never reach operators). The verdict is the result
    of the final run; a repair that does not pass is discarded and the input code is carried forward.
    """

    __test__: ClassVar[bool] = False

    spec = BUILTIN_SPECS["Test"]
    output_model = TestOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> TestOutput:
        code = inputs.code or (inputs.solution if inputs.task_type == "code" else None)
        if not code or not code.strip():
            return TestOutput(ok=False, error="Test: there is no code to test; put a code-writing step before it")
        carried = inputs.solution if inputs.solution is not None else code
        tests = inputs.public_tests
        if not tests or not tests.strip():
            return TestOutput(
                text=carried,
                code=code,
                verdict=None,
                feedback="No public tests are available for this task, so nothing was run; the code is unchecked.",
            )
        max_repairs = int_option(runtime, "test_max_repairs", 2, low=0, high=10)
        if isinstance(max_repairs, Failure):
            return max_repairs.as_output(TestOutput)
        first = await execute(code, tests=tests, entry_point=inputs.entry_point, timeout_s=runtime.sandbox_timeout_s)
        passing, failing = _scores(tests)
        if first.succeeded:
            return TestOutput(
                text=carried,
                code=code,
                verdict=True,
                feedback="All public tests passed.",
                execution=first,
                public_tests=passing,
            )
        failure_report = f"The code fails the public tests.\n{first.report()}"
        if max_repairs == 0:
            return TestOutput(
                text=carried, code=code, verdict=False, feedback=failure_report, execution=first, public_tests=failing
            )
        return await self._repair(inputs, runtime, code, carried, tests, first, failure_report, max_repairs)

    async def _repair(
        self,
        inputs: OperatorInput,
        runtime: OperatorRuntime,
        code: str,
        carried: str,
        tests: str,
        first: ExecSummary,
        failure_report: str,
        max_repairs: int,
    ) -> TestOutput:
        reply_format = code_reply_format(inputs.entry_point)
        prompt = compose_prompt(
            job=_REPAIR_JOB,
            sections=[
                *context_sections(inputs),  # the example tests are among them
                Section("Program", code),
                Section("Test run", first.report()),
            ],
            instruction=inputs.instruction,
            reply_format=reply_format,
        )
        attempts = 0

        async def accept(reply: str) -> TestOutput:
            nonlocal attempts
            attempts += 1
            repaired = extract_code(reply, entry_point=inputs.entry_point, require_entry_point=True)
            run = await execute(
                repaired, tests=tests, entry_point=inputs.entry_point, timeout_s=runtime.sandbox_timeout_s
            )
            if not run.succeeded:
                raise ReplyError(f"the repaired program still fails the public tests.\n{run.report()}")
            return TestOutput(
                text=repaired,
                code=repaired,
                verdict=True,
                feedback=f"The original code failed the public tests; repair {attempts} passes all of them.",
                execution=run,
                attempts=attempts,
                repaired=True,
                public_tests=_scores(tests)[0],
            )

        # Each repair is one executor reply; the re-ask loop is the repair loop (it quotes the new failure).
        repair_runtime = replace(runtime, max_reasks=max_repairs - 1)
        result = await ask(repair_runtime, self.spec, prompt, accept, reply_format=reply_format)
        if isinstance(result, TestOutput):
            return result
        if result.from_backend:
            return TestOutput(ok=False, error=result.error, execution=first, attempts=attempts, unavailable=True)
        return TestOutput(
            text=carried,
            code=code,
            verdict=False,
            feedback=f"{failure_report}\n({attempts} repair attempt(s) did not produce a passing program.)",
            execution=first,
            attempts=attempts,
            public_tests=_scores(tests)[1],
        )


def _scores(tests: str) -> tuple[PublicTestScore, PublicTestScore]:
    """The scores of a program that passes all the public tests and of one that fails them. Test runs them at
    once, so a failure says only "not all" (unless there is a single test): counting would cost a run each."""
    total = len(split_public_tests(tests))
    return PublicTestScore(passed=total, total=total), PublicTestScore(passed=0 if total == 1 else None, total=total)


class ReviewOutput(OperatorOutput):
    """Review's result is its verdict and feedback (base fields); the solution passes through."""


_REVIEW_SCHEMA = ReplySchema(
    fields=(
        ReplyField("feedback", hint="the concrete problems found and how to fix them, or why it is right"),
        ReplyField("verdict", kind="bool", hint="one word: pass if the solution is correct and complete, fail if not"),
    )
)
_REVIEW_JOB = (
    "Review the current solution to the problem below critically. Check that it answers exactly what "
    "was asked, that each step and calculation is right, and that nothing is missing."
)


class Review(Operator):
    spec = BUILTIN_SPECS["Review"]
    output_model = ReviewOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> ReviewOutput:
        solution = current_solution(inputs)
        if not solution:
            return ReviewOutput(ok=False, error=missing_solution_error("Review", "review"))
        carried = inputs.solution if inputs.solution is not None else solution
        return await ask_for_fields(
            runtime,
            self.spec,
            ReviewOutput,
            job=_REVIEW_JOB,
            sections=context_sections(inputs, solution=True),
            instruction=inputs.instruction,
            schema=_REVIEW_SCHEMA,
            build=lambda reply: ReviewOutput(
                text=carried, code=inputs.code, verdict=reply["verdict"], feedback=reply["feedback"]
            ),
        )


AdoptPolicy = Literal["never", "high_confidence", "always"]
_ADOPT_POLICIES: tuple[AdoptPolicy, ...] = ("never", "high_confidence", "always")


class VerifyOutput(OperatorOutput):
    confidence: float | None = None  # 0..1 (high/medium/low map to 0.9/0.6/0.3)
    independent_answer: str | None = None
    adopted: bool = False  # True when `text` is the independent answer instead of the input answer


_VERIFY_SCHEMA = ReplySchema(
    fields=(
        ReplyField("working", required=False, hint="your own solution, worked out before comparing"),
        ReplyField("independent_answer", hint="the final answer you obtained yourself"),
        ReplyField("verdict", kind="bool", hint="one word: correct if the current answer is right, incorrect if not"),
        ReplyField("confidence", kind="confidence", hint="high, medium or low"),
        ReplyField("feedback", required=False, hint="the error in the current answer, if any"),
    )
)
_VERIFY_JOB = (
    "Check the current answer to the problem below. First solve the problem yourself, independently, "
    "without trusting the current answer; then compare your result with it and decide whether the "
    "current answer is correct."
)


class Verify(Operator):
    """Independent re-solve + comparison. The input answer is carried forward unless the adopt policy
    (`verify_adopt` option) allows replacing a failed answer by a differing independent answer."""

    spec = BUILTIN_SPECS["Verify"]
    output_model = VerifyOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> VerifyOutput:
        answer = current_solution(inputs)
        if not answer:
            return VerifyOutput(ok=False, error=missing_solution_error("Verify", "verify", thing="answer"))
        policy = choice_option(runtime, "verify_adopt", "never", _ADOPT_POLICIES)
        threshold = float_option(runtime, "verify_adopt_threshold", 0.8, low=0.0, high=1.0)
        if isinstance(policy, Failure):
            return policy.as_output(VerifyOutput)
        if isinstance(threshold, Failure):
            return threshold.as_output(VerifyOutput)
        return await ask_for_fields(
            runtime,
            self.spec,
            VerifyOutput,
            job=_VERIFY_JOB,
            sections=context_sections(inputs, solution=True),
            instruction=inputs.instruction,
            schema=_VERIFY_SCHEMA,
            build=lambda reply: _verify_result(inputs, answer, reply, policy, threshold),
        )


def _verify_result(
    inputs: OperatorInput, answer: str, reply: dict[str, Any], policy: str, threshold: float
) -> VerifyOutput:
    independent: str = reply["independent_answer"]
    verdict: bool = reply["verdict"]
    confidence: float = reply["confidence"]
    differs = not answers_agree(independent, answer)
    notes = [f"Independent answer: {independent} (confidence {confidence:.2f})."]
    if reply["feedback"]:
        notes.append(str(reply["feedback"]))
    if verdict and differs:
        notes.append("Note: the verifier accepted the answer although its own answer differs.")
    if not verdict and not differs:
        notes.append("Note: the verifier rejected the answer although its own answer agrees with it.")
    adopt = (
        (not verdict) and differs and (policy == "always" or (policy == "high_confidence" and confidence >= threshold))
    )
    carried = inputs.solution if inputs.solution is not None else answer
    if adopt:
        notes.append(f"The independent answer was adopted as the solution (policy {policy}).")
    header = "The answer checks out." if verdict else "The answer appears to be wrong."
    return VerifyOutput(
        text=independent if adopt else carried,
        code=None if adopt else inputs.code,
        verdict=verdict,
        feedback=" ".join([header, *notes]),
        confidence=confidence,
        independent_answer=independent,
        adopted=adopt,
    )
