"""Preconditions a step checks before it spends anything: a step that fails one raises CanvasError, costs no
round and changes nothing (the caller gets the error, not a step result).

Why separate from a turn's own validity: an invalid turn is part of an episode (it costs its round and is
answered with feedback), but a call on a closed episode, a typed edit while a prompt turn is pending, or a turn
too long to read is a client's mistake about the workflow's state, so it is refused before the turn starts.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.state import CanvasState
from flowsteer_mcp.canvas.text import require_unicode


def require_open(state: CanvasState) -> None:
    """The episode still takes steps (it is neither finished nor out of rounds)."""
    if state.done:
        end = state.end
        raise CanvasError(
            ErrorCode.EPISODE_OVER,
            f"This workflow's episode is over ({end.reason if end else state.status}); "
            "read it with get_workflow or start a new one with create_workflow.",
        )


def require_no_pending(state: CanvasState) -> None:
    """No prompt turn is pending: typed edits and finish would otherwise bypass the edit that waits for it."""
    if state.pending is not None:
        request = state.pending.request()
        raise CanvasError(
            ErrorCode.WRONG_STATE,
            f"A prompt turn is pending for {request.node_id} ({request.operator}): send the prompt with act, "
            "or cancel it with act('<action>cancel</action>') first.",
        )


def require_readable_turn(state: CanvasState, text: str) -> None:
    """An `act` text within the workflow's length limit and valid Unicode (stores write UTF-8)."""
    limit = state.options.limits.max_act_chars
    if len(text) > limit:
        raise CanvasError(ErrorCode.LIMIT_EXCEEDED, f"The turn is {len(text)} characters; the limit is {limit}.")
    require_unicode(text, "The turn")
