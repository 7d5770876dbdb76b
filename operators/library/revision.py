"""Revise: rewrite the current solution using the last checker feedback (role SOLUTION)."""

from __future__ import annotations

from operators.base import Operator, OperatorInput, OperatorOutput, OperatorRuntime
from operators.library._dialogue import Failure, ask, ask_fields
from operators.library.solving import code_reply_format
from operators.parsing import ReplyField, ReplySchema, extract_code
from operators.prompting import (
    compose_prompt,
    context_sections,
    current_solution,
    describe_reply_format,
    missing_solution_error,
)
from operators.specs import BUILTIN_SPECS

__all__ = ["Revise", "ReviseOutput"]


class ReviseOutput(OperatorOutput):
    changes: str | None = None  # the model's summary of what it changed (text tasks)


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


class Revise(Operator):
    spec = BUILTIN_SPECS["Revise"]
    output_model = ReviseOutput

    async def run(self, inputs: OperatorInput, runtime: OperatorRuntime) -> ReviseOutput:
        if not current_solution(inputs):
            return ReviseOutput(
                ok=False,
                error=missing_solution_error("Revise", "revise"),
            )
        job = _JOB_WITH_FEEDBACK if inputs.feedback else _JOB_WITHOUT_FEEDBACK
        sections = context_sections(inputs, solution=True, feedback=True, guidance=True)
        if inputs.task_type == "code":
            reply_format = code_reply_format(inputs.entry_point)
            prompt = compose_prompt(
                job=job, sections=sections, instruction=inputs.instruction, reply_format=reply_format
            )

            async def accept(reply: str) -> ReviseOutput:
                code = extract_code(reply, entry_point=inputs.entry_point, require_entry_point=True)
                return ReviseOutput(text=code, code=code)

            result = await ask(runtime, self.spec, prompt, accept, reply_format=reply_format)
            return result.as_output(ReviseOutput) if isinstance(result, Failure) else result
        prompt = compose_prompt(
            job=job,
            sections=sections,
            instruction=inputs.instruction,
            reply_format=describe_reply_format(_REVISE_SCHEMA),
        )
        reply = await ask_fields(runtime, self.spec, prompt, _REVISE_SCHEMA)
        if isinstance(reply, Failure):
            return reply.as_output(ReviseOutput)
        return ReviseOutput(text=reply["solution"], changes=reply["changes"])
