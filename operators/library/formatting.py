"""Format: reduce the current solution to its short final answer span (role SOLUTION)."""

from __future__ import annotations

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._dialogue import Failure, ask, ask_fields
from operators.library.solving import code_reply_format
from operators.parsing import ReplyField, ReplyParseError, ReplySchema, extract_code
from operators.prompting import compose_prompt, context_sections, current_solution, describe_reply_format
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
            return FormatOutput(ok=False, error="Format: there is no solution to format; put a solver before it")
        if inputs.task_type == "code":
            return await self._format_code(inputs, runtime, solution)
        prompt = compose_prompt(
            job=_FORMAT_JOB,
            sections=context_sections(inputs, solution=True),
            instruction=inputs.instruction,
            reply_format=describe_reply_format(_FORMAT_SCHEMA),
        )
        reply = await ask_fields(runtime, self.spec, prompt, _FORMAT_SCHEMA)
        if isinstance(reply, Failure):
            return reply.as_output(FormatOutput)
        return FormatOutput(text=reply["answer"])

    async def _format_code(self, inputs: OperatorInput, runtime: OperatorRuntime, solution: str) -> FormatOutput:
        """Without an instruction the program is extracted locally; with one, the executor applies it."""
        if not (inputs.instruction and inputs.instruction.strip()):
            try:
                code = extract_code(solution, entry_point=inputs.entry_point)
            except ReplyParseError as exc:
                return FormatOutput(ok=False, error=f"Format: the solution holds no usable program: {exc}")
            return FormatOutput(text=code, code=code)
        reply_format = code_reply_format(inputs.entry_point)
        prompt = compose_prompt(
            job=_FORMAT_CODE_JOB,
            sections=context_sections(inputs, solution=True),
            instruction=inputs.instruction,
            reply_format=reply_format,
        )

        async def accept(reply: str) -> FormatOutput:
            code = extract_code(reply, entry_point=inputs.entry_point, require_entry_point=True)
            return FormatOutput(text=code, code=code)

        result = await ask(runtime, self.spec, prompt, accept, reply_format=reply_format)
        return result.as_output(FormatOutput) if isinstance(result, Failure) else result
