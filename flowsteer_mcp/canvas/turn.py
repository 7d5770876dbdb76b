"""Step 1 of an `act` turn: read the text as what it means in the workflow's current state.

While a prompt turn is pending the text is that prompt (or a cancel); otherwise it is one action in the
dialect (`dialect.py`, which also checks operator names, so a typo is reported at once). Nothing here reads
the graph or changes anything: the next step (`change.py`) validates the action against the graph.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.dialect import ActionTurn, CancelTurn, ParsedTurn, parse_action_turn, parse_prompt_turn
from flowsteer_mcp.canvas.errors import CanvasError, ErrorCode
from flowsteer_mcp.canvas.state import CanvasState
from flowsteer_mcp.canvas.validate import CanvasRules


def parse_turn(text: str, state: CanvasState, rules: CanvasRules) -> ParsedTurn:
    """The turn as an action, a prompt or a cancel; CanvasError when it says nothing valid here."""
    if state.pending is not None:
        return parse_prompt_turn(text)
    turn = parse_action_turn(text, rules, lenient=state.options.lenient)
    if isinstance(turn, CancelTurn):
        raise CanvasError(ErrorCode.WRONG_STATE, "Nothing to cancel: no prompt turn is pending.")
    return turn


def is_lenient(turn: ParsedTurn) -> bool:
    """Whether a lenient fallback read this turn (the feedback says so, to teach explicit tags)."""
    return isinstance(turn, ActionTurn) and turn.lenient


__all__ = ["is_lenient", "parse_turn"]
