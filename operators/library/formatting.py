"""Format: reduce the current solution to its short final answer span (role SOLUTION).

Format only extracts; it must never change the answer. Two guards make that hold even for a weak executor
(measured: Qwen2.5-Coder-0.5B turned bare answers such as "16" into "3.5" when asked to format them):
a solution that already is a bare answer passes through without a call, and for math the extracted answer
may only use numbers that the solution states.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._dialogue import ask_for_fields, ask_for_program
from operators.parsing import ReplyError, ReplyField, ReplyParseError, ReplySchema, extract_code
from operators.prompting import context_sections, current_solution, missing_solution_error
from operators.specs import BUILTIN_SPECS

__all__ = ["Format", "FormatOutput"]


class FormatOutput(OperatorOutput):
    """The short answer span is `text`; Format has no extras."""


_FORMAT_SCHEMA = ReplySchema(
    fields=(ReplyField("answer", hint="only the final answer: a number, expression, name, option or short phrase"),),
    bare_field="answer",
)
_FORMAT_JOB = (
    "Extract the final answer from the current solution to the problem below. Write only the answer "
    "itself, exactly as the solution states it, with no explanation and no extra words; do not solve the "
    "problem again."
)

_BARE_ANSWER_MAX_CHARS = 40
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _is_bare_answer(text: str) -> bool:
    """One short token such as `16`, `-11.5`, `\\frac{1}{2}` or `Paris`: nothing left to extract."""
    stripped = text.strip()
    return bool(stripped) and len(stripped) <= _BARE_ANSWER_MAX_CHARS and not any(c.isspace() for c in stripped)


def _numbers(text: str) -> set[float]:
    return {float(match) for match in _NUMBER.findall(text.replace(",", ""))}


def _grounded_in(solution: str) -> Callable[[dict[str, Any]], None]:
    """A reply check: every number in the extracted math answer must appear in the solution."""
    stated = _numbers(solution)

    def check(fields: dict[str, Any]) -> None:
        invented = sorted(_numbers(fields["answer"]) - stated)
        if invented:
            shown = ", ".join(f"{number:g}" for number in invented)
            raise ReplyError(f"the answer uses {shown}, which the current solution never states; copy its final answer")

    return check


_FORMAT_CODE_JOB = (
    "Return the final program from the current solution to the task below, cleaned up as the instruction "
    "asks. Do not change what the program computes."
)


class Format(Operator):
    """For code tasks the short answer *is* the program, extracted without an executor call unless the
    node has an instruction."""

    spec = BUILTIN_SPECS["Format"]
    output_model = FormatOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> FormatOutput:
        solution = current_solution(inputs)
        if not solution:
            return FormatOutput(ok=False, error=missing_solution_error("Format", "format"))
        if inputs.task_type == "code":
            return await self._format_code(inputs, runtime, solution)
        if _is_bare_answer(solution):
            return FormatOutput(text=solution.strip())
        return await ask_for_fields(
            runtime,
            self.spec,
            FormatOutput,
            job=_FORMAT_JOB,
            sections=context_sections(inputs, solution=True),
            instruction=inputs.instruction,
            schema=_FORMAT_SCHEMA,
            build=lambda reply: FormatOutput(text=reply["answer"]),
            check=_grounded_in(solution) if inputs.task_type == "math" else None,
        )

    async def _format_code(self, inputs: OperatorInput, runtime: OperatorRuntime, solution: str) -> FormatOutput:
        """Without an instruction the program is extracted locally; with one, the executor applies it."""
        if not (inputs.instruction and inputs.instruction.strip()):
            try:
                code = extract_code(solution, entry_point=inputs.entry_point)
            except ReplyParseError as exc:
                return FormatOutput(ok=False, error=f"Format: the solution holds no usable program: {exc}")
            return FormatOutput(text=code, code=code)
        return await ask_for_program(
            runtime,
            self.spec,
            FormatOutput,
            job=_FORMAT_CODE_JOB,
            sections=context_sections(inputs, solution=True),
            instruction=inputs.instruction,
            task=inputs,
        )
