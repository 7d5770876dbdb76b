"""Solving operators: each produces a new candidate solution (role SOLUTION).

For code tasks a solver's solution *is* the program: `text` and `code` both hold it. For other tasks
`text` is the answer. Programmer on a math (or any non-code) task is program-of-thought: its program is run
and the value `solve()` returns (or, when it returns None, the last line it printed) is the answer text,
with the program kept in `code`; that text is what becomes the run's final answer and what the scorer and
the equivalence votes (`operators.answers`) read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.direct_call import asks_directly, with_task_imports
from operators.library._dialogue import (
    Failure,
    accept_program,
    ask,
    ask_directly,
    ask_for_fields,
    ask_for_output,
    ask_for_program,
    code_reply_format,
    program_field,
)
from operators.library._execution import ExecSummary, execute
from operators.parsing import ReplyError, ReplyField, ReplyParseError, ReplySchema, extract_code, strip_think
from operators.prompting import compose_prompt, context_sections
from operators.specs import BUILTIN_SPECS

__all__ = [
    "AnswerGenerate",
    "AnswerOutput",
    "Custom",
    "CustomOutput",
    "Programmer",
    "ProgrammerOutput",
    "code_reply_format",
]


class CustomOutput(OperatorOutput):
    """Custom has no extras: the reply (or, for code tasks, the program) is the solution."""


_CUSTOM_DEFAULT_JOB = "Solve the problem below. Show the key reasoning briefly and state the final answer clearly."
_TEXT_REPLY_FORMAT = "Answer in plain text and end with the final answer on its own line."


class Custom(Operator):
    """First in a workflow, Custom asks the direct call with the node's instruction added (code: only without an
    instruction); otherwise the instruction is the job (without one, Custom solves in words from what came before)."""

    spec = BUILTIN_SPECS["Custom"]
    output_model = CustomOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> CustomOutput:
        if asks_directly(inputs):
            return await self._run_directly(inputs, runtime)
        instruction = (inputs.instruction or "").strip()
        job = (
            f"Carry out the following instruction for the problem below.\n{instruction}"
            if instruction
            else _CUSTOM_DEFAULT_JOB
        )
        sections = context_sections(inputs, solution=True, feedback=True, guidance=True, candidates=True)
        if inputs.task_type == "code":
            return await ask_for_program(
                runtime,
                self.spec,
                CustomOutput,
                job=job,
                sections=sections,
                instruction=None,
                task=inputs,
            )
        return await ask_for_output(
            runtime,
            self.spec,
            CustomOutput,
            job=job,
            sections=sections,
            instruction=None,  # the instruction is the job
            reply_format=_TEXT_REPLY_FORMAT,
            accept=_accept_text,
        )

    async def _run_directly(self, inputs: OperatorInput, runtime: OperatorRuntime) -> CustomOutput:
        """Nothing from earlier steps: the direct call (the node's instruction added), so without an instruction the
        node's greedy draw is the direct answer."""
        if inputs.task_type == "code":
            accept = accept_program(CustomOutput, inputs)
            reply_format = code_reply_format(inputs.entry_point)
            result = await ask_directly(runtime, self.spec, inputs, accept, reply_format=reply_format)
        else:
            result = await ask_directly(runtime, self.spec, inputs, _accept_text, reply_format=None)
        return result.as_output(CustomOutput) if isinstance(result, Failure) else result


async def _accept_text(reply: str) -> CustomOutput:
    text = strip_think(reply)
    if not text:
        raise ReplyParseError("the reply was empty")
    return CustomOutput(text=text)


class AnswerOutput(OperatorOutput):
    thought: str | None = None


_ANSWER_SCHEMA = ReplySchema(
    fields=(
        ReplyField("thought", required=False, hint="your step-by-step reasoning"),
        ReplyField("answer", hint="only the final answer, with no explanation"),
    )
)
_ANSWER_CODE_SCHEMA = ReplySchema(
    fields=(
        ReplyField("thought", required=False, hint="your step-by-step reasoning"),
        ReplyField("answer", hint="the complete Python program in a ```python code block"),
    ),
    bare_field="answer",
)
_ANSWER_JOB = (
    "Solve the problem below. Think it through step by step first, then give the final answer "
    "separately from the reasoning."
)


class AnswerGenerate(Operator):
    """Reasoning and answer in separate fields, so the answer is clean without a Format step."""

    spec = BUILTIN_SPECS["AnswerGenerate"]
    output_model = AnswerOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> AnswerOutput:
        is_code = inputs.task_type == "code"

        def build(reply: dict[str, Any]) -> AnswerOutput:
            answer: str = reply["answer"]
            return AnswerOutput(text=answer, code=answer if is_code else None, thought=reply["thought"])

        return await ask_for_fields(
            runtime,
            self.spec,
            AnswerOutput,
            job=_ANSWER_JOB,
            sections=context_sections(inputs, guidance=True, feedback=True),
            instruction=inputs.instruction,
            schema=_ANSWER_CODE_SCHEMA if is_code else _ANSWER_SCHEMA,
            build=build,
            check=program_field("answer", inputs.entry_point) if is_code else None,
        )


class ProgrammerOutput(OperatorOutput):
    execution: ExecSummary | None = None  # the last sandbox run
    attempts: int = 0  # programs written (each one a separate executor reply)


_RESULT_MARKER = "<<flowsteer: value returned by solve()>>"
# Appended to math programs: prints solve()'s value after a marker line, so prints made by the program
# itself cannot be mistaken for the answer. Integral floats print as integers ("42", not "42.0") and
# other floats are rounded to 12 decimals to drop binary noise ("0.3", not "0.30000000000000004").
_SOLVE_RUNNER = f"""

# --- appended by the Programmer operator ---
_flowsteer_value = solve()
if isinstance(_flowsteer_value, float):
    _flowsteer_value = int(_flowsteer_value) if _flowsteer_value.is_integer() else round(_flowsteer_value, 12)
print()
print({_RESULT_MARKER!r})
print(_flowsteer_value)
"""

_CALC_JOB = (
    "Write a Python program that computes the answer to the problem below. Define a function solve() "
    "that takes no arguments and returns the final answer (a number, or a short string when the answer "
    "is not a number). Do not read input and do not call solve() yourself: the program is run and the "
    "value returned by solve() is taken as the answer."
)


def _code_job(entry_point: str | None) -> str:
    target = f"the function `{entry_point}`" if entry_point else "the requested code"
    return (
        f"Write a correct, self-contained Python implementation of {target} for the task below, with the "
        "exact signature the task asks for. The code is loaded and checked in a sandbox."
    )


@dataclass
class _ProgramAttempts:
    count: int = 0
    last: ExecSummary | None = None


class Programmer(Operator):
    """Writes Python and runs it in the sandbox; a failing program is sent back with its error."""

    spec = BUILTIN_SPECS["Programmer"]
    output_model = ProgrammerOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> ProgrammerOutput:
        is_code = inputs.task_type == "code"
        entry_point = inputs.entry_point if is_code else "solve"
        reply_format = code_reply_format(entry_point)
        attempts = _ProgramAttempts()

        async def accept(reply: str) -> ProgrammerOutput:
            attempts.count += 1
            code = extract_code(reply, entry_point=entry_point, require_entry_point=entry_point is not None)
            if is_code:
                code = with_task_imports(code, inputs.problem)
                summary = await execute(code, entry_point=entry_point, timeout_s=runtime.sandbox_timeout_s)
                attempts.last = summary
                if not summary.succeeded:
                    raise ReplyError(f"loading the code failed.\n{summary.report()}")
                return ProgrammerOutput(text=code, code=code, execution=summary, attempts=attempts.count)
            summary = await execute(code + _SOLVE_RUNNER, timeout_s=runtime.sandbox_timeout_s)
            attempts.last = summary
            if not summary.succeeded:
                raise ReplyError(f"running the program failed.\n{summary.report()}")
            value, how = _returned_value(summary.stdout)
            return ProgrammerOutput(
                text=value,
                code=code,
                execution=summary,
                attempts=attempts.count,
                note=f"program-of-thought: {how} value {_preview(value)}",
            )

        if is_code and asks_directly(inputs):  # the direct call; program-of-thought has no direct form
            result = await ask_directly(runtime, self.spec, inputs, accept, reply_format=reply_format)
        else:
            prompt = compose_prompt(
                job=_code_job(entry_point) if is_code else _CALC_JOB,
                sections=context_sections(inputs, solution=True, feedback=True, guidance=True),
                instruction=inputs.instruction,
                reply_format=reply_format,
            )
            result = await ask(runtime, self.spec, prompt, accept, reply_format=reply_format)
        if isinstance(result, Failure):
            return ProgrammerOutput(
                ok=False,
                error=result.error,
                execution=attempts.last,
                attempts=attempts.count,
                unavailable=result.from_backend,
            )
        return result


_NOTE_VALUE_CHARS = 80


def _preview(value: str) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= _NOTE_VALUE_CHARS else flat[: _NOTE_VALUE_CHARS - 3] + "..."


def _returned_value(stdout: str) -> tuple[str, str]:
    """The program's answer and how it was found: "executed" (solve()'s return value) or "printed" (solve()
    returned None, so the last line the program printed stands in for it)."""
    if _RESULT_MARKER not in stdout:
        raise ReplyError("the program finished without solve() returning (was solve() defined and called?)")
    printed, returned = stdout.rsplit(_RESULT_MARKER, 1)
    value = returned.strip()
    if value not in ("", "None"):
        return value, "executed"
    printed_lines = [line.strip() for line in printed.splitlines() if line.strip()]
    if printed_lines:
        return printed_lines[-1], "printed"
    raise ReplyError("solve() returned None; it must return the final answer")
