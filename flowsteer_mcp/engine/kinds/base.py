"""What every stage runner shares: its outcome, how a node result updates the state, its signature."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.engine.node_call import NodeCaller, NodeResult
from flowsteer_mcp.engine.state import FlowState


@dataclass
class StageOutcome:
    state: FlowState
    failure: str | None = None  # None: the stage succeeded
    # Candidates are meant for the one stage right after the stage that made them; every other stage's
    # outcome drops them (StageDispatcher), so only a stage runner that offers candidates sets this.
    offers_candidates: bool = False


class StageRunner(Protocol):
    """Runs one stage of its kind on `state`, appending its trace rows to `sink` in order."""

    async def __call__(
        self, stage: Any, state: FlowState, sink: list[NodeTrace], caller: NodeCaller, /
    ) -> StageOutcome: ...


def applied(state: FlowState, result: NodeResult) -> FlowState:
    """The state after a node result: unchanged when it failed (an error never becomes the answer)."""
    if not result.ok or result.role is None:
        return state
    return state.apply(result.role, result.output, uses_candidates=bool(result.spec and result.spec.needs_candidates))


def skipped_row(node_id: str, operator: str, note: str) -> NodeTrace:
    """The trace row of a node the stage decided not to run."""
    return NodeTrace(node_id=node_id, operator=operator, ok=True, skipped=True, note=note)
