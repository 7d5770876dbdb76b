"""Step 5 of a turn: answer it. Renders the feedback a policy reads, records the step in the history and
builds the `StepResult` every caller (act, typed tools, finish) gets back.

Accepted and rejected steps are answered the same way, so a policy always sees the workflow as it now is.
Messages are clipped before they are stored: the history and the last feedback are kept every round.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowsteer_mcp.canvas.errors import CanvasError
from flowsteer_mcp.canvas.feedback import render_feedback
from flowsteer_mcp.canvas.state import CanvasState, HistoryEntry, StepSource
from flowsteer_mcp.canvas.step import StepResult, execution_view
from flowsteer_mcp.canvas.text import clip
from flowsteer_mcp.canvas.views import next_hint, state_view
from operators.registry import OperatorRegistry

HISTORY_TEXT_CHARS = 2000
MESSAGE_CHARS = 2000  # a step message (stored in the history and the last feedback every round)


@dataclass(frozen=True)
class Outcome:
    """How a step went, as its answer says it: accepted or not, why, and how the feedback labels it."""

    ok: bool
    message: str
    status_label: str | None = None  # default: Success / Failed
    error_code: str | None = None
    lenient: bool = False  # a lenient dialect fallback read the turn

    @classmethod
    def rejected(cls, error: CanvasError, *, code: str | None = None, lenient: bool = False) -> Outcome:
        return cls(False, error.message, error_code=code or error.code.value, lenient=lenient)


def reply(
    state: CanvasState,
    registry: OperatorRegistry,
    outcome: Outcome,
    *,
    source: StepSource,
    text: str,
    fresh: bool,
) -> StepResult:
    """Record the step (history, last feedback) and answer it; `fresh`: the last run happened in this step."""
    message = clip(outcome.message, MESSAGE_CHARS)
    status_label = outcome.status_label
    if state.status == "exhausted":
        status_label = "Budget exhausted"
        message += f" Round budget of {state.options.max_rounds} exhausted: the episode is over."
    view = state_view(state, registry)
    report = state.last_execution
    feedback = render_feedback(
        ok=outcome.ok,
        message=message,
        state=view,
        execution=report,
        hint=None if state.done else next_hint(state, registry),
        status_label=status_label,
        lenient=outcome.lenient,
    )
    state.last_feedback = feedback
    entry = HistoryEntry(
        round=state.rounds_used,
        source=source,
        input=text[:HISTORY_TEXT_CHARS],
        ok=outcome.ok,
        message=message,
        dsl=view.dsl,
    )
    state.history.append(entry)
    end = state.end
    return StepResult(
        ok=outcome.ok,
        message=message,
        feedback=feedback,
        state=view,
        execution=execution_view(report, fresh=fresh),
        done=state.done,
        error_code=outcome.error_code,
        end_reason=end.reason if end else None,
        final_answer=end.final_answer if end else None,
    )


__all__ = ["HISTORY_TEXT_CHARS", "MESSAGE_CHARS", "Outcome", "reply"]
