"""What a client may send: one bounded type per kind of tool argument, published in the tools' input schemas.

Why: a bound in the schema tells a client the limit before it sends anything, and the server refuses a value past
it before any tool code runs, so nothing unbounded reaches the canvas, the store or an error message. The text
caps are the canvas's default limits (`CanvasLimits`): a server may lower a limit (the canvas then refuses with
its own message) but never raise one past what its schema publishes (`limits_over_caps`).

The caps together keep a new workflow small: task, public tests and options at their limits hold under 256 KB of
server memory and of SQLite row (`benchmarks/hostile_load.py` measures it). The worst case in memory is text of
4-byte characters, which CPython stores at 4 bytes a character and, once validated or saved, again as UTF-8: 8
bytes a character, so task and public tests get 24,000 characters between them (about 195 KB); in the SQLite row
it is control characters, 6 bytes each as JSON escapes.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from flowsteer_mcp.canvas.options import CanvasLimits, FinishPolicy

_DEFAULTS = CanvasLimits()

MAX_TASK_CHARS = 16_000  # about 4,000 tokens: a statement with its context passages and examples
MAX_IMPORT_CHARS = 500_000  # a JSON export of a full workflow (48 operators with 4,000-character prompts)
MAX_NAME_CHARS = 64  # an operator name (the library's longest has 14 characters)
MAX_NAMES = 64  # operator names in one list (the library has 12; plug-ins add some)
MAX_PRESET_CHARS = 32  # the label of a custom finish policy
MAX_STAGE_OPERATORS = 16  # operators (and prompts) of one structure; the canvas limits say how many fit
MAX_URI_CHARS = 256  # the longest resource URI is under 100 characters
MAX_PROMPT_ARGUMENT_CHARS = MAX_TASK_CHARS  # any argument of an MCP prompt (the task is the longest)

TaskText = Annotated[str, Field(max_length=MAX_TASK_CHARS)]
EntryPoint = Annotated[str, Field(max_length=_DEFAULTS.max_entry_point_chars)]
PublicTests = Annotated[str, Field(max_length=_DEFAULTS.max_public_tests_chars)]
ActText = Annotated[str, Field(max_length=_DEFAULTS.max_act_chars)]
PromptText = Annotated[str, Field(max_length=_DEFAULTS.max_prompt_chars)]
AnswerText = Annotated[str, Field(max_length=_DEFAULTS.max_answer_chars)]
ImportSpec = Annotated[str, Field(max_length=MAX_IMPORT_CHARS)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
OperatorNames = Annotated[list[Name], Field(max_length=MAX_NAMES)]
StageOperators = Annotated[list[Name], Field(max_length=MAX_STAGE_OPERATORS)]
StagePrompts = Annotated[list[PromptText | None], Field(max_length=MAX_STAGE_OPERATORS)]


class FinishPolicyInput(FinishPolicy):
    """A custom finish gate as a client sends it, every field bounded. The stored `FinishPolicy` stays as it
    was, so states saved by earlier versions still load."""

    preset: str = Field(default="custom", min_length=1, max_length=MAX_PRESET_CHARS, description="a label")
    min_operators: int = Field(default=1, ge=0, le=_DEFAULTS.max_operators, description="operators needed")
    verbose_output_chars: int = Field(
        default=60,
        ge=1,
        le=_DEFAULTS.max_answer_chars,
        description="an output longer than this (or of several lines) needs a Format stage",
    )
    solver_operators: OperatorNames | None = Field(
        default=None, description="operators that count as a solver (default: those the library declares)"
    )
    checker_operators: OperatorNames | None = Field(
        default=None, description="operators that count as a checker (default: those the library declares)"
    )


def limits_over_caps(limits: CanvasLimits) -> list[str]:
    """The limits set above what the input schemas publish (the defaults); minimums may be raised freely."""
    return [
        f"limits.{name} is {getattr(limits, name)}, above the cap of {cap}"
        for name, cap in _DEFAULTS.model_dump().items()
        if not name.startswith("min_") and getattr(limits, name) > cap
    ]
