"""Control flow of the stage kinds, executed directly on the typed graph; each kind's stage runner lives in
`engine/kinds/` (keyed by the kind's name, see `register_stage_runner`), this module dispatches and owns the rule
shared by all: candidates are visible to the one stage right after the stage that offered them and dropped
everywhere else.

Decisions (docs/design/canvas.md, "Stage kinds" and "Execution"; each stage runner's docstring has the detail):
- A stage fails when the last node it ran failed; a parallel stage (or a node's draws) fails only when every
  call failed. A failed node never changes the state, so its error can never become the answer.
- Parallel: branches run concurrently on the same state. A branch whose operator already occurred earlier in
  the same stage is all sampled draws (sampling temperature, its own derived seeds), so
  `Programmer | Programmer` yields two different programs; the first occurrence starts at the greedy draw.
  Candidates = the texts (and programs) of the successful calls with a non-empty text, in branch order and,
  within a branch, draw order. The state then continues as if the first successful non-guidance call had run
  alone (its text is the current solution), plus the guidance of every successful planner call. An ensemble
  stage after a parallel is what actually selects or combines.
- Samples (`samples: k` on a node): the node behaves like k parallel branches of itself: draw 1 greedy, draws
  2..k sampled with distinct seeds (node_call.py), all on the same input. An operator stage with k > 1 is run
  as a parallel stage of itself, so its k outputs become candidates for the next stage; a parallel branch with
  k > 1 contributes its k outputs in place. With a stopping rule (`until`, operators/stopping.py) the draws come
  in the rule's waves and stop once more draws could not change what the next stage picks; the candidates are
  the draws made. Inside a conditional, a loop or a fallback a node has no stage after it that could see
  candidates, so validation refuses samples > 1 there; the engine runs only the greedy draw if one gets through.
- Conditional `C ? F : P`: F runs only when C reports a failed check (verdict False). A check that gave no
  verdict, because it had none (None) or because C itself failed, takes the pass branch and its trace row says
  so: the design runs F only after a failed check (docs/design/canvas.md, "Stage kinds"), and F would otherwise
  revise blind, without feedback (measured with Qwen2.5-Coder-0.5B on GSM8K: such blind revisions turned
  correct answers wrong). F and P see the state after C (so Revise receives C's feedback). The untaken branch
  gets a trace row with skipped=True.
- Loop: the body runs up to `count` times; when the body holds a checker, the loop stops after the first
  iteration whose last checker ran successfully with verdict True. Trace rows carry the 1-based iteration.
- Fallback `A ?? B`: B runs only when A failed or produced no answer (blank text and no code), on the state
  after A; otherwise B gets a skipped row.
"""

from __future__ import annotations

from flowsteer_mcp.canvas.execution import NodeTrace
from flowsteer_mcp.canvas.model import Stage
from flowsteer_mcp.engine.kinds import StageOutcome, branch_draws, stage_runner_for
from flowsteer_mcp.engine.node_call import NodeCaller
from flowsteer_mcp.engine.state import FlowState


class StageDispatcher:
    def __init__(self, caller: NodeCaller) -> None:
        self._caller = caller

    async def run(self, stage: Stage, state: FlowState, sink: list[NodeTrace]) -> StageOutcome:
        outcome = await stage_runner_for(stage.kind)(stage, state, sink, self._caller)
        if not outcome.offers_candidates:
            # Candidates of a parallel stage are meant for the one stage right after it.
            outcome.state = outcome.state.without_candidates()
        return outcome


__all__ = ["StageDispatcher", "StageOutcome", "branch_draws"]
