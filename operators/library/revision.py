"""Revise: rewrite the current solution using the last checker feedback (role SOLUTION).

Do no harm: a revision replaces its input only when there is evidence that it is better, so a weak executor
cannot turn a right answer wrong by "fixing" it. The rule, by the evidence available:
- Code with public tests: both programs run against each public test in the sandbox; the revision is kept
  only when it passes strictly more of them. Otherwise the input program is carried forward. When the input
  already passes every public test, no revision can do better by that measure, so no LLM call is made.
- No public tests (math, qa, general, code without tests) and checker feedback present: the revision is
  kept. The feedback is the only evidence there is, and it says the input is wrong; the engine's
  conditional runs Revise only after a failed check, so keeping a rejected input would be no safer.
- No public tests and no feedback: nothing to revise against, so the input is carried forward without an
  LLM call (a blind re-examination by Qwen2.5-Coder-0.5B turned correct GSM8K answers wrong).
`kept_input` and `note` say which way it went and why; the note reaches the node's trace row.
"""

from __future__ import annotations

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._dialogue import ask_for_fields, ask_for_program
from operators.library._execution import TestTally, count_passing
from operators.parsing import ReplyField, ReplySchema
from operators.prompting import context_sections, current_solution, missing_solution_error
from operators.specs import BUILTIN_SPECS

__all__ = ["Revise", "ReviseOutput"]


class ReviseOutput(OperatorOutput):
    changes: str | None = None  # the model's summary of what it changed (text tasks)
    kept_input: bool = False  # True when the revision was rejected (or not attempted) and the input is carried


_REVISE_SCHEMA = ReplySchema(
    fields=(
        ReplyField("changes", required=False, hint="a short summary of what you changed and why"),
        ReplyField("solution", hint="the complete revised solution, ending with the final answer"),
    ),
    bare_field="solution",
)
_JOB_WITH_FEEDBACK = (
    "Revise the current solution to the problem below so that it addresses the feedback. Keep what is "
    "correct, fix what is wrong, and give the complete revised solution, not only the changes."
)
_JOB_WITHOUT_FEEDBACK = (
    "No checker feedback is available. Re-examine the current solution to the problem below, fix any "
    "error you find, and give the complete revised solution."
)


def _kept(inputs: OperatorInput, note: str, tally: TestTally | None = None) -> ReviseOutput:
    """The input carried forward unchanged (as a checker carries it: solution text and program), with its
    public-test score when it was run."""
    carried = inputs.solution if inputs.solution is not None else (inputs.code or "")
    score = tally.score() if tally is not None else None
    return ReviseOutput(text=carried, code=inputs.code, kept_input=True, note=note, public_tests=score)


class Revise(Operator):
    spec = BUILTIN_SPECS["Revise"]
    output_model = ReviseOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> ReviseOutput:
        solution = current_solution(inputs)
        if not solution:
            return ReviseOutput(ok=False, error=missing_solution_error("Revise", "revise"))
        tests = inputs.public_tests if inputs.public_tests and inputs.public_tests.strip() else None
        if inputs.task_type == "code" and tests is not None:
            return await self._revise_code_by_tests(inputs, runtime, solution, tests)
        if not inputs.feedback:
            return _kept(
                inputs,
                "revision not attempted: no checker feedback and no public tests, so nothing could show a "
                "revision is better; input kept (no LLM call)",
            )
        accepted_note = "revision accepted: it answers the checker's feedback (no public tests to compare by)"
        if inputs.task_type == "code":
            revised = await self._ask_code(inputs, runtime)
            if isinstance(revised, ReviseOutput):
                revised.note = accepted_note
            return revised
        return await self._ask_text(inputs, runtime, accepted_note)

    async def _revise_code_by_tests(
        self, inputs: OperatorInput, runtime: OperatorRuntime, program: str, tests: str
    ) -> ReviseOutput:
        timeout = runtime.sandbox_timeout_s
        before = await count_passing(program, tests=tests, entry_point=inputs.entry_point, timeout_s=timeout)
        if before.passed == before.total:
            return _kept(
                inputs,
                f"revision not attempted: the input already passes {before.describe()}, so no revision "
                "could be better by evidence; input kept (no LLM call)",
                before,
            )
        revised = await self._ask_code(inputs, runtime)
        if not revised.ok or revised.code is None:
            return revised
        after = await count_passing(revised.code, tests=tests, entry_point=inputs.entry_point, timeout_s=timeout)
        if after.passed > before.passed:
            revised.note = f"revision accepted: {_comparison(after, before)}"
            revised.public_tests = after.score()
            return revised
        return _kept(inputs, f"revision rejected: {_comparison(after, before)}; input kept", before)

    async def _ask_code(self, inputs: OperatorInput, runtime: OperatorRuntime) -> ReviseOutput:
        return await ask_for_program(
            runtime,
            self.spec,
            ReviseOutput,
            job=_JOB_WITH_FEEDBACK if inputs.feedback else _JOB_WITHOUT_FEEDBACK,
            sections=context_sections(inputs, solution=True, feedback=True, guidance=True),
            instruction=inputs.instruction,
            task=inputs,
        )

    async def _ask_text(self, inputs: OperatorInput, runtime: OperatorRuntime, note: str) -> ReviseOutput:
        return await ask_for_fields(
            runtime,
            self.spec,
            ReviseOutput,
            job=_JOB_WITH_FEEDBACK,
            sections=context_sections(inputs, solution=True, feedback=True, guidance=True),
            instruction=inputs.instruction,
            schema=_REVISE_SCHEMA,
            build=lambda reply: ReviseOutput(text=reply["solution"], changes=reply["changes"], note=note),
        )


def _comparison(revision: TestTally, original: TestTally) -> str:
    return f"the revision passes {revision.describe()}, the input passes {original.passed}/{original.total}"
