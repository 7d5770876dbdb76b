"""Step 3 of a turn: write a validated change into the state. The only step that changes the workflow.

Nothing here can fail on the user's input (`change.py` already validated it), so a commit never half-applies.
An applied edit drops the last run: it reported on the graph before the edit, and finish must not score it.
"""

from __future__ import annotations

from typing import Literal

from flowsteer_mcp.canvas.change import Apply, GraphChange, Hold
from flowsteer_mcp.canvas.state import CanvasState, EpisodeEnd


def commit(state: CanvasState, change: GraphChange) -> None:
    """Apply a new graph, hold an edit for its prompt turns, or cancel the held edit."""
    if isinstance(change, Apply):
        state.graph = change.graph
        state.last_execution = None
        state.pending = None
        state.status = "building"
    elif isinstance(change, Hold):
        state.pending = change.pending
        state.status = "awaiting_prompt"
    else:
        state.pending = None
        state.status = "building"


def budget_spent(state: CanvasState) -> bool:
    """The episode is still open but has used its last round: it ends with this step."""
    return state.status in ("building", "awaiting_prompt") and state.rounds_used >= state.options.max_rounds


def end_episode(
    state: CanvasState, reason: Literal["finished", "budget_exhausted"], *, claimed_answer: str | None = None
) -> None:
    """Close the episode with the last run's answer (ok or degraded) as what gets scored; a pending edit is
    dropped. Call it after the run the ending needs, so `last_execution` is the built workflow's."""
    report = state.last_execution
    answered = report is not None and report.ok
    state.status = "finished" if reason == "finished" else "exhausted"
    state.pending = None
    state.end = EpisodeEnd(
        reason=reason,
        round=state.rounds_used,
        final_answer=report.output if report is not None and answered else None,
        final_code=report.code if report is not None and answered else None,
        claimed_answer=claimed_answer,
    )


__all__ = ["budget_spent", "commit", "end_episode"]
