"""One exchange with the executor LLM, with a bounded re-ask when the reply cannot be used.

Why: small executors often get the format (or, for Programmer, the program) wrong on the first try and
right on the second when told exactly what was wrong. Every operator therefore goes through `ask`: it
sends the prompt, hands the reply to the operator's `accept` function, and on a `ReplyError` quotes that
error back to the model, at most `runtime.max_reasks` times. Backend failures and exhausted re-asks come
back as a `Failure` value, never as an exception or as an error string posing as an answer.

Most operators make one such exchange the same way: compose the prompt from a job, context sections and the
node's instruction, ask, and turn a `Failure` into the operator's error output. `ask_for_fields` (a structured
reply) and `ask_for_program` (a program) do that once, so an operator's `run` states only what differs: its
job, the context it shows, the reply it wants and how the reply becomes its output. A solver with nothing but
the task (`direct_call.fresh_start`) asks through `ask_directly` instead: the direct baseline's own call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from operators.backends.base import GREEDY, BackendError, ChatMessage, ChatRequest
from operators.base import OperatorInput, OperatorOutput, OperatorRuntime, OperatorSpec
from operators.direct_call import direct_prompt, with_task_imports
from operators.parsing import ReplyError, ReplySchema, extract_code, parse_reply
from operators.prompting import (
    SYSTEM_PROMPT,
    Section,
    compose_prompt,
    describe_reply_format,
    reask_prompt,
    to_messages,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")
OutputT = TypeVar("OutputT", bound=OperatorOutput)
FieldCheck = Callable[[dict[str, Any]], None]  # operator-specific validation of parsed fields (raises ReplyError)


@dataclass(frozen=True)
class Failure:
    """Why an operator could not produce a result (becomes `ok=False, error=...`)."""

    error: str
    from_backend: bool = False  # the executor call itself failed (as opposed to unusable replies)

    def as_output(self, output_cls: type[OutputT]) -> OutputT:
        return output_cls(ok=False, error=self.error, unavailable=self.from_backend)


async def ask(
    runtime: OperatorRuntime,
    spec: OperatorSpec,
    prompt: str,
    accept: Callable[[str], Awaitable[T]],
    *,
    reply_format: str | None,
    system: str | None = SYSTEM_PROMPT,
) -> T | Failure:
    """Send `prompt`; return `accept(reply)`, re-asking with the quoted `ReplyError` on rejection.
    `system=None` sends no system message of ours (the chat template's default applies)."""
    operator = spec.name
    messages = to_messages(prompt, system)
    attempts = 1 + max(0, runtime.max_reasks)
    node_id = runtime.options.get("node_id")
    last_error = ""
    for attempt in range(1, attempts + 1):
        request = ChatRequest(
            messages=list(messages),
            operator=operator,
            node_id=node_id if isinstance(node_id, str) else None,
            max_tokens=spec.reply_tokens,
            draw=runtime.draw or GREEDY,  # every call states its sampling; re-asks keep the call's seed
        )
        try:
            response = await runtime.llm.complete(request)
        except BackendError as exc:
            log.warning("operator_backend_error", operator=operator, attempt=attempt, error=str(exc))
            return Failure(f"{operator}: the executor call failed: {exc}", from_backend=True)
        try:
            return await accept(response.text)
        except ReplyError as exc:
            last_error = str(exc)
            log.info("operator_reply_rejected", operator=operator, attempt=attempt, error=last_error)
            messages.append(ChatMessage(role="assistant", content=response.text))
            messages.append(ChatMessage(role="user", content=reask_prompt(last_error, reply_format)))
    return Failure(f"{operator}: no usable reply after {attempts} attempt(s); last problem: {last_error}")


async def ask_fields(
    runtime: OperatorRuntime,
    spec: OperatorSpec,
    prompt: str,
    schema: ReplySchema,
    *,
    check: FieldCheck | None = None,
) -> dict[str, Any] | Failure:
    """`ask` for a structured reply; `check` may add operator-specific validation (raising ReplyError)."""

    async def accept(text: str) -> dict[str, Any]:
        fields = parse_reply(text, schema)
        if check is not None:
            check(fields)
        return fields

    return await ask(runtime, spec, prompt, accept, reply_format=describe_reply_format(schema))


async def ask_directly(
    runtime: OperatorRuntime,
    spec: OperatorSpec,
    inputs: OperatorInput,
    accept: Callable[[str], Awaitable[T]],
    *,
    reply_format: str | None,
) -> T | Failure:
    """A fresh-start solver's call: the task put exactly as the `direct` baseline puts it (`direct_call`), the
    node's prompt added, with no system message and no reply cap of ours, so without a prompt its greedy draw
    is the direct answer."""
    prompt = direct_prompt(inputs.problem, inputs.task_type, inputs.public_tests, inputs.instruction)
    uncapped = spec.model_copy(update={"reply_tokens": None})
    return await ask(runtime, uncapped, prompt, accept, reply_format=reply_format, system=None)


def code_reply_format(entry_point: str | None) -> str:
    """Reply format for every operator whose answer is a program."""
    target = f" defining `{entry_point}`" if entry_point else ""
    return (
        f"Give the complete Python program{target} in one ```python code block. Include every import it "
        "needs; no tests, examples or input() calls."
    )


def program_field(name: str, entry_point: str | None) -> FieldCheck:
    """A field check that replaces field `name` by the program it holds (which must define `entry_point`)."""

    def check(fields: dict[str, Any]) -> None:
        fields[name] = extract_code(str(fields[name]), entry_point=entry_point, require_entry_point=True)

    return check


async def ask_for_output(
    runtime: OperatorRuntime,
    spec: OperatorSpec,
    output_cls: type[OutputT],
    *,
    job: str,
    sections: Sequence[Section],
    instruction: str | None,
    reply_format: str,
    accept: Callable[[str], Awaitable[OutputT]],
) -> OutputT:
    """Compose the prompt, `ask`, and return the accepted output or the failure as `output_cls`."""
    prompt = compose_prompt(job=job, sections=sections, instruction=instruction, reply_format=reply_format)
    result = await ask(runtime, spec, prompt, accept, reply_format=reply_format)
    return result.as_output(output_cls) if isinstance(result, Failure) else result


async def ask_for_fields(
    runtime: OperatorRuntime,
    spec: OperatorSpec,
    output_cls: type[OutputT],
    *,
    job: str,
    sections: Sequence[Section],
    instruction: str | None,
    schema: ReplySchema,
    build: Callable[[dict[str, Any]], OutputT],
    check: FieldCheck | None = None,
) -> OutputT:
    """The structured-reply exchange: `build` turns the parsed (and checked) fields into the output."""
    prompt = compose_prompt(
        job=job, sections=sections, instruction=instruction, reply_format=describe_reply_format(schema)
    )
    fields = await ask_fields(runtime, spec, prompt, schema, check=check)
    return fields.as_output(output_cls) if isinstance(fields, Failure) else build(fields)


async def ask_for_program(
    runtime: OperatorRuntime,
    spec: OperatorSpec,
    output_cls: type[OutputT],
    *,
    job: str,
    sections: Sequence[Section],
    instruction: str | None,
    task: OperatorInput,
) -> OutputT:
    """The program exchange (`accept_program`)."""
    return await ask_for_output(
        runtime,
        spec,
        output_cls,
        job=job,
        sections=sections,
        instruction=instruction,
        reply_format=code_reply_format(task.entry_point),
        accept=accept_program(output_cls, task),
    )


def accept_program(output_cls: type[OutputT], task: OperatorInput) -> Callable[[str], Awaitable[OutputT]]:
    """Accepts a reply holding a program that defines the task's entry point; the program is `text` and `code`,
    with the imports the task's stub declares added when the program leaves them out."""

    async def accept(reply: str) -> OutputT:
        code = extract_code(reply, entry_point=task.entry_point, require_entry_point=True)
        code = with_task_imports(code, task.problem)
        return output_cls(text=code, code=code)

    return accept
