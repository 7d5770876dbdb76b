"""Prompt assembly shared by the operators: context sections, the custom instruction and the reply format.

Why one place: every operator must present the workflow state the same way, and every operator must honour
the node's custom instruction the same way. The rule is: the operator's own *job* says what the step does,
the custom instruction (when a node has one) refines how to do it and is shown as its own block after the
context, and the reply format comes last and always wins, because the operator has to parse the reply.
For `Custom` the instruction *is* the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from operators.backends.base import ChatMessage
from operators.base import OperatorInput
from operators.parsing import ReplySchema

__all__ = [
    "EXAMPLE_TESTS",
    "SYSTEM_PROMPT",
    "Section",
    "compose_prompt",
    "context_sections",
    "current_solution",
    "describe_reply_format",
    "numbered",
    "reask_prompt",
    "to_messages",
]

SYSTEM_PROMPT = (
    "You carry out one step of a larger problem-solving workflow. Do exactly the step described, reason "
    "carefully, and answer in the reply format requested at the end of the message."
)

EXAMPLE_TESTS = "Example tests"  # the section title of a code task's visible tests
MAX_SECTION_CHARS = 12_000  # keeps one runaway candidate from crowding out the rest of the prompt


@dataclass(frozen=True)
class Section:
    """A titled block of context in a prompt."""

    title: str
    body: str


def _clip(text: str, limit: int = MAX_SECTION_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters omitted ...]\n{text[-half:]}"


def missing_solution_error(operator: str, action: str, thing: str = "solution") -> str:
    """The error of an operator that found nothing to work on; the solver before it may exist but have failed."""
    return (
        f"{operator}: there is no {thing} to {action}; put a solver before it, "
        "or see why the one before it produced none"
    )


def no_candidates_error(operator: str) -> str:
    """The error of a selector that got no candidates: name both ways to make some, and the likely cause."""
    return (
        f"{operator}: no candidates; put a parallel stage or a sampled node (samples > 1) before it, "
        "or see why the one before it produced none"
    )


def current_solution(inputs: OperatorInput) -> str | None:
    """The solution a checker or reviser should look at: the program for code tasks, else the answer."""
    if inputs.task_type == "code" and inputs.code:
        return inputs.code
    return inputs.solution or inputs.code


def numbered(items: Sequence[str], label: str) -> str:
    """Items as separate, numbered blocks ("Candidate 1", ...), so a choice can be given as a number."""
    return "\n\n".join(f"{label} {i}:\n{_clip(item)}" for i, item in enumerate(items, start=1))


def context_sections(
    inputs: OperatorInput,
    *,
    solution: bool = False,
    feedback: bool = False,
    guidance: bool = False,
    candidates: bool = False,
) -> list[Section]:
    """The problem plus the requested parts of the workflow state that are present.

    Code tasks always show their visible example tests, as the `direct` baseline's prompt does: they pin down
    names, argument order and the expected output form, and a workflow step must not know less than a single
    direct call does (MBPP programs written without them returned True/False where the tests
    expected "Valid"/"Invalid").
    """
    sections = [Section("Problem", inputs.problem)]
    if inputs.task_type == "code" and inputs.entry_point:
        sections.append(Section("Required function", f"`{inputs.entry_point}`"))
    if inputs.task_type == "code" and inputs.public_tests and inputs.public_tests.strip():
        sections.append(Section(EXAMPLE_TESTS, inputs.public_tests))
    if guidance and inputs.guidance:
        sections.append(Section("Guidance from earlier steps", "\n\n".join(inputs.guidance)))
    if candidates and inputs.candidates:
        sections.append(Section("Candidate solutions", numbered(inputs.candidates, "Candidate")))
    current = current_solution(inputs) if solution else None
    if current:
        sections.append(Section("Current solution", current))
    if feedback and inputs.feedback:
        sections.append(Section("Feedback from the last check", inputs.feedback))
    return sections


def describe_reply_format(schema: ReplySchema) -> str:
    """Format instructions listing every field, marking the optional ones."""
    if schema.style == "json":
        lines = ["Reply with a single JSON object with these keys:"]
        for f in schema.fields:
            optional = "" if f.required else " (optional)"
            lines.append(f'- "{f.name}"{optional}: {f.hint or f.kind}')
        return "\n".join(lines)
    lines = ["Reply with these tags, each on its own lines:"]
    for f in schema.fields:
        optional = "" if f.required else "   (optional)"
        lines.append(f"<{f.name}>{f.hint or f.kind}</{f.name}>{optional}")
    return "\n".join(lines)


def compose_prompt(
    *,
    job: str,
    sections: Sequence[Section],
    instruction: str | None = None,
    reply_format: str | None = None,
) -> str:
    """One user message: the job, the context, the node's custom instruction, then the reply format."""
    parts = [job.strip()]
    parts.extend(f"## {s.title}\n{_clip(s.body.strip())}" for s in sections if s.body.strip())
    if instruction and instruction.strip():
        parts.append(
            "## Instruction for this step\n"
            f"{instruction.strip()}\n"
            "(Follow this instruction; only the reply format below takes precedence over it.)"
        )
    if reply_format:
        parts.append(f"## Reply format\n{reply_format.strip()}")
    return "\n\n".join(parts)


def to_messages(user: str, system: str | None = SYSTEM_PROMPT) -> list[ChatMessage]:
    """The first turn; `system=None` sends no system message (the chat template's default applies)."""
    turn = ChatMessage(role="user", content=user)
    return [ChatMessage(role="system", content=system), turn] if system is not None else [turn]


def reask_prompt(error: str, reply_format: str | None) -> str:
    """The follow-up message after an unusable reply: quote the problem, restate the format."""
    text = f"Your previous reply could not be used: {error}\nPlease answer again."
    if reply_format:
        text += f"\n\n{reply_format.strip()}"
    return text
